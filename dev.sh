#!/usr/bin/env bash
# The project's two entry points on a fresh Debian machine (as root, or with sudo):
#   ./dev.sh serve  install what is missing, build the model repository from the bundled
#                   checkpoint, serve it over gRPC and answer a first request (Ctrl-C stops)
#   ./dev.sh test   install what is missing, build the model repository, then lint and run
#                   the whole test suite
#   ./dev.sh stack  build the images and run the compose stack in podman (tests marked stack)
#   ./dev.sh repository  build the model repository the images copy in (data/repository)
# Where nvidia-smi lists an NVIDIA GPU, the server's onnxruntime is onnxruntime-gpu and the
# model repository also holds fp16 graphs; ATTNSERVE_DEVICE=cpu keeps the CPU set-up there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

DEBIAN_PACKAGES=(diatheke sword-text-sparv sword-text-web apertium apertium-eng-spa lttoolbox-dev docker-compose prometheus
  fonts-noto-color-emoji fonts-symbola unicode-cldr-core chromium chromium-driver)
PYTHON=${PYTHON:-python3}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install_debian_packages() {
  # the packages named, or DEBIAN_PACKAGES
  local missing=() wanted=("$@")
  [ $# -gt 0 ] || wanted=("${DEBIAN_PACKAGES[@]}")
  for package in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

gpu_present() {
  # nvidia-smi lists an NVIDIA GPU, and ATTNSERVE_DEVICE does not say cpu
  local listing
  [ "${ATTNSERVE_DEVICE:-}" != cpu ] && listing=$(nvidia-smi -L 2>/dev/null) \
    && grep -q '^GPU ' <<<"$listing"
}

install_python_packages() {
  # The serving extra: serve (onnxruntime), or on a GPU gpu (onnxruntime-gpu with CUDA and
  # cuDNN from their pip wheels, as the Dockerfile's runtime-cuda stage). Both packages install
  # the same module, so the other one goes first.
  local find_links=() extra=serve other=onnxruntime-gpu cuda_wheels=()
  [ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)  # the CPU torch wheel
  if gpu_present; then
    extra=gpu other=onnxruntime cuda_wheels=("onnxruntime-gpu[cuda,cudnn]")
  fi
  if "$PYTHON" -m pip show -q "$other" >/dev/null 2>&1; then
    "$PYTHON" -m pip uninstall -y -q "$other"
  fi
  "$PYTHON" -m pip install -q --disable-pip-version-check "${find_links[@]}" \
    -e ".[$extra,client,train,hf,ray,bench,dev]" "${cuda_wheels[@]}"
  [ "$extra" = serve ] || register_cuda_libraries
}

register_cuda_libraries() {
  # The nvidia-* wheels' lib folders on the loader's path, as in the Dockerfile.
  local site
  site=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  [ -d "$site/nvidia" ] || return 0
  find "$site/nvidia" -type d -name lib | as_root tee /etc/ld.so.conf.d/attnserve-nvidia.conf >/dev/null
  as_root ldconfig
}

install_node_packages() {
  # The Node.js example client's libraries (examples/node), as its package-lock.json pins them;
  # Debian's nodejs and npm where the machine has no Node.js of its own (a Node.js from
  # elsewhere carries its npm, which Debian's npm package conflicts with)
  command -v npm >/dev/null || install_debian_packages nodejs npm
  local project
  for project in examples/node tests/server/node; do  # the latter: LibreTranslate's npm client, axe-core
    # installed again where the lock file is newer than the install (a pull that pins more)
    [ "$project/node_modules/.package-lock.json" -nt "$project/package-lock.json" ] \
      || npm ci --prefix "$project" --no-audit --no-fund --loglevel=error >/dev/null
  done
}

export_variants() {
  # ATTNSERVE_EXPORT_VARIANTS where given (fp32,int8,fp16 for a GPU image built elsewhere)
  if [ -n "${ATTNSERVE_EXPORT_VARIANTS:-}" ]; then echo "$ATTNSERVE_EXPORT_VARIANTS"
  elif gpu_present; then echo fp32,int8,fp16; else echo fp32,int8; fi
}

build_protos() {
  # Generated code is built here from protos/, never edited: service/wire/v1/*_pb2*.py. The
  # contract's files are staged as service/wire/v1/ (their imports with them) so that the
  # generated modules form the package service.wire.v1; the proto package, and so every
  # service and message name on the wire, stays attnserve.v1.
  local staged
  staged=$(mktemp -d)
  mkdir -p "$staged/service/wire/v1" service/wire/v1
  for proto in protos/attnserve/v1/*.proto; do
    sed 's#^import "attnserve/v1/#import "service/wire/v1/#' "$proto" \
      >"$staged/service/wire/v1/$(basename "$proto")"
  done
  "$PYTHON" -m grpc_tools.protoc -I "$staged" --python_out=. --pyi_out=. --grpc_python_out=. \
    "$staged"/service/wire/v1/*.proto
  rm -rf "$staged"
  touch service/wire/__init__.py service/wire/v1/__init__.py
}

data_built() {
  # whether model $1's data (data/translator, data/captioner) is there
  case $1 in
    translator) [ -f data/translator/test.es ] ;;
    captioner) [ -f data/captioner/test.jsonl ] ;;
  esac
}

build_data() {
  # Model $1's data where it is not there. The captioner's dev and test splits are those of
  # the full build with 5,000 training scenes (training uses `attnserve data captioner`,
  # 60,000).
  data_built "$1" && return 0
  case $1 in
    translator) "$PYTHON" -m attnserve.cli data translator >/dev/null ;;
    captioner) "$PYTHON" -m attnserve.cli data captioner --train-scenes 5000 >/dev/null ;;
  esac
}

graphs_revision() {
  # what the graphs built op by op are now (export.builder.REVISION, read from its line: the
  # module imports torch): older versions are rebuilt
  sed -n 's/^REVISION = \([0-9][0-9]*\).*/\1/p' export/builder.py
}

build_version() {
  # One shipped version (data/repository/MODEL/N) exported from its checkpoint and certified,
  # its log beside the repository.
  local model=$1 version=$2 checkpoint=$3 variants=$4 log
  log="data/repository-$model-${version##*/}.log"
  rm -rf "$version"
  echo "building $version in the model repository (ONNX export and parity, 1-3 minutes)" >&2
  if ! "$PYTHON" -m attnserve.cli export "$model" --out data/repository --variants "$variants" \
    --checkpoint "$checkpoint" --version "${version##*/}" --sentences 200 >"$log" 2>&1; then
    tail -20 "$log" >&2
    return 1
  fi
  echo "model repository ready: $version (certificate in its manifest.json)" >&2
}

build_repository() {
  # The served model repository: every shipped checkpoint exported as a version with its parity
  # certificate (the captioner's previous checkpoint stays servable as version 1, the default
  # is the highest); a version is rebuilt when its checkpoint changes, when its graphs were not
  # built op by op (the default since the traced ones were measured slower), when they were
  # built before the builder's revision, when it ships no scatter op (export/ops.py), or on
  # a GPU to add fp16. Each model's data, then its versions, are built in turn, the models
  # side by side, each export's torch on one thread where two run at once (on two cores: the
  # data and all three versions in 150 s, the translator's certificate the longest part).
  local model version checkpoint variants revision stale=() work=() jobs=() job failed=0
  variants=$(export_variants)
  revision=$(graphs_revision)
  [ -n "$revision" ] || { echo "export/builder.py: no REVISION line" >&2; exit 1; }
  for shipped in translator/1:translator captioner/1:captioner-1 captioner/2:captioner; do
    version=data/repository/${shipped%%:*}
    checkpoint=models/checkpoints/${shipped##*:}
    if [ ! -f "$version/golden.json" ] || [ "$checkpoint/model.safetensors" -nt "$version/golden.json" ] \
      || ! grep -q '"format_version": 7' "$version/manifest.json" \
      || ! grep -q '"fp32": "built"' "$version/manifest.json" \
      || ! grep -q "\"graphs_revision\": $revision" "$version/manifest.json" \
      || ! grep -q '"ops/scatter_float32.onnx"' "$version/manifest.json" \
      || { [[ $variants == *fp16* ]] && ! grep -q '"fp16/decoder.onnx"' "$version/manifest.json"; }; then
      stale+=("$shipped")
    fi
  done
  for model in translator captioner; do  # a model with data to build or a version to export
    if ! data_built "$model" || [[ " ${stale[*]} " == *" $model/"* ]]; then
      work+=("$model")
    fi
  done
  [ ${#work[@]} -gt 0 ] || return 0
  mkdir -p data
  local threads=${OMP_NUM_THREADS:-}
  [ ${#work[@]} -eq 1 ] || threads=${threads:-1}
  for model in "${work[@]}"; do
    (
      [ -z "$threads" ] || export OMP_NUM_THREADS=$threads
      build_data "$model" || exit 1
      for shipped in "${stale[@]}"; do
        [ "${shipped%%/*}" = "$model" ] || continue
        build_version "$model" "data/repository/${shipped%%:*}" \
          "models/checkpoints/${shipped##*:}" "$variants" || exit 1
      done
    ) &
    jobs+=($!)
  done
  for job in "${jobs[@]}"; do
    wait "$job" || failed=1
  done
  [ "$failed" -eq 0 ] || exit 1
}

serve_and_answer() {
  # Serves in the background, answers a first request once healthy, then keeps serving.
  "$PYTHON" -m attnserve.cli serve --http-listen 0.0.0.0:8080 "$@" &
  local server=$!
  trap 'kill -TERM $server 2>/dev/null; wait $server' INT TERM
  for _ in $(seq 300); do
    "$PYTHON" -m attnserve.cli health >/dev/null 2>&1 && break
    kill -0 $server 2>/dev/null || { wait $server; exit 1; }
    sleep 0.5
  done
  "$PYTHON" -m attnserve.cli translate --beam 4 "Yo soy de Canadá." \
    "¿Me puedes traer un tenedor?" "¿Dónde está la estación de tren?" \
    "La contraseña es incorrecta." "En el principio creó Dios los cielos y la tierra."
  "$PYTHON" -m attnserve.cli caption --beam 4 examples/scene.png
  echo "serving gRPC on 127.0.0.1:50051, HTTP and the page on http://127.0.0.1:8080/" \
    "(metrics on :9400/metrics); Ctrl-C stops" >&2
  wait $server
}

STACK_DEBIAN_PACKAGES=(podman runc catatonit mmdebstrap iptables netavark aardvark-dns uidmap)

install_stack_tools() {
  # podman with runc and netavark, mmdebstrap for the base image, podman-compose from PyPI
  install_debian_packages "${STACK_DEBIAN_PACKAGES[@]}"
  "$PYTHON" -m pip install -q --disable-pip-version-check podman-compose
}

test_workers() {
  # pytest-xdist workers for the suite: one a core, at most 4 (each holds its own torch,
  # servers and session fixtures)
  local cores
  cores=$(nproc)
  echo $((cores < 4 ? cores : 4))
}

run_suite() {
  # The suite, its modules dealt whole to the workers in the order tests/conftest.py gives
  # them (the slow ones first); a worker's torch keeps to one thread (OMP_NUM_THREADS, as its
  # subprocesses do), so that the workers do not contend for the cores they share.
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$PYTHON" -m pytest -n "$(test_workers)" --dist loadfile \
    --no-loadscope-reorder "$@"
}

setup() {
  install_debian_packages
  install_python_packages
  install_node_packages
  build_protos
}

# Sourced (tests/deploy/test_dev_sh.py), dev.sh only defines its functions.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

case "${1:-}" in
  serve)
    setup
    build_repository
    serve_and_answer "${@:2}"
    ;;
  test)
    setup
    build_repository  # the suite tests the served translator version (tests/conftest.py)
    "$PYTHON" -m ruff check .
    "$PYTHON" -m ruff format --check .
    (cd protos && buf lint)
    lint-imports
    run_suite "${@:2}"
    ;;
  repository)
    setup
    build_repository
    ;;
  stack)
    setup
    build_repository
    install_stack_tools
    "$PYTHON" -m pytest -m stack -s tests/deploy/test_podman_stack.py "${@:2}"
    ;;
  *)
    echo "usage: ./dev.sh serve [serve flags] | ./dev.sh test [pytest arguments] | ./dev.sh stack | ./dev.sh repository" >&2
    exit 2
    ;;
esac
