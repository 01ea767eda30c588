#!/usr/bin/env bash
# Build llama.cpp's native server (llama-server) and its quantizer (llama-quantize) once, from
# the llama.cpp sources vendored in the llama-cpp-python sdist of LLAMA_VERSION, tuned to this
# CPU, into $VOICEBOT_BIN_CACHE/llama-server-VERSION-CPUTAG and llama-quantize-VERSION-CPUTAG
# (voicebot/localllm.py: cpu_tag names the CPU's instruction sets, so a cache shared between
# machines never runs a build made for another). llama-quantize re-lays the packaged model for
# this CPU's fastest kernels (localllm.derive_model). LLAMA_PORTABLE=1 builds portable AVX2
# binaries instead, as llama-server-VERSION and llama-quantize-VERSION.
# Started in the background by the first `make run` (voicebot/native_build.py, under the lock
# every start respects), which serves the prebuilt wheel's server meanwhile; run it by hand to build in the foreground. Safe to re-run
# (a cached binary is kept). Exits non-zero when it cannot build (no C++ compiler, no network
# for the sdist); the prebuilt server then stays in use.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
LLAMA_VERSION=${LLAMA_VERSION:-$("$VENV/bin/python" -c \
  'from voicebot.localllm import LLAMA_CPP_PYTHON_VERSION; print(LLAMA_CPP_PYTHON_VERSION)')}
BIN_DIR=${VOICEBOT_BIN_CACHE:-$HOME/.cache/voicebot/bin}
SRC_DIR=${VOICEBOT_SRC_CACHE:-$HOME/.cache/voicebot/src}
PORTABLE=${LLAMA_PORTABLE:-0}
if [ "$PORTABLE" = 1 ]; then
  TARGET="$BIN_DIR/llama-server-$LLAMA_VERSION"
  QUANTIZE_TARGET="$BIN_DIR/llama-quantize-$LLAMA_VERSION"
else
  # The names localllm looks for (run from the project root: the venv may not have it installed yet).
  TARGET=$(VOICEBOT_BIN_CACHE="$BIN_DIR" "$VENV/bin/python" -m voicebot.localllm --binary-path)
  QUANTIZE_TARGET=$(VOICEBOT_BIN_CACHE="$BIN_DIR" "$VENV/bin/python" -m voicebot.localllm --quantize-path)
fi
JOBS=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

if [ -x "$TARGET" ] && [ -x "$QUANTIZE_TARGET" ]; then
  exit 0
fi
command -v c++ >/dev/null || { echo "no C++ compiler (Debian: apt-get install build-essential)" >&2; exit 1; }

mkdir -p "$BIN_DIR" "$SRC_DIR"
SDIST="$SRC_DIR/llama_cpp_python-$LLAMA_VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
  echo "==> downloading the llama-cpp-python $LLAMA_VERSION sdist (its vendored llama.cpp)"
  "$VENV/bin/python" -m pip download -q --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_VERSION" -d "$SRC_DIR"
fi

# cmake >= 3.14 and ninja from PyPI into the venv when the machine has none (as pip does
# for the llama-cpp-python wheel build).
CMAKE=$(command -v cmake || true)
if [ -z "$CMAKE" ]; then
  "$VENV/bin/python" -m pip install -q cmake ninja
  CMAKE="$VENV/bin/cmake"
fi
GENERATOR=()
if command -v ninja >/dev/null || [ -x "$VENV/bin/ninja" ]; then
  GENERATOR=(-G Ninja)
  PATH="$PATH:$(cd "$VENV/bin" && pwd)"
fi

# Tuned to this CPU: a build for the instruction sets this CPU has (AVX-512 where there is
# one) prefills and decodes faster than the portable AVX2 build. LLAMA_PORTABLE=1, on x86-64
# with AVX2/FMA (every server CPU of the last decade), builds one that runs on any of them, as
# the LLM image does.
CPU_FLAGS=(-DGGML_NATIVE=ON)
# No AMX (recipe r2, voicebot/localllm.py TUNED_RECIPE): on a VM whose CPU lists amx_tile,
# llama.cpp's AMX kernels faulted on `ldtilecfg` at the first prompt. -march=native would turn
# them on; an explicit -mno-* wins over it in GCC and Clang.
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
  NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  CPU_FLAGS+=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
              "-DCMAKE_C_FLAGS=$NO_AMX" "-DCMAKE_CXX_FLAGS=$NO_AMX")
fi
if [ "$PORTABLE" = 1 ]; then
  if [ "$(uname -m)" != x86_64 ] || ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo \
     || ! grep -qw f16c /proc/cpuinfo; then
    echo "LLAMA_PORTABLE=1 needs an x86-64 CPU with AVX2, FMA and F16C" >&2
    exit 1
  fi
  CPU_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
tar -xzf "$SDIST" -C "$WORK" "llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
SRC="$WORK/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"

echo "==> building llama-server and llama-quantize once (llama.cpp from llama-cpp-python $LLAMA_VERSION, for $(basename "$TARGET"); about 8 minutes on 2 idle cores)"
started=$(date +%s)
# Only the server and the quantizer: no tests, examples or other tools; no HTTPS (it serves
# 127.0.0.1 or sits behind the cluster's network); no web UI (it would be fetched from the
# network at build time).
"$CMAKE" -S "$SRC" -B "$WORK/build" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF "${CPU_FLAGS[@]}" >"$WORK/cmake.log" 2>&1 \
  || { cat "$WORK/cmake.log" >&2; exit 1; }
"$CMAKE" --build "$WORK/build" --target llama-server llama-quantize -j "$JOBS"
for pair in "llama-server:$TARGET" "llama-quantize:$QUANTIZE_TARGET"; do
  # A temporary name of this process's own, moved into place whole: a start never runs a half-copied file.
  install -m 0755 "$WORK/build/bin/${pair%%:*}" "${pair#*:}.$$.tmp"
  mv "${pair#*:}.$$.tmp" "${pair#*:}"
done
echo "==> llama-server and llama-quantize built in $(( $(date +%s) - started )) s: $TARGET"
