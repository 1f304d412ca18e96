#!/usr/bin/env python3
"""A key's first creation racing its delete by a newer holder (issue 44), through real
processes: two fencekeepers on one Postgres database, and one on the file store.

Each round takes a fresh key. One client creates it with token 1 while another, at the
same moment and through the other proxy, deletes it with token 2. Whatever the
interleaving, the key must end absent: either the delete came first (its fence 2 refuses
the create, 409) or the create came first and the delete removed it. The delete's token
is the newest, so it is never refused. A round fails when the delete is not 204, the
create is neither 201 nor 409, or a GET through either proxy finds the key afterwards
(the newer holder's acknowledged delete lost to the older holder's create: what main at
bfe3a0a did in 38 of 100 rounds).

The delete is sent three ways, one per statement that can meet the race: a plain DELETE
(the single-row statement), a DELETE with an Idempotency-Key (the group-commit batch
statement), and a transaction with one delete op (the transaction statement); and the
create as a plain PUT or as a transaction's put op.

Rounds per variant: FK_RACE_ROUNDS (default 200).

    FENCEKEEPER_BIN=$PWD/build/fencekeeper FK_TEST_PG_URL=... python3 tests/integration/test_create_delete_race.py [FILTER]
"""

import os
import threading
import uuid

import fk
from fk import check

ROUNDS = int(os.environ.get("FK_RACE_ROUNDS") or 200)


def _create(c, key, how):
    if how == "put":
        return c.put(key, b"created by the older holder", token=1)
    return c.transaction([{"op": "put", "key": key, "token": 1,
                           "body": "created by the older holder"}])


def _delete(c, key, how):
    if how == "delete":
        return c.delete(key, token=2)
    if how == "keyed":
        return c.delete(key, token=2, headers={"Idempotency-Key": str(uuid.uuid4())})
    return c.transaction([{"op": "delete", "key": key, "token": 2}])


def race(proxy_a, proxy_b, create_how, delete_how, rounds=ROUNDS):
    """Runs the rounds; returns a list of failure strings (empty: every round held)."""
    prefix = "race/" + fk.rand_name(8) + "/"
    ca, cb = proxy_a.client(timeout=20), proxy_b.client(timeout=20)
    barrier = threading.Barrier(2)
    answers = {}

    def creator(key):
        barrier.wait()
        answers["create"] = _create(ca, key, create_how)

    def deleter(key):
        barrier.wait()
        answers["delete"] = _delete(cb, key, delete_how)

    failures = []
    outcomes = {}
    for i in range(rounds):
        key = prefix + str(i)
        answers.clear()
        ts = [threading.Thread(target=creator, args=(key,)),
              threading.Thread(target=deleter, args=(key,))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        cr, dl = answers["create"], answers["delete"]
        outcomes[(cr.status, dl.status)] = outcomes.get((cr.status, dl.status), 0) + 1
        seen = [ca.get(key).status, cb.get(key).status]
        if dl.status not in (200, 204) or cr.status not in (200, 201, 409) or seen != [404, 404]:
            failures.append("round %d key %s: create %d %s, delete %d %s, then GET %s"
                            % (i, key, cr.status, cr.body[:100], dl.status, dl.body[:100], seen))
    ca.close()
    cb.close()
    print("  %s vs %s: %d rounds, (create, delete) statuses %s"
          % (create_how, delete_how, rounds, sorted(outcomes.items())))
    return failures


VARIANTS = [("put", "delete"), ("put", "keyed"), ("put", "txn"), ("txn", "delete")]


def _run_all(a, b):
    failures = []
    for create_how, delete_how in VARIANTS:
        failures += race(a, b, create_how, delete_how)
    check(not failures, "%d rounds lost the delete:\n  %s" % (len(failures), "\n  ".join(failures[:10])))


def test_two_proxies_on_postgres():
    st = fk.pg_store()
    if st is None:
        fk.missing("postgres (FK_TEST_PG_URL)")
        return
    a = st.start()
    b = st.start()
    _run_all(a, b)


def test_one_proxy(store):
    # One process: the file store's single committer, or one Postgres proxy's batcher
    # (the race then meets itself on one connection pool).
    p = store.start()
    _run_all(p, p)


if __name__ == "__main__":
    fk.main(globals())
