#!/usr/bin/env bash
# A Debian bookworm base image with python3 and pip, made locally with mmdebstrap and imported
# into podman, for hosts that reach no image registry (Debian's mirror and PyPI only):
#   deploy/podman/base-image.sh [IMAGE]        default localhost/attnserve-base:bookworm
# The host's extra CA certificates (/usr/local/share/ca-certificates) are trusted inside, so
# that pip and apt work behind an intercepting proxy; pip may install into the system Python
# (the image is a container: EXTERNALLY-MANAGED is removed) and fails fast (retries=0).
# Python is Debian's 3.11, as in python:3.11-slim-bookworm. Pass the image to builds as
# --build-arg PYTHON_IMAGE=IMAGE.
set -euo pipefail
image=${1:-localhost/attnserve-base:bookworm}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
hooks=()
certificates=(/usr/local/share/ca-certificates/*.crt)
if [ -e "${certificates[0]}" ]; then
  hooks+=(--customize-hook="copy-in ${certificates[*]} /usr/local/share/ca-certificates/"
          --customize-hook='chroot "$1" update-ca-certificates')
fi
hooks+=(--customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED'
        --customize-hook='printf "[global]\nretries = 0\n" > "$1"/etc/pip.conf'
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*')
mmdebstrap --quiet --variant=apt --include=python3,python3-pip,python-is-python3,ca-certificates \
  "${hooks[@]}" bookworm "$work/rootfs.tar"
podman import --quiet "$work/rootfs.tar" "$image" >/dev/null
echo "$image"
