#!/usr/bin/env bash
# Installs the OpenAI Agents SDK (PyPI `openai-agents`, pinned) into a venv under target/ and
# prints the venv's Python on stdout: the real client of tests/server/agents_sdk.rs, which reads
# LEGIO_OPENAI_AGENTS_PYTHON or this default path. Never installs globally. Idempotent: a second
# run only prints the path.
#
#   scripts/install-openai-agents.sh                  # installs into target/openai-agents-venv
#   OPENAI_AGENTS_VENV=/some/dir scripts/install-openai-agents.sh
set -euo pipefail
cd "$(dirname "$0")/.."

spec="${OPENAI_AGENTS_SPEC:-openai-agents==0.24.0}"
venv="${OPENAI_AGENTS_VENV:-$PWD/target/openai-agents-venv}"
python="$venv/bin/python"

if ! "$python" -c 'import agents' >/dev/null 2>&1; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q "$spec" >&2
fi
if ! "$python" -c 'import agents' >/dev/null 2>&1; then
  echo "the OpenAI Agents SDK could not be installed into $venv (python3-venv and PyPI's openai-agents are needed)" >&2
  exit 1
fi
"$python" -c 'import importlib.metadata as m; print("openai-agents", m.version("openai-agents"))' >&2
echo "$python"
