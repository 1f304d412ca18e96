"""The workload of the linearizability test (test_linearizability.py): concurrent clients
against one or several fencekeepers, every request recorded as a lincheck.Op, and fault
injectors (kill -9 and SIGSTOP of a proxy, an immediate Postgres restart).

Not a test module itself (no test_ prefix). The checker is lincheck.py; this file only
produces histories for it.

The load (Workload):
  - N client threads (default 8), each with its own keep-alive connection to one proxy
    (thread i -> proxy i mod len(proxies)); after an error it reconnects, to wherever
    that proxy now listens (a restarted fk.Proxy binds a new port).
  - A few locks (default 4, fresh random names per run), each guarding 2-3 keys, written
    with `Fencing-Lock`; keys never move between locks. One token counter per lock shared
    by every thread: most writes take the next token, some the current one (an equal
    token), some a zombie's (an old one: should get 409 stale_token).
  - PUT (unique self-describing bodies, robust.body_for; about 1 in 20 of 64 KiB-1 MiB),
    DELETE (absent keys too), PUT of a fence, GET of keys and of fences; and races: the
    even thread of a pair posts a two-sided step on a fresh key (a create against a
    delete, a create or a fence advance, with an older and a newer token or equal ones)
    and both threads send their half at the same instant; with several proxies, the two
    halves go through different proxies. Some race keys are under a shared lock, some
    are their own lock (no Fencing-Lock: the key is the lock, tokens from 1).
  - At the end, once the faults have stopped and every proxy answers /readyz again, a
    final read round (GET of every key and fence, through every proxy), recorded as ops
    too, so a lost write shows in the history.

Classification (docs/api.md, "Errors", "Durability and retries"): 2xx -> ok; 404 on a GET
-> ok, found False; 409 stale_token -> stale (with current_token); 409 lock_mismatch and
other 4xx -> fail (and an anomaly: this load never sends a request that earns one); 503
-> fail ("nothing was written", docs/api.md#errors; the store code agrees: a 503 is only
answered for a statement that was never completely sent or was rolled back); 504, any
other 5xx, timeouts, resets, closed connections -> unknown with ret None. After an
unknown, a thread carries on as a new process (the old one's op may still take effect,
concurrently with anything later).

A connection is opened (and a kept-alive one found closed) before an op is recorded: a
request that never left this process is not in the history.

Seed: FK_SEED (as the other tests); 0 or unset picks one, which is printed.
"""

import collections
import dataclasses
import hashlib
import http.client
import itertools
import os
import random
import select
import string
import subprocess
import threading
import time

import fk
import robust


# ---------------------------------------------------------------------------
# Ops (lincheck.Op when lincheck.py is there; the same fields otherwise)
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class _FallbackOp:
    id: int
    process: int
    kind: str
    lock: str
    key: str | None = None
    token: int | None = None
    body: str | None = None
    call: float = 0.0
    ret: float | None = None
    outcome: str = "unknown"
    status: int | None = None
    version: int | None = None
    created: bool | None = None
    found: bool | None = None
    read_body: str | None = None
    read_token: int | None = None
    current_token: int | None = None
    info: str | None = None


def op_class():
    try:
        import lincheck
        return lincheck.Op
    except ImportError:
        return _FallbackOp


def digest(data):
    """What Op.body and Op.read_body hold: sha256 hex and the length."""
    return "%s:%d" % (hashlib.sha256(data).hexdigest(), len(data))


def seed_from_env():
    """FK_SEED, or a fresh random seed when it is unset or 0."""
    s = int(os.environ.get("FK_SEED", "0") or 0)
    return s or random.SystemRandom().randrange(1, 2 ** 31)


# ---------------------------------------------------------------------------
# Keys, locks, tokens
# ---------------------------------------------------------------------------

class Keyspace:
    """`nlocks` locks with fresh names, each guarding 2-3 keys; race keys are added as the
    run goes (under one of the locks, or each its own lock)."""

    def __init__(self, rng, nlocks=4):
        self.prefix = "lin-" + "".join(rng.choice(string.ascii_lowercase + string.digits)
                                       for _ in range(8))
        self.locks = ["%s-l%d" % (self.prefix, i) for i in range(nlocks)]
        self.key_lock = {}
        self.static_keys = []
        for i, lock in enumerate(self.locks):
            for j in range(rng.choice((2, 3))):
                # Nested and flat keys (directories in the file store).
                key = "%s/l%d/k%d" % (self.prefix, i, j) if j % 2 == 0 else "%s-l%d-k%d" % (self.prefix, i, j)
                self.key_lock[key] = lock
                self.static_keys.append(key)
        self.own_locks = []       # race keys that are their own lock
        self.race_keys = []
        self._n = itertools.count()
        self.mu = threading.Lock()

    def fresh(self, lock=None):
        """A new key under `lock`, or (None) a new key that is its own lock."""
        with self.mu:
            n = next(self._n)
            if lock is None:
                key = "%s-own%d" % (self.prefix, n)
                self.own_locks.append(key)
                lock = key
            else:
                key = "%s/%s/f%d" % (self.prefix, lock.rsplit("-", 1)[1], n)
            self.key_lock[key] = lock
            self.race_keys.append(key)
            return key, lock

    def recent_race_keys(self, n=16):
        with self.mu:
            return self.race_keys[-n:]

    def all_keys(self):
        with self.mu:
            return self.static_keys + self.race_keys

    def all_locks(self):
        with self.mu:
            return self.locks + self.own_locks

    def is_own(self, key):
        return self.key_lock[key] == key


class Tokens:
    """One counter per lock, shared by every client: next() is a new holder's token (the
    counter goes up), current() the latest holder's (equal to a token already sent),
    zombie() one from a while ago (below the fence, most of the time)."""

    def __init__(self):
        self.ctr = collections.defaultdict(int)
        self.mu = threading.Lock()

    def next(self, lock):
        with self.mu:
            self.ctr[lock] += 1
            return self.ctr[lock]

    def current(self, lock):
        with self.mu:
            if self.ctr[lock] == 0:
                self.ctr[lock] = 1
            return self.ctr[lock]

    def zombie(self, lock, rng):
        with self.mu:
            return max(0, self.ctr[lock] - rng.randint(2, 12))

    def draw(self, lock, rng):
        r = rng.random()
        if r < 0.6:
            return self.next(lock)
        if r < 0.85:
            return self.current(lock)
        return self.zombie(lock, rng)


# ---------------------------------------------------------------------------
# A connection that follows its proxy across restarts
# ---------------------------------------------------------------------------

class Conn:
    """One keep-alive connection to `proxy` (an fk.Proxy), reopened after an error at the
    proxy's current address. Answers are checked against docs/openapi.yaml like fk.Client's;
    unlike fk.Client it never resends a request (a resent write is a second op)."""

    def __init__(self, proxy, timeout):
        self.proxy = proxy
        self.timeout = timeout
        self.hc = None

    def close(self):
        if self.hc is not None:
            try:
                self.hc.close()
            except Exception:
                pass
            self.hc = None

    def _stale(self):
        """A kept-alive connection the server closed (EOF, reset): readable while idle."""
        sock = self.hc.sock if self.hc is not None else None
        if sock is None:
            return True
        try:
            r, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(r)

    def ready(self, stop_ev, give_up=None):
        """Connects unless connected; False when stop_ev is set (or `give_up`, a monotonic
        time, passes) first."""
        while True:
            if self.hc is not None and not self._stale():
                return True
            self.close()
            if stop_ev.is_set() or (give_up is not None and time.monotonic() > give_up):
                return False
            p = self.proxy
            host, port = p.host, p.port
            if not p.alive() or port is None:
                time.sleep(0.02)
                continue
            hc = http.client.HTTPConnection(host, port, timeout=self.timeout)
            try:
                hc.connect()
            except OSError:
                hc.close()
                time.sleep(0.02)
                continue
            self.hc = hc

    def exchange(self, method, path, headers, body=None):
        """Sends one request on the open connection and reads its answer (fk.Response);
        raises on any transport failure (the connection is then closed)."""
        try:
            self.hc.request(method, path, body=body, headers=headers)
            r = self.hc.getresponse()
            data = r.read()
        except BaseException:
            self.close()
            raise
        resp = fk.Response(r.status, r.reason, list(r.getheaders()), data)
        if r.will_close:
            self.close()
        fk.check_against_spec(method, path, resp)
        return resp


# ---------------------------------------------------------------------------
# Postgres restarts
# ---------------------------------------------------------------------------

class PgServer:
    """The Postgres server of FK_TEST_PG_URL, restarted through pg_ctl: its data directory
    FK_TEST_PG_DATA, programs FK_TEST_PG_BIN, run as FK_TEST_PG_RUN_AS (scripts/test.sh
    sets all three). pg_ctl restart reuses the server's options (postmaster.opts) and
    logs to server.log beside the data directory (where scripts/test.sh has it)."""

    def __init__(self, data, pg_ctl, run_as=None, log=None):
        self.data = data
        self.pg_ctl = pg_ctl
        self.run_as = run_as
        self.log = log or os.path.join(os.path.dirname(os.path.abspath(data)), "server.log")

    @classmethod
    def from_env(cls):
        """The server, or fk.missing() (a skip, or a failure under FK_REQUIRE_SERVICES=1)."""
        fk.require_service("postgres")
        data = os.environ.get("FK_TEST_PG_DATA", "").strip()
        if not data:
            fk.missing("FK_TEST_PG_DATA unset: cannot restart the Postgres of FK_TEST_PG_URL")
        run_as = os.environ.get("FK_TEST_PG_RUN_AS", "").strip() or None
        return cls(data, fk.pg_tool("pg_ctl"), run_as)

    def _cmd(self, args):
        cmd = [self.pg_ctl, "-D", self.data] + args
        if self.run_as and os.geteuid() == 0:
            cmd = ["runuser", "-u", self.run_as, "--"] + cmd
        return cmd

    def restart_immediate(self, timeout=90.0):
        """`pg_ctl -m immediate restart` (a crash and a recovery), then waits until the
        server takes connections again. Returns the seconds it took."""
        t0 = time.monotonic()
        r = subprocess.run(self._cmd(["-m", "immediate", "-w", "-t", "60", "-l", self.log, "restart"]),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("pg_ctl restart failed (%d): %s %s" % (
                r.returncode, r.stdout.decode(errors="replace")[-500:], r.stderr.decode(errors="replace")[-500:]))
        deadline = t0 + timeout
        while True:
            try:
                fk.psql("SELECT 1")
                return time.monotonic() - t0
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


# ---------------------------------------------------------------------------
# Fault injectors
# ---------------------------------------------------------------------------

class Faults:
    """Fault threads for Workload: each acts at random moments of the run, a bounded number
    of times. kills / stops: how many kill -9 (then a restart on the same store) and SIGSTOP
    (0.5-3 s, then SIGCONT) of the proxies with an index in `targets` (default: all);
    pg_restarts: immediate restarts of `pg` (a PgServer). Faults of one proxy never
    overlap."""

    def __init__(self, kills=0, stops=0, pg_restarts=0, targets=None, pg=None,
                 stop_range=(0.5, 3.0), window=(0.1, 0.85)):
        self.kills, self.stops, self.pg_restarts = kills, stops, pg_restarts
        self.targets = targets
        self.pg = pg
        self.stop_range = stop_range
        self.window = window
        if pg_restarts and pg is None:
            raise ValueError("pg_restarts without a PgServer")

    def any(self):
        return bool(self.kills or self.stops or self.pg_restarts)


# ---------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------

LARGE_EVERY = 20            # about one put in LARGE_EVERY has a large body
LARGE = (64 * 1024, 1024 * 1024)
SMALL = (0, 2048)
# Weights of a thread's next step; "race" only for the even thread of a pair.
MIX = {"put": 38, "delete": 12, "fence": 8, "get": 24, "read_fence": 8, "race": 10}
FINAL_PROCESS_BASE = 1_000_000


class _RaceTask:
    """The partner's half of a race: posted by the leader, taken (or cancelled) once."""

    def __init__(self, spec):
        self.spec = spec          # dict(kind, lock, key, token, send_lock)
        self.state = "posted"     # -> "taken" | "cancelled"
        self.mu = threading.Lock()
        self.taken = threading.Event()
        self.go = threading.Event()

    def take(self):
        with self.mu:
            if self.state != "posted":
                return False
            self.state = "taken"
        return True

    def cancel(self):
        """False when the partner has taken it (it will set `taken` at once)."""
        with self.mu:
            if self.state == "taken":
                return False
            self.state = "cancelled"
        return True


class Workload:
    """Runs the load against `proxies` (started fk.Proxy objects; they may be killed and
    restarted by `faults`) for `duration` seconds; run() returns the history (a list of
    Ops sorted by id). After run(): .summary() and the counters below."""

    def __init__(self, proxies, seed, duration=10.0, nthreads=8, nlocks=4, faults=None,
                 timeout=10.0, mix=None, log=print):
        self.proxies = list(proxies)
        self.seed = seed
        self.duration = duration
        self.nthreads = nthreads
        self.faults = faults or Faults()
        self.timeout = timeout
        self.mix = dict(mix or MIX)
        self.log = log
        self.rng = random.Random(seed)
        self.ks = Keyspace(self.rng, nlocks)
        self.tokens = Tokens()
        self.Op = op_class()
        self.ops = []
        self._ids = itertools.count()
        self.mu = threading.Lock()
        self.stop_ev = threading.Event()
        self.faults_stop = threading.Event()
        self.tasks = [collections.deque() for _ in range(nthreads)]
        self.proxy_locks = [threading.Lock() for _ in self.proxies]
        self.anomalies = []       # replies this load can never earn: harness or product bugs
        self.fault_errors = []    # a fault injector that failed (e.g. a proxy did not restart)
        self.events = []          # (t since start, what) of every fault
        self.races = collections.Counter()
        self.t0 = None
        self.t_load_end = None
        self.thread_errors = []

    # --- recording -------------------------------------------------------------
    def _new_op(self, **kw):
        with self.mu:
            op = self.Op(id=next(self._ids), **kw)
            self.ops.append(op)
        return op

    def _anomaly(self, op, text):
        with self.mu:
            self.anomalies.append("%s: op %d %s lock=%s key=%s token=%s" % (
                text, op.id, op.kind, op.lock, op.key, op.token))

    def _event(self, what):
        with self.mu:
            self.events.append((round(time.monotonic() - self.t0, 3), what))
        self.log("  [%6.2fs] %s" % (time.monotonic() - self.t0, what))

    # --- one request -----------------------------------------------------------
    def _request(self, conn, process, kind, lock, key=None, token=None, send_lock=True, size=0):
        """Sends one request on `conn` (connected) and records it; returns the Op."""
        headers = {}
        body = None
        if kind in ("put", "delete", "fence"):
            headers["Fencing-Token"] = str(token)
        if kind in ("put", "delete") and send_lock:
            headers["Fencing-Lock"] = lock
        op = self._new_op(process=process, kind=kind, lock=lock, key=key, token=token)
        if kind == "put":
            # Self-describing and unique: the op's id, writer, key and token at both ends.
            body = robust.body_for("%s|op%d|p%d|%s|t%d" % (self.ks.prefix, op.id, process, key, token), size)
            op.body = digest(body)
            headers["Content-Type"] = "application/octet-stream"
        if kind in ("put", "delete", "get"):
            method = {"put": "PUT", "delete": "DELETE", "get": "GET"}[kind]
            path = "/v1/resources/" + fk.quote_key(key)
        else:
            method = "PUT" if kind == "fence" else "GET"
            path = "/v1/fences/" + fk.quote_key(lock)
        op.call = time.monotonic()
        try:
            resp = conn.exchange(method, path, headers, body)
        except Exception as e:
            op.outcome, op.ret, op.info = "unknown", None, ("%s: %s" % (type(e).__name__, e))[:200]
            return op
        ret = time.monotonic()
        self._classify(op, resp, ret)
        return op

    def _classify(self, op, resp, ret):
        s = op.status = resp.status
        op.ret = ret
        if s >= 500 and s != 503:
            # 504 outcome_unknown, 500 internal: may or may not have been applied.
            op.outcome, op.ret = "unknown", None
            op.info = resp.text[:200]
            if s != 504:
                self._anomaly(op, "%d %s" % (s, resp.text[:200]))
            return
        if s == 503:
            op.outcome, op.info = "fail", resp.text[:200]
            return
        if 200 <= s < 300 or (s == 404 and op.kind in ("get", "read_fence")):
            op.outcome = "ok"
            try:
                self._read_success(op, resp)
            except Exception as e:
                self._anomaly(op, "bad %d answer (%s): %r" % (s, e, resp.body[:200]))
                op.outcome, op.ret, op.info = "unknown", None, "unparsable answer"
            return
        op.info = resp.text[:200]
        if s == 409:
            try:
                b = resp.json()
            except Exception:
                b = {}
            if b.get("error") == "stale_token" and isinstance(b.get("current_token"), int):
                op.outcome = "stale"
                op.current_token = b["current_token"]
                return
        op.outcome = "fail"
        self._anomaly(op, "unexpected %d %s" % (s, resp.text[:200]))

    def _read_success(self, op, resp):
        s = resp.status
        if op.kind == "put":
            b = resp.json()
            op.created = s == 201
            op.version = int(b["version"])
            if s not in (200, 201) or b.get("token") != op.token or b.get("lock") != op.lock \
                    or b.get("key") != op.key or resp.etag != '"%d"' % op.version:
                self._anomaly(op, "put answer %d %r, ETag %s" % (s, b, resp.etag))
        elif op.kind == "delete":
            if s != 204:
                self._anomaly(op, "delete answered %d" % s)
        elif op.kind == "fence":
            b = resp.json()
            if s != 200 or b.get("token") != op.token:
                self._anomaly(op, "fence answer %d %r" % (s, b))
        elif op.kind == "get":
            op.found = s == 200
            if s == 200:
                op.version = int(resp.etag.strip('"'))
                op.read_body = digest(resp.body)
                op.read_token = int(resp.header("Fencing-Token"))
                if resp.header("Fencing-Lock") != op.lock:
                    self._anomaly(op, "GET served Fencing-Lock %r" % resp.header("Fencing-Lock"))
        elif op.kind == "read_fence":
            op.found = s == 200
            if s == 200:
                b = resp.json()
                op.read_token = int(b["token"])
                if b.get("floor") is not None:
                    self._anomaly(op, "a floor in %r (this load raises none)" % b)

    # --- the client threads ----------------------------------------------------
    def _size(self, rng):
        if rng.randrange(LARGE_EVERY) == 0:
            return rng.randint(*LARGE)
        return rng.randint(*SMALL)

    def _pick_key(self, rng):
        recent = self.ks.recent_race_keys()
        if recent and rng.random() < 0.15:
            return rng.choice(recent)
        return rng.choice(self.ks.static_keys)

    def _step(self, tid, conn, process, rng):
        """One random op; returns it (None for a race this thread led without an op)."""
        kinds = list(self.mix)
        if tid % 2 == 1 or tid + 1 >= self.nthreads:
            kinds = [k for k in kinds if k != "race"]
        kind = rng.choices(kinds, weights=[self.mix[k] for k in kinds])[0]
        if kind == "race":
            return self._race(tid, conn, process, rng)
        if kind in ("fence", "read_fence"):
            lock = rng.choice(self.ks.locks)
            token = self.tokens.draw(lock, rng) if kind == "fence" else None
            return self._request(conn, process, kind, lock, token=token)
        key = self._pick_key(rng)
        lock = self.ks.key_lock[key]
        token = self.tokens.draw(lock, rng) if kind != "get" else None
        return self._request(conn, process, kind, lock, key=key, token=token,
                             send_lock=not self.ks.is_own(key),
                             size=self._size(rng) if kind == "put" else 0)

    def _race(self, tid, conn, process, rng):
        """Leads a race with thread tid+1 on a fresh key: both halves sent at once."""
        own = rng.random() < 0.4
        key, lock = self.ks.fresh(None if own else rng.choice(self.ks.locks))
        if own:
            t_old, t_new = self.tokens.next(lock), self.tokens.next(lock)
        else:
            t_old = self.tokens.current(lock)
            t_new = self.tokens.next(lock)
        r = rng.random()
        pair = ("put", "delete") if r < 0.65 else ("put", "put") if r < 0.8 else \
            ("put", "fence") if r < 0.9 else ("delete", "delete")
        r = rng.random()
        toks = (t_old, t_new) if r < 0.6 else (t_new, t_old) if r < 0.8 else (t_new, t_new)
        halves = [dict(kind=k, lock=lock, key=None if k == "fence" else key, token=t,
                       send_lock=not own, size=self._size(rng) if k == "put" else 0)
                  for k, t in zip(pair, toks)]
        if rng.random() < 0.5:
            halves.reverse()
        mine, theirs = halves
        task = _RaceTask(theirs)
        self.tasks[tid + 1].append(task)
        give_up = time.monotonic() + 2.0
        together = False
        while not together and not self.stop_ev.is_set() and time.monotonic() < give_up:
            together = task.taken.wait(0.05)
        if not together and not task.cancel():
            together = task.taken.wait(5.0)   # taken just now
        if together:
            if not conn.ready(self.stop_ev, give_up=time.monotonic() + 2.0):
                task.go.set()
                return None
            task.go.set()
        self.races["%s/%s%s%s" % ("own" if own else "shared", pair[0], "+" if together else "|", pair[1])] += 1
        op = self._request(conn, process, **mine)
        if op.outcome != "unknown":
            op2 = self._request(conn, process, "get", lock, key=key, send_lock=not own)
            return op2
        return op

    def _partner_half(self, task, conn, process):
        if not task.take():
            return None
        try:
            ok = conn.ready(self.stop_ev, give_up=time.monotonic() + 2.0)
        finally:
            task.taken.set()
        task.go.wait(3.0)
        if not ok:
            return None
        return self._request(conn, process, **task.spec)

    def _client(self, tid):
        rng = random.Random("%d/%d" % (self.seed, tid))
        conn = Conn(self.proxies[tid % len(self.proxies)], self.timeout)
        process = tid
        try:
            while not self.stop_ev.is_set():
                task = None
                q = self.tasks[tid]
                if q:
                    task = q.popleft()
                if task is not None:
                    op = self._partner_half(task, conn, process)
                else:
                    if not conn.ready(self.stop_ev):
                        break
                    op = self._step(tid, conn, process, rng)
                if op is not None and op.status == 503:
                    time.sleep(rng.uniform(0.02, 0.1))   # the store is down: back off a little
                if op is not None and op.outcome == "unknown":
                    # The op may still take effect: later ops are a new process.
                    process += self.nthreads
                    conn.close()
                    time.sleep(0.01)
        except BaseException as e:
            import traceback
            self.thread_errors.append("client %d: %s" % (tid, traceback.format_exc()))
            self.stop_ev.set()
        finally:
            conn.close()
            for task in self.tasks[tid]:   # release a leader still waiting on us
                task.cancel()

    # --- faults ----------------------------------------------------------------
    def _times(self, n, rng):
        lo, hi = self.faults.window
        return sorted(rng.uniform(lo * self.duration, hi * self.duration) for _ in range(n))

    def _fault_thread(self, kind, n):
        rng = random.Random("%d/fault/%s" % (self.seed, kind))
        targets = self.faults.targets if self.faults.targets is not None else range(len(self.proxies))
        targets = list(targets)
        for at in self._times(n, rng):
            if self.faults_stop.wait(max(0.0, self.t0 + at - time.monotonic())):
                return
            try:
                if kind == "pg":
                    self._event("postgres: pg_ctl -m immediate restart")
                    took = self.faults.pg.restart_immediate()
                    self._event("postgres: accepting connections again after %.2fs" % took)
                    continue
                i = rng.choice(targets)
                p = self.proxies[i]
                with self.proxy_locks[i]:
                    if kind == "kill":
                        self._event("proxy %d (pid %s, port %s): kill -9" % (i, p.pid, p.port))
                        p.kill()
                        time.sleep(rng.uniform(0.0, 0.3))
                        p.start()
                        self._event("proxy %d restarted: pid %s, port %s" % (i, p.pid, p.port))
                    else:
                        pause = rng.uniform(*self.faults.stop_range)
                        self._event("proxy %d (pid %s): SIGSTOP for %.2fs" % (i, p.pid, pause))
                        p.sigstop()
                        try:
                            time.sleep(pause)
                        finally:
                            p.sigcont()
                        self._event("proxy %d: SIGCONT" % i)
                if kind == "kill":
                    p.wait_ready(60)
                    self._event("proxy %d ready" % i)
            except Exception as e:
                with self.mu:
                    self.fault_errors.append("%s fault at %.1fs: %r" % (kind, at, e))
                self._event("%s fault failed: %r" % (kind, e))

    def _restore(self):
        """Every proxy alive, running and ready; Postgres taking connections."""
        if self.faults.pg is not None:
            deadline = time.monotonic() + 60
            while True:
                try:
                    fk.psql("SELECT 1")
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        for i, p in enumerate(self.proxies):
            with self.proxy_locks[i]:
                p.sigcont()
                if not p.alive():
                    self._event("proxy %d was not running: starting it" % i)
                    p.start()
            p.wait_ready(60)

    # --- the final read round --------------------------------------------------
    def _final_reads(self):
        for i, p in enumerate(self.proxies):
            conn = Conn(p, self.timeout)
            process = FINAL_PROCESS_BASE + i
            items = [("get", self.ks.key_lock[k], k) for k in self.ks.all_keys()] + \
                    [("read_fence", l, None) for l in self.ks.all_locks()]
            for kind, lock, key in items:
                for attempt in range(5):
                    if not conn.ready(threading.Event(), give_up=time.monotonic() + 30):
                        raise fk.CheckFailed("final reads: cannot connect to proxy %d" % i)
                    op = self._request(conn, process, kind, lock, key=key)
                    if op.outcome == "ok":
                        break
                    if op.outcome == "unknown":
                        process += 1000
                        conn.close()
                    time.sleep(0.2)
                else:
                    raise fk.CheckFailed("final reads: %s of %s through proxy %d never answered: %r"
                                         % (kind, key or lock, i, op))
            conn.close()

    # --- run -------------------------------------------------------------------
    def run(self):
        self.log("  workload: seed %d, %d clients, %d proxies, %.0fs, prefix %s, faults: "
                 "%d kill -9, %d SIGSTOP, %d postgres restarts"
                 % (self.seed, self.nthreads, len(self.proxies), self.duration, self.ks.prefix,
                    self.faults.kills, self.faults.stops, self.faults.pg_restarts))
        self.t0 = time.monotonic()
        clients = [threading.Thread(target=self._client, args=(i,), daemon=True,
                                    name="lin-client-%d" % i) for i in range(self.nthreads)]
        faults = [threading.Thread(target=self._fault_thread, args=(k, n), daemon=True,
                                   name="lin-fault-%s" % k)
                  for k, n in (("kill", self.faults.kills), ("stop", self.faults.stops),
                               ("pg", self.faults.pg_restarts)) if n]
        for t in clients + faults:
            t.start()
        try:
            self.stop_ev.wait(self.duration)
            self.faults_stop.set()
            for t in faults:
                t.join(180)
            if any(t.is_alive() for t in faults):
                raise fk.CheckFailed("a fault injector is still running 180s after the run")
            self._restore()
        finally:
            self.faults_stop.set()
            self.stop_ev.set()
            deadline = time.monotonic() + self.timeout + 15
            for t in clients:
                t.join(max(0.1, deadline - time.monotonic()))
        stuck = [t for t in clients if t.is_alive()]
        if stuck:
            import sys
            import traceback
            frames = sys._current_frames()
            raise fk.CheckFailed("client threads still running %.0fs after the stop:\n%s" % (
                self.timeout + 15, "\n".join("%s:\n%s" % (t.name, "".join(traceback.format_stack(frames[t.ident])))
                                             for t in stuck if t.ident in frames)))
        self.t_load_end = time.monotonic()
        if self.thread_errors:
            raise fk.CheckFailed("a client thread failed:\n" + self.thread_errors[0])
        self._final_reads()
        with self.mu:
            self.ops.sort(key=lambda o: o.id)
            return list(self.ops)

    # --- reporting -------------------------------------------------------------
    def counts(self):
        by_outcome = collections.Counter(o.outcome for o in self.ops)
        by_kind = collections.Counter((o.kind, o.outcome) for o in self.ops)
        return by_outcome, by_kind

    def definite(self):
        """Ops with something to check: ok and stale (final reads included)."""
        return sum(1 for o in self.ops if o.outcome in ("ok", "stale"))

    def summary(self):
        by_outcome, by_kind = self.counts()
        kinds = sorted({k for k, _ in by_kind})
        lines = ["%d ops in %.1fs of load (%.0f/s): %s" % (
            len(self.ops), (self.t_load_end or time.monotonic()) - self.t0,
            len(self.ops) / max(0.001, (self.t_load_end or time.monotonic()) - self.t0),
            dict(sorted(by_outcome.items())))]
        for k in kinds:
            lines.append("  %-10s %s" % (k, ", ".join("%s %d" % (o, by_kind[(k, o)])
                                                       for o in ("ok", "stale", "fail", "unknown")
                                                       if by_kind[(k, o)])))
        statuses = collections.Counter(o.status for o in self.ops)
        lines.append("  statuses: %s" % ", ".join("%s %d" % (s, n) for s, n in
                                                   sorted(statuses.items(), key=lambda kv: str(kv[0]))))
        lines.append("  races: %d (%s)" % (sum(self.races.values()),
                                           ", ".join("%s %d" % kv for kv in sorted(self.races.items()))))
        lines.append("  keys %d, locks %d, faults %d" % (len(self.ks.all_keys()), len(self.ks.all_locks()),
                                                        len(self.events)))
        return "\n".join(lines)

    def extra(self):
        """What lincheck.save stores beside the ops."""
        return {"seed": self.seed, "prefix": self.ks.prefix, "duration": self.duration,
                "nthreads": self.nthreads, "proxies": len(self.proxies),
                "faults": [list(e) for e in self.events], "anomalies": self.anomalies[:100],
                "t0": self.t0, "key_lock": dict(self.ks.key_lock)}


def pg_proxy_config():
    """Deadlines short enough that a Postgres restart yields answers (503/504), not hangs."""
    return {"postgres": {"statement_timeout_ms": 3000, "connect_timeout_ms": 2000}}


if __name__ == "__main__":
    # A quick try without the test: python3 lincheck_workload.py [seconds] [faults]
    import sys
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 5
    with_faults = len(sys.argv) > 2 and sys.argv[2] == "faults"
    fk.require_binary()
    seed = seed_from_env()
    print("seed %d" % seed)
    st = fk.pg_store() if os.environ.get("FK_LIN_STORE") == "postgres" else fk.file_store()
    cfg = pg_proxy_config() if st.kind == "postgres" else None
    n = int(os.environ.get("FK_LIN_PROXIES", "1"))
    ps = [st.start(config=cfg) for _ in range(n)]
    for p in ps:
        p.wait_ready()
    faults = Faults(kills=2, stops=2, pg_restarts=1 if st.kind == "postgres" and with_faults else 0,
                    pg=PgServer.from_env() if st.kind == "postgres" and with_faults else None,
                    targets=[0]) if with_faults else None
    try:
        wl = Workload(ps, seed, duration=secs, faults=faults)
        ops = wl.run()
        print(wl.summary())
        print("anomalies: %r" % wl.anomalies[:10])
        print("spec violations: %r" % fk.take_spec_violations()[:5])
        try:
            import lincheck
        except ImportError:
            lincheck = None
        if lincheck is not None:
            t = time.monotonic()
            res = lincheck.check(ops, current_token="exact" if n == 1 else "bounded", time_budget=60)
            print("check: %r (%.1fs)" % (res, time.monotonic() - t))
    finally:
        fk.kill_all_proxies()
        fk._drop_pg_schemas()
        fk._remove_tmp()
