#!/usr/bin/env bash
# The Python packages a server's HTTP edge and the server tests import that the GPU machine
# lacks (../shared/gpu/README.md lists what it has: numpy, grpcio, protobuf, pytest, ...),
# at the versions installed here, as wheels for its Python 3.12 unpacked into .gpu/pylib.
# bench/gpu.sh's phases that start servers put .gpu/pylib on PYTHONPATH. Run it here, from
# the project's root, and carry .gpu/pylib (about 8 MB) with the phase:
#
#   bash bench/gpu_pylib.sh
#
# Left out for what a command may carry: pillow (20 MB; servers started there by `goals`
# and `step` ran without this folder), py3langid (4.5 MB; read only where a request names no
# source language) and httptools (uvicorn parses HTTP with h11 without it). GPU_PYLIB_EXTRA
# adds packages by name ("pillow py3langid").
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PYTHON=${PYTHON:-python3}
# shellcheck disable=SC2206
PACKAGES=(sentencex starlette uvicorn python-multipart httpx httpcore h11 anyio sniffio idna
  certifi click typing_extensions ${GPU_PYLIB_EXTRA:-})
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
for package in "${PACKAGES[@]}"; do
  version=$("$PYTHON" -m pip show "$package" 2>/dev/null | awk '/^Version:/{print $2}')
  "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$wheels" \
    "$package${version:+==$version}"
done
rm -rf .gpu/pylib && mkdir -p .gpu/pylib
for wheel in "$wheels"/*.whl; do
  "$PYTHON" -m zipfile -e "$wheel" .gpu/pylib
done
du -sh .gpu/pylib
