"""Postgres faults under load (docs/postgres.md "Failures").

Each test starts its own private cluster (initdb in a temp dir, as the postgres user when
run as root, like test_postgres_store.py) so it can kill backends, crash and pause the
server. fencekeeper runs with statement_timeout_ms = connect_timeout_ms = 1000.

  - pg_terminate_backend of every fencekeeper backend, five times, mid-load;
  - `pg_ctl stop -m immediate` (a crash) mid-load, down for 2 s, restart;
  - the postmaster and every backend SIGSTOPped for 4 s mid-load, then SIGCONT.

Always: every reply is 2xx, 409, 503 or 504; no request takes longer than its deadline
(DEADLINE_S: the wait for a connection, statement_timeout, plus our own 1 s longer timer,
plus a margin) — nothing hangs; the pool recovers (writes are acknowledged again within
a few seconds of the database coming back); and the history checker, fed with the state
read straight from the database through psql (not through fencekeeper), finds no 2xx for
a write that is not in the database, no acknowledged fence missing, no rejected (409/503)
write present.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import fk
import robust

STATEMENT_TIMEOUT_MS = 1000
CONNECT_TIMEOUT_MS = 1000
# Queue wait for a connection (≤ statement_timeout) + the exchange's own deadline
# (statement_timeout + 1 s) + 1.5 s margin for a loaded (or sanitized) CI machine.
DEADLINE_S = 2 * STATEMENT_TIMEOUT_MS / 1000 + 1 + 1.5


class Cluster:
    """A private Postgres cluster on a free loopback port."""

    def __init__(self):
        self.initdb, self.pg_ctl = fk.pg_tool("initdb"), fk.pg_tool("pg_ctl")
        self.psql_exe = fk.require_tool("psql")
        self.dir = tempfile.mkdtemp(prefix="fk-pgr-")
        self.data = os.path.join(self.dir, "data")
        self.port = fk.free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
        self._run([self.initdb, "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                   "--locale=C.UTF-8", "--no-sync"])
        self.url = "postgresql://postgres@127.0.0.1:%d/postgres" % self.port

    def _run(self, cmd, check=True):
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        return subprocess.run(cmd, check=check, capture_output=True, timeout=120)

    def start(self):
        self._run([self.pg_ctl, "-D", self.data, "-w", "-t", "60", "-l", self.dir + "/log", "-o",
                   "-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=100 "
                   "-c log_min_duration_statement=500 -c log_lock_waits=on" % (self.port, self.dir),
                   "start"])

    def stop(self, mode="fast"):
        self._run([self.pg_ctl, "-D", self.data, "-w", "-m", mode, "stop"])

    def postmaster_pid(self):
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            return int(f.readline())

    def all_pids(self):
        pm = self.postmaster_pid()
        out = [pm]
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open("/proc/%s/stat" % d) as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == pm:
                            out.append(int(d))
                except (OSError, IndexError, ValueError):
                    pass
        return out

    def psql(self, sql):
        r = subprocess.run([self.psql_exe, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", self.url, "-c", sql],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError("psql: %s" % r.stderr)
        return r.stdout

    def remove(self):
        with_pids = []
        try:
            with_pids = self.all_pids()
        except OSError:
            pass
        for pid in with_pids:   # never leave a stopped server behind
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        try:
            self.stop("immediate")
        except Exception:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def db_state(cluster, schema, ks):
    """Keys and fences as the database holds them (for History.check)."""
    keys_state = {k: None for k in ks.keys}
    for line in cluster.psql('SELECT key, encode(body, \'hex\'), token FROM "%s".resources WHERE NOT deleted'
                             % schema).splitlines():
        if line:
            key, hexbody, token = line.split("|")
            if key in keys_state:
                keys_state[key] = (bytes.fromhex(hexbody), int(token))
    fences = {l: None for l in ks.locks}
    for line in cluster.psql('SELECT lock, token FROM "%s".fences' % schema).splitlines():
        if line:
            lock, token = line.split("|")
            if lock in fences:
                fences[lock] = int(token)
    return keys_state, fences


class Run:
    """A private cluster, a fencekeeper on it, and a recorded load with latencies."""

    def __init__(self, prefix):
        self.cluster = Cluster()
        self.cluster.start()
        self.schema = "fk_" + fk.rand_name(8)
        self.store = fk.Store("postgres", self.cluster.url, config={"postgres": {
            "schema": self.schema, "statement_timeout_ms": STATEMENT_TIMEOUT_MS,
            "connect_timeout_ms": CONNECT_TIMEOUT_MS, "pool_size": 4}})
        self.proxy = self.store.start()
        self.proxy.wait_ready()
        self.ks = robust.Keyspace(prefix, nlocks=3, keys_per_lock=2)
        self.tokens = robust.Tokens(self.ks.locks)
        self.history = fk.History()
        self.samples = []   # (t_start, latency, status or None, op)
        self.mu = threading.Lock()
        self.marks = []     # (what, monotonic time): the fault's steps, for explain_slow
        self.load = robust.Load(lambda: self.proxy, self.history, self.ks, self.tokens, nthreads=8,
                                sizes=(1, 4096), timeout=DEADLINE_S + 10, on_result=self._sample,
                                pause_on_error=0.01)

    def _sample(self, op, status, latency):
        with self.mu:
            self.samples.append((op.invoke_t, latency, status, op))

    def acked_since(self, t):
        with self.mu:
            return sum(1 for t0, _, s, _ in self.samples if t0 >= t and s is not None and 200 <= s < 300)

    def wait_acked_since(self, t, n=5, timeout=20.0):
        deadline = time.monotonic() + timeout
        while self.acked_since(t) < n:
            if time.monotonic() > deadline:
                fk.fail("the pool did not recover: fewer than %d writes acknowledged %.0fs after "
                        "the database came back (%s)" % (n, timeout, self.summary_since(t)))
            time.sleep(0.05)
        return time.monotonic() - t

    def summary_since(self, t):
        c = {}
        with self.mu:
            for t0, _, s, _ in self.samples:
                if t0 >= t:
                    c[s] = c.get(s, 0) + 1
        return c

    def finish(self, what):
        self.load.stop()
        statuses = {}
        slow = []
        for t0, lat, s, op in self.samples:
            statuses[s] = statuses.get(s, 0) + 1
            if lat > DEADLINE_S:
                slow.append((round(lat, 2), s, op))
        if slow:
            self.explain_slow(slow)
        fk.check(not slow, "%s: %d requests took longer than %.1fs: %r" % (what, len(slow), DEADLINE_S, slow[:5]))
        bad = sorted(set(s for s in statuses if s is not None) - {200, 201, 204, 409, 503, 504})
        fk.eq(bad, [], "%s: replies outside 2xx/409/503/504" % what)
        fk.eq(statuses.get(None, 0), 0, "%s: requests without a reply (connection errors)" % what)
        keys_state, fences = db_state(self.cluster, self.schema, self.ks)
        self.history.assert_ok(keys_state, fences)
        # And through a fresh fencekeeper: it serves what the database holds.
        robust.verify(self.history, self.proxy, self.ks)
        print("  %s: %d requests %s, max latency %.2fs (deadline %.1fs)"
              % (what, len(self.samples), dict(sorted(statuses.items(), key=lambda kv: str(kv[0]))),
                 max(l for _, l, _, _ in self.samples), DEADLINE_S))

    def explain_slow(self, slow):
        """What a failure needs to be understood later: when each slow request started
        (against the fault's marks), and what fencekeeper and Postgres logged meanwhile."""
        for lat, s, op in sorted(slow, key=lambda x: -x[0])[:5]:
            wall = time.time() - (time.monotonic() - op.invoke_t)
            print("  slow: %.2fs -> %s, started %s UTC, %s" % (
                lat, s, time.strftime("%H:%M:%S", time.gmtime(wall)) + ".%03d" % (wall % 1 * 1000),
                ", ".join("%+.2fs after %s" % (op.invoke_t - t, m) for m, t in self.marks)))
            if op.id in self.load.resent:
                err, first_s, fresh = self.load.resent[op.id]
                print("    sent twice: the first attempt (%s connection) ended after %.2fs with %s"
                      % ("a new" if fresh else "a kept-alive", first_s, err))
        lines = [l for l in self.proxy.stderr_text().splitlines() if '"rejected stale write"' not in l]
        print("--- fencekeeper stderr, stale-write lines left out (last 60):\n%s\n---" % "\n".join(lines[-60:]))
        with fk.contextlib.suppress(OSError), open(os.path.join(self.cluster.dir, "log"), errors="replace") as f:
            print("--- postgres log (last 4000 bytes):\n%s---" % f.read()[-4000:])

    def mark(self, what):
        self.marks.append((what, time.monotonic()))

    def close(self):
        with fk.contextlib.suppress(Exception):
            self.load.stop_ev.set()
        fk.kill_all_proxies()
        self.cluster.remove()


def test_terminate_backends_mid_load():
    run = Run("term")
    try:
        run.load.start()
        time.sleep(1.0)
        killed = 0
        for _ in range(5):
            out = run.cluster.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                   "WHERE application_name = 'fencekeeper' AND pid <> pg_backend_pid()")
            killed += int(out.strip() or 0)
            time.sleep(0.4)
        fk.check(killed >= 5, "terminated only %d fencekeeper backends" % killed)
        t_back = time.monotonic()
        rec = run.wait_acked_since(t_back, n=20)
        time.sleep(0.5)
        run.finish("%d backends terminated, recovered in %.2fs" % (killed, rec))
        fk.eq(run.proxy.client().readyz().status, 200, "/readyz after the terminations")
    finally:
        run.close()


def test_immediate_stop_and_restart():
    run = Run("crash")
    try:
        run.load.start()
        time.sleep(1.0)
        run.mark("stop begins")
        run.cluster.stop("immediate")
        run.mark("stopped")
        t_down = time.monotonic()
        time.sleep(2.0)
        fk.eq(run.proxy.client(timeout=DEADLINE_S).readyz().status, 503, "/readyz while Postgres is down")
        down = run.summary_since(t_down + 0.5)
        fk.check(down.get(503, 0) > 0, "no 503 while the database was down: %r" % down)
        fk.check(not any(s is not None and 200 <= s < 300 for s in down), "2xx while the database was down: %r" % down)
        run.mark("start begins")
        run.cluster.start()
        run.mark("started")
        t_back = time.monotonic()
        rec = run.wait_acked_since(t_back, n=20)
        fk.eq(run.proxy.client().readyz().status, 200, "/readyz after the restart")
        time.sleep(0.5)
        run.finish("crashed, down 2s, recovered in %.2fs" % rec)
    finally:
        run.close()


def test_paused_postgres():
    run = Run("pause")
    pause_s = DEADLINE_S + 3.0
    try:
        run.load.start()
        time.sleep(1.0)
        pids = run.cluster.all_pids()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        t_pause = time.monotonic()
        try:
            time.sleep(pause_s - DEADLINE_S)
            # A new client connection works, and its write is bounded too.
            t0 = time.monotonic()
            key = run.ks.keys[0]
            with run.proxy.client(timeout=DEADLINE_S + 5) as c:
                r = c.put(key, b"during-pause", token=1, lock=run.ks.key_lock[key])
            lat = time.monotonic() - t0
            fk.check(r.status in (409, 503, 504), "a write during the pause: %r" % r)
            fk.check(lat <= DEADLINE_S, "a write during the pause took %.2fs" % lat)
            time.sleep(max(0.0, t_pause + pause_s - time.monotonic()))
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        t_cont = time.monotonic()
        # Requests sent while the database was paused, early enough that their deadline
        # passed before SIGCONT: every one must have been answered, before SIGCONT, non-2xx.
        with run.mu:
            during = [(s, t0 + lat) for t0, lat, s, _ in run.samples if t_pause <= t0 <= t_cont - DEADLINE_S]
        fk.check(len(during) > 0, "no request sent during the pause was answered: they hang")
        codes = sorted(set(s for s, _ in during), key=str)
        fk.check(set(codes) <= {409, 503, 504}, "replies while the database was paused: %r" % codes)
        fk.check(all(done <= t_cont for _, done in during), "a request sent during the pause waited for SIGCONT")
        rec = run.wait_acked_since(t_cont, n=20)
        time.sleep(0.5)
        run.finish("paused %.0fs (%d requests answered %r during it), recovered in %.2fs"
                   % (pause_s, len(during), codes, rec))
    finally:
        run.close()


if __name__ == "__main__":
    fk.main(globals())
