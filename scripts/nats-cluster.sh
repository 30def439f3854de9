#!/usr/bin/env bash
# Starts and stops a local NATS JetStream cluster on loopback ports, for legio's cluster backend.
#
#   scripts/nats-cluster.sh start DIR [N]   start N (default 3) JetStream servers, data in DIR;
#                                           prints one client URL per line
#   scripts/nats-cluster.sh stop DIR        stop the servers started in DIR
#
# The server binary is $LEGIO_NATS_SERVER, else `nats-server` on PATH, else the one that
# scripts/install-nats-server.sh installs under target/. Everything binds 127.0.0.1 only.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

usage() {
  echo "usage: $0 start DIR [N] | stop DIR" >&2
  exit 2
}

server_binary() {
  if [ -n "${LEGIO_NATS_SERVER:-}" ]; then
    echo "$LEGIO_NATS_SERVER"
  elif command -v nats-server >/dev/null 2>&1; then
    command -v nats-server
  else
    "$here/install-nats-server.sh"
  fi
}

# Prints N distinct loopback TCP ports that nothing listens on now, drawn from below the kernel's
# ephemeral range: a port found by binding port 0 comes from that range, where any process's next
# outgoing connection may take it before nats-server binds it; below it the kernel hands out
# nothing by itself. (Another process drawing the same port at the same moment is still possible:
# start() then tries again on new ports.)
free_ports() { # N
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
try:
    low, high = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
except OSError:
    low, high = 32768, 60999
lo, hi = (low - 10000, low) if low >= 12000 else ((high + 1, 65000) if high <= 55000 else (10000, max(low, 10001)))
ports = []
while len(ports) < n:
    port = random.randrange(lo, hi)
    if port in ports:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        ports.append(port)
    except OSError:
        pass
    finally:
        s.close()
print(" ".join(map(str, ports)))
PY
}

write_config() { # NAME DIR CLIENT CLUSTER MONITOR ROUTES N
  local name=$1 dir=$2 client=$3 cluster=$4 monitor=$5 routes=$6 n=$7
  {
    echo "server_name: $name"
    echo "listen: 127.0.0.1:$client"
    echo "http: 127.0.0.1:$monitor"
    # legio accepts messages up to 1 MiB (store.max_message_bytes) plus framing.
    echo "max_payload: 8MB"
    # Written once the server listens on all its ports (so the ports are its own).
    echo "ports_file_dir: \"$dir\""
    echo "jetstream { store_dir: \"$dir/$name\" }"
    if [ "$n" -gt 1 ]; then
      echo "cluster { name: legio, listen: 127.0.0.1:$cluster, routes: [$routes] }"
    fi
  } >"$dir/$name.conf"
}

# Waits until server NAME (pid PID) has bound its ports and is healthy. Returns 0 when it is,
# 2 when it exited because a port was taken (worth another try), 1 on anything else.
wait_healthy() { # MONITOR_PORT NAME DIR PID
  local port=$1 name=$2 dir=$3 pid=$4
  for _ in $(seq 1 600); do
    if ! kill -0 "$pid" 2>/dev/null; then
      if grep -q "address already in use" "$dir/$name.log"; then
        return 2
      fi
      echo "server $name exited; $dir/$name.log ends:" >&2
      tail -n 20 "$dir/$name.log" >&2
      return 1
    fi
    if ls "$dir"/*_"$pid".ports >/dev/null 2>&1 &&
      python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/healthz?js-enabled-only=true', timeout=1)" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "server $name did not become healthy in 60 s; $dir/$name.log ends:" >&2
  tail -n 20 "$dir/$name.log" >&2
  return 1
}

# One try at starting N servers on fresh ports. Returns as wait_healthy does; prints the URLs.
start_once() { # DIR N BIN
  local dir=$1 n=$2 bin=$3 ports routes="" status
  read -r -a ports <<<"$(free_ports $((3 * n)))"
  for i in $(seq 0 $((n - 1))); do
    routes+="${routes:+, }nats-route://127.0.0.1:${ports[$((3 * i + 1))]}"
  done
  for i in $(seq 0 $((n - 1))); do
    local name="n$((i + 1))"
    write_config "$name" "$dir" "${ports[$((3 * i))]}" "${ports[$((3 * i + 1))]}" "${ports[$((3 * i + 2))]}" "$routes" "$n"
    nohup "$bin" -c "$dir/$name.conf" >"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
  done
  for i in $(seq 0 $((n - 1))); do
    status=0
    wait_healthy "${ports[$((3 * i + 2))]}" "n$((i + 1))" "$dir" "$(cat "$dir/n$((i + 1)).pid")" || status=$?
    [ "$status" -eq 0 ] || return "$status"
  done
  for i in $(seq 0 $((n - 1))); do
    echo "nats://127.0.0.1:${ports[$((3 * i))]}"
  done
}

start() {
  local dir=$1 n=${2:-3} bin status
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if ls "$dir"/*.pid >/dev/null 2>&1; then
    echo "servers already run from $dir; stop them first: $0 stop $dir" >&2
    exit 1
  fi
  bin="$(server_binary)"
  for attempt in 1 2 3 4 5; do
    status=0
    start_once "$dir" "$n" "$bin" || status=$?
    [ "$status" -eq 0 ] && return 0
    stop "$dir"
    [ "$status" -eq 2 ] || exit 1
    echo "a port was taken (try $attempt of 5); starting again on other ports" >&2
    for i in $(seq 1 "$n"); do rm -rf "${dir:?}/n$i"; done
    rm -f "$dir"/*.ports
  done
  echo "a port was taken on each of 5 tries; see $dir/*.log" >&2
  exit 1
}

# Whether PID runs: it exists and is not a zombie (ended, waiting for its parent to reap it,
# which `kill -0` would still find). Without `ps`, `kill -0` it is.
running() { # PID
  local state
  if ! command -v ps >/dev/null 2>&1; then
    kill -0 "$1" 2>/dev/null
    return
  fi
  state="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
  [[ "$state" != Z* ]]
}

stop() {
  local dir=$1 pid files
  shopt -s nullglob
  files=("$dir"/*.pid)
  if [ ${#files[@]} -eq 0 ]; then
    echo "nats-cluster.sh: no server started by this script runs in $dir (no *.pid file): nothing to stop" >&2
    return 0
  fi
  for file in "${files[@]}"; do
    pid="$(cat "$file")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      running "$pid" || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$file"
  done
}

case "${1:-}" in
  start) [ $# -ge 2 ] || usage; start "$2" "${3:-3}" ;;
  stop) [ $# -eq 2 ] || usage; stop "$2" ;;
  *) usage ;;
esac
