#!/usr/bin/env bash
# The project's two entry points on a fresh Debian machine (as root, or with sudo):
#   ./dev.sh demo   install what is missing, then translate with the bundled model
#   ./dev.sh test   install what is missing, then lint and run the whole test suite
set -euo pipefail
cd "$(dirname "$0")"

DEBIAN_PACKAGES=(diatheke sword-text-sparv sword-text-web apertium apertium-eng-spa)
PYTHON=${PYTHON:-python3}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install_debian_packages() {
  local missing=()
  for package in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  fi
}

install_python_packages() {
  local find_links=()
  [ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)  # the CPU torch wheel
  "$PYTHON" -m pip install -q --disable-pip-version-check "${find_links[@]}" \
    -e ".[serve,client,train,bench,dev]"
}

build_protos() {
  # Generated code is built here from protos/, never edited: attnserve/v1/*_pb2*.py
  mkdir -p attnserve/v1
  "$PYTHON" -m grpc_tools.protoc -I protos --python_out=. --pyi_out=. --grpc_python_out=. \
    protos/attnserve/v1/*.proto
  touch attnserve/v1/__init__.py
}

build_data() {
  [ -f data/translator/test.es ] || "$PYTHON" -m attnserve.cli data translator >/dev/null
}

setup() {
  install_debian_packages
  install_python_packages
  build_protos
  build_data
}

case "${1:-}" in
  demo)
    setup
    "$PYTHON" -m attnserve.cli translate "Yo soy de Canadá." "¿Me puedes traer un tenedor?" \
      "En el principio creó Dios los cielos y la tierra."
    ;;
  test)
    setup
    "$PYTHON" -m ruff check .
    "$PYTHON" -m ruff format --check .
    (cd protos && buf lint)
    lint-imports
    "$PYTHON" -m pytest "${@:2}"
    ;;
  *)
    echo "usage: ./dev.sh demo | ./dev.sh test [pytest arguments]" >&2
    exit 2
    ;;
esac
