#!/usr/bin/env bash
# The soak and chaos run (issue 16): HTTP load on many conversations against a real `legio serve`
# with random SIGKILLs (then a restart), SIGSTOPs (then SIGCONT), `ulimit -n` on the server and,
# where a tmpfs can be mounted (root), a disk that fills and empties; then checks that every
# acknowledged turn is in the log exactly once and `legio verify` is clean, and prints figures.
#   scripts/soak.sh               a 60 s run (CI runs 45 s)
#   scripts/soak.sh --seconds 600 the long run; other knobs: --clients --conversations
#                                 --chaos-period --nofile --tmpfs-mb --seed (scripts/soak.py)
# Needs python3 (standard library only) and builds the `legio` binary (the test profile's debug build).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
# Built as the README's test command builds it (`cargo test --workspace`: the same crate features,
# dev-dependencies included), so after the tests CI rebuilds nothing here. `cargo build -p legio-cli`
# resolves other features and recompiled the legio crates and some dependencies: 2.5 min in CI.
cargo test -q --locked --workspace --no-run --test models
exec python3 scripts/soak.py --legio "$CARGO_TARGET_DIR/debug/legio" "$@"
