"""Unit tests of lincheck.py, the linearizability checker, on hand-made histories.

Needs no fencekeeper binary. Each history is small enough to decide by hand, and each
test would fail if the checker got that case wrong: the accepted ones are histories a
checker that is too strict (ignores concurrency, unknown ops, ties, the bounded mode)
would refuse, the rejected ones are bugs a checker that is too lax would let through,
and most come with the near-miss twin the other way. Then: agreement with a
brute-force search (every order of every subset of unknown ops) on thousands of tiny
random histories, half of them corrupted; generated linearizable histories of 20,000
ops over 4 locks and 8 clients, checked as a benchmark (the time is printed, only
correctness asserted), and one with a torn read; the time budget;
shortest_failing_prefix() on a lost delete buried in noise; save()/load().

Times are in seconds; histories start at 100.0 to show the report's relative times.
"""

import dataclasses
import itertools
import os
import random
import time

import fk
import lincheck
from lincheck import Op

L = "L"
_ids = itertools.count(1)


def _op(kind, p, call, ret, outcome="ok", lock=L, **kw):
    return Op(id=next(_ids), process=p, kind=kind, lock=lock, call=100.0 + call,
              ret=None if ret is None else 100.0 + ret, outcome=outcome, **kw)


def put(p, call, ret, key, token, body, version, created, lock=L):
    return _op("put", p, call, ret, lock=lock, key=key, token=token, body=body,
               version=version, created=created, status=201 if created else 200)


def put_stale(p, call, ret, key, token, body, current, lock=L):
    return _op("put", p, call, ret, "stale", lock=lock, key=key, token=token, body=body,
               current_token=current, status=409)


def put_unknown(p, call, key, token, body, lock=L):
    return _op("put", p, call, None, "unknown", lock=lock, key=key, token=token, body=body,
               status=504)


def delete(p, call, ret, key, token, outcome="ok", current=None, lock=L):
    return _op("delete", p, call, None if outcome == "unknown" else ret, outcome, lock=lock,
               key=key, token=token, current_token=current,
               status={"ok": 204, "stale": 409, "unknown": None}[outcome])


def get(p, call, ret, key, body, version, token, lock=L):
    return _op("get", p, call, ret, lock=lock, key=key, found=True, read_body=body,
               version=version, read_token=token, status=200)


def get_404(p, call, ret, key, lock=L):
    return _op("get", p, call, ret, lock=lock, key=key, found=False, status=404)


def fence(p, call, ret, token, outcome="ok", current=None, lock=L):
    return _op("fence", p, call, ret, outcome, lock=lock, token=token,
               read_token=token if outcome == "ok" else None, current_token=current,
               status=200 if outcome == "ok" else 409)


def read_fence(p, call, ret, token, lock=L):
    return _op("read_fence", p, call, ret, lock=lock, found=token is not None,
               read_token=token, status=200 if token is not None else 404)


def accepts(ops, mode="exact", what="history"):
    r = lincheck.check(ops, current_token=mode)
    fk.check(r.ok and not r.timed_out,
             "%s should be linearizable (%s):\n%s" % (what, mode, r.message))
    return r


def rejects(ops, mode="exact", what="history", lock=L):
    r = lincheck.check(ops, current_token=mode)
    fk.check(not r.ok, "%s should NOT be linearizable (%s), the checker accepted it" % (what, mode))
    fk.eq(r.lock, lock, "failing lock")
    fk.check(repr(lock) in r.message, "the message names lock %r:\n%s" % (lock, r.message))
    return r


# ---------------------------------------------------------------------------
# Accepted
# ---------------------------------------------------------------------------

def test_sequential():
    accepts([
        get_404(1, 0, 1, "k"),
        read_fence(1, 1, 2, None),
        put(1, 2, 3, "k", 1, "A", 1, True),
        get(2, 4, 5, "k", "A", 1, 1),
        put(1, 6, 7, "k", 2, "B", 2, False),
        read_fence(2, 8, 9, 2),
        get(2, 10, 11, "k", "B", 2, 2),
        put(1, 12, 13, "k2", 2, "C", 1, True),
        delete(1, 14, 15, "k", 3),
        get_404(2, 16, 17, "k"),
        get(2, 18, 19, "k2", "C", 1, 2),
        fence(1, 20, 21, 5),
        read_fence(2, 22, 23, 5),
        delete(1, 24, 25, "missing", 5),
        put(1, 26, 27, "k", 5, "D", 3, True),
        get(2, 28, 29, "k", "D", 3, 5),
    ], what="a sequential history")


def test_overlapping_puts_later_token_wins():
    a = put(1, 0, 10, "k", 1, "A", 1, True)
    b = put(2, 1, 9, "k", 2, "B", 2, False)  # called later, answered first
    accepts([a, b, get(3, 11, 12, "k", "B", 2, 2)], what="overlapping puts, token 2 last")
    # The other order cannot be: the token 1 put after the token 2 one would be refused.
    rejects([a, b, get(3, 11, 12, "k", "A", 1, 1)], what="token 1 put last")


def test_concurrent_get_sees_old_or_new():
    p1 = put(1, 0, 1, "k", 1, "A", 1, True)
    p2 = put(1, 10, 20, "k", 2, "B", 2, False)
    old = get(2, 12, 15, "k", "A", 1, 1)
    new = get(3, 13, 16, "k", "B", 2, 2)
    accepts([p1, p2, old], what="a get concurrent with a put sees the old body")
    accepts([p1, p2, new], what="a get concurrent with a put sees the new body")
    accepts([p1, p2, old, new], what="two concurrent gets, old then new")
    # But once a read has seen the new body, a read that starts after it cannot see the old.
    late_old = get(2, 17, 18, "k", "A", 1, 1)
    rejects([p1, p2, new, late_old], what="old body read after the new one was seen")


def test_tie_between_return_and_call_is_concurrent():
    # The put answers at 5.0 and the get is sent at 5.0: the record cannot order them, so
    # the get may have been served just before the put took effect.
    accepts([put(1, 0, 1, "k", 1, "A", 1, True),
             put(1, 2, 5, "k", 2, "B", 2, False),
             get(2, 5, 6, "k", "A", 1, 1)], what="a tie counted as concurrent")


def test_stale_exact_current_token():
    hist = [put(1, 0, 1, "k", 5, "A", 1, True),
            put_stale(2, 2, 3, "k", 3, "Z", 5),
            get(1, 4, 5, "k", "A", 1, 5)]
    accepts(hist, what="409 with current_token = the fence")
    rejects(hist[:1] + [put_stale(2, 2, 3, "k", 6, "Z", 5)],
            what="409 for a token above the fence")


def test_bounded_current_token_below_fence():
    hist = [put(1, 0, 1, "k", 5, "A", 1, True),
            put(1, 2, 3, "k", 9, "B", 2, False),
            put_stale(2, 4, 5, "k", 3, "Z", 5),  # another proxy's cache still says 5
            get(2, 6, 7, "k", "B", 2, 9)]
    accepts(hist, mode="bounded", what="bounded 409: token < current_token < fence")
    rejects(hist, mode="exact", what="the same 409 with one proxy")


def test_unknown_put_seen_applied():
    hist = [put(1, 0, 1, "k", 1, "A", 1, True),
            put_unknown(2, 2, "k", 2, "B"),
            get(3, 20, 21, "k", "B", 2, 2),
            put_stale(3, 22, 23, "k", 1, "C", 2)]
    accepts(hist, what="an unknown put that later reads show applied")
    # Without the unknown put, the body B comes from nowhere.
    rejects([hist[0], hist[2]], what="the same reads without the unknown put")


def test_unknown_put_never_seen():
    accepts([put(1, 0, 1, "k", 1, "A", 1, True),
             put_unknown(2, 2, "k", 2, "B"),
             get(3, 20, 21, "k", "A", 1, 1),
             put(1, 22, 23, "k", 1, "C", 2, False),
             get(3, 24, 25, "k", "C", 2, 1)], what="an unknown put never applied")


def test_unknown_put_applied_after_client_gave_up():
    # The client gave up on it (no answer); it lands between two much later reads.
    accepts([put(1, 0, 1, "k", 1, "A", 1, True),
             put_unknown(2, 2, "k", 2, "B"),
             get(3, 100, 101, "k", "A", 1, 1),
             get(3, 200, 201, "k", "B", 2, 2)], what="an unknown put that lands late")
    # But an unknown op cannot take effect before it was sent.
    rejects([put(1, 0, 1, "k", 1, "A", 1, True),
             get(3, 2, 3, "k", "B", 2, 2),
             put_unknown(2, 4, "k", 2, "B")], what="a read of an unknown put sent after it")


def test_unknown_put_cannot_apply_twice_or_below_fence():
    base = [put(1, 0, 1, "k", 1, "A", 1, True), put_unknown(2, 2, "k", 2, "B")]
    rejects(base + [get(3, 10, 11, "k", "B", 3, 2)], what="an unknown put applied twice")
    rejects([put(1, 0, 1, "k", 5, "A", 1, True), put_unknown(2, 2, "k", 2, "B"),
             get(3, 10, 11, "k", "B", 2, 2)], what="an unknown put with a stale token applied")


def test_delete_then_lower_token_refused():
    accepts([put(1, 0, 1, "k", 1, "A", 1, True),
             delete(1, 2, 3, "k", 2),
             put_stale(2, 4, 5, "k", 1, "B", 2),
             get_404(3, 6, 7, "k"),
             read_fence(3, 8, 9, 2)], what="a delete then a lower-token put refused")


def test_version_continues_across_delete():
    hist = [put(1, 0, 1, "k", 1, "A", 1, True),
            delete(1, 2, 3, "k", 1),
            put(1, 4, 5, "k", 1, "B", 2, True),
            get(2, 6, 7, "k", "B", 2, 1)]
    accepts(hist, what="put v1, delete, put v2 created")
    rejects(hist[:2] + [put(1, 4, 5, "k", 1, "B", 1, True)], what="version restarting at 1")
    rejects(hist[:2] + [put(1, 4, 5, "k", 1, "B", 2, False)], what="200 after a delete")


def test_fence_advance_then_stale_put():
    accepts([put(1, 0, 1, "k", 3, "A", 1, True),
             fence(2, 2, 3, 10),
             put_stale(1, 4, 5, "k", 9, "B", 10),
             read_fence(3, 6, 7, 10),
             get(3, 8, 9, "k", "A", 1, 3),
             put(2, 10, 11, "k", 10, "C", 2, False)], what="a fence advance then a stale put")


def test_fail_ops_are_ignored():
    hist = [put(1, 0, 1, "k", 1, "A", 1, True),
            dataclasses.replace(put(2, 2, 3, "k", 2, "B", None, None), outcome="fail",
                                status=503),
            get(3, 4, 5, "k", "A", 1, 1),
            put(1, 6, 7, "k", 1, "C", 2, False)]
    accepts(hist, what="a 503 put that did nothing")
    rejects(hist[:2] + [get(3, 4, 5, "k", "B", 2, 2)], what="a read of a 503 put's body")


def test_unknown_delete_may_explain_404():
    hist = [put(1, 0, 1, "k", 1, "A", 1, True),
            delete(2, 2, None, "k", 1, outcome="unknown"),
            get_404(3, 10, 11, "k")]
    accepts(hist, what="a 404 after an unknown delete")


# ---------------------------------------------------------------------------
# Rejected
# ---------------------------------------------------------------------------

def test_lost_delete():
    p = put(1, 0, 10, "k", 1, "A", 1, True)
    d = delete(2, 1, 9, "k", 2)
    # 1 < 2: the put was applied, so before the delete, so the key must be absent now.
    r = rejects([p, d, get(3, 11, 12, "k", "A", 1, 1)], what="the lost delete")
    fk.check("#%d" % d.id in r.message or "#%d" % p.id in r.message, r.message)
    fk.check("model state there" in r.message, r.message)
    accepts([p, d, get_404(3, 11, 12, "k")], what="the delete not lost")


def test_ack_below_acknowledged_token():
    first = put(1, 0, 1, "k", 5, "A", 1, True)
    rejects([first, put(2, 2, 3, "k", 3, "B", 2, False)], what="put 3 acked after put 5")
    rejects([first, delete(2, 2, 3, "k", 3)], what="delete 3 acked after put 5")
    rejects([first, fence(2, 2, 3, 4)], what="fence 4 acked after put 5")
    # Overlapping, the token 3 put may have gone first.
    accepts([put(1, 0, 2, "k", 5, "A", 2, False), put(2, 1, 3, "k", 3, "B", 1, True)],
            what="put 3 overlapping put 5, applied first")


def test_exact_current_token_below_acknowledged_fence():
    hist = [put(1, 0, 1, "k", 14, "A", 1, True),
            put_stale(2, 2, 3, "k", 7, "B", 13)]
    r = rejects(hist, what="409 current_token 13 after fence 14 was acked")
    fk.check("current_token 13" in r.message, r.message)
    accepts(hist, mode="bounded", what="the same in bounded mode")


def test_bounded_current_token_not_above_token():
    base = [put(1, 0, 1, "k", 14, "A", 1, True)]
    rejects(base + [put_stale(2, 2, 3, "k", 7, "B", 7)], mode="bounded",
            what="bounded 409 with current_token = token")
    rejects(base + [put_stale(2, 2, 3, "k", 7, "B", 5)], mode="bounded",
            what="bounded 409 with current_token < token")
    rejects(base + [put_stale(2, 2, 3, "k", 7, "B", 15)], mode="bounded",
            what="bounded 409 with current_token above the fence")
    accepts(base + [put_stale(2, 2, 3, "k", 7, "B", 8)], mode="bounded",
            what="bounded 409 with token < current_token < fence")


def test_torn_read():
    r = rejects([put(1, 0, 1, "k", 1, "A", 1, True),
                 put(2, 2, 4, "k", 2, "B", 2, False),
                 get(3, 3, 5, "k", "AB", 2, 2)], what="a body no put wrote")
    fk.check("'AB'" in r.message, r.message)


def test_read_of_refused_put():
    rejects([put(1, 0, 1, "k", 5, "A", 1, True),
             put_stale(2, 2, 4, "k", 3, "B", 5),
             get(3, 3, 6, "k", "B", 2, 3)], what="a body from a put that got 409")


def test_wrong_version():
    base = [put(1, 0, 1, "k", 1, "A", 1, True)]
    rejects(base + [put(1, 2, 3, "k", 1, "B", 3, False)], what="put answering version 3")
    rejects(base + [get(2, 2, 3, "k", "A", 2, 1)], what="get answering ETag 2")
    rejects(base + [get(2, 2, 3, "k", "A", 1, 2)], what="get answering writer token 2")


def test_read_fence_below_acknowledged_fence():
    rejects([fence(1, 0, 1, 10), read_fence(2, 2, 3, 9)], what="read_fence 9 after fence 10")
    rejects([fence(1, 0, 1, 10), read_fence(2, 2, 3, None)], what="read_fence 404 after fence 10")
    accepts([fence(1, 0, 3, 10), read_fence(2, 1, 2, None)], what="read_fence 404 overlapping")


def test_404_after_acknowledged_put():
    rejects([put(1, 0, 1, "k", 1, "A", 1, True), get_404(2, 2, 3, "k")],
            what="a 404 after an acked put, no delete")
    rejects([put(1, 0, 1, "k", 1, "A", 1, True),
             delete(2, 0.5, 1.5, "k", 0, outcome="stale", current=1),
             get_404(2, 2, 3, "k")], what="a 404 after an acked put, the delete refused")


def test_created_for_existing_key():
    rejects([put(1, 0, 1, "k", 1, "A", 1, True), put(2, 2, 3, "k", 2, "B", 2, True)],
            what="201 for a key that existed")


def test_failure_message_lists_ops_and_state():
    p = put(1, 0, 10, "k", 1, "A", 1, True)
    d = delete(2, 1, 9, "k", 2)
    g = get(3, 11, 12, "k", "A", 1, 1)
    other = [put(1, 0, 1, "k", 1, "A", 1, True, lock="M")]
    other[0].key = "m"
    r = lincheck.check(other + [p, d, g])
    fk.check(not r.ok, "rejected")
    fk.eq(r.lock, L, "lock")
    print("an example report:\n" + r.message)
    fk.check("#%d" % g.id in r.message, "the failing get is named")
    fk.check("+11.000000" in r.message, "times relative to the history's start")
    fk.check("'k': absent (version 1)" in r.message, "the model state is shown")
    fk.check(r.ops_checked == 4, "ops_checked %r" % r.ops_checked)


def test_validation():
    for bad in ([_op("get", 1, 0, 1, "stale", key="k")],
                [_op("put", 1, 0, None, "ok", key="k", token=1, body="A", version=1)],
                [_op("put", 1, 0, 1, "ok", key="k", token=None, body="A")],
                [put(1, 0, 1, "k", 1, "A", 1, True),
                 put(1, 2, 3, "k", 2, "B", 2, False, lock="M")]):
        try:
            lincheck.check(bad)
        except ValueError:
            continue
        fk.fail("check() accepted malformed input %r" % bad)


# ---------------------------------------------------------------------------
# Generated histories
# ---------------------------------------------------------------------------

def simulate(rng, n_ops, locks, clients=8, unknown=0, fails=0, scripted=(), token_rate=300,
             jitter=(0, 0, 0, 1, 2, -1, -4)):
    """A history of n_ops from a real linearizable execution: each of `clients`
    clients sends one request at a time; each request gets a random interval and a
    linearization point inside it, and the answers are computed by applying the ops
    in the order of those points to a plain model (independent of lincheck's). Tokens
    grow with time (token_rate per second) plus a random choice from `jitter`, so some
    writes are refused, and writes with equal tokens overlap. `unknown` writes get
    no answer and land at a random later point (maybe long after the client gave up)
    or never; `fails` ops fail without effect. `scripted`: (Op, lin) pairs added as
    they are, answered by the model at `lin`. Returns the ops sorted by call."""
    start = 100.0
    ops = []
    lin = {}
    next_t = [start + rng.uniform(0, 0.001) for _ in range(clients)]
    lock_names = sorted(locks)
    for n in range(n_ops):
        c = min(range(clients), key=lambda i: next_t[i])
        call = next_t[c]
        ret = call + 0.0001 + rng.expovariate(1 / 0.002)
        next_t[c] = ret + rng.expovariate(1 / 0.0005)
        lock = rng.choice(lock_names)
        key = rng.choice(locks[lock])
        kind = rng.choices(("put", "get", "delete", "fence", "read_fence"),
                           (40, 30, 10, 8, 12))[0]
        op = Op(id=next(_ids), process=c, kind=kind, lock=lock, call=call, ret=ret)
        if kind in ("put", "delete", "get"):
            op.key = key
        if kind in ("put", "delete", "fence"):
            op.token = max(0, int((call - start) * token_rate) + rng.choice(jitter))
        if kind == "put":
            op.body = "b%d" % op.id
        ops.append(op)
        lin[op.id] = rng.uniform(call, ret)
    writes = [o for o in ops if o.kind in ("put", "delete", "fence")]
    no_answer = set()
    for o in rng.sample(writes, unknown):
        no_answer.add(o.id)
        o.ret = None
        lin[o.id] = None if rng.random() < 0.4 else o.call + rng.expovariate(1 / 0.02)
    for o in rng.sample([o for o in ops if o.id not in no_answer], fails):
        o.outcome = "fail"
        o.status = 503
        lin[o.id] = None
    for o, at in scripted:
        ops.append(o)
        lin[o.id] = at
    fence_of = {}
    keys = {}  # key -> [exists, version, token, body]
    for o in sorted((o for o in ops if lin[o.id] is not None), key=lambda o: lin[o.id]):
        F = fence_of.get(o.lock)
        e = keys.setdefault(o.key, [False, 0, None, None]) if o.key else None
        answered = o.id not in no_answer
        if o.kind == "get":
            if answered:
                o.outcome, o.found = "ok", e[0]
                o.status = 200 if e[0] else 404
                if e[0]:
                    o.version, o.read_token, o.read_body = e[1], e[2], e[3]
            continue
        if o.kind == "read_fence":
            if answered:
                o.outcome, o.found, o.read_token = "ok", F is not None, F
                o.status = 200 if F is not None else 404
            continue
        if F is not None and o.token < F:
            if answered:
                o.outcome, o.current_token, o.status = "stale", F, 409
            continue
        fence_of[o.lock] = o.token
        if o.kind == "put":
            created = not e[0]
            e[:] = [True, e[1] + 1, o.token, o.body]
            if answered:
                o.outcome, o.version, o.created = "ok", e[1], created
                o.status = 201 if created else 200
        elif o.kind == "delete":
            e[0], e[2], e[3] = False, None, None
            if answered:
                o.outcome, o.status = "ok", 204
        else:
            if answered:
                o.outcome, o.read_token, o.status = "ok", o.token, 200
    ops.sort(key=lambda o: o.call)
    return ops


def brute_force(ops, mode):
    """The obvious oracle for tiny histories: try every order of the ops (unknown ones
    optional) that respects real time, applying the model to a dict. Independent of
    lincheck's pruning, linked lists and tuples; exponential, so only for a few ops."""
    ops = [o for o in ops if o.outcome != "fail"
           and not (o.outcome == "unknown" and o.kind in ("get", "read_fence"))]
    definite = [o for o in ops if o.outcome in ("ok", "stale")]

    def apply(state, o):
        F, keys = state[0], dict(state[1])
        e = keys.get(o.key, (False, 0, None, None))
        if o.kind == "get":
            if not o.found:
                return None if e[0] else state
            return state if e[0] and (e[3], e[1], e[2]) == (o.read_body, o.version,
                                                           o.read_token) else None
        if o.kind == "read_fence":
            return state if (F is not None) == o.found and (not o.found or F == o.read_token) \
                else None
        refused = F is not None and o.token < F
        if o.outcome == "stale":
            if not refused:
                return None
            good = (o.token < o.current_token <= F) if mode == "bounded" else o.current_token == F
            return state if good else None
        if refused:
            return state if o.outcome == "unknown" else None
        if o.kind == "put":
            if o.outcome == "ok" and (o.version != e[1] + 1 or o.created == e[0]):
                return None
            keys[o.key] = (True, e[1] + 1, o.token, o.body)
        elif o.kind == "delete":
            keys[o.key] = (False, e[1], None, None)
        return (o.token, tuple(sorted(keys.items())))

    seen = set()

    def search(placed, state):
        if all(o.id in placed for o in definite):
            return True
        if (placed, state) in seen:
            return False
        seen.add((placed, state))
        for o in ops:
            if o.id in placed:
                continue
            if any(a.id not in placed and a.ret < o.call for a in definite):
                continue
            ns = apply(state, o)
            if ns is not None and search(placed | {o.id}, ns):
                return True
        return False

    return search(frozenset(), (None, ()))


def random_tiny_history(rng):
    """3 to 7 ops on one lock and two keys, integer times (so ties are common) and
    tokens 0..3, answered by a linearizable execution; then, half the time, one
    observed field changed to another value that could plausibly have been seen."""
    ops = []
    for n in range(rng.randint(3, 7)):
        call = rng.randint(0, 6)
        ret = call + rng.randint(0, 3)
        kind = rng.choice(("put", "put", "put", "delete", "fence", "get", "get", "read_fence"))
        op = Op(id=n, process=n, kind=kind, lock=L, call=float(call), ret=float(ret))
        if kind in ("put", "delete", "get"):
            op.key = rng.choice("ab")
        if kind in ("put", "delete", "fence"):
            op.token = rng.randint(0, 3)
        if kind == "put":
            op.body = "b%d" % n
        ops.append(op)
    lin = {o.id: rng.uniform(o.call, o.ret) for o in ops}
    no_answer = {o.id for o in ops if rng.random() < 0.15}
    for o in ops:
        if o.id in no_answer:
            o.ret = None
            if rng.random() < 0.4:
                lin[o.id] = None
            else:
                lin[o.id] = o.call + rng.uniform(0, 8)
    F, keys = None, {}
    for o in sorted((o for o in ops if lin[o.id] is not None), key=lambda o: lin[o.id]):
        e = keys.get(o.key, [False, 0, None, None])
        ans = o.id not in no_answer
        o.outcome = "ok" if ans else "unknown"
        if o.kind == "get":
            o.found = e[0]
            if e[0]:
                o.version, o.read_token, o.read_body = e[1], e[2], e[3]
        elif o.kind == "read_fence":
            o.found, o.read_token = F is not None, F
        elif F is not None and o.token < F:
            o.outcome = "stale" if ans else "unknown"
            o.current_token = F
        else:
            F = o.token
            if o.kind == "put":
                o.created = not e[0]
                keys[o.key] = e = [True, e[1] + 1, o.token, o.body]
                o.version = e[1]
            elif o.kind == "delete":
                keys[o.key] = [False, e[1], None, None]
            else:
                o.read_token = o.token
    if rng.random() < 0.5:
        o = rng.choice([o for o in ops if o.outcome in ("ok", "stale")] or ops)
        if o.outcome == "stale":
            o.current_token = rng.randint(0, 4)
        elif o.kind == "put":
            if rng.random() < 0.5:
                o.version = rng.randint(1, 4)
            else:
                o.created = not o.created
        elif o.kind == "get":
            o.found = rng.random() < 0.7
            o.read_body = rng.choice(["b%d" % p.id for p in ops if p.kind == "put"] + ["x"])
            o.version, o.read_token = rng.randint(1, 3), rng.randint(0, 3)
        elif o.kind == "read_fence":
            o.found = rng.random() < 0.8
            o.read_token = rng.randint(0, 3) if o.found else None
        elif o.outcome == "ok":
            o.outcome, o.current_token = "stale", rng.randint(0, 4)
    return ops


def test_against_brute_force():
    rng = random.Random(int(os.environ.get("FK_SEED", "0")) or 1234)
    counts = {True: 0, False: 0}
    for n in range(3000):
        ops = random_tiny_history(rng)
        for mode in ("exact", "bounded"):
            want = brute_force(ops, mode)
            got = lincheck.check(ops, current_token=mode)
            if got.ok != want or got.timed_out:
                fk.fail("history #%d, %s: the brute force says %s, lincheck %s:\n%s\n%s" % (
                    n, mode, want, got.ok, "\n".join(map(str, ops)), got.message))
            counts[want] += 1
    print("brute force agreed on %d linearizable and %d non-linearizable histories"
          % (counts[True], counts[False]))
    fk.check(min(counts.values()) > 1000, "both kinds well represented: %r" % counts)


BENCH_LOCKS = {"L%d" % i: ["L%d/k%d" % (i, j) for j in range(3)] for i in range(4)}


def _bench(what, ops, mode="exact"):
    by = {}
    for o in ops:
        by[o.outcome] = by.get(o.outcome, 0) + 1
    t0, c0 = time.monotonic(), time.process_time()
    r = lincheck.check(ops, current_token=mode)
    dt, dc = time.monotonic() - t0, time.process_time() - c0
    print("benchmark (%s, %s): %d ops (%s) over %d locks, 8 clients: %s in %.2fs (%.2fs CPU)"
          % (what, mode, len(ops), ", ".join("%d %s" % (n, k) for k, n in sorted(by.items())),
             len({o.lock for o in ops}), "rejected" if not r.ok else "linearizable", dt, dc))
    return r


def test_benchmark_20000_ops():
    ops = simulate(random.Random(20000), 20000, BENCH_LOCKS, clients=8, unknown=40, fails=20)
    r = _bench("tokens growing", ops)
    fk.check(r.ok and not r.timed_out, "the generated history is linearizable:\n" + r.message)
    fk.check(r.ops_checked >= 19900, "ops_checked %d" % r.ops_checked)
    r = _bench("tokens growing", ops, "bounded")
    fk.check(r.ok and not r.timed_out, "bounded mode accepts it too:\n" + r.message)
    # Few distinct tokens: most concurrent writes carry the same token, so only the
    # versions in their answers and the reads order them.
    shared = simulate(random.Random(20001), 20000, BENCH_LOCKS, clients=8, unknown=40,
                      fails=20, token_rate=3, jitter=(0,) * 12 + (-3,))
    r = _bench("tokens shared", shared)
    fk.check(r.ok and not r.timed_out, "the generated history is linearizable:\n" + r.message)

    # One torn read near the end: rejected, and how long refuting takes.
    reads = [o for o in ops if o.kind == "get" and o.outcome == "ok" and o.found]
    bad = reads[-50]
    torn = [dataclasses.replace(o, read_body="torn") if o is bad else o for o in ops]
    r = _bench("tokens growing, one torn read", torn)
    fk.check(not r.ok and r.lock == bad.lock, "the torn read is found:\n" + r.message)
    fk.check("#%d" % bad.id in r.message, r.message)


def test_time_budget():
    rng = random.Random(7)
    ops = simulate(rng, 4000, {"L": ["a", "b"]}, clients=8)
    reads = [o for o in ops if o.kind == "get" and o.outcome == "ok" and o.found]
    bad = reads[-1]
    torn = [dataclasses.replace(o, read_body="torn") if o is bad else o for o in ops]
    r = lincheck.check(torn, time_budget=0.0)
    fk.check(r.ok and r.timed_out, "a budget of 0s times out: %r" % (r,))


def test_shortest_failing_prefix_lost_delete_in_noise():
    rng = random.Random(42)
    locks = {"L": ["a", "b"], "M": ["m"]}
    # The lost delete on key z of lock L at a third of the way through 200 noise ops
    # (noise from 8 clients spanning about 60 ms), with tokens above the noise's.
    at = 100.02
    p = Op(id=next(_ids), process=100, kind="put", lock="L", key="z", token=20, body="Z",
           call=at, ret=at + 0.010)
    d = Op(id=next(_ids), process=101, kind="delete", lock="L", key="z", token=21,
           call=at + 0.001, ret=at + 0.009)
    g = Op(id=next(_ids), process=102, kind="get", lock="L", key="z",
           call=at + 0.011, ret=at + 0.012)
    ops = simulate(rng, 200, locks, clients=8, unknown=4,
                   scripted=[(p, at + 0.005), (d, at + 0.006), (g, at + 0.0115)])
    fk.eq((p.outcome, p.created, p.version, d.outcome, g.found), ("ok", True, 1, "ok", False),
          "the scripted ops as the model answered them")
    accepts(ops, what="the noisy history before the bug")
    g.found, g.read_body, g.version, g.read_token, g.status = True, "Z", 1, 20, 200
    r = rejects(ops, what="the lost delete in noise")
    n_lock = sum(1 for o in ops if o.lock == "L")

    short = lincheck.shortest_failing_prefix(ops)
    print("shortest failing prefix: %d ops of %d (%d on lock L)" % (len(short), len(ops), n_lock))
    fk.check(short, "a failing prefix")
    fk.check(all(o.lock == "L" for o in short), "only the failing lock's ops")
    fk.check(len(short) < n_lock * 0.6, "much shorter: %d of %d" % (len(short), n_lock))
    ids = {o.id for o in short}
    fk.check({p.id, d.id, g.id} <= ids, "the lost delete's three ops are in it")
    fk.check(not lincheck.check(short).ok, "the prefix fails")
    fk.eq(max(o.ret for o in short if o.outcome in ("ok", "stale")), g.ret,
          "the prefix ends with the bad get's answer")
    # One answer less and it passes: cut just before the get's return.
    before = [o for o in short if o is not g]
    fk.check(lincheck.check(before).ok, "the prefix without the get passes")
    fk.eq(lincheck.shortest_failing_prefix(ops[:1]), [], "a passing history has no failing prefix")


def test_save_load_round_trip():
    rng = random.Random(3)
    ops = simulate(rng, 300, {"L": ["a", "b"], "M": ["m"]}, unknown=5, fails=5)
    path = os.path.join(fk.tmpdir("lincheck"), "history.json")
    lincheck.save(ops, path, extra={"seed": 3, "store": "file"})
    back = lincheck.load(path)
    fk.eq(back, ops, "ops after save/load")
    fk.eq(lincheck.load_extra(path), {"seed": 3, "store": "file"}, "extra")
    fk.eq(lincheck.check(back).ok, True, "the loaded history still checks")
    with open(path) as f:
        fk.check(len(f.read().splitlines()) == len(ops) + 2, "one line per op")


if __name__ == "__main__":
    fk.main(globals(), needs_binary=False)
