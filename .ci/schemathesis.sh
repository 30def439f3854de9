#!/usr/bin/env bash
# Runs schemathesis (path in $1) against `legio serve` on a temp log and an ephemeral loopback
# port, with the scripted legion of config/legio.toml. Semantic refusals of schema-valid input
# (a seq past the end of the log, an unknown agent) are answered with 4xx by design, so the
# positive-data-acceptance check is excluded, and so is the event stream (with follow it streams
# until the server stops); every other check must pass.
set -euo pipefail
cd "$(dirname "$0")/.."
st="$1"
work="$(mktemp -d)"
trap 'kill "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
cp -r config/agents "$work/agents"
sed 's#^path = "../data/legio"#path = "db"#' config/legio.toml > "$work/legio.toml"
# Built as the README's test command builds it (as scripts/soak.sh does), so after the tests CI
# rebuilds nothing here; `cargo build -p legio-cli` resolves other features and recompiles.
cargo test -q --locked --workspace --no-run --test models
LEGIO_API_TOKEN=schemathesis-token "${CARGO_TARGET_DIR:-target}/debug/legio" --config "$work/legio.toml" serve --bind 127.0.0.1:0 > "$work/serve.out" 2> "$work/serve.err" &
pid=$!
for _ in $(seq 1 100); do grep -q http "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
url="$(grep -o 'http://[0-9.:]*' "$work/serve.out" | head -1)"
timeout 600 "$st" run proto/openapi.yaml --url "$url" -H "Authorization: Bearer schemathesis-token" \
  --max-examples 20 --exclude-checks positive_data_acceptance --seed 1 \
  --exclude-path /operator/events
kill -TERM "$pid"; wait "$pid"
