#!/usr/bin/env python3
"""Transactions (issue 34; docs/api.md "POST /v1/transactions"), through real processes,
on both stores where both apply.

  1. Five ops with one stale token among them → 409 naming that op; nothing changed:
     bodies, versions and fences all as before. Likewise a lock mismatch, a failed
     precondition and a failed check_version; a transaction naming one key twice → 400.
  2. File store: kill -9 at each failpoint a transaction's commit passes → after restart
     all of its ops or none (exactly which one, per point). Postgres: the backend killed
     while the transaction runs → 503 or 504, never 2xx, and nothing applied; then a loop
     of such kills at random moments: every transaction all or nothing.
  3. 8 concurrent clients run random transactions over 20 keys under 8 overlapping locks
     for FK_TXN_LOOP_S (default 30) seconds while readers watch: no 5xx (no deadlock or
     error reaches a client), every read shows a committed transaction wholly (once a
     reader has seen one of its writes, every other key it wrote is at its version or
     later), no refused transaction's body is ever seen, each lock's fence only rises and
     ends at the highest token committed on it, each key's version counts its commits.
  4. A zombie's transaction (an old token on one of its locks) is refused while the new
     holder's transaction commits; the zombie's writes under its other, valid lock are not
     applied either.
  5. The ledger example (Postgres): an `operation` inserting a ledger row and a `put` of
     the receipt commit together; a failing statement, a stale token or a failed
     precondition leaves neither.
  Also: Idempotency-Key covers the whole transaction (replay byte for byte, reuse → 422,
  a refused transaction records nothing); `operation` on the file store → 400.

    FENCEKEEPER_BIN=build/fencekeeper FK_TEST_PG_URL=... python3 tests/integration/test_transactions.py [FILTER]
"""

import json
import os
import random
import threading
import time

import fk
from fk import check, eq, expect_error, expect_status

RNG = random.Random(int(os.environ.get("FK_SEED", "0")) or None)
LOOP_S = float(os.environ.get("FK_TXN_LOOP_S") or 30)


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def start(store, config=None, **kw):
    p = store.start(config=config, **kw)
    p.wait_ready()
    return p


def put_op(key, token, body, lock=None, **more):
    op = {"op": "put", "key": key, "token": token, "body": body}
    if lock is not None:
        op["lock"] = lock
    op.update(more)
    return op


def state(c, keys, locks):
    """What a reader sees: (status, body, ETag) per key and the token per lock."""
    out = {}
    for k in keys:
        r = c.get(k)
        out[k] = (r.status, r.body if r.status == 200 else None, r.etag if r.status == 200 else None)
    for lk in locks:
        r = c.fence(lk)
        out["fence:" + lk] = r.json()["token"] if r.status == 200 else None
    return out


def expect_txn_error(r, status, code, op_index, what):
    body = expect_error(r, status, code, what)
    eq(body.get("op_index"), op_index, "%s: op_index" % what)
    return body


def results(r, what):
    expect_status(r, 200, what)
    body = r.json()
    check(isinstance(body, dict) and isinstance(body.get("results"), list),
          "%s: no results array: %r" % (what, body))
    return body["results"]


# ---------------------------------------------------------------------------
# 1. One refused op: nothing changes
# ---------------------------------------------------------------------------

def test_one_stale_op_changes_nothing(store):
    p = start(store)
    with p.client() as c:
        # Before: a/1 and a/2 exist under their own locks, job/x has a fence at 10.
        expect_status(c.put("a/1", b"one", token=3), 201, "seed a/1")
        expect_status(c.put("a/2", b"two", token=3), 201, "seed a/2")
        expect_status(c.put_fence("job/x", 10), 200, "seed job/x")
        keys = ["a/1", "a/2", "a/3", "a/4"]
        locks = ["a/1", "a/2", "a/3", "a/4", "job/x"]
        before = state(c, keys, locks)

        ops = [put_op("a/1", 4, "one'"),
               put_op("a/2", 4, "two'"),
               put_op("a/3", 4, "three"),
               {"op": "fence", "lock": "job/x", "token": 9},  # stale: the fence is 10
               put_op("a/4", 4, "four")]
        body = expect_txn_error(c.transaction(ops), 409, "stale_token", 3, "stale op 3")
        eq((body.get("lock"), body.get("token"), body.get("current_token")), ("job/x", 9, 10),
           "stale_token's lock, token and current_token")
        eq(state(c, keys, locks), before, "state after the refused transaction")

        # The same five with the current token commit, in op order.
        ops[3]["token"] = 10
        res = results(c.transaction(ops), "the same ops, current token")
        eq([x["op"] for x in res], ["put", "put", "put", "fence", "put"], "result ops")
        eq([(x.get("key"), x.get("version"), x.get("created")) for x in res if x["op"] == "put"],
           [("a/1", 2, False), ("a/2", 2, False), ("a/3", 1, True), ("a/4", 1, True)],
           "put results")
        eq((res[3]["lock"], res[3]["token"]), ("job/x", 10), "fence result")
        eq(c.get("a/3").body, b"three", "a/3 written")
        eq(c.get("a/1").etag, '"2"', "a/1's version")

        # A lock mismatch (a/1 belongs to lock a/1), a failed If-Match, a failed
        # check_version: each refused, naming its op; nothing written.
        before = state(c, keys, locks)
        ops = [put_op("a/3", 5, "x"), put_op("a/1", 5, "x", lock="other")]
        body = expect_txn_error(c.transaction(ops), 409, "lock_mismatch", 1, "lock mismatch")
        eq(body.get("lock"), "a/1", "lock_mismatch names the key's lock")
        ops = [put_op("a/3", 5, "x"), put_op("a/4", 5, "x", if_match=7)]
        expect_txn_error(c.transaction(ops), 412, "precondition_failed", 1, "If-Match 7")
        ops = [put_op("a/3", 5, "x"), {"op": "check_version", "key": "a/2", "version": 1}]
        expect_txn_error(c.transaction(ops), 412, "precondition_failed", 1, "check_version 1")
        ops = [{"op": "check_version", "key": "a/2", "absent": True}, put_op("a/3", 5, "x")]
        expect_txn_error(c.transaction(ops), 412, "precondition_failed", 0, "check_version absent")
        ops = [put_op("a/3", 5, "x"), {"op": "check", "lock": "job/x", "token": 9}]
        expect_txn_error(c.transaction(ops), 409, "stale_token", 1, "check below the fence")
        eq(state(c, keys, locks), before, "state after the refused transactions")

        # One key twice → 400, nothing written.
        ops = [put_op("a/3", 5, "x"), {"op": "delete", "key": "a/3", "token": 5}]
        expect_txn_error(c.transaction(ops), 400, "invalid_request", 1, "a key twice")
        eq(state(c, keys, locks), before, "state after the 400")

        # check, check_version, delete and header defaults in one committed transaction.
        ops = [{"op": "check", "lock": "job/x"},
               {"op": "check_version", "key": "a/2", "version": 2},
               {"op": "check_version", "key": "a/9", "absent": True},
               {"op": "delete", "key": "a/4", "lock": "a/4"},
               {"op": "put", "key": "a/5", "body": "five"}]
        res = results(c.transaction(ops, token=11), "header defaults")
        eq((res[0]["token"], res[1]["version"], res[2]["version"], res[3]["version"]), (10, 2, 0, 1),
           "check's fence, check_versions' versions, the deleted version")
        eq(c.get("a/4").status, 404, "a/4 deleted")
        eq((c.get("a/5").body, c.fence("a/5").json()["token"]), (b"five", 11),
           "a/5 written under its own lock with the header's token")
        eq(c.fence("job/x").json()["token"], 10, "a check does not move the fence")

        # A check after a write of its lock reports the transaction's token (op order); a
        # delete of a key already deleted reports version 0, as one never written.
        ops = [{"op": "fence", "lock": "job/x", "token": 12}, {"op": "check", "lock": "job/x", "token": 12},
               {"op": "delete", "key": "a/4", "token": 12}, {"op": "delete", "key": "a/8", "token": 12}]
        res = results(c.transaction(ops), "check after a fence, deletes of absent keys")
        eq([(x["op"], x["token"], x.get("version")) for x in res],
           [("fence", 12, None), ("check", 12, None), ("delete", 12, 0), ("delete", 12, 0)],
           "results")


# ---------------------------------------------------------------------------
# Idempotency-Key over a whole transaction
# ---------------------------------------------------------------------------

def test_idempotency_key_covers_the_transaction(store):
    p = start(store)
    with p.client() as c:
        ops = [put_op("i/1", 5, "one"), put_op("i/2", 5, "two"), {"op": "fence", "lock": "i/l", "token": 5}]
        first = c.transaction(ops, headers={"Idempotency-Key": "tx-1"})
        expect_status(first, 200, "first")
        check(first.header("Idempotent-Replayed") is None, "first attempt marked replayed")
        again = c.transaction(ops, headers={"Idempotency-Key": "tx-1"})
        expect_status(again, 200, "retry")
        eq(again.header("Idempotent-Replayed"), "true", "retry's Idempotent-Replayed")
        eq(again.body, first.body, "the replay's body")
        eq((c.get("i/1").etag, c.get("i/2").etag), ('"1"', '"1"'), "applied once")
        # The fence moved on: the replay still tells what happened then.
        expect_status(c.put_fence("i/l", 8), 200, "fence moves on")
        eq(c.transaction(ops, headers={"Idempotency-Key": "tx-1"}).body, first.body,
           "replay after the fence moved")
        other = [put_op("i/1", 9, "changed")]
        expect_error(c.transaction(other, headers={"Idempotency-Key": "tx-1"}), 422,
                     "idempotency_key_reused", "the key with other ops")
        eq(c.get("i/1").body, b"one", "nothing written by the reused key")
        # A refused transaction records nothing: the same key applies once it can.
        stale = [put_op("i/3", 5, "three"), {"op": "check", "lock": "i/l", "token": 6}]
        expect_txn_error(c.transaction(stale, headers={"Idempotency-Key": "tx-2"}), 409,
                         "stale_token", 1, "refused keyed transaction")
        ok = [put_op("i/3", 8, "three"), {"op": "check", "lock": "i/l", "token": 8}]
        r = c.transaction(ok, headers={"Idempotency-Key": "tx-2"})
        expect_status(r, 200, "the key after a refusal")
        check(r.header("Idempotent-Replayed") is None, "applied, not replayed")
        eq(c.get("i/3").body, b"three", "i/3 written")


def test_operation_op_on_the_file_store_is_refused():
    st = fk.file_store()
    p = start(st)
    with p.client() as c:
        ops = [put_op("o/1", 1, "x"), {"op": "operation", "name": "credit", "params": [1],
                                        "lock": "o/l", "token": 1}]
        body = expect_txn_error(c.transaction(ops), 400, "invalid_request", 1, "operation op")
        check("postgres" in body["message"].lower(), "the 400 says why: %r" % body["message"])
        eq(c.get("o/1").status, 404, "nothing written")


# ---------------------------------------------------------------------------
# 2. Crashes in the middle
# ---------------------------------------------------------------------------

# The points a transaction's commit passes in the file store (docs/file-store.md,
# "Transactions"), and whether its writes survive a kill -9 there.
FILE_TXN_POINTS = [("before_body_fsync", False), ("after_body_fsync", False),
                   ("txn_decided", False), ("before_index_commit", False),
                   ("after_index_commit", True), ("after_rename", True), ("before_reply", True)]

CRASH_KEYS = ["c/old1", "c/old2", "c/gone", "c/new1", "c/new2"]
CRASH_LOCKS = ["c/old1", "c/old2", "c/gone", "c/new1", "c/new2", "c/job"]


def crash_txn_ops(big):
    # Two overwrites, a delete, two creates (one body above the size that is journaled
    # in the redo row, so both kinds of staged body are covered) and a fence advance.
    return [put_op("c/old1", 7, "old1 v2"),
            put_op("c/old2", 7, "x" * (96 * 1024) if big else "old2 v2"),
            {"op": "delete", "key": "c/gone", "token": 7},
            put_op("c/new1", 7, "new1"),
            put_op("c/new2", 7, "y" * (64 * 1024)),
            {"op": "fence", "lock": "c/job", "token": 7}]


def test_file_kill9_at_each_commit_point():
    import test_robust_failpoints as rf  # noqa: E402 - its probe tells failpoints are built in
    if not rf.probe_failpoints():
        fk.missing("a binary built with -DFK_FAILPOINTS=ON")
    for point, survives in FILE_TXN_POINTS:
        for big in (False, True):
            st = fk.file_store()
            p = start(st)
            with p.client() as c:
                for k in ("c/old1", "c/old2", "c/gone"):
                    expect_status(c.put(k, k.encode(), token=2), 201, "seed " + k)
                expect_status(c.put_fence("c/job", 2), 200, "seed c/job")
                before = state(c, CRASH_KEYS, CRASH_LOCKS)
            p.stop()
            p = st.proxy(env={"FK_FAILPOINT": point})
            p.start()
            p.wait_ready()
            try:
                r = p.transaction(crash_txn_ops(big))
                fk.fail("%s: answered %d %r instead of dying" % (point, r.status, r.body[:200]))
            except (ConnectionError, OSError, Exception) as e:  # noqa: BLE001
                if isinstance(e, fk.CheckFailed):
                    raise
            rc = p.wait(10)
            eq(rc, -9, "%s: the process died at the failpoint (rc)" % point)
            p = start(st)
            with p.client() as c:
                after = state(c, CRASH_KEYS, CRASH_LOCKS)
                if not survives:
                    eq(after, before, "%s (big %s): nothing of the transaction" % (point, big))
                else:
                    eq(c.get("c/old1").body, b"old1 v2", "%s: c/old1" % point)
                    eq(c.get("c/old1").etag, '"2"', "%s: c/old1's version" % point)
                    eq(c.get("c/old2").body, b"x" * (96 * 1024) if big else b"old2 v2",
                       "%s: c/old2" % point)
                    eq(c.get("c/gone").status, 404, "%s: c/gone deleted" % point)
                    eq(c.get("c/new1").body, b"new1", "%s: c/new1" % point)
                    eq(c.get("c/new2").body, b"y" * (64 * 1024), "%s: c/new2" % point)
                    for lk in CRASH_LOCKS:
                        eq(c.fence(lk).json()["token"], 7, "%s: fence %s" % (point, lk))
                # The store works on after recovery.
                res = results(c.transaction([put_op("c/new1", 8, "again")]), "%s: after" % point)
                eq(res[0]["version"], 2 if survives else 1, "%s: c/new1's next version" % point)
            p.stop()


def nap_ops(s):
    """A Postgres user schema with a `nap` operation (sleeps, returns a marker) and the
    ledger of the ledger example."""
    return {
        "nap": {"sql": "SELECT pg_sleep($1::float8) AS %s_nap" % s.strip('"')},
        "ledger_insert": {"sql": "INSERT INTO %s.ledger (entry, amount) VALUES ($1, $2) "
                                 "RETURNING id, entry, amount" % s},
    }


def user_schema():
    name = "u_" + fk.rand_name(10)
    fk._pg_schemas.append(name)
    s = '"%s"' % name
    fk.psql("CREATE SCHEMA {s}; CREATE TABLE {s}.ledger (id bigserial PRIMARY KEY, "
            "entry text UNIQUE NOT NULL, amount bigint NOT NULL CHECK (amount <> 0));".format(s=s))
    return name, s


def terminate_nappers(marker):
    return int(fk.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE query LIKE '%%%s_nap%%' AND pid <> pg_backend_pid()" % marker).strip() or 0)


def test_pg_backend_killed_mid_transaction():
    store = fk.pg_store()
    if store is None:
        fk.missing("the postgres store")
    name, s = user_schema()
    p = start(store, config={"operations": nap_ops(s)})
    with p.client() as c:
        expect_status(c.put("k/old", b"old", token=1), 201, "seed")
        keys, locks = ["k/old", "k/new"], ["k/old", "k/new", "k/job"]
        before = state(c, keys, locks)
        box = {}

        def run():
            with p.client() as c2:
                box["r"] = c2.transaction([put_op("k/old", 2, "new body"), put_op("k/new", 2, "n"),
                                           {"op": "fence", "lock": "k/job", "token": 2},
                                           {"op": "operation", "name": "nap", "params": [5],
                                            "lock": "k/job", "token": 2}])

        t = threading.Thread(target=run, daemon=True)
        t.start()
        deadline = time.monotonic() + 20
        while terminate_nappers(name) == 0:
            check(t.is_alive(), "answered before its backend was killed: %r" % box)
            check(time.monotonic() < deadline, "the transaction's statement never showed up")
            time.sleep(0.05)
        t.join(30)
        check("r" in box, "no reply after the backend was killed")
        r = box["r"]
        check(r.status in (503, 504), "killed mid-transaction: %d %r" % (r.status, r.body[:200]))
        deadline = time.monotonic() + 30
        while True:  # the pool reconnects; reads may get 503 meanwhile
            try:
                after = state(c, keys, locks)
                if all(v is None or not isinstance(v, tuple) or v[0] != 503 for v in after.values()):
                    break
            except Exception:  # noqa: BLE001
                pass
            check(time.monotonic() < deadline, "the store did not come back")
            time.sleep(0.2)
        eq(after, before, "nothing of the killed transaction")

    # Kills at random moments of a loop of transactions: each one all or nothing.
    outcomes = []
    stop = threading.Event()

    def killer():
        while not stop.is_set():
            time.sleep(RNG.uniform(0.05, 0.4))
            terminate_nappers(name)

    kt = threading.Thread(target=killer, daemon=True)
    kt.start()
    try:
        with p.client() as c:
            for i in range(25):
                ops = [put_op("loop/a%d" % i, 3, "a%d" % i), put_op("loop/b%d" % i, 3, "b%d" % i),
                       {"op": "operation", "name": "nap", "params": [RNG.uniform(0.05, 0.3)],
                        "lock": "loop/l%d" % i, "token": 3}]
                try:
                    r = c.transaction(ops)
                    outcomes.append((i, r.status))
                except Exception as e:  # noqa: BLE001
                    fk.fail("transaction %d: no HTTP answer: %r" % (i, e))
    finally:
        stop.set()
        kt.join(5)
    for i, status in outcomes:
        check(status in (200, 503, 504), "transaction %d: %d" % (i, status))
    deadline = time.monotonic() + 30
    with p.client() as c:
        for i, status in outcomes:
            while True:
                a, b = c.get("loop/a%d" % i), c.get("loop/b%d" % i)
                if 503 not in (a.status, b.status):
                    break
                check(time.monotonic() < deadline, "the store did not come back")
                time.sleep(0.2)
            check((a.status, b.status) in ((200, 200), (404, 404)),
                  "transaction %d (answered %d): a %d, b %d: not all or nothing"
                  % (i, status, a.status, b.status))
            if status == 200:
                eq((a.status, b.status), (200, 200), "transaction %d answered 200" % i)
            if status == 503:
                eq((a.status, b.status), (404, 404), "transaction %d answered 503" % i)
    print("  outcomes: %s" % {s_: sum(1 for _, x in outcomes if x == s_) for s_ in (200, 503, 504)})
    check(any(x != 200 for _, x in outcomes), "no kill hit a transaction: nothing was tested")


# ---------------------------------------------------------------------------
# 3. Concurrent transactions with a history checker
# ---------------------------------------------------------------------------

N_KEYS, N_LOCKS, N_CLIENTS = 20, 8, 8


def key_lock(i):
    return "h/lock%d" % (i % N_LOCKS)


def test_concurrent_transactions_history(store):
    p = start(store)
    keys = ["h/k%02d" % i for i in range(N_KEYS)]
    lock_of = {k: key_lock(i) for i, k in enumerate(keys)}
    locks = sorted(set(lock_of.values()))
    token_counter = [0]
    counter_mu = threading.Lock()
    txns = {}  # id → {"puts": [keys], "locks": {lock: token}, "advances": set, "status", "versions"}
    txns_mu = threading.Lock()
    errors = []
    seen = []  # (txid, key, seen version): a reader saw key at that version after txid was seen
    fence_seen = {lk: [] for lk in locks}
    stop = threading.Event()

    def next_token():
        with counter_mu:
            token_counter[0] += 1
            return token_counter[0]

    def writer(wid):
        rng = random.Random(RNG.random())
        n = 0
        with p.client() as c:
            while not stop.is_set():
                n += 1
                txid = "w%d-%d" % (wid, n)
                picked = rng.sample(keys, rng.randint(1, 4))
                token = next_token()
                ops = [put_op(k, token, "%s|%s" % (txid, k), lock=lock_of[k]) for k in picked]
                advances = {lock_of[k] for k in picked}
                named = set(advances)
                if rng.random() < 0.3:
                    lk = rng.choice(locks)
                    ops.append({"op": "fence", "lock": lk, "token": token})
                    advances.add(lk)
                    named.add(lk)
                if rng.random() < 0.3:
                    lk = rng.choice(locks)
                    ops.append({"op": "check", "lock": lk, "token": token})
                    named.add(lk)
                rng.shuffle(ops)
                with txns_mu:
                    txns[txid] = {"puts": picked, "advances": advances, "token": token,
                                  "status": None, "versions": {}}
                try:
                    r = c.transaction(ops)
                except Exception as e:  # noqa: BLE001
                    errors.append("%s: no answer: %r" % (txid, e))
                    continue
                with txns_mu:
                    txns[txid]["status"] = r.status
                if r.status == 200:
                    versions = {x["key"]: x["version"] for x in r.json()["results"] if x["op"] == "put"}
                    with txns_mu:
                        txns[txid]["versions"] = versions
                elif r.status != 409:
                    errors.append("%s: %d %r" % (txid, r.status, r.body[:200]))

    def reader():
        rng = random.Random(RNG.random())
        last = {lk: 0 for lk in locks}
        with p.client() as c:
            while not stop.is_set():
                k = rng.choice(keys)
                r = c.get(k)
                if r.status == 404:
                    continue
                if r.status != 200:
                    errors.append("GET %s: %d" % (k, r.status))
                    continue
                txid, _, key = r.body.decode().partition("|")
                eq(key, k, "a body names its key")
                v = int(r.etag.strip('"'))
                seen.append((txid, k, v))
                with txns_mu:
                    others = [o for o in txns[txid]["puts"] if o != k]
                # Every other key the transaction wrote must now be at its version or later.
                for o in others:
                    r2 = c.get(o)
                    if r2.status != 200:
                        errors.append("%s seen on %s, but %s is %d" % (txid, k, o, r2.status))
                        continue
                    seen.append((txid, o, int(r2.etag.strip('"'))))
                lk = rng.choice(locks)
                fr = c.fence(lk)
                if fr.status == 200:
                    t = fr.json()["token"]
                    if t < last[lk]:
                        errors.append("fence %s went down: %d after %d" % (lk, t, last[lk]))
                    last[lk] = t
                    fence_seen[lk].append(t)

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(N_CLIENTS)]
    threads += [threading.Thread(target=reader, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(LOOP_S)
    stop.set()
    for t in threads:
        t.join(60)
        check(not t.is_alive(), "a client is stuck (deadlock?)")
    check(not errors, "errors under load (%d), first: %s" % (len(errors), errors[:5]))

    committed = {t: x for t, x in txns.items() if x["status"] == 200}
    refused = {t: x for t, x in txns.items() if x["status"] == 409}
    check(len(committed) > 50, "only %d transactions committed" % len(committed))
    check(len(refused) > 0, "no transaction was refused: the stale path was not exercised")
    # Reads: a body seen is a committed transaction's; the version a reader saw for a key
    # of a transaction it had already seen is at least that transaction's version there.
    for txid, k, v in seen:
        tx = txns[txid]
        check(tx["status"] != 409, "%s was refused, but %s showed %s" % (txid, k, txid))
    for txid, k, v in seen:
        tx = committed.get(txid)
        if tx is not None and k in tx["versions"]:
            check(v >= tx["versions"][k], "%s: %s seen at version %d, below the transaction's %d"
                  % (txid, k, v, tx["versions"][k]))
    # The end: each key's version counts the committed transactions that wrote it, and its
    # body is the one with the highest version; each fence is the highest committed token.
    with p.client() as c:
        for k in keys:
            writes = [(x["versions"][k], t) for t, x in committed.items() if k in x["puts"]]
            r = c.get(k)
            if not writes:
                eq(r.status, 404, "%s never committed" % k)
                continue
            eq(sorted(v for v, _ in writes), list(range(1, len(writes) + 1)), "%s's versions" % k)
            eq(r.etag, '"%d"' % len(writes), "%s's final version" % k)
            eq(r.body.decode(), "%s|%s" % (max(writes)[1], k), "%s's final body" % k)
        for lk in locks:
            tokens = [x["token"] for x in committed.values() if lk in x["advances"]]
            if tokens:
                eq(c.fence(lk).json()["token"], max(tokens), "fence of %s" % lk)
    print("  %d committed, %d refused, %d reads checked" % (len(committed), len(refused), len(seen)))


# ---------------------------------------------------------------------------
# 4. A zombie's transaction
# ---------------------------------------------------------------------------

def test_zombie_transaction_refused(store):
    p = start(store)
    with p.client() as zombie, p.client() as holder:
        # The zombie held job/report with token 5 and wrote with it.
        ops5 = [put_op("report/day1", 5, "zombie draft", lock="job/report"),
                put_op("index/day1", 5, "zombie index", lock="job/index")]
        results(zombie.transaction(ops5), "the zombie while it held the lock")
        # It pauses; the lock expires; the new holder gets token 6 and commits.
        ops6 = [put_op("report/day1", 6, "final report", lock="job/report"),
                {"op": "fence", "lock": "job/index", "token": 6},
                put_op("index/day1", 6, "final index", lock="job/index")]
        results(holder.transaction(ops6), "the new holder")
        # The zombie wakes up and finishes its work, still with token 5: refused whole.
        late = [{"op": "check", "lock": "job/report", "token": 5},
                put_op("report/day1-summary", 5, "zombie summary", lock="job/summary"),
                put_op("report/day1", 5, "zombie report", lock="job/report")]
        body = expect_txn_error(zombie.transaction(late), 409, "stale_token", 0, "the zombie")
        eq(body["current_token"], 6, "current_token")
        eq(holder.get("report/day1").body, b"final report", "the holder's report stays")
        eq(holder.get("index/day1").body, b"final index", "the holder's index stays")
        eq(holder.get("report/day1-summary").status, 404, "the zombie's other write was not applied")
        eq(holder.fence("job/summary").status, 404, "nor its fence advance on the other lock")


def test_pg_transactions_share_commits_with_puts():
    """Postgres: a transaction without operations or Idempotency-Key rides in a
    group-commit batch with single PUTs (docs/postgres.md, "Transactions share group
    commit"): rows written in one database transaction share xmin. 4 clients PUT new keys
    while one sends 3-put transactions; some transaction must share a commit with PUTs,
    each transaction's rows one commit, and a zombie's transaction sent among them is
    refused whole."""
    store = fk.pg_store()
    if store is None:
        fk.missing("the postgres store")
    p = start(store)
    stop = threading.Event()
    puts, txns, errors = [], [], []

    def putter(w):
        with p.client() as c:
            n = 0
            while not stop.is_set():
                n += 1
                r = c.put("put/%d/%d" % (w, n), b"x", token=1)
                (puts if r.status == 201 else errors).append((r.status, "put"))

    def transactor():
        with p.client() as c:
            expect_status(c.put_fence("zlock", 10), 200, "the new holder's fence")
            n = 0
            while not stop.is_set() and n < 400:
                n += 1
                ops = [put_op("tx/%d/%s" % (n, part), 1, part) for part in ("a", "b", "c")]
                if n % 5 == 0:   # a zombie's: its lock's fence is 10
                    ops.append({"op": "fence", "lock": "zlock", "token": 9})
                    expect_txn_error(c.transaction(ops), 409, "stale_token", 3, "zombie %d" % n)
                    continue
                r = c.transaction(ops)
                (txns if r.status == 200 else errors).append((r.status, n))

    threads = [threading.Thread(target=putter, args=(w,)) for w in range(4)]
    threads.append(threading.Thread(target=transactor))
    for t in threads:
        t.start()
    time.sleep(3)
    stop.set()
    for t in threads:
        t.join()
    eq(errors, [], "every PUT and every valid transaction applied")
    check(len(txns) > 0 and len(puts) > 0, "load ran: %d PUTs, %d transactions" % (len(puts), len(txns)))
    rows = fk.psql("SELECT split_part(key, '/', 2), count(*), count(DISTINCT xmin::text), "
                   "min(xmin::text) FROM %s.resources WHERE key LIKE 'tx/%%' GROUP BY 1"
                   % store.schema).split()
    by_txn = {}
    for line in rows:
        n, count, xmins, xmin = line.split("|")
        by_txn[int(n)] = xmin
        eq((count, xmins), ("3", "1"), "transaction %s: three rows, one commit" % n)
    eq(sorted(by_txn), sorted(n for _, n in txns), "exactly the valid transactions' rows")
    put_xmins = set(fk.psql("SELECT DISTINCT xmin::text FROM %s.resources WHERE key LIKE 'put/%%'"
                            % store.schema).split())
    shared = sum(1 for x in by_txn.values() if x in put_xmins)
    print("  %d PUTs, %d transactions, %d of them committed with PUTs"
          % (len(puts), len(by_txn), shared))
    check(shared > 0, "no transaction shared a commit with a PUT")
    eq(fk.psql("SELECT token FROM %s.fences WHERE lock = 'zlock'" % store.schema).strip(), "10",
       "the zombie's fence op never applied")
    eq(fk.psql("SELECT count(*) FROM %s.fences WHERE lock LIKE 'tx/%%' AND lock NOT IN "
               "(SELECT key FROM %s.resources)" % (store.schema, store.schema)).strip(), "0",
       "no fence of a refused transaction's puts")


# ---------------------------------------------------------------------------
# 5. The ledger example
# ---------------------------------------------------------------------------

def test_pg_ledger_and_receipt_commit_together():
    store = fk.pg_store()
    if store is None:
        fk.missing("the postgres store")
    name, s = user_schema()
    p = start(store, config={"operations": nap_ops(s)})

    def ledger(entry):
        return fk.psql("SELECT amount FROM %s.ledger WHERE entry = '%s'" % (s, entry)).strip()

    with p.client() as c:
        def pay(entry, amount, token=7, **more):
            ops = [{"op": "operation", "name": "ledger_insert", "params": [entry, amount]},
                   put_op("receipts/" + entry, None, json.dumps({"entry": entry, "amount": amount}),
                          lock="payments", content_type="application/json", **more)]
            del ops[1]["token"]
            return c.transaction(ops, token=token, lock="payments")

        res = results(pay("e1", 100), "a payment")
        eq(res[0]["rows"][0]["entry"], "e1", "the ledger row returned")
        eq((res[0]["rows_affected"], res[1]["version"]), (1, 1), "rows_affected and receipt version")
        eq(ledger("e1"), "100", "ledger row e1")
        r = c.get("receipts/e1")
        eq((r.status, r.header("Content-Type")), (200, "application/json"), "receipt e1")
        # The statement fails (the CHECK refuses amount 0): no receipt either.
        body = expect_txn_error(pay("e2", 0), 422, "operation_failed", 0, "amount 0")
        eq(body.get("sqlstate"), "23514", "sqlstate")
        eq((ledger("e2"), c.get("receipts/e2").status), ("", 404), "nothing of e2")
        # A stale token: the statement never runs.
        expect_status(c.put_fence("payments", 9), 200, "a new holder")
        expect_txn_error(pay("e3", 5), 409, "stale_token", 0, "stale payment")
        eq((ledger("e3"), c.get("receipts/e3").status), ("", 404), "nothing of e3")
        # A failed precondition on the receipt: the ledger row is not inserted.
        expect_txn_error(pay("e1", 5, token=9, if_none_match="*"), 412, "precondition_failed", 1,
                         "receipt exists")
        eq(fk.psql("SELECT count(*) FROM %s.ledger" % s).strip(), "1", "still one ledger row")
        # The duplicate entry (unique) fails the statement: the receipt is not overwritten.
        expect_txn_error(pay("e1", 5, token=9), 422, "operation_failed", 0, "duplicate entry")
        eq(c.get("receipts/e1").etag, '"1"', "receipt e1 unchanged")


def test_unauthenticated_transaction_turned_away_at_the_head(store):
    """Without credentials a transaction gets 401 from its request head: the proxy does not
    wait for the body it announced, and nothing is written."""
    token = "txn-" + fk.rand_name(24)
    p = start(store, env={"FENCEKEEPER_AUTH_TOKEN": token})
    auth = {"Authorization": "Bearer " + token}
    body = json.dumps({"ops": [put_op("guarded", 1, "x", lock="G")]}).encode()
    with fk.RawConn(p.host, p.port) as conn:
        # A head announcing 1 MB, and no body at all: the answer cannot wait for it.
        conn.send_raw(b"POST /v1/transactions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
        r = conn.read_response(timeout=5)
        eq(r.status, 401, "no credentials")
        eq(r.json().get("error"), "unauthorized", "error code")
    for headers in ({}, {"Authorization": "Bearer wrong-" + token}):
        r = p.request("POST", "/v1/transactions", headers=dict(headers, **{
            "Content-Type": "application/json"}), body=body)
        eq((r.status, r.json().get("error")), (401, "unauthorized"), "refused: %r" % headers)
    eq(p.request("GET", "/v1/resources/guarded", headers=auth).status, 404, "nothing written")
    eq(p.request("GET", "/v1/fences/G", headers=auth).status, 404, "no fence")
    r = p.request("POST", "/v1/transactions",
                  headers=dict(auth, **{"Content-Type": "application/json"}), body=body)
    eq(r.status, 200, "with credentials: %r" % r)
    p.stop()


def test_report_example_from_the_docs(store):
    """docs/api.md's first transaction example, run as written on a fresh store."""
    curl = fk.require_tool("curl")
    blocks = fk.doc_block("docs/api.md", "txn-example")
    eq([lang for lang, _ in blocks], ["console"], "the example's blocks")
    p = start(store)
    try:
        fk.run_console_block(p, blocks[0][1], curl)
        eq(p.get("reports/2026-12-02.csv").status, 404, "the zombie's report")
        eq(p.get("reports/index.json").etag, '"2"', "the index after the example")
    finally:
        p.stop()


def test_pg_ledger_example_from_the_docs():
    """docs/api.md's ledger example, run as written: its table in a fresh database, its
    config, its curl commands (only the address changed) and their shown outputs."""
    url = fk.require_service("postgres")
    curl = fk.require_tool("curl")
    blocks = fk.doc_block("docs/api.md", "ledger-example")
    eq([lang for lang, _ in blocks], ["sql", "json", "console", "console"], "the example's blocks")
    import urllib.parse
    db = "fk_ledger_" + fk.rand_name(8)
    fk.psql("CREATE DATABASE %s" % db)
    try:
        parts = urllib.parse.urlsplit(url)
        db_url = urllib.parse.urlunsplit(parts._replace(path="/" + db))
        fk.psql(blocks[0][1], url=db_url)
        store = fk.Store("postgres", db_url, config={"postgres": {"schema": "fencekeeper"}})
        p = start(store, config=json.loads(blocks[1][1]))
        try:
            for _, text in blocks[2:]:
                fk.run_console_block(p, text, curl)
            rows = fk.psql("SELECT account, amount, payment FROM ledger ORDER BY id", url=db_url)
            eq(rows.split(), ["7|-25.00|pay-8812"], "the ledger after the example")
            eq(p.get("receipts/pay-8813.json").status, 404, "the zombie's receipt")
        finally:
            p.stop()
    finally:
        fk.psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)


if __name__ == "__main__":
    fk.main(globals())
