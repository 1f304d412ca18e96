"""Postgres high availability (docs/postgres.md "High availability"): fencekeeper on a
multi-host URI (postgresql://h1,h2/db?target_session_attrs=read-write) in front of a
primary and a streaming standby (pg_ha.HaPair), failed over again and again under load.

The load: writers that each take a real Redis lock (scripts/locks/redis-acquire.lua) and
write with its token (PUT of a key bound to the lock, sometimes PUT /v1/fences), and
zombies that replay tokens from earlier holders. Every reply is recorded in an
fk.History (2xx = acknowledged, 409/503 = not applied, 504 and errors = unknown).

  - synchronous replication: FK_HA_FAILOVERS (default 20) failovers (primary killed with
    `pg_ctl stop -m immediate`, standby promoted, its synchronous_standby_names cleared
    as an orchestrator would, old primary rewound into the new standby). After each one,
    against the database read straight from the new primary with psql: every
    acknowledged write and fence is there (0 lost, asserted), and no write with a token
    below an already acknowledged one was accepted. Prints promotion → first 2xx.
  - asynchronous replication: one failover on a quiet replication link, then one with
    the replication connection cut first, so the standby misses what the primary goes
    on acknowledging: prints how many acknowledged fences and writes were lost, shows a
    zombie let in by the loss, and that a fence floor (PUT /v1/floors) above every
    acknowledged token, with the Redis counters moved above it, stops every zombie while
    a new holder writes.
  - read-only servers: a URI naming only the standby, or the standby first without
    target_session_attrs, gets 503 for writes and nothing is written; with
    target_session_attrs=read-write the same hosts reach the primary; a primary made
    read-only under a live pool (default_transaction_read_only) answers 503 (SQLSTATE
    25006, nothing applied), its connections are dropped and not reused, and writes
    come back once it takes writes again.
"""

import contextlib
import json
import os
import random
import statistics
import threading
import time
import urllib.parse

import fk
import pg_ha
import zombies

FAILOVERS = int(os.environ.get("FK_HA_FAILOVERS", "20"))
NLOCKS = 3
WRITERS_PER_LOCK = 2
ZOMBIES = 2
KEYS_PER_LOCK = 3
CLIENT_TIMEOUT_S = 15.0


def pg_config(schema):
    return {"postgres": {"schema": schema, "statement_timeout_ms": 1000,
                         "connect_timeout_ms": 1000, "pool_size": 4}}


def require_services():
    fk.require_service("redis")
    fk.pg_tool("pg_rewind")
    fk.pg_tool("pg_basebackup")


class Load:
    """Writers with real Redis locks and zombies with old tokens, recorded in a History."""

    def __init__(self, proxy, prefix):
        self.proxy = proxy
        self.prefix = prefix
        self.locks = ["%sL%d" % (prefix, i) for i in range(NLOCKS)]
        self.keys = {l: ["%s/k%d" % (l, j) for j in range(KEYS_PER_LOCK)] for l in self.locks}
        self.history = fk.History()
        self.tokens = {l: [] for l in self.locks}   # tokens handed out, per lock
        self.mu = threading.Lock()
        self.stop_ev = threading.Event()
        self.zombies_on = threading.Event()
        self.zombies_on.set()
        self.threads = []
        self.redis_port = fk.redis_port()

    def all_keys(self):
        return [k for l in self.locks for k in self.keys[l]]

    def start(self):
        n = 0
        for l in self.locks:
            for w in range(WRITERS_PER_LOCK):
                self.threads.append(threading.Thread(target=self._writer, args=("w%d" % n, l), daemon=True))
                n += 1
        for z in range(ZOMBIES):
            self.threads.append(threading.Thread(target=self._zombie, args=("z%d" % z,), daemon=True))
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(CLIENT_TIMEOUT_S + 5)
        self.threads = []

    def _put(self, c, who, lock, key, token, seq):
        body = ("%s-%d-%d" % (who, token, seq)).encode()
        op = self.history.invoke(who, "put", lock, key=key, token=token, value=body)
        try:
            r = c.put(key, body, token=token, lock=lock)
        except Exception as e:  # noqa: BLE001 - any failure is "unknown"
            self.history.unknown(op, repr(e))
            return None
        self.history.record_response(op, r)
        return r

    def _fence(self, c, who, lock, token):
        op = self.history.invoke(who, "fence", lock, token=token)
        try:
            r = c.put_fence(lock, token)
        except Exception as e:  # noqa: BLE001
            self.history.unknown(op, repr(e))
            return None
        self.history.record_response(op, r)
        return r

    def _writer(self, who, lock):
        rnd = random.Random(who)
        owner = zombies.owner_id(who)
        seq = 0
        with zombies.RedisClient(self.redis_port) as r, fk.Client(self.proxy.host, self.proxy.port,
                                                                  timeout=CLIENT_TIMEOUT_S) as c:
            while not self.stop_ev.is_set():
                token = zombies.acquire(r, lock, owner, 20000)
                if token is None:
                    time.sleep(0.005)
                    continue
                with self.mu:
                    self.tokens[lock].append(token)
                try:
                    for _ in range(3):
                        seq += 1
                        self._put(c, who, lock, rnd.choice(self.keys[lock]), token, seq)
                    if rnd.random() < 0.3:
                        self._fence(c, who, lock, token)
                finally:
                    zombies.release(r, lock, owner)
                time.sleep(0.03)   # a steady load, not a flood: the history is checked often

    def _zombie(self, who):
        rnd = random.Random(who)
        seq = 0
        with fk.Client(self.proxy.host, self.proxy.port, timeout=CLIENT_TIMEOUT_S) as c:
            while not self.stop_ev.is_set():
                if not self.zombies_on.wait(0.1):
                    continue
                lock = rnd.choice(self.locks)
                with self.mu:
                    old = self.tokens[lock][:-2]
                if not old:
                    time.sleep(0.01)
                    continue
                seq += 1
                self._put(c, who, lock, rnd.choice(self.keys[lock]), rnd.choice(old[-20:]), seq)
                time.sleep(0.05)

    # --- what the history says ---------------------------------------------------
    def acked_since(self, t):
        return sum(1 for o in list(self.history.ops) if o.result == "ok" and o.complete_t > t)

    def first_ok_after(self, t, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = [o.complete_t for o in list(self.history.ops) if o.result == "ok" and o.complete_t > t]
            if done:
                return min(done)
            time.sleep(0.01)
        raise fk.CheckFailed("no 2xx within %.0fs of the promotion" % timeout)

    def snapshot(self, at):
        """A History as it stood at monotonic time `at`: what completed later (or not at
        all) is unknown there. Checking it against the database read after `at` asks:
        is everything acknowledged by then on the server now?"""
        h = fk.History()
        for o in list(self.history.ops):
            c = fk.Op(o.id, o.process, o.kind, o.lock, o.key, o.token, o.value)
            c.invoke_t = o.invoke_t
            if o.result is not None and o.complete_t is not None and o.complete_t <= at:
                c.complete_t, c.result, c.info = o.complete_t, o.result, o.info
            else:
                c.complete_t, c.result, c.info = at, "unknown", "after the snapshot"
            h.ops.append(c)
        return h


def db_state(pair, schema, load):
    """Keys and own fences as the current primary holds them (psql, not fencekeeper: the
    proxy's fence cache must not stand in for the database)."""
    keys_state = {k: None for k in load.all_keys()}
    for line in pair.psql(pair.primary, "SELECT key, encode(body, 'hex'), token FROM \"%s\".resources "
                          "WHERE NOT deleted" % schema):
        key, hexbody, token = line.split("|")
        if key in keys_state:
            keys_state[key] = (bytes.fromhex(hexbody), int(token))
    fences = {l: None for l in load.locks}
    for line in pair.psql(pair.primary, "SELECT lock, token FROM \"%s\".fences" % schema):
        lock, token = line.split("|")
        if lock in fences:
            fences[lock] = int(token)
    return keys_state, fences


def losses(history, keys_state, fences):
    """What the database lost of what `history` acknowledged: (acknowledged fence
    advances above their lock's fence now (PUT /v1/fences, and writes, which advance the
    fence too), the locks whose fence went below an acknowledged token, acknowledged
    writes whose key now holds nothing or a lower token). History.check is the finer
    test; this counts."""
    lost_advances = [o for o in history.ops if o.result == "ok" and o.token is not None
                     and (fences.get(o.lock) is None or fences[o.lock] < o.token)]
    lost_locks = sorted({o.lock for o in lost_advances})
    lost_writes = []
    for o in history.ops:
        if o.result == "ok" and o.kind == "put":
            cur = keys_state.get(o.key)
            if cur is None or cur[1] < o.token:
                lost_writes.append(o)
    return lost_advances, lost_locks, lost_writes


def stats(xs):
    return "min %.2f s, median %.2f s, max %.2f s over %d" % (min(xs), statistics.median(xs), max(xs), len(xs))


class Run:
    def __init__(self, sync):
        require_services()
        self.pair = pg_ha.HaPair(sync=sync)
        self.schema = "ha_" + fk.rand_name(8)
        self.store = fk.Store("postgres", self.pair.url, config=pg_config(self.schema))
        self.proxy = self.store.start()
        self.proxy.wait_ready(60)
        self.load = Load(self.proxy, "ha%s/" % fk.rand_name(5))
        self.recovery = []   # promotion → first 2xx, seconds
        self.probes = 0

    def failover(self, before=None):
        """Waits for some acknowledged load, runs before() (if any), fails over, waits
        for the first 2xx on the new primary. Returns (kill time, promotion time)."""
        t = time.monotonic()
        deadline = t + 30
        while self.load.acked_since(t) < 10:
            fk.check(time.monotonic() < deadline, "the load made no progress in 30 s")
            time.sleep(0.05)
        if before:
            before()
        killed = time.monotonic()
        promoted = self.pair.failover()
        if self.load.threads:
            first = self.load.first_ok_after(promoted)
        else:
            first = self.probe()
        self.recovery.append(first - promoted)
        return killed, promoted

    def probe(self, timeout=30.0):
        """With the load stopped: writes on a lock of its own until one is acknowledged;
        the time it was."""
        lock = self.load.prefix + "probe"
        deadline = time.monotonic() + timeout
        with fk.Client(self.proxy.host, self.proxy.port, timeout=CLIENT_TIMEOUT_S) as c:
            while True:
                self.probes += 1
                try:
                    r = c.put(lock + "/k", b"probe", token=self.probes, lock=lock)
                    if 200 <= r.status < 300:
                        return time.monotonic()
                except OSError:
                    pass
                fk.check(time.monotonic() < deadline, "no 2xx within %.0fs of the promotion" % timeout)
                time.sleep(0.01)

    def remove(self):
        self.load.stop()
        self.proxy.stop()
        self.pair.remove()


def test_sync_failovers_lose_nothing():
    run = Run(sync=True)
    try:
        run.load.start()
        phases = {"failover": 0.0, "check": 0.0, "rebuild": 0.0}
        for i in range(FAILOVERS):
            t0 = time.monotonic()
            run.failover()
            at = time.monotonic()
            phases["failover"] += at - t0
            ks, fs = db_state(run.pair, run.schema, run.load)
            snap = run.load.snapshot(at)   # after the read: it must know every value read
            adv, locks, writes = losses(snap, ks, fs)
            errs = snap.check(ks, fs)
            if adv or writes or errs:
                raise fk.CheckFailed("failover %d (synchronous) lost acknowledged data: %d fence advances "
                                     "(locks %s), %d writes; history: %s\n  %s"
                                     % (i + 1, len(adv), locks, len(writes), snap.summary(),
                                        "\n  ".join(errs[:20] + [repr(o) for o in (adv + writes)[:10]])))
            t1 = time.monotonic()
            phases["check"] += t1 - at
            run.pair.rebuild()
            phases["rebuild"] += time.monotonic() - t1
        print("time spent: %s" % ", ".join("%s %.1f s" % kv for kv in phases.items()))
        run.load.stop()
        ks, fs = db_state(run.pair, run.schema, run.load)
        run.load.history.assert_ok(ks, fs)
        h = run.load.history
        acked = sum(1 for o in h.ops if o.result == "ok")
        zombie_409 = sum(1 for o in h.ops if o.process.startswith("z") and o.result == "fail")
        if run.pair.rewind_failures:
            print("pg_rewind did not repair %d old primaries (pg_basebackup instead); the last:\n%s"
                  % (len(run.pair.rewind_failures), run.pair.rewind_failures[-1]))
        print("synchronous: %d failovers (%d old primaries rewound), 0 acknowledged writes or fences lost; "
              "%d ops, %d acknowledged (%d fences), %d zombie writes refused; promotion -> first 2xx: %s"
              % (run.pair.failovers, run.pair.rewinds, len(h.ops), acked,
                 sum(1 for o in h.ops if o.result == "ok" and o.kind == "fence"), zombie_409,
                 stats(run.recovery)), flush=True)
    finally:
        run.remove()


def put_floor(c, prefix, token):
    return c.request("PUT", "/v1/floors?prefix=" + urllib.parse.quote(prefix, safe=""),
                     headers={"Fencing-Token": str(token)})


def test_async_failover_loss_and_floor():
    run = Run(sync=False)
    try:
        load = run.load
        load.start()
        # A failover with the replication link quiet: what asynchronous commit loses
        # when the standby keeps up (usually nothing on loopback).
        run.failover()
        at = time.monotonic()
        ks, fs = db_state(run.pair, run.schema, load)
        adv0, locks0, writes0 = losses(load.snapshot(at), ks, fs)
        run.pair.rebuild()

        # The window made real: the standby stops receiving, the primary goes on
        # acknowledging, then dies. The load stops before the crash, so that later
        # writes (higher tokens) do not cover up what the loss took.
        def cut_and_wait():
            run.pair.cut_replication()
            t = time.monotonic()
            while load.acked_since(t) < 20 and time.monotonic() < t + 10:
                time.sleep(0.05)
            load.stop()

        run.failover(before=cut_and_wait)
        at = time.monotonic()
        ks, fs = db_state(run.pair, run.schema, load)
        adv, locks, writes = losses(load.snapshot(at), ks, fs)
        fences_lost = [o for o in adv if o.kind == "fence"]
        print("asynchronous, quiet link: lost %d acknowledged fence advances (%d PUT /v1/fences), "
              "%d acknowledged writes" % (len(adv0), sum(1 for o in adv0 if o.kind == "fence"), len(writes0)))
        print("asynchronous, replication cut before the crash: lost %d acknowledged fence advances "
              "(%d of them PUT /v1/fences) on %d of %d locks, %d acknowledged writes; "
              "promotion -> first 2xx: %s"
              % (len(adv), len(fences_lost), len(locks), len(load.locks), len(writes), stats(run.recovery)),
              flush=True)
        if run.pair.rewind_failures:
            print("pg_rewind did not repair %d old primaries (pg_basebackup instead); the last:\n%s"
                  % (len(run.pair.rewind_failures), run.pair.rewind_failures[-1]))
        fk.check(adv, "the cut replication lost nothing: the loss window was not real")

        # Zombies the loss lets in: the token the database still has as the fence is
        # below one that was acknowledged. Through a proxy that did not see the lost
        # fences (another proxy of the fleet, or this one restarted): the one that served
        # them still has them in its fence cache and refuses these itself.
        acked_max = max(o.token for o in load.history.ops if o.result == "ok" and o.token is not None)
        other = run.store.start()
        other.wait_ready(30)
        with run.proxy.client() as c, other.client() as c2:
            let_in = 0
            for lock in locks:
                zombie_token = fs[lock] if fs[lock] is not None else 1
                lost_to = max(o.token for o in adv if o.lock == lock)
                r0 = c.put(load.keys[lock][0], b"zombie-same-proxy", token=zombie_token, lock=lock)
                r = c2.put(load.keys[lock][0], b"zombie-before-floor", token=zombie_token, lock=lock)
                let_in += 200 <= r.status < 300
                print("without a floor: a zombie with token %d on %s (acknowledged up to %d): %d through "
                      "another proxy, %d through the proxy that acknowledged the lost fence"
                      % (zombie_token, lock, lost_to, r.status, r0.status), flush=True)
            fk.check(let_in, "no zombie was let in: the loss did not show")

            # Above every acknowledged token, and every token Redis handed out (what the
            # repair script does: a token issued but never acknowledged is still a zombie's).
            floor = max([acked_max] + [t for ts in load.tokens.values() for t in ts]) + 1
            r = put_floor(c, load.prefix, floor)
            fk.expect_status(r, 200, "PUT /v1/floors")
            refused = 0
            for l in load.locks:
                for t in sorted(set(load.tokens[l]))[-10:]:
                    for cl in (c, c2):
                        r = cl.put(load.keys[l][0], b"zombie-after-floor", token=t, lock=l)
                        fk.expect_error(r, 409, "stale_token", "zombie with token %d on %s after the floor"
                                        % (t, l))
                        refused += 1
            with zombies.RedisClient(load.redis_port) as rc:
                for l in load.locks:
                    zombies.raise_fence(rc, l, floor)
                owner = zombies.owner_id("new-holder")
                lock = locks[0]
                t = zombies.acquire(rc, lock, owner, 10000)
                fk.check(t is not None and t > floor, "new holder's token %r not above the floor %d" % (t, floor))
                r = c2.put(load.keys[lock][0], b"new-holder", token=t, lock=lock)
                fk.check(200 <= r.status < 300, "the new holder's write: %d %r" % (r.status, r.body))
                zombies.release(rc, lock, owner)
            print("floor %d on prefix %r: %d zombie writes with old tokens refused (409) through both "
                  "proxies, the new holder (token %d) writes" % (floor, load.prefix, refused, t), flush=True)
        other.stop()
    finally:
        run.remove()


def test_read_only_server_is_never_written():
    require_services()
    pair = pg_ha.HaPair(sync=False)
    try:
        pr, sb = pair.primary, pair.standby
        base = "postgresql://postgres@"
        db = "/" + pg_ha.DB
        cases = [
            ("the standby only", base + "127.0.0.1:%d" % sb.port + db, False),
            ("standby first, no target_session_attrs",
             base + "127.0.0.1:%d,127.0.0.1:%d" % (sb.port, pr.port) + db, False),
            ("standby first, target_session_attrs=read-write",
             base + "127.0.0.1:%d,127.0.0.1:%d" % (sb.port, pr.port) + db + "?target_session_attrs=read-write",
             True),
        ]
        for what, url, writable in cases:
            schema = "ro_" + fk.rand_name(8)
            if not writable:
                # The schema exists (made through the primary): only the server differs.
                p0 = fk.Store("postgres", pr.url(), config=pg_config(schema)).start()
                p0.wait_ready(60)
                p0.stop()
                time.sleep(0.5)   # the standby replays the schema
            p = fk.Store("postgres", url, config=pg_config(schema)).start()
            key = "ro/%s" % fk.rand_name(6)
            with p.client() as c:
                if writable:
                    p.wait_ready(30)
                    fk.expect_status(c.put(key, b"x", token=5, lock="ro-lock"), 201, what)
                else:
                    for _ in range(3):
                        r = c.put(key, b"x", token=5, lock="ro-lock")
                        fk.expect_error(r, 503, "unavailable", what)
                    fk.check(c.readyz().status == 503, "%s: ready on a read-only server" % what)
            rows = pair.psql(pr, "SELECT count(*) FROM \"%s\".resources WHERE key = '%s'" % (schema, key))
            fk.eq(rows, ["1" if writable else "0"], "%s: rows on the primary" % what)
            if not writable:
                # The log is written by a background thread: wait for the line, do not
                # read the file once (a CI run read it empty right after the 503s).
                p.wait_log(lambda o: "hot standby" in json.dumps(o), timeout=10)
            p.stop()

        # A primary turned read-only under a live pool: 25006, 503, connections dropped.
        schema = "ro_" + fk.rand_name(8)
        p = fk.Store("postgres", pr.url(), config=pg_config(schema)).start()
        p.wait_ready(60)
        with p.client() as c:
            fk.expect_status(c.put("ro/a", b"1", token=5, lock="ro-lock"), 201, "before")
            pair.psql(pr, "ALTER SYSTEM SET default_transaction_read_only = on")
            pair.psql(pr, "SELECT pg_reload_conf()")
            time.sleep(0.3)
            statuses = []
            for i in range(6):
                r = c.put("ro/b%d" % i, b"2", token=6, lock="ro-lock")
                statuses.append(r.status)
                fk.check(r.status == 503, "write to a read-only primary: %d %r" % (r.status, r.body[:200]))
            fk.eq(pair.psql(pr, "SELECT count(*) FROM \"%s\".resources WHERE key LIKE 'ro/b%%'" % schema),
                  ["0"], "rows written while read-only")
            # As above: the log line comes from a background thread; wait for it.
            with contextlib.suppress(Exception):
                p.wait_log(lambda o: o.get("msg") == "postgres server is read-only; connection dropped",
                           timeout=10)
            text = p.stderr_text()
            dropped = [l for l in text.splitlines() if "postgres server is read-only; connection dropped" in l]
            fk.check(dropped, "no 'connection dropped' log line:\n%s" % text[-2000:])
            fk.check(any("25006" in l for l in dropped), "the drop does not name SQLSTATE 25006: %s" % dropped)
            pair.psql(pr, "ALTER SYSTEM RESET default_transaction_read_only")
            pair.psql(pr, "SELECT pg_reload_conf()")
            deadline = time.monotonic() + 20
            while True:
                r = c.put("ro/c", b"3", token=7, lock="ro-lock")
                if r.status == 201:
                    break
                fk.check(time.monotonic() < deadline, "writes did not come back: %d %r" % (r.status, r.body))
                time.sleep(0.2)
            print("read-only primary: writes answered %s, %d connection(s) dropped, then writes again"
                  % (statuses, len(dropped)), flush=True)
        p.stop()
    finally:
        pair.remove()


if __name__ == "__main__":
    fk.main(globals())
