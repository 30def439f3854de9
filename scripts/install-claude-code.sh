#!/usr/bin/env bash
# Installs the Claude Code CLI (npm `@anthropic-ai/claude-code`) the real-CLI tests of the
# claude-code provider run (issue 45), under target/, never globally, and prints the variable the
# tests read as an `export NAME=VALUE` line on stdout (`eval "$(scripts/install-claude-code.sh)"`).
# Idempotent: a second run of the same version only prints it.
#
#   LEGIO_CLAUDE_CODE   the CLI's executable (its `claude` bin)
#
# The version is pinned; LEGIO_CLAUDE_CODE_VERSION picks another (`latest` for the newest the
# registry has, resolved to its number so each version gets its own folder):
#
#   scripts/install-claude-code.sh                                   # the pinned 2.1.197
#   LEGIO_CLAUDE_CODE_VERSION=latest scripts/install-claude-code.sh  # the newest
#
# Needs node and npm (Debian: apt-get install nodejs npm). The package ships its binary as an
# optional dependency per platform (linux-x64, linux-arm64, their musl builds): npm must be
# allowed to install optional dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${LEGIO_CLAUDE_CODE_VERSION:-2.1.197}"
if ! command -v npm >/dev/null 2>&1; then
  echo "npm is missing: install node and npm (apt-get install nodejs npm)" >&2
  exit 1
fi
if [ "$version" = "latest" ]; then
  if ! version="$(npm view @anthropic-ai/claude-code@latest version 2>/dev/null)" || [ -z "$version" ]; then
    echo "cannot ask the npm registry for @anthropic-ai/claude-code's latest version" >&2
    exit 1
  fi
fi
node_dir="$PWD/target/claude-code/$version"
bin="$node_dir/node_modules/.bin/claude"

installed() {
  [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^$version"
}

if ! installed; then
  mkdir -p "$node_dir"
  npm install --silent --no-audit --no-fund --include=optional --prefix "$node_dir" \
    "@anthropic-ai/claude-code@$version" >&2
fi
if ! installed; then
  echo "@anthropic-ai/claude-code@$version did not install into $node_dir (no working $bin)" >&2
  exit 1
fi
echo "export LEGIO_CLAUDE_CODE=$bin"
