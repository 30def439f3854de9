#!/usr/bin/env bash
# Installs the official `openai` Python SDK (PyPI) into a venv under target/ and prints the venv's
# Python on stdout: the real client of the OpenAI-compatible door's tests (tests/server/sdk.rs,
# which reads LEGIO_OPENAI_PYTHON or this default path). Never installs globally. Idempotent: a
# second run only prints the path.
#
#   scripts/install-openai-sdk.sh                  # installs into target/openai-sdk-venv
#   OPENAI_SDK_VENV=/some/dir scripts/install-openai-sdk.sh
set -euo pipefail
cd "$(dirname "$0")/.."

spec="${OPENAI_SDK_SPEC:-openai>=1.60,<4}"
venv="${OPENAI_SDK_VENV:-$PWD/target/openai-sdk-venv}"
python="$venv/bin/python"

if ! "$python" -c 'import openai, pydantic' >/dev/null 2>&1; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q "$spec" >&2
fi
if ! "$python" -c 'import openai, pydantic' >/dev/null 2>&1; then
  echo "the openai SDK could not be installed into $venv (python3-venv and PyPI's openai are needed)" >&2
  exit 1
fi
"$python" -c 'import openai; print("openai", openai.__version__)' >&2
echo "$python"
