#!/usr/bin/env python3
"""Exactly-once writes with Idempotency-Key (issue 32; docs/api.md "Retries and
exactly-once"), through real processes, on both stores where both apply.

  1. Postgres: the connection to the database is severed after the commit and before its
     answer reached fencekeeper (delay_proxy.hold_replies + sever, the commit seen in SQL
     first): 504 whose message says to retry with the same Idempotency-Key; the retry gets
     the original 2xx (byte for byte, marked Idempotent-Replayed); the version advanced
     once (SQL and ETag); a `credit` operation applied once (balance in SQL), its replay
     carrying the balance of then.
  2. File store: kill -9 after the commit, before the reply (failpoint before_reply) for
     a PUT, a DELETE and a fence; restart; each retry replays; a fence moved on since
     does not change the replay.
  3. Two proxies on one database: first attempt through A, retry through B → replay (and
     the other way round), also after the fence moved on.
  4. 50 concurrent duplicates of one keyed write → exactly one applied, the rest replays
     or 409 idempotency_in_progress with Retry-After, which resolve to replays (both
     stores; on Postgres over two proxies, and a `credit` operation too).
  5. Same key, different request (body, token, content type, method, path, If-Match,
     operation parameters) → 422 idempotency_key_reused, nothing written; malformed keys
     → 400, nothing written; GET ignores the header; /metrics counts replays apart.
  6. After retention_s → the same key is a new request (applies again) (both stores).
  7. Crash loop (both stores): kill -9 at random moments under keyed writes with retries
     of earlier keys; every unknown outcome resolved by retrying with its key; checked
     against the history: each keyed write applied exactly once (distinct resources at
     version 1, shared counters whose versions are exactly 1..N over their writes,
     Postgres: a ledger row per `credit` key), every later answer a byte-identical replay.
  Also: refused keyed writes record nothing (stale token, lock mismatch, precondition,
  operation_failed): the same key then applies; a replay answers what happened then even
  after the fence moved on.

    FENCEKEEPER_BIN=build/fencekeeper FK_TEST_PG_URL=... python3 tests/integration/test_idempotency.py [FILTER]

FK_IDEM_LOOP_S (default 15) is the crash loop's load time per store.
"""

import json
import os
import random
import re
import signal
import threading
import time
import urllib.parse

import delay_proxy
import fk
from fk import check, eq, expect_error, expect_status

IK = "Idempotency-Key"
RNG = random.Random(int(os.environ.get("FK_SEED", "0")) or None)
LOOP_S = float(os.environ.get("FK_IDEM_LOOP_S") or 15)


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def ik(key, **more):
    h = {IK: key}
    h.update({k.replace("_", "-"): v for k, v in more.items()})
    return h


def replayed(r):
    return r.header("Idempotent-Replayed") == "true"


def expect_first(r, status, what):
    """r applied the write now: status, and no Idempotent-Replayed."""
    expect_status(r, status, what)
    check(r.header("Idempotent-Replayed") is None,
          "%s: Idempotent-Replayed on a write applied now: %r" % (what, r.header_list))
    return r


def expect_replay(r, first, what):
    """r is the replay of `first`: the same status, meaningful headers and body bytes,
    plus Idempotent-Replayed: true."""
    check(r.status == first.status, "%s: replay status %d %r, original %d %r"
          % (what, r.status, r.body[:200], first.status, first.body[:200]))
    check(replayed(r), "%s: no Idempotent-Replayed: true on the replay: %r" % (what, r.header_list))
    for h in ("ETag", "Fencing-Token", "Content-Type"):
        eq(r.header(h), first.header(h), "%s: replay's %s" % (what, h))
    eq(r.body, first.body, "%s: replay's body" % what)
    return r


def put_body(key, token, version, lock=None):
    """The body of an applied PUT (docs/api.md#put-resource)."""
    return json.dumps({"key": key, "lock": lock or key, "token": token, "version": version},
                      separators=(",", ":")).encode()


def start(store, config=None, **kw):
    p = store.start(config=config, **kw)
    p.wait_ready()
    return p


def settle(send, what, timeout=30.0):
    """send() until the answer is neither 503 (nothing written or read: the pool is
    reconnecting, which on a loaded machine takes seconds after a cut) nor 409
    idempotency_in_progress (the first attempt still running); returns it."""
    deadline = time.monotonic() + timeout
    while True:
        r = send()
        busy = r.status == 503 or (r.status == 409 and b"idempotency_in_progress" in r.body)
        if not busy:
            return r
        if time.monotonic() > deadline:
            fk.fail("%s: still %d after %.0fs: %r" % (what, r.status, timeout, r.body[:200]))
        time.sleep(0.1)


def metric(proxy, name, **labels):
    """One sample of /metrics (0 when absent)."""
    text = proxy.request("GET", "/metrics").text
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if m and m.group(1) == name:
            got = ",".join(sorted(x for x in (m.group(2) or "").split(",") if x))
            if got == want:
                return float(m.group(3))
    return 0.0


def sql_one(sql):
    return fk.psql(sql).strip()


def version_in_sql(store, key):
    v = sql_one("SELECT version FROM \"%s\".resources WHERE key = '%s' AND NOT deleted"
                % (store.schema, key))
    return int(v) if v else None


def bank():
    """A user schema (Postgres) with an account 7 at balance 1000 and a ledger, and named
    operations on it: credit (+$1 on account $2), credit_once (a ledger row for key $1,
    +$2 on account 7), open (a new account $1; a duplicate fails with 23505)."""
    name = "u_" + fk.rand_name(10)
    fk._pg_schemas.append(name)
    s = '"%s"' % name
    fk.psql("CREATE SCHEMA {s}; CREATE TABLE {s}.accounts (id int PRIMARY KEY, balance bigint NOT NULL);"
            "INSERT INTO {s}.accounts VALUES (7, 1000);"
            "CREATE TABLE {s}.ledger (k text NOT NULL, amount bigint NOT NULL);".format(s=s))
    ops = {
        "credit": {"sql": "UPDATE %s.accounts SET balance = balance + $1 WHERE id = $2 "
                          "RETURNING id, balance" % s},
        "credit_once": {"sql": "WITH l AS (INSERT INTO %s.ledger (k, amount) VALUES ($1, $2)) "
                               "UPDATE %s.accounts SET balance = balance + $2 WHERE id = 7 "
                               "RETURNING balance" % (s, s)},
        "open": {"sql": "INSERT INTO %s.accounts (id, balance) VALUES ($1, 0)" % s},
    }
    return s, ops


def balance(s, account=7):
    return int(sql_one("SELECT balance FROM %s.accounts WHERE id = %d" % (s, account)))


def pg_url_via(port):
    """FK_TEST_PG_URL with its host and port replaced by 127.0.0.1:port."""
    parsed = urllib.parse.urlsplit(fk.require_service("postgres"))
    netloc = parsed.netloc.rsplit("@", 1)
    where = "127.0.0.1:%d" % port
    return urllib.parse.urlunsplit(parsed._replace(
        netloc=(netloc[0] + "@" + where) if len(netloc) == 2 else where))


# ---------------------------------------------------------------------------
# 1. Postgres: the answer lost after the commit
# ---------------------------------------------------------------------------

# How long each answer of the database is held back while the request whose answer is to
# be lost runs: long enough for the test to see the commit (psql) and sever first, however
# many round trips the write takes.
ANSWER_HOLD_S = 2.0


def lose_answer(relay, send, committed, what):
    """Sends a request (send(), on a thread) while the database's answers reach
    fencekeeper ANSWER_HOLD_S late, waits until committed() sees its commit (SQL straight
    to the database), then severs every connection of the relay: fencekeeper never hears
    that it committed. Returns fencekeeper's reply."""
    box = {}

    def run():
        try:
            box["r"] = send()
        except Exception as e:  # noqa: BLE001 - reported below
            box["e"] = e

    relay.hold_replies(ANSWER_HOLD_S)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    try:
        while not committed():
            check(t.is_alive(), "%s: answered before its commit was seen (%.1f s late "
                                "answers): %r" % (what, ANSWER_HOLD_S, box))
            check(time.monotonic() < deadline, "%s: no commit within 20 s" % what)
            time.sleep(0.02)
    finally:
        severed = relay.sever()
    check(severed > 0, "%s: no connection to sever" % what)
    t.join(30)
    check(not t.is_alive(), "%s: no reply 30 s after the connection was severed" % what)
    check("r" in box, "%s: %r" % (what, box.get("e")))
    return box["r"]


def expect_outcome_unknown(r, what):
    body = expect_error(r, 504, "outcome_unknown", what)
    check(IK in body["message"], "%s: the 504's message does not say to retry with the same "
                                 "%s: %r" % (what, IK, body["message"]))


def test_pg_answer_lost_after_commit_then_retry_replays():
    parsed = urllib.parse.urlsplit(fk.require_service("postgres"))
    with delay_proxy.DelayProxy(parsed.hostname or "127.0.0.1", parsed.port or 5432, 0) as relay:
        store = fk.pg_store()
        store.url = pg_url_via(relay.port)
        s, ops = bank()
        # Answers are held ANSWER_HOLD_S while the write runs: its statements must not time out.
        # One pooled connection: once a request has gone through after a cut, the pool has
        # nothing left to set up. With more, a connection still being set up when the next
        # hold_replies() starts has each of its ~30 set-up round trips held ANSWER_HOLD_S,
        # and the request waits for connections that cannot come (seen: "credit: no commit
        # within 20 s").
        p = start(store, config={"operations": ops,
                                 "postgres": {"statement_timeout_ms": 20000,
                                              "connect_timeout_ms": 5000, "pool_size": 1}})
        with p.client() as c:
            # A PUT.
            send = lambda: c.put("cut/doc", b"hello", token=5, headers=ik("k-cut-put"))
            r = lose_answer(relay, send, lambda: version_in_sql(store, "cut/doc") == 1, "PUT")
            expect_outcome_unknown(r, "PUT with its answer lost")
            first = settle(send, "PUT retried with its key")
            expect_status(first, 201, "PUT retried")
            check(replayed(first), "the retry of a committed PUT is a replay: %r" % first.header_list)
            eq(first.body, put_body("cut/doc", 5, 1), "the replay is the original 201's body")
            eq(first.etag, '"1"', "replay's ETag")
            expect_replay(send(), first, "PUT retried again")
            eq(version_in_sql(store, "cut/doc"), 1, "version in SQL after the retries")
            # The pool may still be reconnecting after the cut: a read may get 503 meanwhile.
            g = settle(lambda: c.get("cut/doc"), "GET after the retries")
            eq((g.status, g.body, g.etag), (200, b"hello", '"1"'), "GET after the retries")

            # A named operation: credit 100 to account 7.
            send = lambda: c.operation("credit", 5, "acct/7", [100, 7], headers=ik("k-cut-credit"))
            r = lose_answer(relay, send, lambda: balance(s) == 1100, "credit")
            expect_outcome_unknown(r, "credit with its answer lost")
            first = settle(send, "credit retried with its key")
            expect_status(first, 200, "credit retried")
            check(replayed(first), "the retry of a committed credit is a replay")
            eq(first.json()["rows"], [{"id": 7, "balance": 1100}], "the replay's rows are those of then")
            eq(first.json()["rows_affected"], 1, "replay's rows_affected")
            expect_replay(send(), first, "credit retried again")
            eq(balance(s), 1100, "credited exactly once")

            # The connection pool works again for new keys.
            r = settle(lambda: c.operation("credit", 5, "acct/7", [1, 7], headers=ik("k-cut-credit-2")),
                       "a new credit after the cut")
            expect_first(r, 200, "a new credit after the cut")
            eq(balance(s), 1101, "the new credit applied")
            r = c.put("cut/doc", b"again", token=5, headers=ik("k-cut-put-2", If_Match='"1"'))
            expect_first(r, 200, "If-Match on the version the replay reported")
            eq(r.etag, '"2"', "the next version")


# ---------------------------------------------------------------------------
# 2. File store: kill -9 after the commit, before the reply
# ---------------------------------------------------------------------------

def crash_before_reply(st, send, what):
    """Starts a proxy on st that dies at the failpoint before_reply, sends one request,
    checks that the process died by SIGKILL without answering."""
    p = st.proxy(env={"FK_FAILPOINT": "before_reply"})
    p.start()
    p.wait_ready()
    try:
        with p.client(timeout=20) as c:
            r = send(c)
    except Exception:  # noqa: BLE001 - the process died: expected
        r = None
    if r is not None:
        p.kill()
        if 200 <= r.status < 300:
            fk.missing("%s ignores FK_FAILPOINT: it was built without -DFK_FAILPOINTS=ON" % fk.binary())
        fk.fail("%s: answered %d %r instead of dying at before_reply" % (what, r.status, r.body[:200]))
    eq(p.wait(10), -signal.SIGKILL, "%s: exit status at before_reply" % what)


def test_file_kill9_before_reply_then_retry_replays():
    st = fk.file_store()
    put = lambda c: c.put("fp/doc", b"body", token=5, lock="fp/lock", headers=ik("k-fp-put"))
    delete = lambda c: c.delete("fp/doc", token=6, lock="fp/lock", headers=ik("k-fp-del"))
    fence = lambda c: c.put_fence("fp/lock", 9, headers=ik("k-fp-fence"))

    crash_before_reply(st, put, "PUT")
    p = start(st)
    with p.client() as c:
        first = put(c)
        expect_status(first, 201, "PUT retried after kill -9")
        check(replayed(first), "the retry of a PUT committed before kill -9 is a replay")
        eq(first.body, put_body("fp/doc", 5, 1, lock="fp/lock"), "replayed body")
        eq(first.etag, '"1"', "replayed ETag")
        g = c.get("fp/doc")
        eq((g.status, g.body, g.etag), (200, b"body", '"1"'), "GET: applied once")
    p.kill()

    crash_before_reply(st, delete, "DELETE")
    p = start(st)
    with p.client() as c:
        first = delete(c)
        expect_status(first, 204, "DELETE retried after kill -9")
        check(replayed(first), "the retry of a DELETE committed before kill -9 is a replay")
        expect_replay(delete(c), first, "DELETE retried again")
        expect_status(c.get("fp/doc"), 404, "deleted")
        eq(c.fence("fp/lock").json()["token"], 6, "fence after the delete")
    p.kill()

    crash_before_reply(st, fence, "PUT fence")
    p = start(st)
    with p.client() as c:
        first = fence(c)
        expect_status(first, 200, "fence retried after kill -9")
        check(replayed(first), "the retry of a fence committed before kill -9 is a replay")
        eq(first.json()["token"], 9, "replayed fence token")
        expect_status(c.put_fence("fp/lock", 12), 200, "the fence moves on")
        expect_replay(fence(c), first, "fence retried after the fence moved on")
        eq(c.fence("fp/lock").json()["token"], 12, "the replay changed no fence")
        # And the replays survive a clean restart too.
    p.stop()
    p = start(st)
    with p.client() as c:
        expect_replay(fence(c), first, "fence retried after a clean restart")


# ---------------------------------------------------------------------------
# 3. Two proxies on one database
# ---------------------------------------------------------------------------

def test_pg_two_proxies_first_through_a_retry_through_b():
    fk.require_service("postgres")
    store = fk.pg_store()
    s, ops = bank()
    a = start(store, config={"operations": ops})
    b = start(store, config={"operations": ops})
    with a.client() as ca, b.client() as cb:
        put = lambda c: c.put("two/doc", b"v1", token=5, lock="two/lock", headers=ik("k-two-put"))
        first = expect_first(put(ca), 201, "PUT through A")
        expect_replay(put(cb), first, "PUT retried through B")
        eq(version_in_sql(store, "two/doc"), 1, "version in SQL")

        credit = lambda c: c.operation("credit", 5, "acct/7", [100, 7], headers=ik("k-two-credit"))
        cfirst = expect_first(credit(cb), 200, "credit through B")
        expect_replay(credit(ca), cfirst, "credit retried through A")
        eq(balance(s), 1100, "credited once")

        # The fences move on through B; replays through either still tell what happened.
        expect_status(cb.put_fence("acct/7", 50), 200, "fence acct/7 moves on")
        expect_status(cb.put_fence("two/lock", 50), 200, "fence two/lock moves on")
        for c, via in ((ca, "A"), (cb, "B")):
            expect_replay(credit(c), cfirst, "credit retried through %s after the fence moved" % via)
            expect_replay(put(c), first, "PUT retried through %s after the fence moved" % via)
        eq(balance(s), 1100, "still credited once")
        eq(version_in_sql(store, "two/doc"), 1, "still version 1")

        # A different request under the key, through the other proxy: refused.
        r = cb.put("two/doc", b"v2", token=50, lock="two/lock", headers=ik("k-two-put"))
        expect_error(r, 422, "idempotency_key_reused", "another body under the key through B")
        delete = lambda c: c.delete("two/doc", token=50, lock="two/lock", headers=ik("k-two-del"))
        dfirst = expect_first(delete(cb), 204, "DELETE through B")
        expect_replay(delete(ca), dfirst, "DELETE retried through A")
        expect_status(ca.get("two/doc"), 404, "deleted")


# ---------------------------------------------------------------------------
# 4. Concurrent duplicates
# ---------------------------------------------------------------------------

def duplicates(proxies, n, send):
    """n threads, each on its own connection (to proxies[i % len]), send at once."""
    barrier = threading.Barrier(n)

    def one(i):
        with proxies[i % len(proxies)].client() as c:
            expect_status(c.healthz(), 200, "connect")
            barrier.wait(30)
            return send(c), c.port

    return fk.parallel(one, n)


def exactly_one_applied(proxies, results, send, status, what):
    """Exactly one answer applied the write; every other is its replay or 409
    idempotency_in_progress with Retry-After, which the client resolves by retrying:
    then a replay. Returns (the applied answer, number of 409s)."""
    applied = [r for r, _ in results if 200 <= r.status < 300 and not replayed(r)]
    eq(len(applied), 1, "%s: answers that applied the write (statuses %r)"
       % (what, sorted(r.status for r, _ in results)))
    first = applied[0]
    expect_status(first, status, what)
    busy = 0
    by_port = {p.port: p for p in proxies}
    for r, port in results:
        if r is first:
            continue
        if r.status == 409:
            expect_error(r, 409, "idempotency_in_progress", what)
            check(r.header("Retry-After"), "%s: 409 idempotency_in_progress without Retry-After" % what)
            busy += 1
            with by_port[port].client() as c:
                expect_replay(settle(lambda: send(c), what), first, "%s: a 409 retried" % what)
        else:
            expect_replay(r, first, what)
    return first, busy


def test_concurrent_duplicates_apply_once(store):
    n = 50
    if store.kind == "postgres":
        s, ops = bank()
        proxies = [start(store, config={"operations": ops}) for _ in range(2)]
    else:
        proxies = [start(store)]
    send = lambda c: c.put("dup/doc", b"once", token=3, headers=ik("k-dup-put"))
    first, busy = exactly_one_applied(proxies, duplicates(proxies, n, send), send, 201, "50 PUTs")
    eq(first.etag, '"1"', "the applied PUT's version")
    for p in proxies:
        g = p.get("dup/doc")
        eq((g.status, g.body, g.etag), (200, b"once", '"1"'), "GET through each proxy: version 1")
    if store.kind == "postgres":
        eq(version_in_sql(store, "dup/doc"), 1, "version in SQL")
        send = lambda c: c.operation("credit", 3, "acct/7", [10, 7], headers=ik("k-dup-credit"))
        first, busy2 = exactly_one_applied(proxies, duplicates(proxies, n, send), send, 200,
                                           "50 credits")
        eq(first.json()["rows"], [{"id": 7, "balance": 1010}], "the applied credit's rows")
        eq(balance(s), 1010, "credited once")
        busy += busy2
        # An INSERT into a unique column: a duplicate that runs while the first is in
        # flight on the other proxy fails its statement (23505) before its record's claim
        # could lose the race; it is still answered from the first one's record, not 422.
        send = lambda c: c.operation("open", 3, "acct/9", [9], headers=ik("k-dup-open"))
        first, busy3 = exactly_one_applied(proxies, duplicates(proxies, n, send), send, 200,
                                           "50 opens")
        eq(sql_one("SELECT count(*) FROM %s.accounts WHERE id = 9" % s), "1", "opened once")
        busy += busy3
    print("  %s: %d of the duplicates got 409 idempotency_in_progress" % (store.kind, busy))


# ---------------------------------------------------------------------------
# 5. Same key, different request; malformed keys; GET; metrics
# ---------------------------------------------------------------------------

def test_same_key_different_request_is_refused(store):
    config = None
    if store.kind == "postgres":
        s, ops = bank()
        config = {"operations": ops}
    p = start(store, config=config)
    with p.client() as c:
        key = "k-reuse"
        first = expect_first(c.put("re/doc", b"original", token=5, lock="re/lock",
                                   content_type="text/plain", headers=ik(key)), 201, "first")
        applied0 = metric(p, "fencekeeper_writes_total", result="applied")
        replayed0 = metric(p, "fencekeeper_writes_total", result="replayed")
        variants = [
            ("another body", lambda: c.put("re/doc", b"changed", token=5, lock="re/lock",
                                           content_type="text/plain", headers=ik(key))),
            ("a higher token", lambda: c.put("re/doc", b"original", token=6, lock="re/lock",
                                             content_type="text/plain", headers=ik(key))),
            ("another content type", lambda: c.put("re/doc", b"original", token=5, lock="re/lock",
                                                   content_type="text/html", headers=ik(key))),
            ("If-Match added", lambda: c.put("re/doc", b"original", token=5, lock="re/lock",
                                             content_type="text/plain",
                                             headers=ik(key, If_Match='"1"'))),
            ("DELETE of the same key", lambda: c.delete("re/doc", token=5, lock="re/lock",
                                                        headers=ik(key))),
            ("another path", lambda: c.put("re/other", b"original", token=5, lock="re/lock",
                                           content_type="text/plain", headers=ik(key))),
            ("a fence", lambda: c.put_fence("re/lock", 7, headers=ik(key))),
        ]
        for what, send in variants:
            expect_error(send(), 422, "idempotency_key_reused", what)
        g = c.get("re/doc")
        eq((g.status, g.body, g.etag, g.header("Content-Type")),
           (200, b"original", '"1"', "text/plain"), "nothing written by the refused requests")
        expect_status(c.get("re/other"), 404, "another path: not created")
        eq(c.fence("re/lock").json()["token"], 5, "no fence moved by the refused requests")
        expect_replay(c.put("re/doc", b"original", token=5, lock="re/lock",
                            content_type="text/plain", headers=ik(key)), first, "the same request")
        eq(metric(p, "fencekeeper_writes_total", result="replayed") - replayed0, 1,
           "writes_total{result=replayed}: the one replay")
        eq(metric(p, "fencekeeper_writes_total", result="applied") - applied0, 0,
           "writes_total{result=applied}: no refused request nor replay counted as applied")

        if store.kind == "postgres":
            op = expect_first(c.operation("credit", 5, "acct/7", [100, 7], headers=ik("k-op")),
                              200, "credit")
            for what, params, token in (("other parameters", [200, 7], 5), ("another token", [100, 7], 6)):
                expect_error(c.operation("credit", token, "acct/7", params, headers=ik("k-op")),
                             422, "idempotency_key_reused", "credit with " + what)
            expect_error(c.operation("open", 5, "acct/7", [8], headers=ik("k-op")),
                         422, "idempotency_key_reused", "another operation")
            expect_replay(c.operation("credit", 5, "acct/7", [100, 7], headers=ik("k-op")), op,
                          "the same credit")
            eq(balance(s), 1100, "credited once, nothing else run")
            eq(sql_one("SELECT count(*) FROM %s.accounts" % s), "1", "account 8 not opened")

    # Malformed keys: 400 invalid_request, nothing written; GET ignores the header.
    bad = ["", "x" * 256, "a b", "caf\xe9", "tab\there"]
    with p.raw() as rc:
        for i, value in enumerate(bad):
            r = rc.request("PUT", "/v1/resources/bad/%d" % i,
                           headers=[("Fencing-Token", "1"), (IK, value)], body=b"x")
            expect_error(r, 400, "invalid_request", "Idempotency-Key %r" % value)
        r = rc.request("PUT", "/v1/resources/bad/two", body=b"x",
                       headers=[("Fencing-Token", "1"), (IK, "one"), (IK, "two")])
        expect_error(r, 400, "invalid_request", "two Idempotency-Key fields")
        r = rc.request("PUT", "/v1/fences/bad-lock", headers=[("Fencing-Token", "1"), (IK, "a b")])
        expect_error(r, 400, "invalid_request", "PUT fence with a malformed key")
        r = rc.request("DELETE", "/v1/resources/re/doc",
                       headers=[("Fencing-Token", "9"), ("Fencing-Lock", "re/lock"), (IK, "")])
        expect_error(r, 400, "invalid_request", "DELETE with an empty key")
        for path in ["/v1/resources/bad/%d" % i for i in range(len(bad))] + ["/v1/resources/bad/two"]:
            expect_status(rc.request("GET", path), 404, "%s not written" % path)
        expect_status(rc.request("GET", "/v1/fences/bad-lock"), 404, "no fence for bad-lock")
        r = rc.request("GET", "/v1/resources/re/doc", headers=[(IK, "a b")])
        eq((r.status, r.body), (200, b"original"), "GET ignores a malformed Idempotency-Key")
        expect_status(rc.request("HEAD", "/v1/resources/re/doc", headers=[(IK, "")]), 200,
                      "HEAD ignores it")
        longest = "".join(chr(0x21 + i % 94) for i in range(255))
        r = rc.request("PUT", "/v1/resources/bad/longest", body=b"x",
                       headers=[("Fencing-Token", "1"), (IK, longest)])
        expect_first(r, 201, "a 255-character key of every printable character")
        r2 = rc.request("PUT", "/v1/resources/bad/longest", body=b"x",
                        headers=[("Fencing-Token", "1"), (IK, longest)])
        expect_replay(r2, r, "the 255-character key again")


# ---------------------------------------------------------------------------
# Refused writes record nothing; a replay tells what happened then
# ---------------------------------------------------------------------------

def test_refused_keyed_writes_record_nothing(store):
    config = None
    if store.kind == "postgres":
        s, ops = bank()
        config = {"operations": ops}
    p = start(store, config=config)
    with p.client() as c:
        expect_status(c.put_fence("z/lock", 10), 200, "the fence at 10")

        # PUT: a zombie's keyed write is refused and recorded nothing...
        r = c.put("z/doc", b"zombie", token=5, lock="z/lock", headers=ik("k-z-put"))
        body = expect_error(r, 409, "stale_token", "keyed PUT below the fence")
        eq(body["current_token"], 10, "current_token")
        expect_status(c.get("z/doc"), 404, "the stale PUT wrote nothing")
        r = c.put("z/doc", b"zombie", token=5, lock="z/lock", headers=ik("k-z-put"))
        expect_error(r, 409, "stale_token", "the same stale PUT again: refused afresh, no replay")
        check(not replayed(r), "a refusal is never a replay")
        # ...so the key is free: the same key with a good token applies.
        first = expect_first(c.put("z/doc", b"holder", token=10, lock="z/lock", headers=ik("k-z-put")),
                             201, "the key again with a good token")
        # The fence moves on: the replay still says what happened then.
        expect_status(c.put_fence("z/lock", 20), 200, "the fence at 20")
        expect_replay(c.put("z/doc", b"holder", token=10, lock="z/lock", headers=ik("k-z-put")),
                      first, "retry after the fence moved on (not 409 stale)")
        g = c.get("z/doc")
        eq((g.body, g.etag), (b"holder", '"1"'), "applied once")

        # DELETE and PUT fence the same way.
        r = c.delete("z/doc", token=15, lock="z/lock", headers=ik("k-z-del"))
        expect_error(r, 409, "stale_token", "keyed DELETE below the fence")
        expect_status(c.get("z/doc"), 200, "the stale DELETE deleted nothing")
        expect_first(c.delete("z/doc", token=20, lock="z/lock", headers=ik("k-z-del")), 204,
                     "DELETE, the key again with a good token")
        expect_status(c.get("z/doc"), 404, "deleted")
        r = c.put_fence("z/lock", 19, headers=ik("k-z-fence"))
        expect_error(r, 409, "stale_token", "keyed fence below the fence")
        ffirst = expect_first(c.put_fence("z/lock", 25, headers=ik("k-z-fence")), 200,
                              "fence, the key again with a good token")
        eq(ffirst.json()["token"], 25, "fence token")

        # Lock mismatch: refused, again refused afresh, then the same key with the right lock.
        expect_status(c.put("z/owned", b"a", token=25, lock="z/lock"), 201, "z/owned under z/lock")
        for attempt in (1, 2):
            r = c.put("z/owned", b"b", token=30, lock="z/other", headers=ik("k-z-mismatch"))
            expect_error(r, 409, "lock_mismatch", "keyed PUT under another lock (%d)" % attempt)
            check(not replayed(r), "a refusal is never a replay")
        expect_first(c.put("z/owned", b"b", token=30, lock="z/lock", headers=ik("k-z-mismatch")),
                     200, "the key again under the right lock")

        # Precondition: If-None-Match: * on an existing key → 412, records nothing; once the
        # key is gone the very same request applies.
        pre = lambda: c.put("z/owned", b"c", token=30, lock="z/lock",
                            headers=ik("k-z-pre", If_None_Match="*"))
        expect_error(pre(), 412, "precondition_failed", "If-None-Match: * on an existing key")
        eq(c.get("z/owned").body, b"b", "the 412 wrote nothing")
        expect_status(c.delete("z/owned", token=30, lock="z/lock"), 204, "delete without a key")
        pfirst = expect_first(pre(), 201, "the same request once the key is gone")
        expect_replay(pre(), pfirst, "and its retry")

        if store.kind == "postgres":
            r = c.operation("credit", 5, "z/lock", [100, 7], headers=ik("k-z-op"))
            expect_error(r, 409, "stale_token", "keyed credit below the fence")
            eq(balance(s), 1000, "the stale credit ran nothing")
            expect_first(c.operation("credit", 30, "z/lock", [100, 7], headers=ik("k-z-op")), 200,
                         "credit, the key again with a good token")
            eq(balance(s), 1100, "credited")
            # operation_failed: opening account 7 fails (duplicate), records nothing.
            open7 = lambda: c.operation("open", 30, "z/lock", [9], headers=ik("k-z-open"))
            fk.psql("INSERT INTO %s.accounts VALUES (9, 5)" % s)
            body = expect_error(open7(), 422, "operation_failed", "opening an existing account")
            eq(body.get("sqlstate"), "23505", "sqlstate")
            fk.psql("DELETE FROM %s.accounts WHERE id = 9" % s)
            ofirst = expect_first(open7(), 200, "the same request once the account is gone")
            eq(ofirst.json()["rows_affected"], 1, "opened")
            expect_replay(open7(), ofirst, "and its retry")
            eq(sql_one("SELECT balance FROM %s.accounts WHERE id = 9" % s), "0", "opened once")


# ---------------------------------------------------------------------------
# 6. Retention
# ---------------------------------------------------------------------------

RETENTION_S = 2


def test_after_retention_the_key_is_new(store):
    p = start(store, config={"idempotency": {"retention_s": RETENTION_S}})
    with p.client() as c:
        send = lambda: c.put("ret/doc", b"same", token=5, headers=ik("k-ret"))
        t_sent = time.monotonic()
        first = expect_first(send(), 201, "first")
        t_answered = time.monotonic()
        r = send()
        # The record's age at this lookup is below the time since the first was sent.
        if time.monotonic() - t_sent < RETENTION_S / 2:
            expect_replay(r, first, "a retry well within the retention")
        else:
            print("  (machine too slow to check the replay within %d s)" % RETENTION_S)
        # The record's age at the next lookup is above the time since the first answer.
        while time.monotonic() - t_answered < RETENTION_S + 0.5:
            time.sleep(0.1)
        again = expect_first(send(), 200, "the same request after the retention: a new write")
        eq(again.etag, '"2"', "applied again: version 2")
        expect_replay(send(), again, "and it has a record of its own")
        eq(c.get("ret/doc").etag, '"2"', "version 2")
    if store.kind == "postgres":
        eq(version_in_sql(store, "ret/doc"), 2, "version in SQL")


# ---------------------------------------------------------------------------
# 7. Crash loop
# ---------------------------------------------------------------------------

COUNTERS = 4


class Intent:
    """One keyed write and every answer it got. kind: "new" (PUT of its own resource
    cl/IK: version 1 once applied), "bump" (PUT to a shared counter resource cnt/J: each
    application makes one version) or "op" (Postgres: credit_once, a ledger row per key)."""

    def __init__(self, n, kind, rng):
        self.ik = "ik-%d-%s" % (n, fk.rand_name(6))
        self.kind = kind
        self.counter = rng.randrange(COUNTERS)
        self.amount = rng.randint(1, 1000)
        self.first = None       # the first 2xx answer recorded (not always the first sent)
        self.applied = 0        # 2xx answers without Idempotent-Replayed
        self.unknown = 0        # 504s, timeouts, broken connections

    @property
    def key(self):
        return {"new": "cl/" + self.ik, "bump": "cnt/%d" % self.counter}.get(self.kind)

    def send(self, c):
        if self.kind == "op":
            return c.operation("credit_once", 1, "acct", [self.ik, self.amount], headers=ik(self.ik))
        return c.put(self.key, self.ik.encode(), token=1, headers=ik(self.ik))


class CrashLoop:
    def __init__(self, store, proxy):
        self.store = store
        self.cur = proxy
        self.intents = []
        self.mu = threading.Lock()
        self.errors = []
        self.replays = 0
        self.busy = 0

    def pick(self, rng):
        with self.mu:
            if self.intents and rng.random() < 0.25:
                return rng.choice(self.intents)   # a retry of an earlier key
            kinds = ["new", "bump"] + (["op"] if self.store.kind == "postgres" else [])
            it = Intent(len(self.intents), rng.choice(kinds), rng)
            self.intents.append(it)
            return it

    def record(self, it, r):
        """Checks and records one answer; returns False when the attempt's outcome is
        unknown."""
        with self.mu:
            if r is None or r.status == 504 or r.status >= 500 and r.status != 503:
                it.unknown += 1
                return False
            if 200 <= r.status < 300:
                if not replayed(r):
                    it.applied += 1
                    if it.applied > 1:
                        self.errors.append("%s applied twice: %r" % (it.ik, r.body[:200]))
                else:
                    self.replays += 1
                # Two threads may send one key at once (a retry of a key still in flight
                # elsewhere), and the one answered first may record last: the server frees
                # the key's claim before its answer is read. So no order is assumed here:
                # at most one answer was applied (above), and every 2xx is the same one.
                if it.first is None:
                    it.first = r
                elif not (r.status == it.first.status and r.body == it.first.body
                          and r.etag == it.first.etag):
                    self.errors.append("%s: answer %d %r %r and %d %r: not the same outcome"
                                       % (it.ik, r.status, r.body[:120], r.header_list,
                                          it.first.status, it.first.body[:120]))
                return True
            if r.status == 503 or (r.status == 409 and b"idempotency_in_progress" in r.body):
                self.busy += r.status == 409
                return True
            self.errors.append("%s: unexpected %d %r" % (it.ik, r.status, r.body[:200]))
            return True

    def worker(self, stop, seed):
        rng = random.Random(seed)
        c, port = None, None
        while not stop.is_set():
            p = self.cur
            if c is None or port != p.port:
                if c is not None:
                    c.close()
                c, port = p.client(timeout=10), p.port
            it = self.pick(rng)
            try:
                r = it.send(c)
            except Exception:  # noqa: BLE001 - killed mid-request: unknown
                r = None
                c.close()
                time.sleep(0.01)
            self.record(it, r)
        if c is not None:
            c.close()

    def resolve(self, c):
        """Retries every key without a 2xx until it has one; then every key that had an
        unknown outcome, and a sample of the others, once more: each must replay."""
        unresolved = [it for it in self.intents if it.first is None]
        for it in unresolved:
            deadline = time.monotonic() + 30
            while it.first is None:
                check(time.monotonic() < deadline, "%s: no 2xx within 30 s" % it.ik)
                try:
                    r = it.send(c)
                except Exception:  # noqa: BLE001
                    c.close()
                    r = None
                if not self.record(it, r) or it.first is None:
                    time.sleep(0.05)
        again = [it for it in self.intents if it.unknown]
        others = [it for it in self.intents if not it.unknown]
        again += RNG.sample(others, min(len(others), 200))
        for it in again:
            self.record(it, it.send(c))
        return len(unresolved)


def test_crash_loop_every_keyed_write_applied_once(store):
    config = {}
    s = None
    if store.kind == "postgres":
        s, ops = bank()
        config = {"operations": ops,
                  "postgres": {"statement_timeout_ms": 3000, "connect_timeout_ms": 2000}}
    p = start(store, config=config)
    loop = CrashLoop(store, p)
    t0 = time.monotonic()
    cycles = kills_in_flight = 0
    while time.monotonic() - t0 < LOOP_S or cycles < 3:
        stop = threading.Event()
        unknown_before = sum(it.unknown for it in loop.intents)
        threads = [threading.Thread(target=loop.worker, args=(stop, RNG.random()), daemon=True)
                   for _ in range(6)]
        for t in threads:
            t.start()
        time.sleep(RNG.uniform(0.1, 0.8))
        p.kill()
        stop.set()
        for t in threads:
            t.join(30)
        check(not any(t.is_alive() for t in threads), "a load thread hangs")
        kills_in_flight += sum(it.unknown for it in loop.intents) > unknown_before
        cycles += 1
        p.start()
        p.wait_ready()
    with p.client() as c:
        unresolved = loop.resolve(c)
    check(not loop.errors, "%d errors:\n  %s" % (len(loop.errors), "\n  ".join(loop.errors[:20])))

    # The state against the history: every key applied exactly once.
    intents = loop.intents
    with p.client() as c:
        for it in intents:
            if it.kind == "new":
                g = c.get(it.key)
                eq((g.status, g.body, g.etag), (200, it.ik.encode(), '"1"'), "%s: applied once" % it.ik)
                eq(it.first.etag, '"1"', "%s: its answer" % it.ik)
        for j in range(COUNTERS):
            mine = [it for it in intents if it.kind == "bump" and it.counter == j]
            if not mine:
                continue
            g = c.get("cnt/%d" % j)
            expect_status(g, 200, "cnt/%d" % j)
            eq(g.etag, '"%d"' % len(mine), "cnt/%d: one version per key that wrote it" % j)
            versions = sorted(int(it.first.etag.strip('"')) for it in mine)
            eq(versions, list(range(1, len(mine) + 1)),
               "cnt/%d: the versions its writes were answered with" % j)
            last = [it for it in mine if it.first.etag == g.etag]
            eq(g.body, last[0].ik.encode(), "cnt/%d: the body of the write that made its version" % j)
    if store.kind == "postgres":
        rows = fk.psql("SELECT k, count(*), sum(amount) FROM %s.ledger GROUP BY k" % s)
        ledger = {}
        for line in rows.splitlines():
            if line:
                k, n, total = line.split("|")
                ledger[k] = (int(n), int(total))
        ops = {it.ik: it for it in intents if it.kind == "op"}
        eq(sorted(ledger), sorted(ops), "a ledger row for every credit key, none other")
        twice = [k for k, (n, _) in ledger.items() if n != 1]
        eq(twice, [], "credit keys applied more than once")
        eq(balance(s), 1000 + sum(it.amount for it in ops.values()), "balance")
        n_new = int(sql_one("SELECT count(*) FROM \"%s\".resources WHERE key LIKE 'cl/%%' "
                            "AND version = 1 AND NOT deleted" % store.schema))
        eq(n_new, sum(1 for it in intents if it.kind == "new"), "cl/ rows at version 1 in SQL")
    unknown = sum(1 for it in intents if it.unknown)
    print("  %s: %d kill -9 cycles in %.1fs (%d hit requests in flight), %d keys, %d answers "
          "unknown, %d resolved only after the loop, %d replays, %d x 409 in progress"
          % (store.kind, cycles, time.monotonic() - t0, kills_in_flight, len(intents), unknown,
             unresolved, loop.replays, loop.busy))
    check(unknown > 0, "no kill hit a request in flight: nothing was tested")
    check(loop.replays > 0, "no replay at all")


if __name__ == "__main__":
    fk.main(globals())
