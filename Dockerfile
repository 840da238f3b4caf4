# attnserve images.
#
#   docker build -t attnserve:cpu .                            the CPU server (target runtime)
#   docker build --target runtime-cuda -t attnserve:cuda \
#     --build-arg EXPORT_VARIANTS=fp32,int8,fp16 .             the NVIDIA GPU server
#
# Stage build: torch (CPU wheel) and the Debian packages of the data (Bibles, emoji artwork and
# names); builds the translator's corpus and the captioner's scenes, exports both shipped
# checkpoints to one model repository (with their parity certificates) and builds the wheel.
# The runtime stages hold the wheel with the serve (or gpu) extra and the repository: no torch.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# The corpus (`attnserve data translator`) is read from these SWORD modules through diatheke;
# the captioner's scenes (`attnserve data captioner`) are drawn from Noto Color Emoji and named
# from CLDR.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        diatheke sword-text-sparv sword-text-web fonts-noto-color-emoji unicode-cldr-core \
    && rm -rf /var/lib/apt/lists/*

# torch first and from the CPU index (the PyPI wheel is the CUDA build); the pin in the train
# extra is then already satisfied. A build may mount a directory of wheels at /opt/wheels
# (`podman build -v /opt/wheels:/opt/wheels:ro`): a CPU torch wheel there is taken instead.
RUN if ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then \
        pip install --find-links /opt/wheels torch==2.13.0; \
    else \
        pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0; \
    fi

WORKDIR /src
COPY pyproject.toml README.md ./
COPY protos/ protos/
COPY attnserve/ attnserve/
COPY service/ service/
COPY models/ models/
COPY export/ export/

RUN pip install -e ".[serve,train]" grpcio-tools

# The gRPC code is generated, never kept in git (as ./dev.sh does).
RUN rm -rf attnserve/v1 && mkdir attnserve/v1 \
    && python -m grpc_tools.protoc -I protos --python_out=. --pyi_out=. --grpc_python_out=. \
        protos/attnserve/v1/*.proto \
    && touch attnserve/v1/__init__.py

ARG EXPORT_VARIANTS=fp32,int8
RUN python -m attnserve.cli data translator \
    && python -m attnserve.cli export translator --out /repository --variants "${EXPORT_VARIANTS}" \
    && python -m attnserve.cli data captioner --train-scenes 5000 \
    && python -m attnserve.cli export captioner --out /repository --variants "${EXPORT_VARIANTS}"

RUN pip wheel --no-deps --wheel-dir /dist .


# What every server image shares: the model repository, the user, ports, health and signals.
FROM ${PYTHON_IMAGE} AS serve-base

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# The user and its group are both 10001, what the images run as (USER 10001:10001 below and
# runAsUser/runAsGroup in deploy/kubernetes): `--user-group` alone would make a system group
# with another id.
RUN groupadd --system --gid 10001 attnserve \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin attnserve

# Owned by root and read-only to the server: the manifest's hashes are checked at load.
COPY --from=build /repository/ /srv/attnserve/repository/

ENV ATTNSERVE_REPOSITORY=/srv/attnserve/repository \
    ATTNSERVE_LISTEN=0.0.0.0:50051 \
    ATTNSERVE_METRICS_LISTEN=0.0.0.0:9400

WORKDIR /srv/attnserve
EXPOSE 50051 9400

# grpc.health.v1 through the port the server listens on. SIGTERM drains: health turns
# NOT_SERVING and in-flight requests finish within the grace period.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/bin/sh", "-c", "exec attnserve health --server \"127.0.0.1:${ATTNSERVE_LISTEN##*:}\""]
STOPSIGNAL SIGTERM

ENTRYPOINT ["attnserve"]
CMD ["serve"]


# NVIDIA GPUs: onnxruntime-gpu with CUDA and cuDNN from their pip wheels; the host needs only
# the driver and the NVIDIA container toolkit. The wheels' libraries are found where Python
# put the `nvidia` package (site-packages in python images, dist-packages on Debian's).
FROM serve-base AS runtime-cuda

COPY --from=build /dist/ /tmp/wheels/
RUN wheel="$(echo /tmp/wheels/attnserve-*.whl)" \
    && pip install "${wheel}[gpu]" "onnxruntime-gpu[cuda,cudnn]" \
    && rm -rf /tmp/wheels \
    && nvidia="$(python -c 'import nvidia; print(*nvidia.__path__)')" \
    && find ${nvidia} -type d -name lib > /etc/ld.so.conf.d/nvidia-wheels.conf \
    && ldconfig \
    && python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"

ENV ATTNSERVE_DEVICE=cuda \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001


# The CPU server, and the default target.
FROM serve-base AS runtime

COPY --from=build /dist/ /tmp/wheels/
RUN wheel="$(echo /tmp/wheels/attnserve-*.whl)" \
    && pip install "${wheel}[serve]" \
    && rm -rf /tmp/wheels \
    && python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"

ENV ATTNSERVE_DEVICE=cpu
USER 10001:10001
