# syntax=docker/dockerfile:1
# The gpufleet image: `gpufleet operator` (what the Helm chart runs) and every other `gpufleet`
# command. Build from the repository root: docker build -t gpufleet:0.1.0 .
# Stage 1 builds gpufleet's wheel and installs it with its dependencies into a virtual
# environment; stage 2 copies only that environment onto the same slim base (no compiler, no
# pip cache, no sources) and runs it as a non-root numeric UID. Nothing is written at run time
# except under /tmp (the chart mounts an emptyDir there), so a read-only root filesystem works.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpufleet ./gpufleet
# The wheel is built exactly as tests/unit/packaging/test_wheel.py builds it.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/gpufleet \
 && /opt/gpufleet/bin/pip install --no-cache-dir --disable-pip-version-check /wheels/gpufleet-*.whl \
 && /opt/gpufleet/bin/pip check

FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="gpufleet" \
      org.opencontainers.image.description="Kubernetes-native scheduler and autoscaler for shared GPU clusters" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
COPY --from=build /opt/gpufleet /opt/gpufleet
# HOME and matplotlib's cache point at /tmp: the only writable place with a read-only root.
ENV PATH=/opt/gpufleet/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
# 65532 is the conventional "nonroot" UID/GID (no entry in /etc/passwd is needed).
USER 65532:65532
ENTRYPOINT ["gpufleet"]
CMD ["operator"]
