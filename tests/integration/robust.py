"""Shared pieces of the robustness tests: a concurrent load generator that
records every operation in an fk.History, unique self-describing bodies, and file-store
disk inspection (temp files, bodies as stored on disk).

Not a test module itself (no test_ prefix); test_robust_*.py and scripts/soak.sh use it.
"""

import hashlib
import os
import random
import shutil
import sqlite3
import tempfile
import threading
import time

import fk

# Tokens are drawn as value * STRIDE + thread + 1, so that two threads never send the same
# token for one lock: an equal token would be accepted twice and make "which body is the
# last one" ambiguous for the checker.
STRIDE = 64


def body_for(tag, size):
    """A body that names its writer (tag) at both ends and is filled with bytes derived
    from the tag: a torn or mixed body can never equal any written body."""
    head = b"<" + tag.encode() + b">"
    tail = b"</" + tag.encode() + b">"
    fill_len = max(0, size - len(head) - len(tail))
    seed = hashlib.sha256(tag.encode()).digest()
    reps = fill_len // len(seed) + 1
    return head + (seed * reps)[:fill_len] + tail


def simple_key_path(root, key):
    """objects/ path of a key made of [a-z0-9-] segments (docs/file-store.md, Key → path)."""
    segs = key.split("/")
    return os.path.join(root, "objects", *[s + "~" for s in segs[:-1]], segs[-1])


def tmp_files(root):
    """Every file under ROOT/objects whose name holds ~tmp~ (writes in flight)."""
    out = []
    for d, _, files in os.walk(os.path.join(root, "objects")):
        out += [os.path.join(d, f) for f in files if "~tmp~" in f]
    return out


def committed_tmp_files(root):
    """Temp files that a redo row in ROOT/index.db names: committed writes whose rename had
    not happened when the process stopped. The next start rolls the latest write of each
    key forward. Reads a copy of the index (and its WAL), so that the store's own files
    stay exactly as the crash left them; call it while no process uses the store."""
    names = set()
    with tempfile.TemporaryDirectory(prefix="fk-index-") as d:
        for suffix in ("", "-wal"):
            src = os.path.join(root, "index.db" + suffix)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(d, "index.db" + suffix))
        if not os.path.exists(os.path.join(d, "index.db")):
            return []
        db = sqlite3.connect(os.path.join(d, "index.db"))
        try:
            names = {r[0] for r in db.execute("SELECT tmp FROM redo WHERE tmp IS NOT NULL")}
        finally:
            db.close()
    return [t for t in tmp_files(root) if os.path.basename(t) in names]


def object_files(root):
    """Every file under ROOT/objects that is not a temp file (bodies, committed or not)."""
    out = []
    for d, _, files in os.walk(os.path.join(root, "objects")):
        out += [os.path.join(d, f) for f in files if "~tmp~" not in f]
    return out


class Keyspace:
    """A handful of locks, each guarding a few keys (one lock may guard many keys)."""

    def __init__(self, prefix, nlocks=3, keys_per_lock=2):
        self.locks = ["%s-l%d" % (prefix, i) for i in range(nlocks)]
        self.key_lock = {}
        for i, lock in enumerate(self.locks):
            for j in range(keys_per_lock):
                # Nested keys exercise directory creation in the file store.
                key = "%s/l%d/k%d" % (prefix, i, j) if j % 2 else "%s-l%d-k%d" % (prefix, i, j)
                self.key_lock[key] = lock

    @property
    def keys(self):
        return list(self.key_lock)


class Tokens:
    """Random tokens per lock around a slowly rising 'era': most writes carry a token at or
    above the fence, some fall below it (stale, must get 409). Unique per lock."""

    def __init__(self, locks, stale_share=0.25):
        self.era = {l: 1 for l in locks}
        self.used = {l: set() for l in locks}
        self.stale_share = stale_share
        self.mu = threading.Lock()

    def next(self, lock, tid, rng):
        with self.mu:
            if rng.random() < self.stale_share:
                v = max(0, self.era[lock] - rng.randint(1, 6))
            else:
                self.era[lock] += rng.randint(0, 2)
                v = self.era[lock]
            t = v * STRIDE + tid + 1
            while t in self.used[lock]:
                v += 1
                t = v * STRIDE + tid + 1
            self.used[lock].add(t)
            self.era[lock] = max(self.era[lock], v)
            return t


class Load:
    """Concurrent writers (one fk.Client per thread) against `target()` (a function that
    returns the current Proxy, so the controller may restart it). Every operation goes
    into `history`; exceptions (killed proxy, timeouts) are recorded as unknown.

    mix: weights for "put", "delete", "fence". sizes: (min, max) body bytes.
    """

    def __init__(self, target, history, keyspace, tokens, nthreads=6, mix=None,
                 sizes=(1, 64 * 1024), timeout=10.0, tag="w", seed=None, on_result=None,
                 pause_on_error=0.02):
        self.target = target
        self.history = history
        self.ks = keyspace
        self.tokens = tokens
        self.nthreads = nthreads
        self.mix = mix or {"put": 85, "delete": 5, "fence": 10}
        self.sizes = sizes
        self.timeout = timeout
        self.tag = tag
        self.stop_ev = threading.Event()
        self.threads = []
        self.counter = 0
        self.mu = threading.Lock()
        self.rng = random.Random(seed)
        self.on_result = on_result      # fn(op, status_or_None, latency_s)
        self.pause_on_error = pause_on_error
        self.errors = []
        self.resent = {}   # op id -> Client.resent: the request went out twice (diagnostics)

    def _next_tag(self):
        with self.mu:
            self.counter += 1
            return "%s%d-%d" % (self.tag, os.getpid(), self.counter)

    def _one(self, c, tid, rng):
        kinds = list(self.mix)
        kind = rng.choices(kinds, weights=[self.mix[k] for k in kinds])[0]
        key = rng.choice(self.ks.keys)
        lock = self.ks.key_lock[key]
        token = self.tokens.next(lock, tid, rng)
        proc = "w%d" % tid
        if kind == "put":
            tag = self._next_tag()
            body = body_for(tag, rng.randint(*self.sizes))
            op = self.history.invoke(proc, "put", lock, key, token, body)
            fn = lambda: c.put(key, body, token=token, lock=lock)
        elif kind == "delete":
            op = self.history.invoke(proc, "delete", lock, key, token)
            fn = lambda: c.delete(key, token=token, lock=lock)
        else:
            op = self.history.invoke(proc, "fence", lock, None, token)
            fn = lambda: c.put_fence(lock, token)
        t0 = time.monotonic()
        c.resent = None
        try:
            r = fn()
        except Exception as e:
            self.history.unknown(op, repr(e))
            if self.on_result:
                self.on_result(op, None, time.monotonic() - t0)
            return False
        self.history.record_response(op, r)
        if c.resent is not None:
            with self.mu:
                self.resent[op.id] = c.resent
        if self.on_result:
            self.on_result(op, r.status, time.monotonic() - t0)
        if r.status in (400, 404, 428) or (r.status == 409 and b"lock_mismatch" in r.body):
            # None of these can happen with a well-formed load: a harness or product bug.
            self.errors.append("unexpected %d for %r: %r" % (r.status, op, r.body[:200]))
        return r.status < 500

    def _run(self, tid):
        rng = random.Random(self.rng.random())
        c = None
        while not self.stop_ev.is_set():
            if c is None:
                p = self.target()
                if p is None or p.port is None:
                    time.sleep(0.01)
                    continue
                c = p.client(timeout=self.timeout)
            ok = self._one(c, tid, rng)
            if not ok:
                c.close()
                c = None
                time.sleep(self.pause_on_error)
        if c is not None:
            c.close()

    def start(self):
        self.stop_ev.clear()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(self.nthreads)]
        for t in self.threads:
            t.start()
        return self

    def stop(self, timeout=60.0):
        self.stop_ev.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        alive = [t for t in self.threads if t.is_alive()]
        if alive:
            raise fk.CheckFailed("%d load threads still running %.0fs after stop" % (len(alive), timeout))
        fk.check(not self.errors, "load saw impossible replies:\n  " + "\n  ".join(self.errors[:10]))


def acked(history, kind=None):
    return [o for o in history.ops if o.result == "ok" and (kind is None or o.kind == kind)]


STORE_OPENED = "file store opened"
STORE_SWEPT = "file store swept what an unclean stop left behind"


def wait_recovered(proxy, timeout=60.0):
    """File store: waits for the latest start's "file store opened" line and, when the run
    before did not stop cleanly, for the sweep that follows (docs/file-store.md,
    "Recovery"): it runs beside requests, and until it has finished a crash's temp files
    and uncommitted bodies may still be on disk. Returns (opened, swept or None)."""
    opened = proxy.wait_log(lambda o: o.get("msg") == STORE_OPENED, timeout, this_run=True)
    if opened.get("clean_stop") is True:
        return opened, None
    fk.check(opened.get("clean_stop") is False, "no clean_stop in %r" % opened)
    swept = proxy.wait_log(lambda o: o.get("msg") == STORE_SWEPT, timeout, this_run=True)
    fk.check(swept.get("finished") is True, "the sweep did not finish: %r" % swept)
    return opened, swept


def verify(history, proxy, keyspace, root=None):
    """Reads every key and fence through `proxy` and runs the history checker; for the
    file store (root given) also waits for its recovery to finish, then checks that no
    temp file is left, that an absent key has no file and that each body on disk is the
    body served. Returns (keys_state, fences_state)."""
    if root is not None:
        wait_recovered(proxy)
    keys_state, fences_state = fk.read_state(proxy, keyspace.keys, keyspace.locks)
    history.assert_ok(keys_state, fences_state)
    if root is not None:
        left = tmp_files(root)
        fk.check(not left, "temp files left after recovery: %r" % left[:5])
        for key, st in keys_state.items():
            path = simple_key_path(root, key)
            if st is None:
                fk.check(not os.path.exists(path), "key %s is absent but %s exists" % (key, path))
            else:
                with open(path, "rb") as f:
                    on_disk = f.read()
                fk.check(on_disk == st[0], "key %s: body on disk (%d bytes) differs from the served one (%d)"
                         % (key, len(on_disk), len(st[0])))
    return keys_state, fences_state


def check_still_fencing(proxy, keyspace, fences_state):
    """After recovery: a token below each fence is refused, one above it is applied."""
    with proxy.client() as c:
        for lock in keyspace.locks:
            fence = fences_state.get(lock)
            if fence is None or fence == 0:
                continue
            r = c.put_fence(lock, fence - 1)
            fk.expect_error(r, 409, "stale_token", "token below the recovered fence of %s" % lock)
            fk.eq(r.json()["current_token"], fence, "current_token of %s after recovery" % lock)
