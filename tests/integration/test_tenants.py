#!/usr/bin/env python3
"""What one tenant can do to another, or to the store, without writing (issue 45, items
3, 4 and 5, and the last sentence of item 2), against the real binary on both stores.

  - A client that may write nothing (metrics only, read only) is refused POST
    /v1/transactions from the head: a declared 64 MB body is never read (403 at once,
    connection closed; with Expect: 100-continue, 403 instead of the 100).
  - Such a client's keyed transactions of check ops (the attack: 100 checks of 1 KiB
    lock names each, under a fresh Idempotency-Key every time) leave no record: the
    record count in the store (SQLite / SQL) stays 0 and the file store's index does not
    grow. A writer's keyed transactions of guards only record nothing either (and are
    never replayed); a writer's keyed put does record (the count works).
  - Idempotency-Keys are per client: tenant B's PUT with the key tenant A used is applied
    (not 422) and its reply names nothing of A's; each one's retry replays its own reply;
    a third client with A's scope sending A's exact request with A's key is applied
    afresh, never served A's replay; 422 and 409 stay within one client; the records are
    under each client's name. The single bearer token keeps one shared space.
  - No lock outside the caller's read scope is named: gamma (writes s/ and g/) binds
    s/leak to lock g/private; delta (writes s/) then GETs and HEADs it (no Fencing-Lock
    or Fencing-Token), PUTs and DELETEs it (409 lock_mismatch without `lock`), and sends
    transactions whose put or delete op hits it (the same, with op_index), keyed or
    not; no reply's bytes (status line, headers, body) contain the lock's name or its
    token. gamma itself still sees both.

    FENCEKEEPER_BIN=build/fencekeeper FK_TEST_PG_URL=... python3 tests/integration/test_tenants.py [FILTER]
"""

import os
import sqlite3
import time

import fk
from fk import check, eq, expect_error, expect_status

IK = "Idempotency-Key"

TOKENS = {"alpha": "alpha-t0ken-45a", "beta": "beta-t0ken-45b", "alpha2": "alpha2-t0ken-45c",
          "gamma": "gamma-t0ken-45d", "delta": "delta-t0ken-45e", "reader": "reader-t0ken-45f",
          "scraper": "scraper-t0ken-45g", "writer": "writer-t0ken-45h"}

SCOPES = {
    "alpha": {"write_prefixes": ["a/"]},
    "alpha2": {"write_prefixes": ["a/"]},  # alpha's scope, another client
    "beta": {"write_prefixes": ["b/"]},
    "gamma": {"write_prefixes": ["s/", "g/"]},
    "delta": {"write_prefixes": ["s/"]},
    "reader": {"read_prefixes": ["r/"]},
    "scraper": {"metrics": True},
    "writer": {"write_prefixes": ["w/"], "read_prefixes": ["r/"]},
}


def auth(name):
    return {"Authorization": "Bearer " + TOKENS[name]}


def start(store, names, extra=None):
    d = fk.tmpdir("tenants")
    clients = []
    for n in names:
        path = os.path.join(d, n + ".token")
        with open(path, "w") as f:
            f.write(TOKENS[n] + "\n")
        clients.append(dict(name=n, token_file=path, **SCOPES[n]))
    p = store.start(config=fk.deep_merge({"auth": {"clients": clients}}, extra or {}))
    p.wait_ready()  # the Postgres schema (and its idempotency table) exists
    return p


def index_files(store):
    return [os.path.join(store.root, n) for n in os.listdir(store.root)
            if n.startswith("index.db")]


def records(store, scope=None):
    """Idempotency-Key records in the store (all, or one scope's), read beside the
    running proxy."""
    where = "" if scope is None else " WHERE scope = '%s'" % scope
    if store.kind == "postgres":
        return int(fk.psql('SELECT count(*) FROM "%s".idempotency%s' % (store.schema, where)).strip())
    db = [f for f in index_files(store) if f.endswith("index.db")]
    check(db, "no index.db under %s: %r" % (store.root, os.listdir(store.root)))
    con = sqlite3.connect("file:%s?mode=ro" % db[0], uri=True, timeout=10)
    try:
        return con.execute("SELECT count(*) FROM idempotency" + where).fetchone()[0]
    finally:
        con.close()


def index_bytes(store):
    return sum(os.path.getsize(f) for f in index_files(store)) if store.kind == "file" else 0


def wire_bytes(r):
    """Everything a reply carried, as one byte string: status line, headers, body."""
    out = ("%s %d %s\r\n" % (r.version, r.status, r.reason)).encode("latin-1")
    for k, v in r.header_list:
        out += ("%s: %s\r\n" % (k, v)).encode("latin-1")
    return out + b"\r\n" + r.body


def replayed(r):
    return r.header("Idempotent-Replayed") == "true"


# ---------------------------------------------------------------------------
# Item 2 (last sentence) and item 3: a client without write scope keeps nothing
# ---------------------------------------------------------------------------

def checks(n, prefix, token=1):
    # 1 KiB lock names, as in the issue's probe (each check's result repeats its lock).
    return [{"op": "check", "lock": prefix + ("%04d-" % i) + "x" * 1010, "token": token}
            for i in range(n)]


def test_no_write_scope_is_refused_from_the_head(store):
    with start(store, ("scraper", "reader", "writer")) as p:
        for who in ("scraper", "reader"):
            # A body declared, none sent: the 403 comes from the head alone, and the
            # connection is closed without reading a byte of it. 4 MiB is within
            # max_body_bytes (a build that reads the body waits for it: no answer); 64 MiB
            # above it (the scope is decided before the body's size: 403, not 413).
            for length in (4 << 20, 64 << 20):
                with p.raw() as raw:
                    raw.send_raw(("POST /v1/transactions HTTP/1.1\r\nHost: x\r\nAuthorization: "
                                  "Bearer %s\r\nContent-Type: application/json\r\n"
                                  "Idempotency-Key: k1\r\nContent-Length: %d\r\n\r\n"
                                  % (TOKENS[who], length)).encode())
                    r = raw.read_response(timeout=5)
                    expect_error(r, 403, "forbidden", who + ": transaction from the head")
                    check("may not write any key or lock" in r.json()["message"], r.json())
                    check("op_index" not in r.json(), "no op was looked at: %r" % r.json())
                    check(raw.is_closed(), who + ": connection closed, the body never read")
            # Expect: 100-continue: the 403 instead of the 100.
            with p.raw() as raw:
                raw.send_raw(("POST /v1/transactions HTTP/1.1\r\nHost: x\r\nAuthorization: "
                              "Bearer %s\r\nExpect: 100-continue\r\nContent-Length: 67108864"
                              "\r\n\r\n" % TOKENS[who]).encode())
                r = raw.read_response(timeout=5)
                eq(r.status, 403, who + ": 403, not 100 Continue")
                check(raw.is_closed(), who + ": closed after the 403")
        line = p.wait_log(lambda o: o.get("msg") == "forbidden request" and o.get("client") == "reader"
                          and o.get("route") == "transactions")
        check("may not write any key or lock" in line.get("detail", ""), line)
        # The writer's transactions are decided as before.
        with p.client() as c:
            expect_status(c.transaction([{"op": "put", "key": "w/1", "body": "x", "token": 1}],
                                        headers=auth("writer")), 200, "writer's transaction")


def test_no_write_scope_keeps_no_record(store):
    with start(store, ("reader", "writer")) as p, p.client() as c:
        # The attack: keyed transactions of 100 checks of 1 KiB locks each, a new key each
        # time (on builds before issue 45: a 121 KiB record each, kept 24 h).
        before = index_bytes(store)
        for i in range(30):
            r = c.transaction(checks(100, "r/"), headers=dict(auth("reader"), **{IK: "rd-%d" % i}))
            expect_error(r, 403, "forbidden", "reader's keyed checks")
        eq(records(store), 0, "records after the reader's keyed checks")
        if store.kind == "file":
            grown = index_bytes(store) - before
            check(grown < 1 << 20, "the index grew by %d bytes (30 x 121 KiB before issue 45)" % grown)

        # A writer's guards-only transactions write nothing, so they record nothing: every
        # retry is decided afresh (never replayed), also after the fence moved.
        W = auth("writer")
        for i in range(30):
            r = c.transaction(checks(100, "w/"), headers=dict(W, **{IK: "wr-%d" % i}))
            expect_status(r, 200, "writer's keyed checks")
            check(not replayed(r), "guards are never replayed")
        eq(records(store), 0, "records after the writer's keyed guards")
        if store.kind == "file":
            grown = index_bytes(store) - before
            check(grown < 1 << 20, "the index grew by %d bytes" % grown)
        guard = [{"op": "check", "lock": "w/l", "token": 3},
                 {"op": "check_version", "key": "w/k", "absent": True}]
        first = c.transaction(guard, headers=dict(W, **{IK: "g-1"}))
        expect_status(first, 200, "guard")
        expect_status(c.put_fence("w/l", 5, headers=W), 200, "the fence moves on")
        r = c.transaction(guard, headers=dict(W, **{IK: "g-1"}))
        expect_error(r, 409, "stale_token", "the same guard, decided afresh")
        eq(r.json().get("op_index"), 0, "op_index")
        # A malformed key is still refused.
        expect_error(c.transaction(guard, headers=dict(W, **{IK: "bad key"})), 400,
                     "invalid_request", "malformed key on guards")
        eq(records(store), 0, "no record for guards")

        # Control: a keyed write records (so the count above would have seen records).
        expect_status(c.transaction([{"op": "put", "key": "w/p", "body": "x", "token": 5,
                                      "lock": "w/l"}], headers=dict(W, **{IK: "put-1"})),
                      200, "keyed put")
        eq(records(store, "writer"), 1, "the writer's keyed put is recorded under its name")


# ---------------------------------------------------------------------------
# Item 3 (last sentence): records per client are bounded
# ---------------------------------------------------------------------------

def refused_for_records(r, what):
    expect_error(r, 429, "too_many_idempotency_records", what)
    ra = r.header("Retry-After")
    check(ra is not None and ra.isdigit() and int(ra) >= 1, what + ": Retry-After %r" % ra)
    return int(ra)


def test_records_per_client_are_bounded(store):
    A, B = auth("alpha"), auth("beta")
    limits = {"idempotency": {"max_records_per_client": 4, "retention_s": 4}}
    with start(store, ("alpha", "beta"), limits) as p, p.client() as c:
        first = c.put("a/k0", b"v0", token=1, headers=dict(A, **{IK: "q-0"}))
        expect_status(first, 201, "alpha's first keyed put")
        for i in range(1, 4):
            expect_status(c.put("a/k%d" % i, b"v", token=1, headers=dict(A, **{IK: "q-%d" % i})),
                          201, "alpha's keyed put %d" % i)
        eq(records(store, "alpha"), 4, "alpha's records")
        # At the bound: a new key is refused on every keyed route, and nothing is written.
        ra = refused_for_records(c.put("a/new", b"x", token=1, headers=dict(A, **{IK: "q-new"})),
                                 "put with a new key")
        check(ra <= 4 + 2 + 1, "Retry-After %d: at most the retention plus a count's period" % ra)
        refused_for_records(c.delete("a/k1", token=2, headers=dict(A, **{IK: "q-del"})),
                            "delete with a new key")
        refused_for_records(c.put_fence("a/f", 9, headers=dict(A, **{IK: "q-fence"})),
                            "fence with a new key")
        refused_for_records(c.transaction([{"op": "put", "key": "a/t", "body": "x"}], token=1,
                                          headers=dict(A, **{IK: "q-txn"})),
                            "transaction with a new key")
        eq(records(store, "alpha"), 4, "no record for a refused write")
        expect_status(c.get("a/new", headers=A), 404, "the refused put wrote nothing")
        expect_status(c.get("a/t", headers=A), 404, "the refused transaction wrote nothing")
        eq(c.get("a/k1", headers=A).status, 200, "the refused delete deleted nothing")
        expect_status(c.request("GET", "/v1/fences/a/f", headers=A), 404, "no fence moved")
        # A retry of a recorded request is still answered from its record; a different
        # request under a recorded key is still 422; a write without a key goes ahead.
        r = c.put("a/k0", b"v0", token=1, headers=dict(A, **{IK: "q-0"}))
        eq((r.status, replayed(r)), (201, True), "retry of a recorded put replays")
        expect_error(c.put("a/k0", b"other", token=1, headers=dict(A, **{IK: "q-0"})), 422,
                     "idempotency_key_reused", "another request under a recorded key")
        expect_status(c.put("a/plain", b"x", token=1, headers=A), 201, "a write without a key")
        # Another client has its own bound.
        expect_status(c.put("b/k", b"x", token=1, headers=dict(B, **{IK: "q-new"})), 201,
                      "beta, with the key alpha was refused")
        # As records expire, room comes back (the count learns it within a period).
        ok = None
        for _ in range(60):
            ok = c.put("a/later", b"x", token=1, headers=dict(A, **{IK: "q-later"}))
            if ok.status != 429:
                break
            time.sleep(0.5)
        expect_status(ok, 201, "a new key once alpha's records expired")


def test_record_bytes_per_client_are_bounded(store):
    A = auth("alpha")
    # A record under a 200-byte Idempotency-Key counts 5 ("alpha") + 200 + 32 + 64 = 301
    # bytes: the fifth is past 1,000 (the bound is checked before a write: 4 x 301 =
    # 1,204 >= 1,000).
    limits = {"idempotency": {"max_records_per_client": 0, "max_bytes_per_client": 1000}}
    with start(store, ("alpha",), limits) as p, p.client() as c:
        ikey = lambda i: "b-%d-" % i + "k" * (196 - len(str(i)))
        for i in range(4):
            expect_status(c.put("a/%d" % i, b"v", token=1, headers=dict(A, **{IK: ikey(i)})), 201,
                          "keyed put %d" % i)
        refused_for_records(c.put("a/4", b"v", token=1, headers=dict(A, **{IK: ikey(4)})),
                            "past the byte bound")
        eq(records(store, "alpha"), 4, "records")

    # The count survives a restart: the next start counts the store's records (and says
    # so once it has).
    with start(store, ("alpha",), limits) as p, p.client() as c:
        line = p.wait_log(lambda o: o.get("msg") == "idempotency records counted")
        eq((line.get("clients"), line.get("records")), (1, 4), "the count at the start")
        refused_for_records(c.put("a/5", b"v", token=1, headers=dict(A, **{IK: ikey(5)})),
                            "after a restart")
        eq(records(store, "alpha"), 4, "records after the restart")


# ---------------------------------------------------------------------------
# Item 4: Idempotency-Keys are per client
# ---------------------------------------------------------------------------

def test_idempotency_keys_are_per_client(store):
    A, A2, B = auth("alpha"), auth("alpha2"), auth("beta")
    with start(store, ("alpha", "alpha2", "beta")) as p, p.client() as c:
        key = {IK: "order-42"}
        a1 = c.put("a/x", b"alpha's", token=10, headers=dict(A, **key))
        expect_status(a1, 201, "alpha's keyed PUT")
        # beta happens to use the same key: its own request, applied, and its reply says
        # nothing of alpha's (before issue 45: 422 idempotency_key_reused).
        b1 = c.put("b/y", b"beta's", token=20, headers=dict(B, **key))
        expect_status(b1, 201, "beta's PUT with alpha's key")
        check(not replayed(b1), "beta's PUT applied, not replayed")
        for secret in (b"a/x", b"alpha"):
            check(secret not in wire_bytes(b1), "beta's reply names %r: %r" % (secret, wire_bytes(b1)))
        eq(c.get("b/y", headers=B).body, b"beta's", "beta's body written")

        # Each retry replays its own client's reply, byte for byte.
        a2 = c.put("a/x", b"alpha's", token=10, headers=dict(A, **key))
        check(replayed(a2) and a2.body == a1.body and a2.status == 201, "alpha's replay: %r" % a2)
        b2 = c.put("b/y", b"beta's", token=20, headers=dict(B, **key))
        check(replayed(b2) and b2.body == b1.body and b2.status == 201, "beta's replay: %r" % b2)

        # alpha2 may write a/ too and sends alpha's exact request with alpha's key: it is
        # never served alpha's replay; it is applied now (version 2).
        x = c.put("a/x", b"alpha's", token=10, headers=dict(A2, **key))
        expect_status(x, 200, "alpha2's identical request")
        check(not replayed(x), "alpha2 was served alpha's replay: %r" % x.header_list)
        eq(x.json()["version"], 2, "alpha2's write applied")

        # Within one client the key still guards: another request with it is 422 (and
        # the 422 is about the client's own use).
        expect_error(c.put("b/other", b"z", token=20, headers=dict(B, **key)), 422,
                     "idempotency_key_reused", "beta reuses its own key")
        eq(c.get("b/other", headers=B).status, 404, "nothing written by the reused key")

        # Every keyed route: a fence advance and a transaction under one key by two
        # clients, each applied once and replayed to its own client.
        tk = {IK: "tx-shared"}
        ta = c.transaction([{"op": "put", "key": "a/t", "body": "a"}], token=11, lock="a/l",
                           headers=dict(A, **tk))
        tb = c.transaction([{"op": "put", "key": "b/t", "body": "b"}], token=21, lock="b/l",
                           headers=dict(B, **tk))
        expect_status(ta, 200, "alpha's transaction")
        expect_status(tb, 200, "beta's transaction with alpha's key")
        check(b"a/" not in tb.body, "beta's results name alpha's names: %r" % tb.body)
        ra = c.transaction([{"op": "put", "key": "a/t", "body": "a"}], token=11, lock="a/l",
                           headers=dict(A, **tk))
        check(replayed(ra) and ra.body == ta.body, "alpha's transaction replay")
        fk_ = {IK: "fence-shared"}
        expect_status(c.put_fence("a/f", 7, headers=dict(A, **fk_)), 200, "alpha's fence")
        fb = c.put_fence("b/f", 8, headers=dict(B, **fk_))
        expect_status(fb, 200, "beta's fence with alpha's key")
        check(not replayed(fb), "beta's fence applied")

        # The records are under each client's name.
        for who, n in (("alpha", 3), ("beta", 3), ("alpha2", 1)):
            eq(records(store, who), n, "records under %s" % who)
        eq(records(store, ""), 0, "nothing in the shared space")


def test_single_token_keeps_one_space(store):
    d = fk.tmpdir("tenants-token")
    tok = os.path.join(d, "token")
    with open(tok, "w") as f:
        f.write("shared-t0ken\n")
    H = {"Authorization": "Bearer shared-t0ken", IK: "one-space"}
    with store.start(args=("--auth-token-file", tok)) as p:
        p.wait_ready()
        with p.client() as c1, p.client() as c2:
            first = c1.put("k/1", b"v", token=1, headers=H)
            expect_status(first, 201, "first")
            again = c2.put("k/1", b"v", token=1, headers=H)
            check(replayed(again) and again.body == first.body,
                  "another connection with the shared token is the same caller: %r" % again)
            expect_error(c2.put("k/2", b"v", token=1, headers=H), 422, "idempotency_key_reused",
                         "the shared space")
        eq(records(store, ""), 1, "the record is in the shared space")


# ---------------------------------------------------------------------------
# Item 5: no lock outside the caller's read scope is revealed
# ---------------------------------------------------------------------------

SECRET_LOCK = "g/private"
SECRET_TOKEN = 918273645


def no_secret(r, what):
    raw = wire_bytes(r)
    for s in (SECRET_LOCK.encode(), str(SECRET_TOKEN).encode()):
        check(s not in raw, "%s: the reply carries %r: %r" % (what, s, raw))


def test_out_of_scope_locks_are_not_revealed(store):
    G, D = auth("gamma"), auth("delta")
    with start(store, ("gamma", "delta")) as p, p.client() as c:
        expect_status(c.put("s/leak", b"data", token=SECRET_TOKEN, lock=SECRET_LOCK, headers=G),
                      201, "gamma binds s/leak to g/private")
        expect_status(c.put("s/mine", b"mine", token=5, headers=D), 201, "delta's own key")

        # gamma may read its lock: it sees both, as before.
        r = c.get("s/leak", headers=G)
        eq((r.header("Fencing-Lock"), r.header("Fencing-Token")), (SECRET_LOCK, str(SECRET_TOKEN)),
           "gamma's GET")
        r = c.put("s/leak", b"x", token=1, lock="s/other", headers=G)
        expect_error(r, 409, "lock_mismatch", "gamma's mismatch")
        eq(r.json().get("lock"), SECRET_LOCK, "gamma's 409 names the lock")

        # delta may read and write the key, not the lock.
        forbidden = c.request("GET", "/v1/fences/" + SECRET_LOCK, headers=D)
        eq(forbidden.status, 403, "the lock itself is out of delta's scope")
        for method in ("GET", "HEAD"):
            r = c.request(method, "/v1/resources/s/leak", headers=D)
            expect_status(r, 200, "delta " + method)
            eq((r.header("Fencing-Lock"), r.header("Fencing-Token")), (None, None),
               "delta %s: the writer's lock and token" % method)
            check(r.etag == '"1"', "the version is still shown: %r" % r.header_list)
            no_secret(r, "delta " + method)
        eq(c.get("s/leak", headers=D).body, b"data", "the body is delta's to read")
        # delta's own key, under its own lock: shown.
        eq(c.get("s/mine", headers=D).header("Fencing-Lock"), "s/mine", "delta's own lock shown")

        attempts = [
            ("PUT", lambda h: c.put("s/leak", b"evil", token=SECRET_TOKEN + 1, headers=h)),
            ("PUT with Fencing-Lock",
             lambda h: c.put("s/leak", b"evil", token=SECRET_TOKEN + 1, lock="s/x", headers=h)),
            ("DELETE", lambda h: c.delete("s/leak", token=SECRET_TOKEN + 1, headers=h)),
            ("keyed PUT", lambda h: c.put("s/leak", b"evil", token=3, headers=dict(h, **{IK: "d-1"}))),
        ]
        for what, send in attempts:
            r = send(D)
            expect_error(r, 409, "lock_mismatch", "delta " + what)
            body = r.json()
            eq(body.get("key"), "s/leak", what + ": key")
            check("lock" not in body, what + ": lock member %r" % body)
            check("outside this client's read scope" in body["message"], body)
            no_secret(r, "delta " + what)

        for what, ops in [
                ("put op", [{"op": "put", "key": "s/t1", "body": "1"},
                            {"op": "put", "key": "s/leak", "body": "evil"}]),
                ("delete op", [{"op": "delete", "key": "s/leak"}]),
                ("put op with a lock", [{"op": "put", "key": "s/leak", "body": "e", "lock": "s/x"}])]:
            for keyed in (False, True):
                h = dict(D, **{IK: "tx-" + what.replace(" ", "-")}) if keyed else D
                r = c.transaction(ops, token=SECRET_TOKEN + 1, headers=h)
                expect_error(r, 409, "lock_mismatch", "delta's transaction: " + what)
                body = r.json()
                eq(body.get("op_index"), len(ops) - 1, what + ": op_index")
                check("lock" not in body, what + ": lock member %r" % body)
                no_secret(r, "delta's transaction: " + what)
        # Listings never showed it (as before).
        r = c.request("GET", "/v1/fences?prefix=", headers=D)
        no_secret(r, "delta's listing")

        # Nothing moved: the key is gamma's data under gamma's lock.
        r = c.get("s/leak", headers=G)
        eq((r.body, r.header("Fencing-Lock"), r.etag), (b"data", SECRET_LOCK, '"1"'), "s/leak intact")


def main():
    fk.main(globals())


if __name__ == "__main__":
    main()
