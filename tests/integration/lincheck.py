"""A linearizability checker for histories of fencekeeper operations (stdlib only).

What it decides: whether a history of concurrent HTTP operations could have come from
a single copy of the "register with fence" model below, each operation taking effect
at one instant between the moment its request was sent and the moment its answer
arrived (Herlihy and Wing's linearizability). The search is the Wing-Gong algorithm as
improved by Lowe and used by Porcupine: depth-first over the operations that may go
next, with memoization of (set of linearized operations, model state) and
backtracking.

The model, per lock (docs/api.md, "The fence rule"): a fence F (None until the first
applied write) and, per key guarded by the lock, exists, version (starts 0; every
applied PUT adds 1; a DELETE keeps it), the writer's token and the body's digest.

  put(key, t, body)  t < F: refused, the answer must be 409 stale_token. Otherwise
                     F = t, version += 1, the key exists with that body and writer t;
                     the answer is 201 (it did not exist) or 200, with the new version.
  delete(key, t)     t < F: refused (409). Otherwise F = t, the key is absent (its
                     version kept); 204 whether or not it existed.
  fence(t)           PUT /v1/fences/{lock}: t < F: 409; otherwise F = t; 200, token t.
  get(key)           200 with body, version (ETag) and writer token, or 404.
  read_fence         GET /v1/fences/{lock}: 404 before any write, else 200 with F.

A 409 stale_token carries current_token c. current_token="exact" (one fencekeeper):
c == F where the refusal linearizes. current_token="bounded" (several fencekeepers,
each refusing from its own cache of fences, which lags but never exceeds the real
fence): t < c <= F there.

Outcomes of an Op:
  ok       a definite answer (2xx, or 404 for a read): linearized between call and
           ret, and its answer must be the model's.
  stale    a 409 stale_token: not applied; linearized between call and ret as a
           refusal, with current_token checked per the mode.
  fail     definitely not applied and nothing to check (400, 428, 503, ...): ignored.
  unknown  no answer (504, timeout, lost connection, killed proxy): it may take
           effect at any moment after its call, even long after the client gave up,
           or never. Where it takes effect its effect is the model's (it applies only
           if t >= F there). A read with outcome unknown is dropped.

Each key belongs to one lock for the whole history, so locks are checked one by one
(a history is linearizable iff each lock's is). Every lock starts unfenced and every
key absent with version 0: a history must start from fresh names.

Interface: Op, Result, check(), check_lock(), shortest_failing_prefix(), save(),
load() (and load_extra()). tests/integration/test_lincheck.py tests it on hand-made
histories; test_linearizability.py runs it on histories recorded against real
fencekeepers.

Choices worth knowing:
  - Ties: a call and a return at the same instant count as concurrent (calls sort
    before returns). Clocks have finite resolution, and two events with one
    timestamp cannot be ordered from the record; treating them as concurrent can only
    accept more, never report an order that did not happen.
  - An unknown op's `ret`, if set, is ignored: its effect may land after it.
  - Pruning, each sound (it never removes the last way to linearize a history;
    test_lincheck.py checks the result against a brute-force search):
      * a read or a 409 that is minimal (may go next) and agrees with the current
        state is placed at once without trying alternatives: neither changes the
        state, and nothing unplaced has to come before it;
      * ceilings: F and the versions only grow, so no write may take F above the
        token of an acknowledged write still to place (acknowledged writes go in
        token order), nor above a read_fence answer or (exact mode) a 409's
        current_token still to place; no unknown put may take a version above one
        that an answer still to place shows;
      * an unknown write is tried only when it changes the state (not when t < F,
        nor when it is a no-op), keeps the ceilings, does not leave a key absent
        (or present) when an op still to place needs otherwise and no write that
        could change it back was called in time; of unknown writes alike in kind,
        key, token and body only the earliest-called is tried (they are
        interchangeable), and bodies no read returns count as one body;
      * unknown writes are tried after the definite ones at each step, so that they
        are linearized as late as needed (often never).
    Accepting a linearizable history is quick (the search rarely backtracks).
    Refuting one can take long when many unknown writes share a token: each of them
    may or may not have landed in many places; time_budget then ends it.
  - time_budget bounds the search (seconds). When it runs out the answer is neither
    proof nor refutation: Result.ok is True and Result.timed_out is set.
"""

import dataclasses
import json
import os
import time

KINDS = ("put", "delete", "fence", "get", "read_fence")
OUTCOMES = ("ok", "fail", "stale", "unknown")
MODES = ("exact", "bounded")


@dataclasses.dataclass
class Op:
    id: int
    process: int               # client id
    kind: str                  # "put" | "delete" | "fence" | "get" | "read_fence"
    lock: str                  # the op's lock (for get: the lock the key belongs to)
    key: str | None = None     # put/delete/get
    token: int | None = None   # put/delete/fence
    body: str | None = None    # put: digest of the body sent (compared by equality)
    call: float = 0.0          # time the request was sent (monotonic seconds)
    ret: float | None = None   # time the answer arrived; None for unknown
    outcome: str = "unknown"   # "ok" | "fail" | "stale" | "unknown"
    status: int | None = None  # HTTP status, informational
    version: int | None = None  # put ok: version in the reply; get ok 200: the ETag version
    created: bool | None = None  # put ok: True for 201, False for 200
    found: bool | None = None  # get/read_fence ok: True for 200, False for 404
    read_body: str | None = None   # get 200: digest of the body received
    read_token: int | None = None  # get 200: Fencing-Token (writer); read_fence 200: the token
    current_token: int | None = None  # stale: the 409's current_token
    info: str | None = None    # free text for reports


@dataclasses.dataclass
class Result:
    ok: bool
    lock: str | None           # the first lock whose history is not linearizable
    message: str               # explanation (see check())
    ops_checked: int
    seconds: float
    timed_out: bool = False    # budget exhausted: neither proven nor refuted (ok stays True)


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------
#
# A lock's state is the tuple (F, keys): F the fence (None or int), keys a tuple with
# one entry per key of the lock, (exists, version, writer_token, body); an absent key
# is (False, version, None, None), so that states that cannot be told apart compare
# (and hash) equal. Tuples keep it small, immutable and hashable for the memo.

_PUT, _DELETE, _FENCE, _GET, _READ_FENCE = range(5)
_KIND_CODE = {"put": _PUT, "delete": _DELETE, "fence": _FENCE, "get": _GET,
              "read_fence": _READ_FENCE}
_OK, _STALE, _UNKNOWN = range(3)


class _Rec:
    """One op as the search sees it: the fields it needs, without attribute lookups
    through the dataclass, and the key as an index into the state's keys tuple."""
    __slots__ = ("op", "idx", "kind", "ki", "token", "body", "outcome", "definite",
                 "write", "version", "created", "found", "read_body", "read_token",
                 "current_token", "call", "ret", "cls")

    def __init__(self, op, idx, ki):
        self.op = op
        self.idx = idx
        self.kind = _KIND_CODE[op.kind]
        self.ki = ki
        self.token = op.token
        self.body = op.body
        self.outcome = {"ok": _OK, "stale": _STALE, "unknown": _UNKNOWN}[op.outcome]
        self.definite = self.outcome != _UNKNOWN
        self.write = self.kind in (_PUT, _DELETE, _FENCE)
        self.version = op.version
        self.created = op.created
        self.found = op.found
        self.read_body = op.read_body
        self.read_token = op.read_token
        self.current_token = op.current_token
        self.call = op.call
        self.ret = op.ret if self.definite else None


def _step(state, r, bounded):
    """The model's step for op r from `state`: the state after it, or None when the
    op's observed answer is not what the model answers there. Unknown writes never
    return None (refused, they leave the state as it is)."""
    F, keys = state
    kind = r.kind
    if kind == _GET:
        e = keys[r.ki]
        if r.found:
            if (e[0] and e[3] == r.read_body
                    and (r.version is None or r.version == e[1])
                    and (r.read_token is None or r.read_token == e[2])):
                return state
            return None
        return None if e[0] else state
    if kind == _READ_FENCE:
        if r.found:
            return state if F is not None and F == r.read_token else None
        return state if F is None else None
    t = r.token
    refused = F is not None and t < F
    outcome = r.outcome
    if outcome == _STALE:
        if not refused:
            return None
        c = r.current_token
        if c is not None:
            if bounded:
                if not (t < c <= F):
                    return None
            elif c != F:
                return None
        return state
    if refused:
        return None if outcome == _OK else state
    if kind == _PUT:
        i = r.ki
        e = keys[i]
        v = e[1] + 1
        if outcome == _OK:
            if r.version is not None and r.version != v:
                return None
            if r.created is not None and r.created == e[0]:
                return None
        return (t, keys[:i] + ((True, v, t, r.body),) + keys[i + 1:])
    if kind == _DELETE:
        i = r.ki
        e = keys[i]
        return (t, keys[:i] + ((False, e[1], None, None),) + keys[i + 1:])
    # fence
    if outcome == _OK and r.read_token is not None and r.read_token != t:
        return None
    return (t, keys)


def _explain(state, r, bounded):
    """Why the model does not give op r's answer in `state` (for reports)."""
    F, keys = state
    kind = r.kind
    if kind == _GET:
        e = keys[r.ki]
        have = ("the key exists: %s" % _fmt_entry(e)) if e[0] else \
            "the key is absent (version %d)" % e[1]
        if r.found:
            want = "200 body=%s version=%s token=%s" % (_short(r.read_body), r.version,
                                                      r.read_token)
        else:
            want = "404"
        return "answered %s; %s" % (want, have)
    if kind == _READ_FENCE:
        return "answered %s; the fence is %s" % (
            "200 token=%s" % r.read_token if r.found else "404", F)
    t = r.token
    refused = F is not None and t < F
    if r.outcome == _STALE:
        if not refused:
            return "answered 409 but token %d >= fence %s: the model applies it" % (t, F)
        c = r.current_token
        if bounded:
            return "answered 409 with current_token %s; bounded mode needs %d < c <= %s" % (
                c, t, F)
        return "answered 409 with current_token %s; the fence is %s" % (c, F)
    if refused:
        return "answered %s but token %d < fence %d: the model refuses it (409)" % (
            _answer(r), t, F)
    if kind == _PUT:
        e = keys[r.ki]
        return "answered %s; the model gives version %d, %s" % (
            _answer(r), e[1] + 1, "200 replaced" if e[0] else "201 created")
    if kind == _FENCE:
        return "answered token %s; the model answers %d" % (r.read_token, t)
    return "the model accepts it here, but no order that places it here goes on"


def _answer(r):
    if r.kind == _PUT:
        if r.created is None:
            return "2xx version=%s" % r.version
        return "%s version=%s" % ("201" if r.created else "200", r.version)
    if r.kind == _DELETE:
        return "204"
    return "200"


def _short(s):
    if s is None:
        return "None"
    s = str(s)
    return repr(s if len(s) <= 16 else s[:12] + "...")


def _fmt_entry(e):
    if not e[0]:
        return "absent (version %d)" % e[1]
    body = "(one no read returned)" if e[3] is _UNREAD else _short(e[3])
    return "version=%d token=%s body=%s" % (e[1], e[2], body)


def _fmt_state(state, key_names):
    F, keys = state
    parts = ["fence=%s" % F]
    for name, e in zip(key_names, keys):
        parts.append("%r: %s" % (name, _fmt_entry(e)))
    return "; ".join(parts)


def _fmt_op(op, t0):
    """One line about op: id, process, kind, key, token, times relative to t0,
    outcome and everything observed."""
    s = "#%s p%s %s" % (op.id, op.process, op.kind)
    if op.key is not None:
        s += " key=%r" % op.key
    if op.token is not None:
        s += " token=%s" % op.token
    if op.kind == "put":
        s += " body=%s" % _short(op.body)
    ret = "..." if op.ret is None or op.outcome == "unknown" else "%+.6f" % (op.ret - t0)
    s += " [%+.6f, %s] %s" % (op.call - t0, ret, op.outcome)
    if op.status is not None:
        s += " status=%s" % op.status
    if op.outcome == "ok":
        if op.kind == "put":
            s += " version=%s created=%s" % (op.version, op.created)
        elif op.kind == "get":
            if op.found:
                s += " found body=%s version=%s token=%s" % (_short(op.read_body), op.version,
                                                             op.read_token)
            else:
                s += " not found"
        elif op.kind == "read_fence":
            s += " token=%s" % op.read_token if op.found else " not found"
        elif op.kind == "fence" and op.read_token is not None:
            s += " token=%s" % op.read_token
    elif op.outcome == "stale":
        s += " current_token=%s" % op.current_token
    if op.info:
        s += " (%s)" % op.info
    return s


# ---------------------------------------------------------------------------
# Input checks and grouping
# ---------------------------------------------------------------------------

def _validate(ops, current_token):
    if current_token not in MODES:
        raise ValueError("current_token must be one of %s, not %r" % (MODES, current_token))
    key_lock = {}
    for op in ops:
        if op.kind not in KINDS:
            raise ValueError("op #%s: unknown kind %r" % (op.id, op.kind))
        if op.outcome not in OUTCOMES:
            raise ValueError("op #%s: unknown outcome %r" % (op.id, op.outcome))
        if op.outcome == "fail":
            continue
        if op.kind in ("put", "delete", "get") and op.key is None:
            raise ValueError("op #%s: %s without a key" % (op.id, op.kind))
        if op.kind in ("put", "delete", "fence") and not isinstance(op.token, int):
            raise ValueError("op #%s: %s without an integer token" % (op.id, op.kind))
        if op.outcome == "stale" and op.kind not in ("put", "delete", "fence"):
            raise ValueError("op #%s: a %s cannot be stale" % (op.id, op.kind))
        if op.outcome in ("ok", "stale"):
            if op.ret is None:
                raise ValueError("op #%s: outcome %s without ret" % (op.id, op.outcome))
            if op.ret < op.call:
                raise ValueError("op #%s: ret %r before call %r" % (op.id, op.ret, op.call))
            if op.outcome == "ok" and op.kind in ("get", "read_fence") and op.found is None:
                raise ValueError("op #%s: %s ok without found" % (op.id, op.kind))
        if op.key is not None and op.kind in ("put", "delete", "get"):
            other = key_lock.setdefault(op.key, op.lock)
            if other != op.lock:
                raise ValueError("key %r is under two locks: %r and %r (op #%s)"
                                 % (op.key, other, op.lock, op.id))


def _relevant(op):
    """Whether the search needs op: fail ops and unknown reads carry nothing."""
    if op.outcome == "fail":
        return False
    if op.outcome == "unknown" and op.kind in ("get", "read_fence"):
        return False
    return True


def _by_lock(ops):
    groups = {}
    for op in ops:
        groups.setdefault(op.lock, []).append(op)
    return groups


# ---------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------

class _Lowest:
    """The lowest of some values, each belonging to an op, over the ops not yet
    linearized: the (value, op index) pairs sorted, and a pointer to the first whose op
    is not placed (moved forward lazily, and back when the search unplaces an op)."""
    __slots__ = ("entries", "p", "placed")

    def __init__(self, entries, placed):
        self.entries = entries
        self.p = 0
        self.placed = placed

    def value(self):
        p, entries, placed = self.p, self.entries, self.placed
        while p < len(entries) and placed[entries[p][1]]:
            p += 1
        self.p = p
        return entries[p][0] if p < len(entries) else _INF


_INF = float("inf")
_UNREAD = ("a body no read returned",)  # never equal to a read_body (a str)


class _Timeout(Exception):
    pass


def _search(ops, bounded, deadline):
    """Searches one lock's ops (already filtered by _relevant). Returns (ok, report):
    report is None on success, else (state, linearized_bits, prefix_ops, recs, keys)
    after the longest linearizable prefix found. Raises _Timeout past deadline."""
    key_names = sorted({op.key for op in ops if op.key is not None})
    key_index = {k: i for i, k in enumerate(key_names)}
    recs = [_Rec(op, i, key_index.get(op.key)) for i, op in enumerate(ops)]
    n_definite = sum(1 for r in recs if r.definite)

    # A body no read returns only ever meets the model as "not that body": all such
    # bodies become one, so that states differing only in them are one state for the
    # memo. Unknown writes alike in kind, key, token and (so canonical) body are
    # interchangeable: in any linearization the earliest-called of them can stand
    # where a later one is placed (its call is no later, and the later one can go
    # where the earlier one went). So of each class only the earliest-called one not
    # yet linearized is tried. Without this, refuting a history with many unknown
    # writes under one token tries every choice of which of them filled each gap.
    read_bodies = {r.read_body for r in recs if r.kind == _GET and r.definite and r.found}
    for r in recs:
        if r.kind == _PUT and r.body not in read_bodies:
            r.body = _UNREAD
        r.cls = (r.kind, r.ki, r.token, r.body)

    # Events: (time, 0 call / 1 return, op index). Calls sort before returns at the
    # same instant (see the module docstring). Entry 0 is the list head, entry m+1
    # its tail; the live entries form a doubly linked list (nxt/prv) from which a
    # linearized op's call and return are lifted, and into which they are put back
    # when the search backtracks (in the reverse order: "dancing links").
    events = []
    for r in recs:
        events.append((r.call, 0, r.idx))
        if r.definite:
            events.append((r.ret, 1, r.idx))
    events.sort()
    m = len(events)
    head, tail = 0, m + 1
    e_op = [-1] * (m + 2)
    e_ret = [False] * (m + 2)
    call_e = [0] * len(recs)
    ret_e = [0] * len(recs)
    for j, (_, is_ret, i) in enumerate(events, 1):
        e_op[j] = i
        e_ret[j] = bool(is_ret)
        if is_ret:
            ret_e[i] = j
        else:
            call_e[i] = j
    nxt = list(range(1, m + 3))
    prv = list(range(-1, m + 1))
    e_ret[tail] = True  # the walk for candidates stops at the tail as at a return

    # Lookahead, from ops not yet linearized (each bound holds until its op is placed):
    #  - Ceilings. The fence and every key's version only grow, so
    #      F <= the token of every acknowledged write (t >= F where it goes), of every
    #           read_fence 200 and, in exact mode, the current_token of every 409;
    #      version(k) <= version - 1 of every acknowledged put of k, and the version of
    #           every get 200 of k.
    #  - Existence. A key made absent must exist again by the return of the first
    #    op still to place that needs it to exist (a get 200, a 200 put): some put of
    #    it still to place (acknowledged 201, or unknown and not below the fence) must
    #    have been called by then. Likewise a key made to exist needs such a delete
    #    called by the first return of a 404 or a 201 put.
    # A write that would break one is not tried: the fence ceiling for every write;
    # the version ceiling and existence for unknown writes (a definite write's own
    # answer already pins where it can go, an unknown one floats).
    placed = [False] * len(recs)
    watch = [[] for _ in recs]  # op index -> [(_Lowest, position in it)]

    def lowest(pairs):
        low = _Lowest(sorted(pairs), placed)
        for pos, (_, i) in enumerate(low.entries):
            watch[i].append((low, pos))
        return low

    def per_key(values):
        return [lowest([(v, r.idx) for r in recs if r.ki == k
                        for v in [values(r)] if v is not None])
                for k in range(len(key_names))]

    fence_ceiling = lowest(
        [(r.token, r.idx) for r in recs if r.write and r.outcome == _OK]
        + [(r.read_token, r.idx) for r in recs
           if r.kind == _READ_FENCE and r.outcome == _OK and r.found]
        + ([] if bounded else [(r.current_token, r.idx) for r in recs
                               if r.outcome == _STALE and r.current_token is not None]))

    def version_bound(r):
        if r.outcome == _OK and r.version is not None:
            if r.kind == _PUT:
                return r.version - 1
            if r.kind == _GET and r.found:
                return r.version
        return None

    def needs(r, exists):
        return r.outcome == _OK and (
            (r.kind == _GET and r.found == exists)
            or (r.kind == _PUT and r.created is not None and r.created != exists))

    version_ceilings = per_key(version_bound)
    first_needs_exists = per_key(lambda r: r.ret if needs(r, True) else None)
    first_needs_absent = per_key(lambda r: r.ret if needs(r, False) else None)
    # Definite writes that can make a key exist (a 200 put needs it to exist already)
    # or absent; the unknown ones are scanned, as only those not below the fence count.
    first_creator = per_key(lambda r: r.call if r.kind == _PUT and r.outcome == _OK
                            and r.created is not False else None)
    first_deleter = per_key(lambda r: r.call if r.kind == _DELETE and r.outcome == _OK
                            else None)
    unknown_puts = [[r for r in recs if r.ki == k and r.kind == _PUT and not r.definite]
                    for k in range(len(key_names))]
    unknown_deletes = [[r for r in recs if r.ki == k and r.kind == _DELETE and not r.definite]
                       for k in range(len(key_names))]

    def floats_ok(r, ns):
        """Whether unknown write r, leading to state ns, keeps the lookahead."""
        if r.kind == _FENCE:
            return True
        k = r.ki
        if r.kind == _PUT:
            if ns[1][k][1] > version_ceilings[k].value():
                return False
            need, definite, others = first_needs_absent[k], first_deleter[k], unknown_deletes[k]
        else:
            need, definite, others = first_needs_exists[k], first_creator[k], unknown_puts[k]
        by = need.value()
        if definite.value() <= by:
            return True
        F = ns[0]
        return any(not placed[u.idx] and u.call <= by and u.token >= F for u in others)

    def candidates(state):
        """The ops to try next, with the state each leads to, in the order to try."""
        F = state[0]
        g = fence_ceiling.value()
        writes = []
        unknowns = []
        classes = set()  # of the unknown ops met in this walk
        e = nxt[head]
        while not e_ret[e]:
            r = recs[e_op[e]]
            if r.definite:
                if r.write and r.outcome == _OK:
                    if r.token <= g:
                        ns = _step(state, r, bounded)
                        if ns is not None:
                            writes.append((r.idx, ns))
                else:
                    ns = _step(state, r, bounded)
                    if ns is not None:
                        return [(r.idx, ns)]  # a read or a 409 that fits: no choice needed
            elif r.cls not in classes:
                classes.add(r.cls)
                if r.token <= g and (F is None or r.token >= F):
                    ns = _step(state, r, bounded)
                    if ns != state and floats_ok(r, ns):
                        unknowns.append((r.idx, ns))
            e = nxt[e]
        return writes + unknowns

    def lift(i):
        for j in (call_e[i], ret_e[i]):
            if j:
                nxt[prv[j]] = nxt[j]
                prv[nxt[j]] = prv[j]
        placed[i] = True

    def unlift(i):
        for j in (ret_e[i], call_e[i]):
            if j:
                nxt[prv[j]] = j
                prv[nxt[j]] = j
        placed[i] = False
        for c, pos in watch[i]:
            if pos < c.p:
                c.p = pos

    state = (None, tuple((False, 0, None, None) for _ in key_names))
    bits = 0
    done = 0          # definite ops linearized
    node = None       # the linearized ops, newest first: (op index, parent node)
    best = (0, state, bits, node)
    seen = set()
    stack = []
    if n_definite == 0:
        return True, None
    cands = candidates(state)
    ci = 0
    steps = 0
    while True:
        steps += 1
        if steps & 1023 == 0 and time.monotonic() > deadline:
            raise _Timeout()
        pushed = False
        while ci < len(cands):
            i, ns = cands[ci]
            ci += 1
            nb = bits | (1 << i)
            memo = (nb, ns)
            if memo in seen:
                continue
            seen.add(memo)
            stack.append((cands, ci, bits, state, done, node, i))
            lift(i)
            bits, state, node = nb, ns, (i, node)
            if recs[i].definite:
                done += 1
                if done == n_definite:
                    return True, None
                if done > best[0]:
                    best = (done, state, bits, node)
            cands = candidates(state)
            ci = 0
            pushed = True
            break
        if pushed:
            continue
        if not stack:
            _, bstate, bbits, bnode = best
            prefix = []
            while bnode is not None:
                prefix.append(recs[bnode[0]])
                bnode = bnode[1]
            prefix.reverse()
            return False, (bstate, bbits, prefix, recs, key_names)
        cands, ci, bits, state, done, node, i = stack.pop()
        unlift(i)


def _blocked_by(ns, r, pending, bounded, t0):
    """Why placing r, which the model accepts, leads nowhere: the op still to place
    that needs the fence or the key's version lower than r leaves it (the search's
    ceilings), or None."""
    F, keys = ns
    worst = None
    for o in pending:
        if o is r:
            continue
        if o.write and o.outcome == _OK:
            bound, need = o.token, "an acknowledged write with token %d" % o.token
        elif o.kind == _READ_FENCE and o.outcome == _OK and o.found:
            bound, need = o.read_token, "a fence read answered %d" % o.read_token
        elif o.outcome == _STALE and not bounded and o.current_token is not None:
            bound, need = o.current_token, "a 409 with current_token %d" % o.current_token
        else:
            continue
        if F is not None and F > bound and (worst is None or bound < worst[0]):
            worst = (bound, o, need, "the fence to %d" % F)
    if r.kind == _PUT:
        v = keys[r.ki][1]
        for o in pending:
            if o is r or o.ki != r.ki or o.outcome != _OK or o.version is None:
                continue
            if o.kind == _PUT:
                bound, need = o.version - 1, "a put answering version %d" % o.version
            elif o.kind == _GET and o.found:
                bound, need = o.version, "a read of version %d" % o.version
            else:
                continue
            if v > bound and (worst is None or bound < worst[0]):
                worst = (bound, o, need, "the version to %d" % v)
    if worst is None:
        return None
    _, o, need, what = worst
    return ("placing it takes %s, and the fence and versions never go down, but #%s (%s,"
            " called at %+.6f) is still to be placed" % (what, o.op.id, need, o.call - t0))


def _failure_message(lock, report, bounded, t0, n_ops):
    state, bits, prefix, recs, key_names = report
    pending = [r for r in recs if r.definite and not (bits >> r.idx) & 1]
    first_ret = min(r.ret for r in pending)
    stuck = sorted((r for r in pending if r.call <= first_ret), key=lambda r: (r.call, r.idx))
    lines = ["lock %r: not linearizable (%d ops of this lock checked; current_token=%s)"
             % (lock, n_ops, "bounded" if bounded else "exact"),
             "after the longest linearizable prefix found (%d of %d definite ops), none of"
             " these can be linearized next (times relative to the history's first call):"
             % (sum(1 for r in prefix if r.definite), sum(1 for r in recs if r.definite))]
    for r in stuck[:12]:
        why = _explain(state, r, bounded)
        ns = _step(state, r, bounded)
        if ns is not None:
            why = _blocked_by(ns, r, pending, bounded, t0) or why
        must = "  <- must be linearized by its return" if r.ret == first_ret else ""
        lines.append("  %s%s" % (_fmt_op(r.op, t0), must))
        lines.append("      %s" % why)
    if len(stuck) > 12:
        lines.append("  ... and %d more" % (len(stuck) - 12))
    if prefix:
        lines.append("the prefix ends with (oldest first):")
        for r in prefix[-8:]:
            note = ""
            if not r.definite:
                note = "  (unknown: linearized here)"
            lines.append("  %s%s" % (_fmt_op(r.op, t0), note))
    else:
        lines.append("not even the first op can be linearized")
    lines.append("model state there: %s" % _fmt_state(state, key_names))
    return "\n".join(lines)


def _check_lock(lock, ops, bounded, deadline, t0):
    """(ok, timed_out, n_ops, message) for one lock's (relevant) ops."""
    try:
        ok, report = _search(ops, bounded, deadline)
    except _Timeout:
        return True, True, len(ops), "lock %r: search budget exhausted (%d ops)" % (lock, len(ops))
    if ok:
        return True, False, len(ops), ""
    return False, False, len(ops), _failure_message(lock, report, bounded, t0, len(ops))


def check(ops, current_token="exact", time_budget=60.0):
    """Checks a whole history, lock by lock (in the order of each lock's first op),
    within time_budget seconds in all. Stops at the first lock whose history is not
    linearizable: Result.lock names it, and Result.message lists the ops that could
    not be placed after the longest linearizable prefix found (with call/ret times
    relative to the history's first call, process, kind, key, token, outcome and what
    was observed), why the model refuses each there, the prefix's last ops and the
    model state after it. ops_checked counts the ops the search considered (not the
    fail ops nor the unknown reads)."""
    _validate(ops, current_token)
    started = time.monotonic()
    deadline = started + time_budget
    t0 = min((op.call for op in ops), default=0.0)
    bounded = current_token == "bounded"
    checked = 0
    timed_out = []
    groups = _by_lock([op for op in ops if _relevant(op)])
    for lock, lops in groups.items():
        ok, to, n, msg = _check_lock(lock, lops, bounded, deadline, t0)
        checked += n
        if to:
            timed_out.append(lock)
        if not ok:
            return Result(False, lock, msg, checked, time.monotonic() - started)
    seconds = time.monotonic() - started
    if timed_out:
        return Result(True, None, "search budget of %.1fs exhausted on lock(s) %s: neither"
                      " proven nor refuted" % (time_budget, ", ".join(map(repr, timed_out))),
                      checked, seconds, timed_out=True)
    return Result(True, None, "linearizable: %d ops over %d lock(s) in %.2fs"
                  % (checked, len(groups), seconds), checked, seconds)


def check_lock(ops, current_token="exact", time_budget=60.0):
    """check() for the ops of one lock (raises ValueError if they name several)."""
    locks = {op.lock for op in ops}
    if len(locks) > 1:
        raise ValueError("check_lock: ops of several locks: %s" % sorted(locks))
    return check(ops, current_token, time_budget)


# ---------------------------------------------------------------------------
# Shrinking a failure
# ---------------------------------------------------------------------------

def _cut(ops, T):
    """The history as it stood at time T: ops called at or before T; those that had
    not returned by T become unknown (reads among them are dropped)."""
    out = []
    for op in ops:
        if op.call > T or op.outcome == "fail":
            continue
        if op.outcome in ("ok", "stale") and op.ret is not None and op.ret <= T:
            out.append(op)
        elif op.kind in ("get", "read_fence"):
            continue
        elif op.outcome == "unknown" and op.ret is None:
            out.append(op)
        else:
            out.append(dataclasses.replace(op, outcome="unknown", ret=None))
    return out


def shortest_failing_prefix(ops, current_token="exact", time_budget=60.0):
    """The shortest prefix in time of the failing lock's history that still fails, or
    [] when the history passes (or the search timed out). A prefix is a cut at a time
    T (_cut); failing is monotone in T (a linearization of a later cut, truncated
    before its first op called after T, linearizes the earlier cut), so a binary
    search over the definite ops' return times finds the first T that fails; the
    result is then verified: it fails, and the cut just before it does not.
    time_budget applies to each check."""
    res = check(ops, current_token, time_budget)
    if res.ok:
        return []
    lock_ops = [op for op in ops if op.lock == res.lock]
    times = sorted({op.ret for op in lock_ops if op.outcome in ("ok", "stale")})

    def fails(k):
        r = check_lock(_cut(lock_ops, times[k]), current_token, time_budget)
        return not r.ok

    lo, hi = 0, len(times) - 1
    if not fails(hi):
        return lock_ops  # only a budget exhausted by a cut can get here
    while lo < hi:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid + 1
    if lo > 0 and fails(lo - 1):
        raise AssertionError("shortest_failing_prefix: failing is not monotone at %r"
                             % times[lo - 1])
    return _cut(lock_ops, times[lo])


# ---------------------------------------------------------------------------
# Saving and loading histories
# ---------------------------------------------------------------------------

FORMAT = "fencekeeper-lincheck-history"


def save(ops, path, extra=None):
    """Writes the history as one JSON document: {"format", "version", "extra", "ops"},
    with one JSON object per op (dataclasses.asdict) on a line of its own. Floats keep
    every digit (json writes repr), so load() gives back equal Ops."""
    head = json.dumps({"format": FORMAT, "version": 1, "extra": extra or {}}, sort_keys=True)
    lines = [head[:-1] + ', "ops": [']
    for k, op in enumerate(ops):
        lines.append(json.dumps(dataclasses.asdict(op), sort_keys=True)
                     + ("," if k + 1 < len(ops) else ""))
    lines.append("]}")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def _load_doc(path):
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("%s: not a %s file" % (path, FORMAT))
    return doc


def load(path):
    """Reads a history written by save(); returns its ops."""
    names = {f.name for f in dataclasses.fields(Op)}
    return [Op(**{k: v for k, v in d.items() if k in names}) for d in _load_doc(path)["ops"]]


def load_extra(path):
    """The `extra` metadata save() stored with a history."""
    return _load_doc(path)["extra"]
