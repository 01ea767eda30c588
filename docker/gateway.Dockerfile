# The gateway: WebSocket /v1/call, /healthz, /readyz, /metrics on 8080.
# Build from the repository root:  docker build -f docker/gateway.Dockerfile -t voicebot/gateway:0.1.0 .

# BASE_IMAGE: where no image registry is reachable, the base made from Debian's packages
# (docker/base-image.sh; docs/operations.md, "Offline"); unset or empty, the official Python image.
ARG BASE_IMAGE

FROM ${BASE_IMAGE:-python:3.11.11-slim-bookworm} AS build
# The package index pip installs from, as the building machine's pip has it (unset: PyPI).
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml ./
COPY voicebot ./voicebot
RUN pip install .

FROM ${BASE_IMAGE:-python:3.11.11-slim-bookworm}
RUN groupadd --system --gid 10001 voicebot \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent voicebot
COPY --from=build /opt/venv /opt/venv
COPY docker/healthcheck.py docker/wait_idle.py /opt/voicebot/bin/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints \
    GATEWAY_HOST=0.0.0.0 \
    GATEWAY_PORT=8080
WORKDIR /tmp
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "/opt/voicebot/bin/healthcheck.py", "http", "GATEWAY_PORT", "8080", "/healthz"]
ENTRYPOINT ["python", "-m", "voicebot.gateway.app"]
