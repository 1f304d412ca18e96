"""Postgres group commit: one batch statement holds stale and fresh writes side by
side, and every result is exactly what a lone statement would have answered.

A proxy with one connection makes concurrent writes pile up into batches (while its only
connection runs one batch, the next one forms). Fences are raised through a second proxy,
so the first one's stale-rejection cache does not know them and the stale writes reach
the database inside a batch. Creates of one new key under different locks race through
both proxies, next to unrelated writes: a batch that loses such a race rolls back whole
and its writes are re-run one by one, so exactly one create wins, only its fence moves,
and every unrelated write still succeeds. Afterwards the database is read directly: data,
fences, no row without a version (earlier builds used version-0 placeholders), and fewer
transactions than writes (proof that batches formed).

Needs FK_TEST_PG_URL (exit 77 = skipped without it, unless FK_REQUIRE_SERVICES=1).
"""

import os
import subprocess
import threading
import time
import urllib.parse

import delay_proxy
import fk
from fk import check, eq, expect_error, expect_status

PG_URL = fk.require_service("postgres")

N = 64        # concurrent clients on N locks, one key each
ROUNDS = 3
CREATORS = 8  # per proxy, racing to create one new key under distinct locks
RACES = 20    # rounds of that race: whether a batch meets it is up to the scheduler


def start_pair():
    store = fk.pg_store()
    # One connection: everything concurrent through p1 goes through its batches.
    p1 = store.start(config={"postgres": {"pool_size": 1, "batch_max": 64}})
    p2 = store.start(config={"postgres": {"pool_size": 4}})
    p1.wait_ready()
    p2.wait_ready()
    return store, p1, p2


def run_together(n, fn):
    """Runs fn(i) in n threads released at once; returns the results in order."""
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait(30)
        return fn(i)

    return fk.parallel(one, n)


def batch_metrics(client):
    """(batches, writes) so far: fencekeeper_store_batch_size's _count and _sum."""
    r = client.request("GET", "/metrics")
    expect_status(r, 200, "/metrics")
    values = {}
    for line in r.text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("fencekeeper_store_batch_size_count", "fencekeeper_store_batch_size_sum"):
            values[name] = int(float(value))
    return values["fencekeeper_store_batch_size_count"], values["fencekeeper_store_batch_size_sum"]


def sql_rows(query):
    out = fk.psql(query).strip()
    return [line.split("|") for line in out.splitlines() if line]


def test_one_batch_holds_stale_fresh_refused_and_deleted_writes():
    store, p1, p2 = start_pair()
    schema = fk.psql("SELECT quote_ident('%s')" % store.schema).strip()
    with p1.client() as c:
        batches_before = batch_metrics(c)
    for rnd in range(ROUNDS):
        key = lambda i: "r%d/k%02d" % (rnd, i)
        lock = lambda i: "r%d/L%02d" % (rnd, i)
        # Every key exists at version 1 under its lock, fence 10 (p1 caches it).
        def setup(i):
            with p1.client() as c:
                return c.put(key(i), b"v1-%d" % i, token=10, lock=lock(i)).status
        eq(sorted(set(run_together(N, setup))), [201], "round %d setup" % rnd)
        # Raise every fourth fence to 100 through p2: p1 does not know.
        with p2.client() as c:
            for i in range(0, N, 4):
                expect_status(c.put_fence(lock(i), 100), 200, "raise %s" % lock(i))

        # i % 4: 0 stale PUT, 1 fresh PUT, 2 fresh PUT with a wrong If-Match, 3 fresh DELETE.
        def write(i):
            with p1.client() as c:
                g = i % 4
                if g == 0 or g == 1:
                    return c.put(key(i), b"v2-%d" % i, token=50, lock=lock(i))
                if g == 2:
                    return c.put(key(i), b"v2-%d" % i, token=50, lock=lock(i),
                                 headers={"If-Match": '"7"'})
                return c.delete(key(i), token=50, lock=lock(i))

        results = run_together(N, write)
        for i, r in enumerate(results):
            g = i % 4
            what = "round %d client %d (group %d)" % (rnd, i, g)
            if g == 0:
                body = expect_error(r, 409, "stale_token", what)
                eq((body["token"], body["current_token"]), (50, 100), what + " tokens")
            elif g == 1:
                expect_status(r, 200, what)
                eq(r.json()["version"], 2, what + " version")
                eq(r.header("ETag"), '"2"', what + " ETag")
            elif g == 2:
                expect_error(r, 412, "precondition_failed", what)
            else:
                expect_status(r, 204, what)

        # The database, read directly.
        rows = sql_rows("SELECT key, lock, version, token, deleted, convert_from(coalesce(body, ''), 'UTF8') "
                        "FROM %s.resources WHERE key LIKE 'r%d/%%' ORDER BY key" % (schema, rnd))
        eq(len(rows), N, "round %d: one row per key" % rnd)
        for i, (k, l, version, token, deleted, body) in enumerate(rows):
            g = i % 4
            want = {0: ("1", "10", "f", "v1-%d" % i), 1: ("2", "50", "f", "v2-%d" % i),
                    2: ("1", "10", "f", "v1-%d" % i), 3: ("1", "50", "t", "")}[g]
            eq((k, l, version, token, deleted, body), (key(i), lock(i)) + want,
               "round %d row %d" % (rnd, i))
        fences = dict(sql_rows("SELECT lock, token FROM %s.fences WHERE lock LIKE 'r%d/%%'"
                               % (schema, rnd)))
        for i in range(N):
            eq(fences.get(lock(i)), {0: "100", 1: "50", 2: "10", 3: "50"}[i % 4],
               "round %d fence %d" % (rnd, i))
        # Rows written in one transaction share xmin: fewer transactions than writes.
        written = sql_rows("SELECT count(*), count(DISTINCT xmin::text) FROM %s.resources "
                           "WHERE key LIKE 'r%d/%%' AND token = 50" % (schema, rnd))[0]
        eq(written[0], str(N // 2), "round %d written rows" % rnd)
        check(int(written[1]) < N // 2,
              "round %d: %s writes in %s transactions: no batch formed" % (rnd, written[0], written[1]))
        print("  round %d: %s writes committed in %s transactions" % (rnd, written[0], written[1]))
    eq(sql_rows("SELECT count(*) FROM %s.resources WHERE version = 0" % schema), [["0"]],
       "no row without a version")
    # /metrics: every write through p1 reached its batches (the stale ones too: p1's cache
    # did not know the raised fences), in fewer commits than writes.
    with p1.client() as c:
        batches, writes = [a - b for a, b in zip(batch_metrics(c), batches_before)]
    eq(writes, ROUNDS * 2 * N, "fencekeeper_store_batch_size_sum: writes through p1's batches")
    check(batches < writes, "fencekeeper_store_batch_size_count %d: no batch formed" % batches)
    print("  metrics: %d writes in %d batches" % (writes, batches))


def test_each_batch_shape_refuses_zombies_and_writes_under_another_proxys_floor():
    """A batch with no Idempotency-Key goes out as the plain statement, one with keys as
    the keyed statement (sql/batch.cpp): each must refuse, inside a batch, a write whose
    lock's fence another proxy raised (a zombie) and a write below a floor another proxy
    raised, while it applies the fresh writes beside them. p1 knows neither the fences nor
    the floor: only the statement's own reads can refuse them."""
    store, p1, p2 = start_pair()
    schema = fk.psql("SELECT quote_ident('%s')" % store.schema).strip()
    for shape in ("plain", "keyed"):
        prefix = "shape-%s/" % shape
        key = lambda i: "%sk%02d" % (prefix, i)
        lock = lambda i: "%sg%d/L%02d" % (prefix, i % 4, i)
        floor = prefix + "g1/"

        def setup(i):
            with p1.client() as c:
                return c.put(key(i), b"v1", token=10, lock=lock(i)).status
        eq(sorted(set(run_together(N, setup))), [201], "%s: setup" % shape)
        # Through p2, which p1 does not hear from: group 0's fences to 100, and a floor of
        # 80 over group 1's locks.
        with p2.client() as c:
            for i in range(0, N, 4):
                expect_status(c.put_fence(lock(i), 100), 200, "raise %s" % lock(i))
            r = c.request("PUT", "/v1/floors?prefix=" + urllib.parse.quote(floor, safe=""),
                          headers={"Fencing-Token": "80"})
            expect_status(r, 200, "floor %s" % floor)

        # i % 4: 0 zombie PUT, 1 PUT under the floor, 2 fresh PUT, 3 fresh DELETE; keyed:
        # each with an Idempotency-Key of its own.
        def write(i):
            h = {"Idempotency-Key": "%s-%s-%02d" % (shape, fk.rand_name(6), i)} if shape == "keyed" else None
            with p1.client() as c:
                if i % 4 == 3:
                    return c.delete(key(i), token=50, lock=lock(i), headers=h)
                return c.put(key(i), b"v2", token=50, lock=lock(i), headers=h)

        before = sql_rows("SELECT count(*) FROM %s.idempotency" % schema)[0][0]
        results = run_together(N, write)
        for i, r in enumerate(results):
            what = "%s: client %d (group %d)" % (shape, i, i % 4)
            if i % 4 == 0:
                b = expect_error(r, 409, "stale_token", what)
                eq((b["token"], b["current_token"], b.get("floor")), (50, 100, None), what)
            elif i % 4 == 1:
                b = expect_error(r, 409, "stale_token", what)
                eq((b["token"], b["current_token"], b.get("floor")), (50, 80, floor), what)
            elif i % 4 == 2:
                expect_status(r, 200, what)
            else:
                expect_status(r, 204, what)
        rows = sql_rows("SELECT key, token, deleted FROM %s.resources WHERE key LIKE '%s%%' ORDER BY key"
                        % (schema, prefix))
        eq(rows, [[key(i), "50" if i % 4 >= 2 else "10", "t" if i % 4 == 3 else "f"] for i in range(N)],
           "%s: rows" % shape)
        fences = dict(sql_rows("SELECT lock, token FROM %s.fences WHERE lock LIKE '%s%%'" % (schema, prefix)))
        eq(fences, {lock(i): {0: "100", 1: "10", 2: "50", 3: "50"}[i % 4] for i in range(N)},
           "%s: fences" % shape)
        written = sql_rows("SELECT count(*), count(DISTINCT xmin::text) FROM %s.resources "
                           "WHERE key LIKE '%s%%' AND token = 50" % (schema, prefix))[0]
        check(int(written[1]) < int(written[0]),
              "%s: %s writes in %s transactions: no batch formed" % (shape, written[0], written[1]))
        # Records for the applied keyed writes only; none from the plain statement.
        after = sql_rows("SELECT count(*) FROM %s.idempotency" % schema)[0][0]
        eq(int(after) - int(before), N // 2 if shape == "keyed" else 0, "%s: records" % shape)
        print("  %s: %s writes committed in %s transactions" % (shape, written[0], written[1]))


def test_creates_racing_on_one_new_key_under_different_locks():
    store, p1, p2 = start_pair()
    schema = fk.psql("SELECT quote_ident('%s')" % store.schema).strip()
    for rnd in range(RACES):
        key = "race%d/new" % rnd
        locks = ["race%d/L%02d" % (rnd, j) for j in range(2 * CREATORS)]

        # Creators, plus unrelated fresh writes to keep p1's batches full around them.
        def create(i):
            if i < 2 * CREATORS:
                proxy = p1 if i % 2 == 0 else p2
                with proxy.client() as c:
                    return c.put(key, b"by-%d" % i, token=5 + i, lock=locks[i])
            with p1.client() as c:
                return c.put("race%d/other%02d" % (rnd, i), b"x", token=1)

        results = run_together(2 * CREATORS + 24, create)
        created = [i for i in range(2 * CREATORS) if results[i].status == 201]
        eq(len(created), 1, "round %d: exactly one create wins: %r" % (
            rnd, [(r.status, r.body[:80]) for r in results[:2 * CREATORS]]))
        winner = created[0]
        for i in range(2 * CREATORS):
            if i == winner:
                continue
            body = expect_error(results[i], 409, "lock_mismatch", "round %d creator %d" % (rnd, i))
            eq(body["lock"], locks[winner], "round %d creator %d: the key's lock" % (rnd, i))
        for i in range(2 * CREATORS, len(results)):
            expect_status(results[i], 201, "round %d unrelated write %d" % (rnd, i))
        # Only the winner's fence moved: a refused write leaves the fence alone.
        fences = dict(sql_rows("SELECT lock, token FROM %s.fences WHERE lock LIKE 'race%d/L%%'"
                               % (schema, rnd)))
        eq(fences, {locks[winner]: str(5 + winner)}, "round %d fences" % rnd)
        row = sql_rows("SELECT lock, version, token, convert_from(body, 'UTF8') FROM %s.resources "
                       "WHERE key = '%s'" % (schema, key))
        eq(row, [[locks[winner], "1", str(5 + winner), "by-%d" % winner]], "round %d row" % rnd)
    eq(sql_rows("SELECT count(*) FROM %s.resources WHERE version = 0" % schema), [["0"]],
       "no row without a version")


def test_same_lock_writes_queue_behind_each_other():
    """Many writes to one lock (and key) through p1: they never share a batch, every
    result is truthful, and the highest token's body is what stays."""
    _, p1, _ = start_pair()
    tokens = list(range(1, 49))

    def write(i):
        with p1.client() as c:
            return c.put("one/key", b"t%d" % tokens[i], token=tokens[i], lock="one/lock")

    results = run_together(len(tokens), write)
    for i, r in enumerate(results):
        check(r.status in (200, 201, 409), "token %d: %r" % (tokens[i], r))
        if r.status == 409:
            body = expect_error(r, 409, "stale_token", "token %d" % tokens[i])
            check(body["current_token"] > tokens[i], "token %d: fence %r" % (tokens[i], body))
    eq(sum(1 for r in results if r.status == 201), 1, "one create")
    with p1.client() as c:
        g = c.get("one/key")
        eq((g.status, g.body, g.header("Fencing-Token")), (200, b"t48", "48"), "highest wins")
        eq(c.fence("one/lock").json()["token"], 48, "fence")


def open_transaction(sql, what):
    """Opens a psql session, runs BEGIN and `sql` (which must print 'held'), and returns
    it with its transaction still open: release() ends it."""
    exe = fk.require_tool("psql")
    proc = subprocess.Popen([exe, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", PG_URL],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    proc.stdin.write("BEGIN;\n%s\n" % sql)
    proc.stdin.flush()
    eq(proc.stdout.readline().strip(), "held", "the test session " + what)
    return proc


def hold_fence_row(schema, lock):
    """Opens a psql session that holds lock's fence row (FOR UPDATE) until released."""
    return open_transaction("SELECT 'held' FROM %s.fences WHERE lock = '%s' FOR UPDATE;"
                            % (schema, lock), "holds %s's fence row" % lock)


def release(proc, end="ROLLBACK"):
    proc.stdin.write(end + ";\n")
    proc.stdin.close()
    proc.wait(30)


def wait_for_lock_wait(query_like, what):
    """Waits until a statement whose text matches `query_like` waits for a lock."""
    deadline = time.monotonic() + 20
    while int(fk.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                      "AND query LIKE '%s'" % query_like.replace("'", "''"))) < 1:
        check(time.monotonic() < deadline, what)
        time.sleep(0.05)


def test_a_batch_that_loses_a_create_race_rolls_back_and_reruns_its_writes():
    """A batch finds a new key absent, passes its checks and advances its fence, and only
    when it inserts the row finds the key being created by another transaction, which
    then commits. It must not commit that fence advance: the whole batch rolls back and
    each of its writes is re-run alone, so the create answers lock_mismatch (the key now
    belongs to another lock), its lock has no fence, and the writes around it succeed.
    Made deterministic with two psql sessions: one holds the proxy's only connection on a
    fence row while the batch forms behind it, the other has inserted the key and commits
    only once the batch waits for it."""
    store = fk.pg_store()
    p = store.start(config={"postgres": {"pool_size": 1, "batch_max": 64,
                                         "statement_timeout_ms": 30000}})
    p.wait_ready()
    schema = fk.psql("SELECT quote_ident('%s')" % store.schema).strip()
    with p.client() as c:
        expect_status(c.put("cr/busy", b"v1", token=1, lock="cr/Lbusy"), 201, "create cr/busy")
    others = ["cr/u%d" % i for i in range(6)]
    results = {}

    def put(name, key, lock, token):
        with p.client() as c:
            results[name] = c.put(key, b"ours", token=token, lock=lock)

    blocker = hold_fence_row(schema, "cr/Lbusy")
    creator = open_transaction(
        "INSERT INTO %s.resources (key, lock, body, content_type, version, token) VALUES "
        "('cr/new', 'cr/Lother', 'theirs', 'text/plain', 1, 7); SELECT 'held';" % schema,
        "inserts cr/new without committing")
    threads = []
    try:
        busy = threading.Thread(target=put, args=("busy", "cr/busy", "cr/Lbusy", 2))
        busy.start()
        threads.append(busy)
        wait_for_lock_wait("WITH k AS MATERIALIZED%%%s%%" % store.schema,
                           "cr/busy's write never waited for its fence row")
        for name, key, lock in [("new", "cr/new", "cr/Lnew")] + [(k, k, k + "/L") for k in others]:
            t = threading.Thread(target=put, args=(name, key, lock, 5))
            t.start()
            threads.append(t)
        time.sleep(1.0)  # they queue behind the busy connection and form one batch
        release(blocker)
        wait_for_lock_wait("WITH i AS MATERIALIZED%%%s%%" % store.schema,
                           "the batch never waited for the uncommitted cr/new")
        release(creator, "COMMIT")
        creator = None
    finally:
        if creator:
            release(creator)
        if not blocker.stdin.closed:
            release(blocker)
    for t in threads:
        t.join(30)
    expect_status(results["busy"], 200, "cr/busy")
    body = expect_error(results["new"], 409, "lock_mismatch", "the create that lost the race")
    eq(body["lock"], "cr/Lother", "the key's lock")
    for k in others:
        expect_status(results[k], 201, "%s, in the batch that rolled back" % k)
    eq(sql_rows("SELECT lock, token FROM %s.fences WHERE lock = 'cr/Lnew'" % schema), [],
       "the losing create's fence advance was rolled back")
    eq(sql_rows("SELECT lock, convert_from(body, 'UTF8') FROM %s.resources WHERE key = 'cr/new'"
                % schema), [["cr/Lother", "theirs"]], "cr/new is the other transaction's")


def stuck_batch_then_another(config, while_stuck, url=None):
    """Starts a proxy with `config`, gets a write to lock bc/La stuck in the database on
    its fence row (held by a psql session), then sends a write to an unrelated lock and
    calls while_stuck(thread_a, thread_b, results, sent_at) before releasing the row.
    `url`: the proxy's --store instead of the database's own (a delay proxy). Returns
    the proxy, stopped."""
    store = fk.pg_store()
    if url:
        store.url = url
    p = store.start(config=fk.deep_merge({"postgres": {"statement_timeout_ms": 30000}}, config))
    p.wait_ready()
    with p.client() as c:
        for name in ("a", "b"):
            expect_status(c.put("bc/" + name, b"v1", token=1, lock="bc/L" + name), 201,
                          "create %s" % name)
    results = {}

    def put(name):
        with p.client() as c:
            results[name] = c.put("bc/" + name, b"v2", token=2, lock="bc/L" + name)
            results[name + "_at"] = time.monotonic()

    holder = hold_fence_row(store.schema, "bc/La")
    ta = threading.Thread(target=put, args=("a",))
    tb = threading.Thread(target=put, args=("b",))
    try:
        ta.start()
        # a's batch is in the database, waiting for the fence row.
        wait_for_lock_wait("%%%s%%" % store.schema, "a's write never waited for the row lock")
        sent_at = time.monotonic()
        tb.start()
        while_stuck(ta, tb, results, sent_at)
    finally:
        release(holder)
    ta.join(30)
    tb.join(30)
    expect_status(results["a"], 200, "a, once the row lock is released")
    expect_status(results["b"], 200, "b")
    with p.client() as c:
        eq(c.get("bc/a").body, b"v2", "a's body")
        eq(c.get("bc/b").body, b"v2", "b's body")
    p.stop()
    return p


def test_batch_concurrency_bounds_the_batches_in_flight():
    """postgres.batch_concurrency is how many batches one proxy has in the database at
    once. A batch stuck on a row lock (held here by a psql session) holds one of them: with
    1, a write to an unrelated lock waits behind it; with 2, it is written meanwhile (once
    the stuck batch has run batch_overlap_ms, default 50)."""
    def limit_1(ta, tb, results, sent_at):
        tb.join(1.5)
        check(tb.is_alive(), "batch_concurrency 1: b waits behind a's batch")

    def limit_2(ta, tb, results, sent_at):
        tb.join(20)
        check(not tb.is_alive(), "batch_concurrency 2: b is written while a waits")
        expect_status(results["b"], 200, "b written while a's batch waits")
        check(ta.is_alive(), "a still waits for the row lock")

    stuck_batch_then_another({"postgres": {"batch_concurrency": 1}}, limit_1)
    stuck_batch_then_another({"postgres": {"batch_concurrency": 2}}, limit_2)


def test_batch_overlap_holds_a_second_batch_until_the_first_has_run_that_long():
    """postgres.batch_overlap_ms: a second batch starts only once the newest batch in
    flight has run that long (a slow commit), so that writes arriving meanwhile join one
    larger batch. With 4000 ms and a batch stuck on a row lock, a write to an unrelated
    lock is still waiting 2 s later, and is written (by the timer, with nothing else
    arriving) about 4 s after the stuck batch started, while that batch still waits."""
    overlap_s = 4.0

    def held_back(ta, tb, results, sent_at):
        tb.join(2.0)
        check(tb.is_alive(), "b waits while the stuck batch is younger than batch_overlap_ms")
        tb.join(20)
        check(not tb.is_alive(), "b is written once the stuck batch is older than "
                                 "batch_overlap_ms")
        expect_status(results["b"], 200, "b written while a's batch waits")
        check(ta.is_alive(), "a still waits for the row lock")
        waited = results["b_at"] - sent_at
        check(waited < overlap_s + 3, "b waited %.1f s, expected about %.0f s or less"
              % (waited, overlap_s))

    stuck_batch_then_another({"postgres": {"batch_concurrency": 2,
                                           "batch_overlap_ms": int(overlap_s * 1000)}},
                             held_back)


def round_trip_logs(proxy):
    return [l for l in proxy.log_lines() if l.get("msg") == "postgres round trip"]


def test_a_far_database_gets_a_second_batch_after_half_a_round_trip():
    """postgres.far_round_trip_ms: fencekeeper times an empty query on each new
    connection; a database that answers no faster than far_round_trip_ms (default 1) is
    far, and there a second batch starts after half that round trip instead of waiting
    batch_overlap_ms. Through a delay proxy (8 ms each way) and with batch_overlap_ms
    4000, a write to an unrelated lock is written while the stuck batch still waits, well
    before 4 s; with far_round_trip_ms 0 the same write still waits 2 s later. The
    database reached directly is near (the same 4000 ms holds it back: see the test
    above), and both proxies log what they measured."""
    overlap_s = 4.0
    parsed = urllib.parse.urlsplit(PG_URL)
    host = parsed.hostname or "127.0.0.1"
    with delay_proxy.DelayProxy(host, parsed.port or 5432, 0.008) as far:
        netloc = parsed.netloc.rsplit("@", 1)
        where = "127.0.0.1:%d" % far.port
        far_url = urllib.parse.urlunsplit(parsed._replace(
            netloc=(netloc[0] + "@" + where) if len(netloc) == 2 else where))

        def pipelined(ta, tb, results, sent_at):
            tb.join(overlap_s - 1.5)
            check(not tb.is_alive(), "a far database: b is written long before "
                                     "batch_overlap_ms")
            expect_status(results["b"], 200, "b written while a's batch waits")
            check(ta.is_alive(), "a still waits for the row lock")

        p = stuck_batch_then_another({"postgres": {"batch_concurrency": 2,
                                                   "batch_overlap_ms": int(overlap_s * 1000)}},
                                     pipelined, url=far_url)
        logs = round_trip_logs(p)
        check(logs, "the far proxy logs the round trip it measured")
        eq(logs[0].get("far"), True, "far, through the delay proxy: %s" % logs[0])
        check(logs[0]["round_trip_ms"] >= 16, "at least 2 x 8 ms: %s" % logs[0])
        check(abs(logs[0]["second_batch_after_ms"] - logs[0]["round_trip_ms"] / 2) < 0.01,
              "half a round trip: %s" % logs[0])

        def held_back(ta, tb, results, sent_at):
            tb.join(2.0)
            check(tb.is_alive(), "far_round_trip_ms 0: b waits for batch_overlap_ms")

        p = stuck_batch_then_another({"postgres": {"batch_concurrency": 2,
                                                   "batch_overlap_ms": int(overlap_s * 1000),
                                                   "far_round_trip_ms": 0}},
                                     held_back, url=far_url)
        logs = round_trip_logs(p)
        check(logs and logs[0].get("far") is False,
              "far_round_trip_ms 0: never far: %s" % logs)
        eq(logs[0]["second_batch_after_ms"], overlap_s * 1000, "batch_overlap_ms applies")

    store = fk.pg_store()
    p = store.start()
    p.wait_ready()
    p.stop()
    logs = round_trip_logs(p)
    # The fastest exchange counts: the last line logged says what the proxy settled on.
    check(logs and logs[-1].get("far") is False, "loopback Postgres is near: %s" % logs)
    check(logs[-1]["round_trip_ms"] < 1, "under far_round_trip_ms: %s" % logs[-1])


def test_bench_ceiling_tool_applies_every_write():
    """scripts/bench/pg_batch_ceiling (bench.sh's database ceiling for P) sends the store's
    own batch statement with the store's own parameters: it must keep doing so as they
    change. (It once sent a new text parameter in binary, and every bench run's ceiling
    failed with "insufficient data left in message" without any test noticing.)"""
    exe = os.environ.get("FK_PG_BATCH_CEILING_BIN", "")
    check(exe and os.access(exe, os.X_OK), "FK_PG_BATCH_CEILING_BIN (%r) is not a built tool" % exe)
    store = fk.pg_store()
    p = store.start()
    p.wait_ready()   # the schema exists from here on
    # Both statement shapes: no argument (plain), and keyed (a record per write).
    for shape in (None, "keyed"):
        tag = "ceil-%s-" % fk.rand_name(6)
        r = subprocess.run([exe, PG_URL, store.schema, "4", "0.5", "256", tag] + ([shape] if shape else []),
                           capture_output=True, text=True, timeout=60)
        eq(r.returncode, 0, "pg_batch_ceiling %s: %s %s" % (shape, r.stdout, r.stderr))
        fields = dict(kv.split("=") for kv in r.stdout.split())
        writes = int(fields["writes"])
        check(writes >= 4 and writes % 4 == 0, "writes %d: not whole batches of 4" % writes)
        eq(int(sql_rows("SELECT count(*) FROM \"%s\".resources WHERE key LIKE '%s%%' AND version = 1"
                        % (store.schema, tag))[0][0]), writes, "rows the tool wrote (%s)" % shape)
        eq(int(sql_rows("SELECT count(*) FROM \"%s\".idempotency WHERE key LIKE '%s%%'"
                        % (store.schema, tag))[0][0]), writes if shape else 0,
           "records the tool's writes left (%s)" % shape)


if __name__ == "__main__":
    fk.main(globals())
