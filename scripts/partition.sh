#!/usr/bin/env bash
# The partition run (issue 47): three hosts in network namespaces on one bridge, each one
# nats-server (JetStream, replicas 3) and one `legio serve --node`; keyed posts from clients with a
# ledger while a node is SIGKILLed, a node is SIGSTOPped, and the stream leader's host is cut off
# silently (its bridge port down) and healed. Checks 0 lost, 0 duplicated, every conversation
# answered again within the lease TTL + 10 s on the majority side, none left failed after the
# heal, no 500; prints the failover figures. Needs root (ip netns, ip link) and python3.
#   scripts/partition.sh              the CI run: TTL 5 s, a 25 s cut (about 2 minutes)
#   scripts/partition.sh --cut 60     a longer cut; other knobs: --clients --conversations --ttl
#                                     --settle --keep (scripts/partition.py --help)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
if [ "$(id -u)" != 0 ]; then
  echo "scripts/partition.sh needs root: it makes network namespaces and a bridge" >&2
  exit 2
fi
nats_server="${LEGIO_NATS_SERVER:-$(scripts/install-nats-server.sh)}"
# Built as the README's test command builds it, so after the tests CI rebuilds nothing here.
cargo test -q --locked --workspace --no-run --test models
exec python3 scripts/partition.py --legio "$CARGO_TARGET_DIR/debug/legio" --nats-server "$nats_server" "$@"
