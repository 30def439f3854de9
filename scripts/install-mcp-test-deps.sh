#!/usr/bin/env bash
# Installs the MCP implementations the MCP tests run against (issue 13), all under target/,
# never globally, and prints the variables the tests read as `export NAME=VALUE` lines on stdout
# (`eval "$(scripts/install-mcp-test-deps.sh)"`). Idempotent: a second run only prints them.
#
#   LEGIO_MCP_EVERYTHING  the reference server @modelcontextprotocol/server-everything (npm),
#                         run as `node $LEGIO_MCP_EVERYTHING stdio|streamableHttp`
#   LEGIO_MCP_PYTHON      a Python with the official `mcp` SDK (PyPI), the client of legio's
#                         MCP server in the tests
#
# Needs node and npm (Debian: apt-get install nodejs npm) and python3 with venv.
set -euo pipefail
cd "$(dirname "$0")/.."

everything_version="${MCP_EVERYTHING_VERSION:-2026.8.31}"
python_mcp_version="${PYTHON_MCP_VERSION:-1.30.0}"
node_dir="$PWD/target/mcp-node"
venv="$PWD/target/mcp-venv"
entry="$node_dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

if [ ! -f "$entry" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "npm is missing: install node and npm (apt-get install nodejs npm)" >&2
    exit 1
  fi
  mkdir -p "$node_dir"
  npm install --silent --no-audit --no-fund --prefix "$node_dir" \
    "@modelcontextprotocol/server-everything@$everything_version" >&2
fi
if [ ! -f "$entry" ]; then
  echo "@modelcontextprotocol/server-everything did not install into $node_dir (no $entry)" >&2
  exit 1
fi

if ! "$venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q "mcp==$python_mcp_version" >&2
fi
"$venv/bin/python" -c 'import mcp' >&2

echo "export LEGIO_MCP_EVERYTHING=$entry"
echo "export LEGIO_MCP_PYTHON=$venv/bin/python"
