#!/usr/bin/env python3
"""The soak and chaos run (issue 16), driven by scripts/soak.sh.

HTTP load on many conversations against a real `legio serve` (scripted providers), while the
server is killed (SIGKILL, then restarted), frozen (SIGSTOP, then SIGCONT), run under a
descriptor limit (`ulimit -n`) and, where a tmpfs can be mounted, on a disk that fills and
empties. Like a supervisor (systemd, Kubernetes), the run starts the server again whenever it
exits on its own (after a storage failure it exits with code 75). The client remembers every turn the server acknowledged (200); at the end the server is
stopped, `legio verify` must be clean and `legio export` must hold every acknowledged turn's
message exactly once. Prints the figures and exits non-zero on any loss or duplicate.
Standard library only.
"""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

CONFIG = """
[store]
path = "{db}"
[runtime]
history_window = 4
[server]
token = "soak-token"
shutdown_grace_seconds = 5
storage_failure_exit_seconds = 1
[server.limits]
header_read_timeout_seconds = 5
body_read_timeout_seconds = 5
max_connections = {max_connections}
max_turns_in_flight_per_token = 64
[agents.lead]
role = "orchestrator"
description = "leads"
prompt = "lead.md"
provider = "resumable"
[agents.a]
role = "specialist"
description = "helps"
prompt = "lead.md"
provider = "stateless"
[providers.resumable]
kind = "scripted"
history = "session"
[providers.stateless]
kind = "scripted"
history = "stateless"
"""


def log(*parts):
    print("soak:", *parts, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerDown(Exception):
    """The server did not come back within 60 s after a restart."""


def outgrown(db, mount):
    """A hint when the log itself has filled the tmpfs (then no restart can open it: that is a
    full disk only an operator can free, not the chaos the filler makes)."""
    if not mount:
        return ""
    used = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(db) for f in fs)
    total = shutil.disk_usage(mount).total
    if used < 0.8 * total:
        return ""
    return f" (the log itself takes {used >> 20} of the tmpfs's {total >> 20} MiB: pass a larger --tmpfs-mb)"


class Server:
    """`legio serve` under a descriptor limit, restartable."""

    def __init__(self, legio, config, port, nofile, out):
        self.legio, self.config, self.port, self.nofile, self.out = legio, config, port, nofile, out
        self.proc = None
        self.lock = threading.Lock()

    def start(self):
        cmd = f"ulimit -n {self.nofile} && exec {self.legio} --config {self.config} serve --bind 127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(["bash", "-c", cmd], stdout=self.out, stderr=self.out)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                # The previous process may still hold the lock for a moment: try again.
                time.sleep(0.2)
                self.proc = subprocess.Popen(["bash", "-c", cmd], stdout=self.out, stderr=self.out)
                continue
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise ServerDown(self.last_words())

    def last_words(self):
        """The server's last lines that are not per-request errors."""
        self.out.flush()
        with open(self.out.name, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
        return [l for l in lines if "request failed" not in l][-3:]

    def signal(self, sig):
        with self.lock:
            if self.proc and self.proc.poll() is None:
                self.proc.send_signal(sig)

    def restart_if_exited(self):
        """Starts the server again if it exited on its own; its exit code, or None."""
        with self.lock:
            if self.proc is None or self.proc.poll() is None:
                return None
            code = self.proc.returncode
            self.start()
            return code

    def kill_and_restart(self):
        with self.lock:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.start()

    def stop(self):
        with self.lock:
            if self.proc.poll() is not None:
                return self.proc.returncode
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                log("SIGTERM did not end the server within 60 s: SIGKILL")
                self.proc.kill()
                return self.proc.wait()


class Figures:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}  # content -> conversation
        self.attempts = 0
        self.refused = {}  # status or error kind -> count
        self.last_ack = time.time()
        self.longest_stall = 0.0  # seconds without any acknowledgement
        self.fatal = None

    def count(self, what):
        with self.lock:
            self.refused[what] = self.refused.get(what, 0) + 1


def client(worker, port, conversations, stop, figures):
    rng = random.Random(worker)
    n = 0
    conn = None
    while not stop.is_set():
        conv = f"soak:{worker}:{rng.randrange(conversations)}"
        n += 1
        content = f"turn {worker}-{n} {'@a ' if n % 5 == 0 else ''}hello"
        body = json.dumps({"content": content})
        with figures.lock:
            figures.attempts += 1
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", f"/sessions/{conv}/turns", body,
                         {"Authorization": "Bearer soak-token", "Content-Type": "application/json"})
            response = conn.getresponse()
            answer = response.read()
            if response.status == 200:
                replies = json.loads(answer)["replies"]
                with figures.lock:
                    figures.acked[content] = conv
                    figures.last_ack = time.time()
                if any(r.get("error") for r in replies):
                    figures.count("200 with an agent error")
            else:
                code = json.loads(answer).get("error", {}).get("code", "?")
                figures.count(f"{response.status} {code}")
                if response.status in (429, 503):
                    time.sleep(0.05)
        except (OSError, http.client.HTTPException, ValueError) as e:
            figures.count(type(e).__name__)
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.05)


def chaos(server, stop, rng, figures, counts, period):
    while not stop.wait(rng.uniform(period / 2, period * 1.5)):
        if rng.random() < 0.5:
            try:
                server.kill_and_restart()
            except ServerDown as down:
                figures.fatal = "after a SIGKILL the server did not come back within 60 s: " + " | ".join(down.args[0]) + outgrown(server.db, server.mount)
                log(figures.fatal)
                stop.set()
                return
            counts["kills"] += 1
        else:
            server.signal(signal.SIGSTOP)
            time.sleep(rng.uniform(0.5, 3.0))
            server.signal(signal.SIGCONT)
            counts["stops"] += 1


def supervisor(server, stop, figures, counts):
    """Starts the server again when it exits on its own, as systemd or Kubernetes would."""
    while not stop.wait(0.1):
        try:
            code = server.restart_if_exited()
        except ServerDown as down:
            figures.fatal = "the server exited on its own and did not come back within 60 s: " + " | ".join(down.args[0]) + outgrown(server.db, server.mount)
            log(figures.fatal)
            stop.set()
            return
        if code is not None:
            counts["exits"] += 1
            counts["exit_codes"][code] = counts["exit_codes"].get(code, 0) + 1


def disk_filler(mount, stop, rng, counts):
    filler = os.path.join(mount, "filler")
    while not stop.wait(rng.uniform(3, 8)):
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * (1 << 20))
        except OSError:
            pass  # full
        counts["fills"] += 1
        stop.wait(rng.uniform(1, 3))
        os.remove(filler)


def try_tmpfs(root, size_mb):
    mount = os.path.join(root, "disk")
    os.makedirs(mount)
    if size_mb == 0:
        return None, "--tmpfs-mb 0"
    if os.geteuid() != 0:
        return None, "not root (mounting a tmpfs needs root)"
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", mount],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return None, f"mount -t tmpfs failed: {result.stderr.strip()}"
    return mount, None


def check(legio, config, figures):
    verify = subprocess.run([legio, "--config", config, "verify"], capture_output=True, text=True)
    export = subprocess.run([legio, "--config", config, "export"], capture_output=True, text=True)
    if export.returncode != 0:
        log("export failed (every acknowledged turn counts as lost):", export.stderr.strip())
    seen = {}
    for line in export.stdout.splitlines():
        record = json.loads(line)
        if record.get("kind") != "message_posted" or record.get("sender") != "user":
            continue
        text = "".join(p.get("text", "") for p in record.get("parts", []) if isinstance(p, dict))
        key = (record.get("conversation"), text)
        seen[key] = seen.get(key, 0) + 1
    lost = [c for c, conv in figures.acked.items() if seen.get((conv, c), 0) == 0]
    doubled = [c for c, conv in figures.acked.items() if seen.get((conv, c), 0) > 1]
    return verify, lost, doubled, sum(seen.values())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--legio", required=True)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--chaos-period", type=float, default=4.0)
    parser.add_argument("--nofile", type=int, default=256)
    parser.add_argument("--tmpfs-mb", type=int, default=1024,
                        help="size of the tmpfs that fills and empties (0: no disk-full chaos); the "
                             "log itself must fit in it with room to spare (about 2.3 KiB a turn)")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="legio-soak-")
    mount, why = try_tmpfs(root, args.tmpfs_mb)
    if mount is None:
        if args.tmpfs_mb and os.environ.get("CI") == "true":
            log(f"CI asks for the filling disk, and it cannot be had: {why}; run as root (or pass --tmpfs-mb 0)")
            sys.exit(1)
        log(f"disk-full chaos skipped: {why}")
    db = os.path.join(mount or root, "db")
    config = os.path.join(root, "legio.toml")
    with open(os.path.join(root, "lead.md"), "w") as f:
        f.write("You lead.")
    with open(config, "w") as f:
        f.write(CONFIG.format(db=db, max_connections=max(16, args.nofile // 2)))
    port = free_port()
    out = open(os.path.join(root, "server.log"), "ab")
    server = Server(args.legio, config, port, args.nofile, out)
    server.db, server.mount = db, mount
    log(f"seed {args.seed}, {args.seconds:.0f} s, {args.clients} clients, {args.conversations} conversations per client, ulimit -n {args.nofile}, dir {root}")
    server.start()
    figures, counts = Figures(), {"kills": 0, "stops": 0, "fills": 0, "exits": 0, "exit_codes": {}}
    stop = threading.Event()
    threads = [threading.Thread(target=client, args=(w, port, args.conversations, stop, figures))
               for w in range(args.clients)]
    threads.append(threading.Thread(target=chaos, args=(server, stop, random.Random(rng.random()), figures, counts, args.chaos_period)))
    threads.append(threading.Thread(target=supervisor, args=(server, stop, figures, counts)))
    if mount:
        threads.append(threading.Thread(target=disk_filler, args=(mount, stop, random.Random(rng.random()), counts)))
    started = time.time()
    for t in threads:
        t.start()
    next_report = started + 10
    while time.time() - started < args.seconds and not stop.is_set():
        time.sleep(0.5)
        with figures.lock:
            figures.longest_stall = max(figures.longest_stall, time.time() - figures.last_ack)
        if time.time() >= next_report:
            next_report += 10
            log(f"{time.time() - started:.0f} s: {len(figures.acked)} acknowledged, {counts}")
    stop.set()
    for t in threads:
        t.join()
    if mount and os.path.exists(os.path.join(mount, "filler")):
        os.remove(os.path.join(mount, "filler"))
    code = server.stop()
    verify, lost, doubled, stored = check(args.legio, config, figures)
    clean = verify.returncode == 0
    print(f"turns attempted:      {figures.attempts}")
    print(f"turns acknowledged:   {len(figures.acked)}")
    print(f"user messages stored: {stored}")
    print(f"SIGKILLs survived:    {counts['kills']}")
    print(f"SIGSTOPs survived:    {counts['stops']}")
    print(f"disk fills:           {counts['fills'] if mount else 'skipped (' + why + ')'}")
    codes = ", ".join(f"{n} with code {c}" for c, n in sorted(counts["exit_codes"].items()))
    print(f"exits on its own:     {counts['exits']}{' (' + codes + ')' if codes else ''}, each started again")
    print(f"refusals and errors:  {json.dumps(figures.refused, sort_keys=True)}")
    print(f"longest stall:        {figures.longest_stall:.1f} s without an acknowledged turn")
    print(f"SIGTERM exit code:    {code}")
    if code != 0:
        with open(os.path.join(root, "server.log"), "rb") as f:
            tail = [l for l in f.read().decode(errors="replace").splitlines() if "request failed" not in l]
        print("  server's last lines:", *tail[-4:], sep="\n    ")
    print(f"lost:                 {len(lost)}")
    print(f"duplicated:           {len(doubled)}")
    print(f"verify:               {'clean' if clean else 'NOT CLEAN'}")
    if not clean:
        print(verify.stdout[-2000:], verify.stderr[-2000:])
    for c in (lost + doubled)[:10]:
        print("  example:", c, figures.acked[c])
    if figures.fatal:
        print(f"ABORTED:              {figures.fatal}")
    ok = clean and not lost and not doubled and not figures.fatal
    if ok:
        if mount:
            subprocess.run(["umount", mount])
        shutil.rmtree(root, ignore_errors=True)
    else:
        with open(os.path.join(root, "acknowledged.json"), "w") as f:
            json.dump(figures.acked, f)
        print(f"kept {root} (server.log, acknowledged.json: content -> conversation, the log{'; the tmpfs stays mounted at ' + mount if mount else ''})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
