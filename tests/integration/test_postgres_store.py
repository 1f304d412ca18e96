"""Postgres-only integration tests: several fencekeepers on one database, named
SQL operations, Postgres stopped and restarted under load, kill -9 under load.

Needs FK_TEST_PG_URL (exit 77 = skipped without it, unless FK_REQUIRE_SERVICES=1). The
restart test starts its own private Postgres (initdb in a temp dir, as the `postgres`
user when run as root), since it stops and restarts the server.
"""

import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time

import fk
from fk import check, eq, expect_error, expect_status

PG_URL = fk.require_service("postgres")


def two_proxies(config=None):
    store = fk.pg_store()
    p1 = store.start(config=config)
    p2 = store.start(config=config)
    p1.wait_ready()
    p2.wait_ready()
    return store, p1, p2


def test_stale_through_one_proxy_after_newer_through_the_other():
    _, p1, p2 = two_proxies()
    with p1.client() as a, p2.client() as b:
        expect_status(a.put("shared/doc", b"v10", token=10), 201, "first write through p1")
        r = b.put("shared/doc", b"zombie", token=9)
        expect_error(r, 409, "stale_token", "older token through p2")
        eq(r.json()["current_token"], 10, "p2 reports the fence p1 set")
        # p1's cache knows 10; a newer fence set through p2 must still reject through p1.
        expect_status(b.put_fence("shared/doc", 20), 200, "fence raised through p2")
        r = a.put("shared/doc", b"zombie2", token=15)
        expect_error(r, 409, "stale_token", "token between the fences through p1")
        eq(r.json()["current_token"], 20, "p1 reports the newer fence")
        g = a.get("shared/doc")
        eq((g.status, g.body, g.header("Fencing-Token")), (200, b"v10", "10"), "data unchanged")
        # Deletes and lock ownership are shared too.
        expect_error(b.put("shared/doc", b"x", token=30, lock="other"), 409, "lock_mismatch",
                     "another lock through p2")
        expect_status(b.delete("shared/doc", token=20), 204, "delete through p2")
        expect_status(a.get("shared/doc"), 404, "deleted for p1 as well")


def test_race_across_two_proxies_ends_with_the_highest_token():
    _, p1, p2 = two_proxies()
    tokens = list(range(1, 241))
    random.shuffle(tokens)
    nthreads = 16
    shares = [tokens[i::nthreads] for i in range(nthreads)]
    results = []
    lock = threading.Lock()

    def worker(i):
        proxy = p1 if i % 2 == 0 else p2
        with proxy.client() as c:
            for t in shares[i]:
                r = c.put("race/key", b"token=%d" % t, token=t, lock="race")
                with lock:
                    results.append((t, r.status, r.body))

    fk.parallel(worker, nthreads)
    eq(sorted({s for _, s, _ in results} - {200, 201, 409}), [], "only 200/201/409")
    eq(sum(1 for _, s, _ in results if s == 201), 1, "exactly one create")
    for t, s, body in results:
        if s == 409:
            b = json.loads(body)
            eq(b["error"], "stale_token", "409 code")
            check(b["current_token"] > t, "rejected %d with current_token %r" % (t, b["current_token"]))
    accepted = [t for t, s, _ in results if s in (200, 201)]
    check(max(tokens) in accepted, "the highest token is always accepted")
    for p in (p1, p2):
        with p.client() as c:
            g = c.get("race/key")
            eq((g.status, g.body), (200, b"token=%d" % max(tokens)), "final body via each proxy")
            eq(g.etag, '"%d"' % len(accepted), "one version per applied write")
            eq(c.fence("race").json()["token"], max(tokens), "fence")


def test_named_operations():
    user_schema = "u_" + fk.rand_name(10)
    fk._pg_schemas.append(user_schema)
    fk.psql('CREATE SCHEMA "%s"; CREATE TABLE "%s".accounts (id int PRIMARY KEY, balance numeric NOT NULL);'
            'INSERT INTO "%s".accounts VALUES (7, 1000);' % (user_schema, user_schema, user_schema))
    ops = {
        "credit": {"sql": 'UPDATE "%s".accounts SET balance = balance + $1 WHERE id = $2 RETURNING id, balance' % user_schema},
        "open": {"sql": 'INSERT INTO "%s".accounts (id, balance) VALUES ($1, 0)' % user_schema},
        "show": {"sql": 'SELECT id, balance, balance > 0 AS positive, NULL::text AS note FROM "%s".accounts ORDER BY id' % user_schema},
    }
    _, p1, p2 = two_proxies(config={"operations": ops})

    def balance():
        return fk.psql('SELECT balance FROM "%s".accounts WHERE id = 7' % user_schema).strip()

    with p1.client() as a, p2.client() as b:
        r = a.operation("credit", 5, "acct/7", [100, 7])
        expect_status(r, 200, "credit accepted")
        eq(r.json()["rows_affected"], 1, "rows_affected")
        eq(r.json()["rows"], [{"id": 7, "balance": 1100}], "rows as JSON")
        eq(r.json()["token"], 5, "token")
        eq(balance(), "1100", "credited")
        # Stale, answered from p1's cache and by the database through p2.
        for c, what in ((a, "p1 (cache)"), (b, "p2 (database)")):
            r = c.operation("credit", 4, "acct/7", [100, 7])
            expect_error(r, 409, "stale_token", "stale credit via " + what)
            eq(r.json()["current_token"], 5, "current_token via " + what)
            eq(balance(), "1100", "stale credit changed nothing via " + what)
        # SQL error: 422 with the SQLSTATE, rolled back, fence unchanged.
        r = b.operation("open", 9, "acct/7", [7])
        expect_error(r, 422, "operation_failed", "duplicate key")
        eq(r.json().get("sqlstate"), "23505", "sqlstate")
        eq(a.fence("acct/7").json()["token"], 5, "failed operation left the fence alone")
        # Wrong parameter count: 400 before anything runs.
        expect_error(a.operation("credit", 9, "acct/7", [1]), 400, "invalid_request", "param count")
        eq(a.fence("acct/7").json()["token"], 5, "param count error left the fence alone")
        expect_error(a.operation("nope", 9, "acct/7", []), 404, "not_found", "unknown operation")
        r = b.operation("show", 9, "acct/7", [])
        expect_status(r, 200, "select")
        eq(r.json()["rows"], [{"id": 7, "balance": 1100, "positive": True, "note": None}], "select rows")
        eq(a.fence("acct/7").json()["token"], 9, "accepted operation advanced the fence")


def test_kill9_mid_load_keeps_every_acknowledged_fence():
    store = fk.pg_store()
    p = store.start()
    p.wait_ready()
    nlocks = 12
    acked = {}
    stop = threading.Event()
    lock = threading.Lock()

    def worker(i):
        name = "k9/%d" % i
        t = 0
        try:
            with p.client(timeout=5) as c:
                while not stop.is_set():
                    t += 1
                    r = c.put(name, b"t=%d" % t, token=t)
                    if r.status in (200, 201):
                        with lock:
                            acked[name] = t
        except Exception:
            pass  # the process died under us

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(nlocks)]
    for th in threads:
        th.start()
    time.sleep(1.5)
    p.signal(9)
    stop.set()
    for th in threads:
        th.join(10)
    check(len(acked) > 0, "some writes were acknowledged before the kill")
    rows = fk.psql('SELECT f.lock, f.token, r.token FROM "%s".fences f JOIN "%s".resources r ON r.key = f.lock'
                   % (store.schema, store.schema))
    db = {}
    for line in rows.strip().splitlines():
        name, fence, wtoken = line.split("|")
        db[name] = (int(fence), int(wtoken))
    for name, t in acked.items():
        check(name in db, "acknowledged %s is in the database" % name)
        fence, wtoken = db[name]
        check(fence >= t, "%s: fence %d below acknowledged %d" % (name, fence, t))
        check(wtoken >= t, "%s: stored write %d below acknowledged fence %d" % (name, wtoken, t))
        check(fence >= wtoken, "%s: stored write above its fence" % name)
    # A restarted proxy keeps rejecting what was fenced out.
    p.restart()
    with p.client() as c:
        name, t = next(iter(acked.items()))
        expect_error(c.put(name, b"zombie", token=t - 1 if t > 0 else 0), 409, "stale_token",
                     "zombie after restart") if t > 0 else None


# --- Postgres stopped and restarted under load --------------------------------------

class PrivatePostgres:
    """A throwaway cluster on a free loopback port that the test may stop and start."""

    def __init__(self):
        self.initdb, self.pg_ctl = fk.pg_tool("initdb"), fk.pg_tool("pg_ctl")
        # Its own top-level temp dir: the postgres user must be able to reach it.
        self.dir = tempfile.mkdtemp(prefix="fk-pg-")
        self.port = fk.free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
        self._run([self.initdb, "-D", self.dir + "/data", "-A", "trust", "-U", "postgres"])
        self.url = "postgresql://postgres@127.0.0.1:%d/postgres" % self.port

    def _run(self, cmd):
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self):
        self._run([self.pg_ctl, "-D", self.dir + "/data", "-w", "-l", self.dir + "/log",
                   "-o", "-p %d -k %s -c listen_addresses=127.0.0.1" % (self.port, self.dir), "start"])

    def stop(self, mode="fast"):
        self._run([self.pg_ctl, "-D", self.dir + "/data", "-w", "-m", mode, "stop"])

    def remove(self):
        try:
            self.stop("immediate")
        except Exception:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def test_postgres_restart_under_load():
    pg = PrivatePostgres()
    pg.start()
    try:
        store = fk.Store("postgres", pg.url, config={"postgres": {"statement_timeout_ms": 2000,
                                                                  "connect_timeout_ms": 1000}})
        p = store.start()
        p.wait_ready()
        results = []  # (phase, key, status)
        phase = ["before"]
        stop = threading.Event()
        lock = threading.Lock()

        def worker(i):
            n = 0
            with p.client(timeout=10) as c:
                while not stop.is_set():
                    n += 1
                    key = "load/%d/%d" % (i, n)
                    try:
                        r = c.put(key, key.encode(), token=n)
                        status = r.status
                    except OSError:
                        status = -1
                    with lock:
                        results.append((phase[0], key, status))
                    if status not in (200, 201):
                        time.sleep(0.05)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        time.sleep(1.0)
        phase[0] = "down"
        pg.stop("fast")
        time.sleep(2.0)
        with p.client() as c:
            eq(c.readyz().status, 503, "/readyz while Postgres is down")
        pg.start()
        phase[0] = "recovering"
        p.wait_ready(timeout=30)
        time.sleep(0.5)
        phase[0] = "after"
        time.sleep(1.5)
        stop.set()
        for th in threads:
            th.join(30)
        by_phase = {}
        for ph, _, s in results:
            by_phase.setdefault(ph, []).append(s)
        check(all(s in (200, 201) for s in by_phase.get("before", [])), "all writes succeed before")
        down = set(by_phase.get("down", [])) | set(by_phase.get("recovering", []))
        eq(sorted(down - {200, 201, 503, 504}), [], "only 503/504 (or 2xx) around the outage")
        check(503 in down, "the outage was seen as 503")
        after = by_phase.get("after", [])
        check(len(after) > 0 and all(s in (200, 201) for s in after),
              "full service after the restart: %r" % sorted(set(after)))
        # Every acknowledged write is there.
        acked = [k for _, k, s in results if s in (200, 201)]
        with p.client() as c:
            for k in acked:
                g = c.get(k)
                eq((g.status, g.body), (200, k.encode()), "acknowledged %s present" % k)
    finally:
        fk.kill_all_proxies()
        pg.remove()


if __name__ == "__main__":
    fk.main(globals())
