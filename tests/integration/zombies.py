"""Zombie-writer harness: real lock services, real worker processes, real pauses and
kills, every operation recorded and checked afterwards (Python 3 stdlib only).

Pieces:
  - RedisClient: a minimal RESP client (enough for EVAL of the recipes in scripts/locks).
  - acquire()/release()/raise_fence(): the Redis recipes, run from the .lua files in
    scripts/locks/ (so the tests exercise exactly what docs/locks.md tells users to run).
  - RedisServer: an extra redis-server in a temp dir on a free port (replicas for the
    failover scenario, a faketime'd one for the clock jump).
  - Relay: a TCP relay that can be "cut" so a replica silently stops receiving the
    primary's replication stream (a deterministic way to lose the last INCRs).
  - Worker: a worker process (this file run as `zombies.py worker ...`), optionally
    under a lock wrapper (scripts/locks/redis-lock.sh, etcd-lock.sh), in its own
    process group so SIGSTOP/SIGCONT/SIGKILL hit the wrapper and the worker together.
    Workers print JSON events on stdout; the orchestrator turns them into fk.History
    operations (times are CLOCK_MONOTONIC, shared by all processes on the host).
  - Recorder: the History plus lock acquisitions and the HTTP replies, with the
    checks every scenario ends with.
  - cron_race(): the three-instance daily-report race, through fencekeeper or (control
    run) straight into a directory / a Postgres table.

Worker event protocol (one JSON object per stdout line):
  {"ev":"acquired","lock","token","t"}         a lock was taken (token from the service)
  {"ev":"working","t"}                         doing the "work" (the pause point); with
                                               a go file, it then waits for that file
                                               before it works (see Worker.hold())
  {"ev":"invoke","id","kind","lock","key","token","value","t"}
  {"ev":"complete","id","result":"ok|fail|unknown","status","body","t"}
  {"ev":"skip","key","t"}                      the report exists already: nothing to do
  {"ev":"done","round","t"}                    a cron round is finished for this worker
"""

import argparse
import contextlib
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import delay_proxy  # noqa: E402
import fk  # noqa: E402

LOCKS = os.path.join(fk.REPO, "scripts", "locks")


# ---------------------------------------------------------------------------
# Redis: a minimal RESP client and the lock recipes
# ---------------------------------------------------------------------------

class RedisError(Exception):
    pass


class RedisClient:
    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.host, self.port = host, port
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb")

    def close(self):
        with contextlib.suppress(Exception):
            self.f.close()
        with contextlib.suppress(Exception):
            self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._read() for _ in range(n)]
        raise RedisError("bad RESP line %r" % line)


_lua_cache = {}


def lua(name):
    """The text of scripts/locks/<name>: the tests run the recipes users are given."""
    if name not in _lua_cache:
        with open(os.path.join(LOCKS, name)) as f:
            _lua_cache[name] = f.read()
    return _lua_cache[name]


FLOOR_KEY = "fence-floor"


def acquire(r, lock, owner, ttl_ms):
    """redis-acquire.lua with its three keys, as redis-lock.sh calls it: the fencing
    token (above the floor key fence-floor, when set), or None when the lock is held."""
    v = r.call("EVAL", lua("redis-acquire.lua"), 3, "lock:" + lock, "fence:" + lock, FLOOR_KEY,
               owner, ttl_ms)
    return v if v is None else int(v)


def release(r, lock, owner):
    return r.call("EVAL", lua("redis-release.lua"), 1, "lock:" + lock, owner)


def raise_fence(r, lock, value):
    return int(r.call("EVAL", lua("redis-raise-fence.lua"), 1, "fence:" + lock, value))


def owner_id(name):
    return "%s:%d:%s" % (name, os.getpid(), fk.rand_name(8))


_servers = []


def _kill_servers():
    while _servers:
        s = _servers.pop()
        with contextlib.suppress(Exception):
            s.kill()


class RedisServer:
    """A redis-server on a free loopback port in a temp dir, without persistence (a
    killed server loses everything it had not replicated). prefix: a command to run it
    under (e.g. faketime); env: extra environment."""

    def __init__(self, args=(), prefix=(), env=None, name="redis"):
        self.exe = fk.require_tool("redis-server")
        self.args = [str(a) for a in args]
        self.prefix = list(prefix)
        self.env = env
        self.name = name
        self.dir = fk.tmpdir(name)
        self.port = None
        self.proc = None

    def start(self, timeout=10.0):
        self.port = fk.free_port()
        cmd = self.prefix + [self.exe, "--port", str(self.port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", self.dir,
                             "--protected-mode", "no"] + self.args
        env = dict(os.environ)
        env.update(self.env or {})
        self.log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        _servers.append(self)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.client(timeout=1) as r:
                    if r.call("PING") == "PONG":
                        return self
            except (OSError, RedisError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise fk.CheckFailed("%s did not start: %s" % (self.name, self.log_text()[-2000:]))
            time.sleep(0.05)

    def log_text(self):
        with contextlib.suppress(OSError), open(os.path.join(self.dir, "redis.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")
        return ""

    def client(self, timeout=5.0):
        return RedisClient(self.port, timeout=timeout)

    def call(self, *args):
        with self.client() as r:
            return r.call(*args)

    def info(self, section="replication"):
        text = self.call("INFO", section).decode()
        out = {}
        for line in text.splitlines():
            k, sep, v = line.partition(":")
            if sep:
                out[k] = v.strip()
        return out

    def signal(self, sig):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc:
            with contextlib.suppress(Exception):
                self.proc.wait(10)
        with contextlib.suppress(Exception):
            self.log.close()


class Relay(delay_proxy.DelayProxy):
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:target, started at once. cut() makes it
    silently drop everything from then on in both directions while keeping the connections
    open: to the replica behind it, the primary just went quiet (a partition, or a primary
    that died before it could send its last writes)."""

    def __init__(self, target_port):
        super().__init__("127.0.0.1", target_port, 0.0)
        self.start()

    def close(self):
        self.stop()


# ---------------------------------------------------------------------------
# Orchestrator side: worker processes and the recorder
# ---------------------------------------------------------------------------

class Recorder:
    """fk.History plus what the History does not keep: lock acquisitions and the HTTP
    reply (status, parsed JSON body) of every operation."""

    def __init__(self):
        self.history = fk.History()
        self.acquires = []       # (worker, lock, token, t)
        self.replies = {}        # op.id -> {"status": int|None, "body": ...}
        self.lock = threading.Lock()

    def on_event(self, worker, ev, pending):
        kind = ev.get("ev")
        if kind == "acquired":
            with self.lock:
                self.acquires.append((worker, ev["lock"], ev["token"], ev["t"]))
        elif kind == "invoke":
            value = ev.get("value")
            op = self.history.invoke(worker, ev["kind"], ev["lock"], ev.get("key"), ev.get("token"),
                                     value.encode() if isinstance(value, str) else value)
            op.invoke_t = ev["t"]
            pending[ev["id"]] = op
        elif kind == "complete":
            op = pending.pop(ev["id"], None)
            if op is None:
                return
            res = ev["result"]
            {"ok": self.history.ok, "fail": self.history.fail}.get(res, self.history.unknown)(
                op, ev.get("status"))
            op.complete_t = ev["t"]
            self.replies[op.id] = {"status": ev.get("status"), "body": ev.get("body")}

    def ops(self, kind=None, worker=None, result=None, key=None):
        return [o for o in self.history.ops
                if (kind is None or o.kind == kind) and (worker is None or o.process == worker)
                and (result is None or o.result == result) and (key is None or o.key == key)]

    def reply(self, op):
        return self.replies.get(op.id, {})

    def check(self, proxy, keys, locks):
        """Reads the final state through `proxy` and runs the History checks."""
        keys_state, fences_state = fk.read_state(proxy, keys, locks)
        self.history.assert_ok(keys_state, fences_state)
        return keys_state, fences_state

    def expect_stale(self, op, fence=None):
        """op must have been rejected with 409 stale_token naming the fence."""
        rep = self.reply(op)
        body = rep.get("body") if isinstance(rep.get("body"), dict) else {}
        fk.check(op.result == "fail" and rep.get("status") == 409 and body.get("error") == "stale_token",
                 "zombie write %r was not rejected as stale: %r" % (op, rep))
        fk.eq(body.get("token"), op.token, "409 body token (the token sent)")
        fk.eq(body.get("lock"), op.lock, "409 body lock")
        if fence is not None:
            fk.eq(body.get("current_token"), fence, "409 body current_token (the fence)")
        return body


_workers = []
_go_dir = None


def _group_states(pgid):
    """(pid, state letter) of every process in process group pgid."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                st = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = st[st.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append((int(name), fields[0]))
    return out


def _kill_workers():
    while _workers:
        w = _workers.pop()
        with contextlib.suppress(Exception):
            w.kill9()


class Worker:
    """One worker process (its own process group). argv: the worker's command line
    (see worker_argv); wrapper: a lock wrapper command to run it under."""

    def __init__(self, name, recorder, argv, wrapper=(), env=None):
        self.name = name
        self.rec = recorder
        self.events = []
        self.cond = threading.Condition()
        self.pending = {}
        self.dir = fk.tmpdir("worker-" + name)
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        e = dict(os.environ)
        e.update(env or {})
        self._err = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(list(wrapper) + list(argv), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err, env=e,
                                     start_new_session=True, cwd=self.dir)
        _workers.append(self)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.rec.on_event(self.name, ev, self.pending)
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()
        with self.cond:
            self.events.append({"ev": "eof", "t": time.monotonic()})
            self.cond.notify_all()

    def stderr_text(self):
        with contextlib.suppress(OSError), open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")
        return ""

    def wait_for(self, pred, timeout=10.0, what="event", start=0):
        """Waits for an event (index >= start) satisfying pred; returns it."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for ev in self.events[start:]:
                    if pred(ev):
                        return ev
                    if ev.get("ev") == "eof":
                        raise fk.CheckFailed("worker %s exited (rc %s) before %s; stderr:\n%s"
                                             % (self.name, self.proc.poll(), what, self.stderr_text()[-2000:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise fk.CheckFailed("worker %s: no %s within %.1fs; events %r; stderr:\n%s"
                                         % (self.name, what, timeout, self.events[-5:],
                                            self.stderr_text()[-2000:]))
                self.cond.wait(left)

    def wait_ev(self, kind, timeout=10.0, start=0, **match):
        return self.wait_for(lambda e: e.get("ev") == kind and all(e.get(k) == v for k, v in match.items()),
                             timeout, "%s %r" % (kind, match), start)

    def mark(self):
        with self.cond:
            return len(self.events)

    def send(self, line):
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def _killpg(self, sig):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def pause(self):
        """SIGSTOP the whole process group (the lock wrapper too: etcdctl stops renewing
        its lease like a frozen VM would), and wait until every process in it has
        stopped, so that nothing it does after this returns can have happened before
        the freeze."""
        self._killpg(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while True:
            running = [pid for pid, state in _group_states(self.proc.pid) if state not in "Tt"]
            if not running:
                return
            if time.monotonic() > deadline:
                raise fk.CheckFailed("worker %s: processes %r did not stop within 10s of SIGSTOP"
                                     % (self.name, running))
            time.sleep(0.002)

    @staticmethod
    def hold():
        """A new go file for a worker's --go-file (once mode) or round line (cron mode):
        after its "working" event the worker waits until the file exists. The scenario
        pauses it first and then calls go(path), so the pause always lands before the
        work, however slowly this process reacts on a loaded machine."""
        global _go_dir
        if _go_dir is None:
            _go_dir = tempfile.mkdtemp(prefix="fk-zombie-go-")
        fd, path = tempfile.mkstemp(dir=_go_dir, suffix=".go")
        os.close(fd)
        os.unlink(path)
        return path

    @staticmethod
    def go(path):
        with open(path, "w"):
            pass

    def resume(self):
        self._killpg(signal.SIGCONT)

    def kill9(self):
        self._killpg(signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(10)
        self.t.join(5)
        with contextlib.suppress(Exception):
            self._err.close()

    def wait_exit(self, timeout=20.0):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise fk.CheckFailed("worker %s did not exit within %.0fs; stderr:\n%s"
                                 % (self.name, timeout, self.stderr_text()[-2000:]))
        self.t.join(5)
        return rc

    def close(self):
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        if self in _workers:
            _workers.remove(self)
        self.kill9()


def worker_argv(*args):
    return [sys.executable, os.path.join(HERE, "zombies.py"), "worker"] + [str(a) for a in args]


def cleanup():
    """Kills every worker and extra server this module started (call from finally)."""
    global _go_dir
    _kill_workers()
    _kill_servers()
    if _go_dir is not None:
        shutil.rmtree(_go_dir, ignore_errors=True)
        _go_dir = None


def fk_target(proxy):
    return "fk:%s:%d" % (proxy.host, proxy.port)


def etcd_env():
    eps = fk.require_service("etcd")
    fk.require_tool("etcdctl")
    return {"ETCDCTL_API": "3", "ETCDCTL_ENDPOINTS": eps}


def redis_env(port):
    return {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(port)}


def wrapper_redis(lock, ttl_ms):
    return [os.path.join(LOCKS, "redis-lock.sh"), lock, str(ttl_ms), "--"]


def wrapper_etcd(lock):
    return [os.path.join(LOCKS, "etcd-lock.sh"), lock, "--"]


def direct_op(rec, process, kind, lock, key, token, value, fn):
    """Runs one HTTP write in this process and records it: fn() -> fk.Response."""
    op = rec.history.invoke(process, kind, lock, key, token,
                            value.encode() if isinstance(value, str) else value)
    try:
        resp = fn()
    except Exception as e:  # noqa: BLE001 - an unknown outcome, recorded as such
        rec.history.record_response(op, e)
        rec.replies[op.id] = {"status": None, "body": repr(e)}
        return op, None
    rec.history.record_response(op, resp)
    try:
        body = resp.json() if resp.body else None
    except fk.CheckFailed:
        body = resp.text
    rec.replies[op.id] = {"status": resp.status, "body": body}
    return op, resp


def restart_proxy_hard(proxy):
    """kill -9 the proxy and start it again on the same store: every acknowledged
    write must survive (the 2xx came after fsync / COMMIT)."""
    proxy.kill()
    proxy.start()
    proxy.wait_ready()
    return proxy


# ---------------------------------------------------------------------------
# The cron race
# ---------------------------------------------------------------------------

class ControlTarget:
    """Where the control run writes without fencekeeper: a plain directory or a
    Postgres table (UPSERT), read back the same way."""

    def __init__(self, store):
        self.store = store
        if store.kind == "file":
            self.spec = "dir:" + store.root
        else:
            table = '"%s".control_reports' % store.schema
            fk.psql('CREATE SCHEMA IF NOT EXISTS "%s"; CREATE TABLE IF NOT EXISTS %s '
                    '(key text PRIMARY KEY, body text NOT NULL)' % (store.schema, table), store.url)
            self.spec = "pg:%s|%s" % (table, store.url)

    def read(self, key):
        t = make_target(self.spec)
        return t.read(key)


def cron_race(store, recorder, *, rounds, lock, redis_port, proxy=None, ttl_ms=400,
              work_ms=60, victim_work_ms=250, seed=None, log=print):
    """Three instances A, B, C. Each round every instance tries to produce the report
    reports/<lock>/round-NN: take the Redis lock (retrying), check the report is not
    there yet, "work" work_ms, write the report, release. Each round one random
    instance (the victim) is started first, so it takes the lock, and is SIGSTOPped
    mid-work past its TTL; the others take over, one of them writes the report; then
    the victim is SIGCONTed and finishes its (now stale) write.

    proxy given: writes go through fencekeeper (each new holder first advances the
    fence with PUT /v1/fences, as docs/locks.md recommends). proxy None: the control
    run, straight into storage. Returns per-round info dicts."""
    rng = random.Random(seed)
    target = fk_target(proxy) if proxy else ControlTarget(store).spec
    names = ["A", "B", "C"]
    workers = {}
    for n in names:
        argv = worker_argv("--mode", "cron", "--name", n, "--lock", lock, "--target", target,
                           "--redis-port", redis_port, "--ttl-ms", ttl_ms, "--work-ms", work_ms,
                           *(["--fence-first"] if proxy else []))
        workers[n] = Worker(n, recorder, argv)
    out = []
    try:
        for r in range(rounds):
            key = "reports/%s/round-%02d.csv" % (lock, r)
            victim = rng.choice(names)
            others = [n for n in names if n != victim]
            marks = {n: workers[n].mark() for n in names}
            # The victim holds after "working" until it is frozen (Worker.hold), so the
            # SIGSTOP lands mid-job however late this process gets to send it.
            go = Worker.hold()
            workers[victim].send("round %d %s %d %s" % (r, key, victim_work_ms, go))
            w = workers[victim].wait_ev("working", 10, marks[victim])
            workers[victim].pause()
            paused_at = time.monotonic()
            Worker.go(go)
            for n in others:
                workers[n].send("round %d %s" % (r, key))
            # Wait until one of the others has written the report (its write completed).
            winner = None
            deadline = time.monotonic() + 10 + ttl_ms / 1000.0
            while winner is None and time.monotonic() < deadline:
                for n in others:
                    with workers[n].cond:
                        evs = workers[n].events[marks[n]:]
                    if any(e.get("ev") == "complete" and e.get("kind") == "put" for e in evs):
                        winner = n
                if winner is None:
                    time.sleep(0.01)
            # Keep the victim frozen a random bit longer, then wake it.
            time.sleep(rng.uniform(0, 0.05))
            frozen_for = time.monotonic() - paused_at
            workers[victim].resume()
            for n in names:
                workers[n].wait_ev("done", 15, marks[n], round=r)
            out.append({"round": r, "key": key, "victim": victim, "victim_token": w.get("token"),
                        "winner": winner, "frozen_s": frozen_for})
            log("  round %02d: victim %s (token %s) frozen %.2fs; %s wrote the report"
                % (r, victim, w.get("token"), frozen_for, winner or "nobody"))
    finally:
        for wk in workers.values():
            with contextlib.suppress(Exception):
                wk.send("quit")
        for wk in workers.values():
            with contextlib.suppress(Exception):
                wk.wait_exit(5)
            wk.close()
    return out


# ---------------------------------------------------------------------------
# Worker process side
# ---------------------------------------------------------------------------

def emit(**ev):
    ev.setdefault("t", time.monotonic())
    try:
        sys.stdout.write(json.dumps(ev) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass


class FkTarget:
    def __init__(self, host, port):
        self.c = fk.Client(host, int(port), timeout=15)

    def exists(self, key):
        # A read has no side effects: retry through a 503 or a dropped connection.
        for attempt in range(50):
            try:
                r = self.c.get(key)
            except OSError:
                if attempt == 49:
                    raise
                time.sleep(0.1)
                continue
            if r.status in (200, 404):
                return r.status == 200
            if r.status != 503 or attempt == 49:
                raise RuntimeError("GET %s: %d %r" % (key, r.status, r.body[:200]))
            time.sleep(0.1)

    def read(self, key):
        r = self.c.get(key)
        return r.body if r.status == 200 else None

    def _classify(self, r):
        try:
            body = json.loads(r.body.decode()) if r.body else None
        except ValueError:
            body = r.body.decode("utf-8", "replace")
        if 200 <= r.status < 300:
            res = "ok"
        elif r.status == 503 or 400 <= r.status < 500:
            res = "fail"
        else:
            res = "unknown"
        return res, r.status, body

    def write(self, key, value, token, lock):
        return self._classify(self.c.put(key, value.encode(), token=token, lock=lock,
                                         content_type="text/csv"))

    def fence(self, lock, token):
        return self._classify(self.c.put_fence(lock, token))


class DirTarget:
    """Control run: reports go straight into files (written the careful way: temp file,
    fsync, rename; careful writing does not help against a zombie)."""

    def __init__(self, root):
        self.root = root

    def exists(self, key):
        return os.path.exists(os.path.join(self.root, key))

    def read(self, key):
        with contextlib.suppress(FileNotFoundError), open(os.path.join(self.root, key), "rb") as f:
            return f.read()
        return None

    def write(self, key, value, token, lock):
        path = os.path.join(self.root, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp.%d" % os.getpid()
        with open(tmp, "wb") as f:
            f.write(value.encode())
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        return "ok", None, None


class PgTarget:
    """Control run on Postgres: an UPSERT straight into a table with psql."""

    def __init__(self, table, url):
        self.table, self.url = table, url

    def _psql(self, sql, **vars):
        cmd = ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", self.url]
        for k, v in vars.items():
            cmd += ["-v", "%s=%s" % (k, v)]
        r = subprocess.run(cmd, input=sql, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError("psql: %s" % r.stderr)
        return r.stdout

    def exists(self, key):
        return self._psql("SELECT count(*) FROM %s WHERE key = :'k';" % self.table, k=key).strip() == "1"

    def read(self, key):
        out = self._psql("SELECT body FROM %s WHERE key = :'k';" % self.table, k=key)
        return out.rstrip("\n").encode() if out.strip() else None

    def write(self, key, value, token, lock):
        self._psql("INSERT INTO %s (key, body) VALUES (:'k', :'b') "
                   "ON CONFLICT (key) DO UPDATE SET body = EXCLUDED.body;" % self.table, k=key, b=value)
        return "ok", None, None


def make_target(spec):
    kind, _, rest = spec.partition(":")
    if kind == "fk":
        host, _, port = rest.rpartition(":")
        return FkTarget(host, port)
    if kind == "dir":
        return DirTarget(rest)
    if kind == "pg":
        table, _, url = rest.partition("|")
        return PgTarget(table, url)
    raise SystemExit("bad target %r" % spec)


_op_seq = [0]


def do_op(kind, lock, key, token, value, fn):
    _op_seq[0] += 1
    oid = "%d-%d" % (os.getpid(), _op_seq[0])
    emit(ev="invoke", id=oid, kind=kind, lock=lock, key=key, token=token, value=value)
    try:
        res, status, body = fn()
    except Exception as e:  # connection lost, timeout: outcome unknown
        res, status, body = "unknown", None, repr(e)
    emit(ev="complete", id=oid, kind=kind, key=key, token=token, result=res, status=status, body=body)
    return res, status, body


def wait_go(path):
    """Holds the worker until the orchestrator creates path (Worker.hold/go)."""
    if not path:
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError("no go file %s within 60s" % path)
        time.sleep(0.005)


def work(ms):
    """The "work": sleeps in small slices so a SIGSTOP lands mid-work, and the pause
    is not absorbed by a single long sleep."""
    end = time.monotonic() + ms / 1000.0
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.005))


def save_token(state_dir, lock, token):
    os.makedirs(state_dir, exist_ok=True)
    path = os.path.join(state_dir, "token")
    with open(path + ".tmp", "w") as f:
        json.dump({"lock": lock, "token": token}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)


def load_token(state_dir):
    with open(os.path.join(state_dir, "token")) as f:
        d = json.load(f)
    return d["lock"], d["token"]


def worker_once(a):
    """One job: the token comes from the lock wrapper (FENCING_TOKEN) or, for a worker
    restarted after kill -9, from the state file it saved before it crashed."""
    target = make_target(a.target)
    if a.resume:
        lock, token = load_token(a.state_dir)
        emit(ev="resumed", lock=lock, token=token)
    else:
        token = int(os.environ["FENCING_TOKEN"])
        lock = os.environ.get("FENCING_LOCK", a.lock)
        if a.state_dir:
            save_token(a.state_dir, lock, token)
        emit(ev="acquired", lock=lock, token=token, pid=os.getpid())
        t0 = time.monotonic()
        emit(ev="working", token=token)
        wait_go(a.go_file)
        work(a.work_ms)
        emit(ev="worked", token=token, elapsed_ms=int((time.monotonic() - t0) * 1000))
    value = "%s,%s,token=%d,nonce=%s\n" % (a.name, a.key, token, fk.rand_name(8))
    do_op("put", lock, a.key, token, value, lambda: target.write(a.key, value, token, lock))
    emit(ev="exit")


def worker_cron(a):
    """Long-lived cron instance: one round per "round N KEY" line on stdin."""
    target = make_target(a.target)
    r = RedisClient(a.redis_port)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        rnd, key = int(parts[1]), parts[2]
        work_ms = int(parts[3]) if len(parts) > 3 else a.work_ms
        go_file = parts[4] if len(parts) > 4 else None
        while True:
            owner = owner_id(a.name)
            token = acquire(r, a.lock, owner, a.ttl_ms)
            if token is None:
                time.sleep(a.retry_ms / 1000.0)
                continue
            emit(ev="acquired", lock=a.lock, token=token, round=rnd)
            try:
                if a.fence_first:
                    res, status, _ = do_op("fence", a.lock, None, token, None,
                                           lambda: target.fence(a.lock, token))
                    if res != "ok":
                        break  # somebody newer already fenced us out: not our round
                if target.exists(key):
                    emit(ev="skip", key=key, round=rnd)
                    break
                emit(ev="working", token=token, round=rnd)
                wait_go(go_file)
                work(work_ms)
                value = "report %s by %s token=%d nonce=%s\n" % (key, a.name, token, fk.rand_name(8))
                do_op("put", a.lock, key, token, value, lambda: target.write(key, value, token, a.lock))
                break
            finally:
                release(r, a.lock, owner)
        emit(ev="done", round=rnd)


def worker_careful(a):
    """A careful holder in the Redlock style: it takes the Redis lock, notes the wall
    clock, works, and before writing checks that less than the TTL has elapsed on its
    own clock ("my lease is still valid"); if not, it gives up without writing. Run
    under libfaketime, its clock can jump (the test steps it back, like an NTP step),
    and the check then says "valid" long after the lock expired in Redis.

    Sleeps with select(): libfaketime breaks Python's clock_nanosleep-based sleep."""
    import select
    target = make_target(a.target)
    r = RedisClient(a.redis_port)
    owner = owner_id(a.name)
    deadline = time.monotonic() + 10
    while True:
        token = acquire(r, a.lock, owner, a.ttl_ms)
        if token is not None:
            break
        if time.monotonic() > deadline:
            emit(ev="exit", error="lock not acquired")
            return
        select.select([], [], [], a.retry_ms / 1000.0)
    wall0 = time.time()
    emit(ev="acquired", lock=a.lock, token=token, wall=wall0)
    emit(ev="working", token=token)
    end = time.monotonic() + a.work_ms / 1000.0
    while time.monotonic() < end:
        select.select([], [], [], 0.005)
    elapsed_ms = (time.time() - wall0) * 1000.0
    valid = elapsed_ms < a.ttl_ms
    emit(ev="lease_check", token=token, elapsed_ms=elapsed_ms, valid=valid)
    if valid:
        value = "%s,%s,token=%d,nonce=%s\n" % (a.name, a.key, token, fk.rand_name(8))
        do_op("put", a.lock, a.key, token, value, lambda: target.write(a.key, value, token, a.lock))
    release(r, a.lock, owner)
    emit(ev="exit")


def worker_main(argv):
    p = argparse.ArgumentParser(prog="zombies.py worker")
    p.add_argument("--mode", choices=["once", "cron", "careful"], default="once")
    p.add_argument("--name", required=True)
    p.add_argument("--lock", default=None)
    p.add_argument("--key", default=None)
    p.add_argument("--target", required=True)
    p.add_argument("--redis-port", type=int, default=None)
    p.add_argument("--ttl-ms", type=int, default=400)
    p.add_argument("--work-ms", type=int, default=50)
    p.add_argument("--retry-ms", type=int, default=15)
    p.add_argument("--state-dir", default=None)
    p.add_argument("--go-file", default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--fence-first", action="store_true")
    a = p.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if a.mode == "once":
        worker_once(a)
    elif a.mode == "careful":
        worker_careful(a)
    else:
        worker_cron(a)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
    else:
        print("usage: zombies.py worker --name N --target T ... (started by the test_zombie_* tests)")
        sys.exit(2)
