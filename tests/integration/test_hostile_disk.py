#!/usr/bin/env python3
"""Refused writes leave nothing on disk (issue 45, item 1), against the real binary on
the file store: a transaction of 99 new keys of 500 segments each refused on its last op,
single deep PUTs refused with 412 or a stale 409, every other kind of refusal (floor,
lock mismatch, precondition, bad op, client gone), the sweep after a kill -9 in the
middle of staging such a request, and an unrelated 1-byte PUT served while two such
requests are staged. docs/file-store.md ("Directories of refused writes") is the
contract tested here.

    FENCEKEEPER_BIN=build/fencekeeper python3 tests/integration/test_hostile_disk.py [FILTER]
"""

import json
import os
import socket
import threading
import time

import fk
from fk import check, eq, expect_error, expect_status

SEGMENTS = 500   # segments per key: 499 directories each
TXN_KEYS = 99    # new keys per transaction; op 100 is the one refused


def deep_key(prefix, i):
    # 500 segments, 999 bytes: every directory below the first is new for each key.
    return "%s%02d/" % (prefix, i) + "a/" * (SEGMENTS - 2) + "k"


def entries(root):
    """Every directory and file under ROOT/objects, as relative paths."""
    base = os.path.join(root, "objects")
    out = set()
    for d, dirs, files in os.walk(base):
        rel = os.path.relpath(d, base)
        for n in dirs + files:
            out.add(n if rel == "." else rel + "/" + n)
    return out


def assert_nothing_new(store, before, what):
    after = entries(store.root)
    new = sorted(after - before)
    print("  %s: %d entries before, %d after, %d new" % (what, len(before), len(after), len(new)))
    check(not new, "%s left %d new entries under objects/, e.g. %s" % (what, len(new), new[:3]))


def attack_ops(prefix, last):
    ops = [{"op": "put", "key": deep_key(prefix, i), "body": "x"} for i in range(TXN_KEYS)]
    return ops + [last]


def transact(p, ops, **kw):
    # The attack takes tens of seconds on a busy 2-core machine (49,401 mkdirs, each
    # fsynced in its parent): no timing is asserted on it.
    with p.client(timeout=900) as c:
        return c.transaction(ops, **kw)


def prime(p):
    """Fences and keys the refusals below run into: lock guard at 10, key owned/k under
    lock owner, a floor over floored/."""
    with p.client() as c:
        expect_status(c.put_fence("guard", 10), 200)
        expect_status(c.put("owned/k", b"v", token=1, lock="owner"), 201)
        expect_status(c.request("PUT", "/v1/floors?prefix=floored%2F",
                                headers={"Fencing-Token": "50"}), 200)


def start(store, config=None):
    p = store.start(config=config)
    p.wait_ready()
    prime(p)
    return p


def test_refused_transaction_leaves_no_directory():
    store = fk.file_store()
    p = start(store)
    before = entries(store.root)
    cases = [
        ("a stale check", {"op": "check", "lock": "guard", "token": 1},
         409, "stale_token"),
        ("a floor", {"op": "fence", "lock": "floored/x", "token": 2}, 409, "stale_token"),
        ("a lock mismatch", {"op": "put", "key": "owned/k", "lock": "thief", "token": 9,
                             "body": "y"}, 409, "lock_mismatch"),
        ("a precondition", {"op": "check_version", "key": "owned/k", "version": 7},
         412, "precondition_failed"),
    ]
    for i, (what, last, status, code) in enumerate(cases):
        t0 = time.monotonic()
        r = transact(p, attack_ops("t%d-" % i, last), token=5, lock="atk")
        took = time.monotonic() - t0
        print("  %s: %d in %.1f s" % (what, r.status, took))
        expect_error(r, status, code, what)
        eq(r.json().get("op_index"), TXN_KEYS, what + ": the last op is named")
        assert_nothing_new(store, before, "a transaction refused on " + what)
    # Refused before staging: nothing may be created either.
    for what, last in [("an operation op", {"op": "operation", "name": "nope", "params": [],
                                            "lock": "atk", "token": 5}),
                       ("an invalid key", {"op": "put", "key": "bad//key", "body": "x"})]:
        r = transact(p, attack_ops("b-", last), token=5, lock="atk")
        expect_status(r, 400, what)
        assert_nothing_new(store, before, "a transaction with " + what)
    # What survives a restart is what was there before.
    p.restart()
    assert_nothing_new(store, before, "the refused transactions, after a restart")
    p.stop()


def test_refused_single_put_leaves_no_directory():
    store = fk.file_store()
    p = start(store)
    before = entries(store.root)
    with p.client() as c:
        for what, kw, status, code in [
            ("412", {"token": 5, "headers": {"If-Match": '"1"'}}, 412, "precondition_failed"),
            ("stale 409", {"token": 1, "lock": "guard"}, 409, "stale_token"),
            ("floor 409", {"token": 1, "lock": "floored/l"}, 409, "stale_token"),
        ]:
            for i in range(3):
                expect_error(c.put(deep_key("s-" + what[:3], i), b"x", **kw), status, code, what)
            assert_nothing_new(store, before, "deep PUTs refused with " + what)
    p.restart()
    assert_nothing_new(store, before, "the refused PUTs, after a restart")
    p.stop()


def test_client_gone_leaves_no_directory():
    store = fk.file_store()
    p = start(store)
    before = entries(store.root)
    body = json.dumps({"ops": attack_ops("g-", {"op": "check", "lock": "guard", "token": 1})})
    body = body.encode()
    # The body half sent, then the connection closed: nothing reaches the store.
    raw = p.raw()
    raw.send_raw(("POST /v1/transactions HTTP/1.1\r\nHost: fk\r\nContent-Type: application/json"
                  "\r\nFencing-Token: 5\r\nFencing-Lock: atk\r\nContent-Length: %d\r\n\r\n"
                  % len(body)).encode() + body[: len(body) // 2])
    time.sleep(0.2)
    raw.close()
    # The whole body sent, then the connection closed before the answer: the refusal is
    # decided all the same, and cleans up all the same.
    raw = p.raw()
    raw.send_raw(("POST /v1/transactions HTTP/1.1\r\nHost: fk\r\nContent-Type: application/json"
                  "\r\nFencing-Token: 5\r\nFencing-Lock: atk\r\nContent-Length: %d\r\n\r\n"
                  % len(body)).encode() + body)
    raw.close()
    # It is decided once a request behind it on the same path is: a txn is one item.
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        expect_error(p.transaction([{"op": "check", "lock": "guard", "token": 1}]), 409,
                     "stale_token")
        if not (entries(store.root) - before):
            break
        time.sleep(0.5)
    assert_nothing_new(store, before, "requests whose clients went away")
    p.stop()


def test_sweep_after_kill_during_staging():
    store = fk.file_store()
    p = start(store)
    before = entries(store.root)
    objects = os.path.join(store.root, "objects")
    top_before = len(os.listdir(objects))

    def attack():
        try:
            transact(p, attack_ops("k-", {"op": "check", "lock": "guard", "token": 1}),
                     token=5, lock="atk")
        except (OSError, fk.ConnectionClosed, Exception):
            pass  # killed under it

    t = threading.Thread(target=attack, daemon=True)
    t.start()
    # Kill it while its directories are being made (a few keys in), or, if staging is
    # quicker than this poll, as soon as any appeared.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(os.listdir(objects)) < top_before + 3:
        time.sleep(0.005)
    p.kill()
    t.join(10)
    left = len(entries(store.root) - before)
    print("  killed with %d new entries on disk" % left)
    p.start()
    p.wait_ready()
    p.wait_log(lambda o: o.get("msg") == "file store swept what an unclean stop left behind",
               timeout=120, this_run=True)
    assert_nothing_new(store, before, "the sweep after a kill -9 in staging")
    p.stop()


def test_unrelated_put_is_served_during_the_attack():
    store = fk.file_store()
    p = start(store)
    before = entries(store.root)
    done = []

    def attack(n):
        r = transact(p, attack_ops("l%d-" % n, {"op": "check", "lock": "guard", "token": 1}),
                     token=5, lock="atk")
        done.append(r.status)

    threads = [threading.Thread(target=attack, args=(n,), daemon=True) for n in range(2)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(0.3)
    worst = 0.0
    puts = 0
    with p.client(timeout=60) as c:
        while any(t.is_alive() for t in threads) or puts == 0:
            s = time.monotonic()
            expect_status(c.put("plain/%d" % puts, b"x", token=1), 201)
            worst = max(worst, time.monotonic() - s)
            puts += 1
            time.sleep(0.05)
    for t in threads:
        t.join(300)
    print("  2 attacks took %.1f s; %d unrelated PUTs, slowest %.3f s"
          % (time.monotonic() - t0, puts, worst))
    eq(done, [409, 409], "both attacks refused")
    check(worst < 5.0, "an unrelated 1-byte PUT took %.1f s during the attack" % worst)
    p.stop()
    after = entries(store.root) - before
    eq(len(after), puts + 1, "only the unrelated PUTs' bodies (and plain~) are new")


if __name__ == "__main__":
    fk.main(globals())
