#!/usr/bin/env python3
"""Soak driver for scripts/soak.sh (docs/reliability.md). Not part of CI.

Two fencekeepers on file stores (or one database with --store postgresql://...):

  steady  never restarted: mixed load (puts, deletes, fence advances, about a quarter of
          them with stale tokens), zombie writers (a token below the fence, must get 409),
          clients that vanish mid-request, and invalid requests. Sampled every INTERVAL
          seconds: RSS (VmRSS), open fds (/proc/PID/fd), request latency p50/p99 of the
          window, ops and errors. These samples are what must stay flat.
  chaos   restarted over and over under the same kind of load: kill -9, SIGTERM (must
          exit 0), and a disk fault (the fsync EIO shim, when available: the store must go
          to its failed state) followed by a clean restart. After every restart the
          whole operation history is checked (tests/integration/fk.History).

Writes a CSV (one row per sample) and exits non-zero when a history check fails, a zombie
write is accepted, SIGTERM does not exit 0, or the steady process is not flat over the
last half of the run: RSS grew more than max(RSS_SLACK_MIB, 10 %) or open fds more than
FD_SLACK between the first and the last quarter-run medians... see judge().
"""

import argparse
import csv
import os
import random
import signal
import socket
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import fk       # noqa: E402
import robust   # noqa: E402

RSS_SLACK_MIB = 8.0
RSS_SLACK_FRAC = 0.10
FD_SLACK = 6


def proc_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def proc_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def pct(values, q):
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


class Steady:
    def __init__(self, store, nthreads):
        self.proxy = store.start()
        self.proxy.wait_ready()
        self.ks = robust.Keyspace("soak", nlocks=4, keys_per_lock=3)
        self.history = fk.History()
        self.lat = []
        self.errors = 0
        self.ops = 0
        self.mu = threading.Lock()
        self.load = robust.Load(lambda: self.proxy, self.history, self.ks,
                                robust.Tokens(self.ks.locks, stale_share=0.25), nthreads=nthreads,
                                sizes=(1, 32 * 1024), timeout=30, on_result=self._result, tag="s")
        self.stop_ev = threading.Event()
        self.failures = []
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._zombie, self._rude)]

    def _result(self, op, status, latency):
        with self.mu:
            self.ops += 1
            self.lat.append(latency)
            # History: a request to the never-restarted process should always be answered.
            if status is None or status >= 500:
                self.errors += 1

    def window(self):
        with self.mu:
            lat, self.lat = self.lat, []
            ops, errors = self.ops, self.errors
            self.ops = self.errors = 0
        return ops, errors, pct(lat, 0.5) * 1000, pct(lat, 0.99) * 1000

    def _zombie(self):
        """A writer that was paused while others moved on: token 0 below every fence."""
        c = self.proxy.client(timeout=30)
        while not self.stop_ev.wait(0.2):
            lock = random.choice(self.ks.locks)
            try:
                f = c.fence(lock)
                if f.status != 200 or f.json()["token"] == 0:
                    continue
                key = random.choice([k for k, l in self.ks.key_lock.items() if l == lock])
                r = c.put(key, b"zombie", token=0, lock=lock)
                if r.status != 409:
                    self.failures.append("zombie write with token 0 to %s got %r" % (key, r))
            except Exception as e:
                c.close()
                self.failures.append("zombie: %r" % e)

    def _rude(self):
        """Clients that hang up mid-body, send garbage, or go idle and vanish."""
        while not self.stop_ev.wait(0.1):
            try:
                s = socket.create_connection((self.proxy.host, self.proxy.port), timeout=5)
                kind = random.randrange(3)
                if kind == 0:
                    s.sendall(b"PUT /v1/resources/soak-rude HTTP/1.1\r\nHost: x\r\nFencing-Token: 1\r\n"
                              b"Content-Length: 100000\r\n\r\n" + b"x" * 1000)
                elif kind == 1:
                    s.sendall(b"GARBAGE \x00\xff\r\n\r\n")
                    s.recv(4096)
                else:
                    s.sendall(b"GET /v1/fences/soak-l0 HTTP/1.1\r\nHost: x\r\n")
                s.close()
            except OSError:
                pass

    def start(self):
        self.load.start()
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop_ev.set()
        self.load.stop()
        for t in self.threads:
            t.join(10)
        robust.verify(self.history, self.proxy, self.ks, root=self.proxy.store.root)


class Chaos:
    def __init__(self, store, shim):
        self.store = store
        self.shim = shim
        self.proxy = store.start()
        self.proxy.wait_ready()
        self.ks = robust.Keyspace("chaos", nlocks=3, keys_per_lock=2)
        self.history = fk.History()
        self.tokens = robust.Tokens(self.ks.locks)
        self.events = {"kill9": 0, "sigterm": 0, "fsync_eio": 0}
        self.failures = []
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _cycle(self):
        load = robust.Load(lambda: self.proxy, self.history, self.ks, self.tokens, nthreads=4,
                           sizes=(1, 16 * 1024), timeout=30, tag="c")
        event = random.choice(["kill9", "sigterm"] + (["fsync_eio"] if self.shim else []))
        if event == "fsync_eio":
            self.proxy.kill()
            self.proxy.env = {"LD_PRELOAD": self.shim, "FK_FSYNC_FAIL_AFTER": str(random.randint(5, 200))}
            self.proxy.start()
            self.proxy.wait_ready()
        load.start()
        time.sleep(random.uniform(1.0, 8.0))
        if event == "kill9":
            self.proxy.kill()
        elif event == "sigterm":
            rc = self.proxy.stop(timeout=30)
            if rc != 0:
                self.failures.append("SIGTERM: exit status %r" % rc)
        else:
            self.proxy.kill()
        load.stop()
        self.proxy.env = None
        self.proxy.start()
        self.proxy.wait_ready()
        robust.verify(self.history, self.proxy, self.ks, root=self.store.root)
        self.events[event] += 1

    def _run(self):
        while not self.stop_ev.is_set():
            try:
                self._cycle()
            except Exception as e:
                self.failures.append("chaos cycle: %s" % e)
                return

    def start(self):
        self.thread.start()

    def finish(self):
        self.stop_ev.set()
        self.thread.join(120)


def judge(rows):
    """Flat = over the last half of the run, RSS and fds did not keep growing."""
    n = len(rows)
    if n < 8:
        return ["too few samples (%d) to judge; run at least 2 minutes" % n]
    half = rows[n // 2:]
    q = max(2, len(half) // 4)
    first, last = half[:q], half[-q:]
    rss0 = statistics.median(r["rss_kib"] for r in first)
    rss1 = statistics.median(r["rss_kib"] for r in last)
    fd0 = statistics.median(r["fds"] for r in first)
    fd1 = statistics.median(r["fds"] for r in last)
    problems = []
    allowed = max(RSS_SLACK_MIB * 1024, rss0 * RSS_SLACK_FRAC)
    verdict = "RSS %.1f -> %.1f MiB (allowed +%.1f), fds %g -> %g (allowed +%d)" % (
        rss0 / 1024, rss1 / 1024, allowed / 1024, fd0, fd1, FD_SLACK)
    if rss1 - rss0 > allowed:
        problems.append("RSS grows over the last half: " + verdict)
    if fd1 - fd0 > FD_SLACK:
        problems.append("open fds grow over the last half: " + verdict)
    print("soak: " + verdict)
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("minutes", type=float)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=6)
    args = ap.parse_args()
    fk.require_binary()
    shim = os.path.join(os.path.dirname(os.path.abspath(fk.binary())), "libfk_fsync_fault.so")
    shim = shim if os.path.exists(shim) else None
    steady = Steady(fk.file_store(), args.threads)
    chaos = Chaos(fk.file_store(), shim)
    print("soak: %.1f min, steady pid %d, chaos on %s, fsync fault shim: %s"
          % (args.minutes, steady.proxy.pid, chaos.store.root, shim or "not built"), flush=True)
    steady.start()
    chaos.start()
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    rows = []
    fields = ["t_s", "rss_kib", "fds", "p50_ms", "p99_ms", "ops", "errors", "chaos_restarts"]
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        while time.monotonic() < end and not chaos.failures and not steady.failures:
            time.sleep(args.interval)
            ops, errors, p50, p99 = steady.window()
            row = {"t_s": round(time.monotonic() - t0), "rss_kib": proc_rss_kib(steady.proxy.pid),
                   "fds": proc_fds(steady.proxy.pid), "p50_ms": round(p50, 2), "p99_ms": round(p99, 2),
                   "ops": ops, "errors": errors, "chaos_restarts": sum(chaos.events.values())}
            rows.append(row)
            w.writerow(row)
            f.flush()
            print("soak: " + " ".join("%s=%s" % (k, row[k]) for k in fields), flush=True)
    problems = []
    chaos.finish()
    try:
        steady.finish()
    except Exception as e:
        problems.append("steady history check: %s" % e)
    problems += chaos.failures + steady.failures[:10]
    if sum(r["errors"] for r in rows):
        problems.append("the steady process answered %d requests with 5xx or not at all"
                        % sum(r["errors"] for r in rows))
    problems += judge(rows)
    print("soak: chaos events %r, %d ops checked on chaos, %d on steady"
          % (chaos.events, len(chaos.history.ops), len(steady.history.ops)))
    fk.kill_all_proxies()
    fk._remove_tmp()
    if problems:
        print("soak: FAILED\n  " + "\n  ".join(problems))
        return 1
    print("soak: flat, all histories check out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
