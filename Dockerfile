# attnserve images: the torch-free server and the model repository built on the host.
#
#   ./dev.sh repository                                  the repository, once: data/repository
#   docker build -t attnserve:cpu .                      the CPU server (target runtime)
#   docker build --target runtime-cuda -t attnserve:cuda .   the NVIDIA GPU server
#
# The images copy in the model repository that `./dev.sh repository` exported and certified
# (ONNX graphs, tokenizers, parity certificates, golden sets; with fp16 graphs where the host
# has a GPU, or ATTNSERVE_EXPORT_VARIANTS=fp32,int8,fp16). The repository is made in one place,
# by the commands every test runs, so an image serves exactly what was certified: no data set,
# artwork renderer or torch inside the build, nothing of the data pipeline to keep in step.
# Stage build generates the gRPC code and builds the wheel; the runtime stages install it with
# the serve (or gpu) extra.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

WORKDIR /src
RUN pip install "grpcio-tools>=1.66" "setuptools>=68" wheel
COPY pyproject.toml README.md ./
COPY dev.sh ./
COPY protos/ protos/
COPY attnserve/ attnserve/
COPY service/ service/
COPY models/ models/
COPY export/ export/

# The gRPC code is generated, never kept in git (by the function ./dev.sh uses).
RUN rm -rf service/wire && bash -c 'source ./dev.sh && PYTHON=python build_protos' \
    && pip wheel --no-deps --no-build-isolation --wheel-dir /dist .

# The model repository, checked before it is copied: a version without its certificate's
# manifest stops the build here with what to run.
COPY data/repository/ /repository/
RUN for version in translator/1 captioner/1 captioner/2; do \
        [ -f "/repository/$version/manifest.json" ] && [ -f "/repository/$version/golden.json" ] \
        || { echo "data/repository/$version is missing or incomplete: run ./dev.sh repository" >&2; \
             exit 1; }; \
    done


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
EXPOSE 50051 9400 8080

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


# The CPU server with Ray (the ray extra): a front and its replicas on a Ray cluster, every
# node of it this image (deploy/kubernetes/attnserve-ray.yaml).
FROM serve-base AS runtime-ray

COPY --from=build /dist/ /tmp/wheels/
RUN wheel="$(echo /tmp/wheels/attnserve-*.whl)" \
    && pip install "${wheel}[serve,ray]" \
    && rm -rf /tmp/wheels \
    && python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"

ENV ATTNSERVE_DEVICE=cpu
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
