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

# Prints one free loopback TCP port (the kernel's pick; released again before the server binds it).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

write_config() { # NAME DIR CLIENT CLUSTER MONITOR ROUTES N
  local name=$1 dir=$2 client=$3 cluster=$4 monitor=$5 routes=$6 n=$7
  {
    echo "server_name: $name"
    echo "listen: 127.0.0.1:$client"
    echo "http: 127.0.0.1:$monitor"
    # legio accepts messages up to 1 MiB (store.max_message_bytes) plus framing.
    echo "max_payload: 8MB"
    echo "jetstream { store_dir: \"$dir/$name\" }"
    if [ "$n" -gt 1 ]; then
      echo "cluster { name: legio, listen: 127.0.0.1:$cluster, routes: [$routes] }"
    fi
  } >"$dir/$name.conf"
}

wait_healthy() { # MONITOR_PORT NAME DIR
  for _ in $(seq 1 200); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$1/healthz?js-enabled-only=true', timeout=1)" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "server $2 did not become healthy; see $3/$2.log" >&2
  return 1
}

start() {
  local dir=$1 n=${2:-3}
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if ls "$dir"/*.pid >/dev/null 2>&1; then
    echo "servers already run from $dir; stop them first: $0 stop $dir" >&2
    exit 1
  fi
  local bin clients=() clusters=() monitors=() routes=""
  bin="$(server_binary)"
  for i in $(seq 1 "$n"); do
    clients+=("$(free_port)")
    clusters+=("$(free_port)")
    monitors+=("$(free_port)")
  done
  for i in $(seq 0 $((n - 1))); do
    routes+="${routes:+, }nats-route://127.0.0.1:${clusters[$i]}"
  done
  for i in $(seq 0 $((n - 1))); do
    local name="n$((i + 1))"
    write_config "$name" "$dir" "${clients[$i]}" "${clusters[$i]}" "${monitors[$i]}" "$routes" "$n"
    nohup "$bin" -c "$dir/$name.conf" >"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
  done
  for i in $(seq 0 $((n - 1))); do
    wait_healthy "${monitors[$i]}" "n$((i + 1))" "$dir"
  done
  for i in $(seq 0 $((n - 1))); do
    echo "nats://127.0.0.1:${clients[$i]}"
  done
}

stop() {
  local dir=$1 pid
  shopt -s nullglob
  for file in "$dir"/*.pid; do
    pid="$(cat "$file")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
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
