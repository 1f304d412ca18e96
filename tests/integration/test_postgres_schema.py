"""The Postgres store's schema and statements, checked by what the database does with them
rather than by their text: a schema name that needs quoting (a reserved word) is
created once by two proxies starting together and reused on restart; a database holding
a newer schema version is refused; a schema-1 database (what 0.1 leaves) is migrated to
version 2 with its data intact and keyed writes recorded; a listing prefix ending in multi-byte UTF-8 bounds
the scan exactly (the prefix's UTF-8 successor); a delete tombstones the key, keeps its
version and moves its fence.

Needs FK_TEST_PG_URL (exit 77 = skipped without it, unless FK_REQUIRE_SERVICES=1).
"""

import threading

import fk
from fk import check, eq, expect_status

PG_URL = fk.require_service("postgres")


def quoted(name):
    return '"' + name.replace('"', '""') + '"'


def own_schema(name):
    """A Store on schema `name`, dropped by the caller (fk's cleanup does not quote)."""
    return fk.Store("postgres", PG_URL, config={"postgres": {"schema": name}}, schema=name)


def drop(name):
    fk.psql("DROP SCHEMA IF EXISTS %s CASCADE" % quoted(name))


def test_schema_name_needing_quotes_is_created_once_and_reused():
    # A reserved word: valid in the config, an SQL error wherever it is not quoted.
    name = "order"
    drop(name)
    store = own_schema(name)
    try:
        # Two proxies start at once: the advisory lock serializes their migrations.
        procs = [store.proxy(), store.proxy()]
        starters = [threading.Thread(target=p.start) for p in procs]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        p1, p2 = procs
        p1.wait_ready()
        p2.wait_ready()
        expect_status(p1.put("k", b"v1", token=5, lock="L"), 201, "PUT through p1")
        r = p2.get("k")
        expect_status(r, 200, "GET through p2")
        eq(r.body, b"v1", "body through p2")
        r = p2.put("k", b"old", token=4, lock="L")
        expect_status(r, 409, "stale PUT through p2")
        eq(r.json()["current_token"], 5, "the fence p1 set")
        eq(fk.psql("SELECT version FROM %s.schema_version ORDER BY version"
                   % quoted(name)).split(), ["1", "2", "3", "4"], "one schema_version row per version")
        eq(fk.psql("SELECT lock || '=' || token FROM %s.fences" % quoted(name)).split(),
           ["L=5"], "the fence row")
        # A restart migrates an existing schema: nothing is lost, nothing is duplicated.
        p1.restart()
        r = p1.get("k")
        expect_status(r, 200, "GET after restart")
        eq(r.body, b"v1", "body after restart")
        eq(fk.psql("SELECT count(*) FROM %s.schema_version" % quoted(name)).strip(), "4",
           "still one schema_version row per version")
        p1.stop()
        p2.stop()
    finally:
        drop(name)


def test_a_newer_schema_version_is_refused():
    store = fk.pg_store()
    p = store.start()
    p.wait_ready()
    p.stop()
    fk.psql("INSERT INTO %s.schema_version (version) VALUES (99)" % quoted(store.schema))
    p = store.start()
    line = p.wait_log(lambda o: o.get("msg") == "postgres connect failed", timeout=20)
    check("FKV01" in str(line), "the refusal names FKV01: %r" % line)
    eq(p.client().readyz().status, 503, "/readyz with a newer schema")
    r = p.put("k", b"v", token=1, lock="L")
    eq(r.status, 503, "a write with a newer schema")
    eq(fk.psql("SELECT count(*) FROM %s.resources" % quoted(store.schema)).strip(), "0",
       "nothing written")
    p.stop()


def test_upgrade_from_schema_1_keeps_the_data_and_records_keyed_writes():
    name = "fk_upgrade_v1"
    drop(name)
    store = own_schema(name)
    q = quoted(name)
    try:
        p = store.start()
        p.wait_ready()
        expect_status(p.put("k", b"v1", token=1, lock="L"), 201, "PUT before the downgrade")
        p.stop()
        # What 0.1 leaves behind: version 2 only added the idempotency table and its index,
        # version 3 the floors table (and a new body for fk_fence_step, replaced again),
        # version 4 the function fk_key_live.
        fk.psql("DROP TABLE %s.idempotency; DROP TABLE %s.floors; DROP FUNCTION %s.fk_key_live; "
                "DELETE FROM %s.schema_version WHERE version >= 2" % (q, q, q, q))
        eq(fk.psql("SELECT version FROM %s.schema_version" % q).split(), ["1"], "schema 1")
        p = store.start()
        p.wait_ready()
        eq(fk.psql("SELECT version FROM %s.schema_version ORDER BY version" % q).split(),
           ["1", "2", "3", "4"], "migrated to schema 4")
        eq(sorted(fk.psql("SELECT indexname FROM pg_indexes WHERE schemaname = '%s' "
                          "AND tablename = 'idempotency'" % name).split()),
           ["idempotency_committed_at", "idempotency_pkey"], "the record table's indexes")
        r = p.get("k")
        expect_status(r, 200, "GET of the schema-1 data")
        eq(r.body, b"v1", "schema-1 body")
        key = {"Idempotency-Key": "upgrade-1"}
        r = p.put("k", b"v2", token=2, lock="L", headers=key)
        expect_status(r, 200, "keyed PUT after the upgrade")
        eq(r.header("ETag"), '"2"', "version 2")
        r = p.put("k", b"v2", token=2, lock="L", headers=key)
        expect_status(r, 200, "keyed retry")
        eq(r.header("Idempotent-Replayed"), "true", "the retry is a replay")
        eq(r.header("ETag"), '"2"', "the recorded version")
        eq(fk.psql("SELECT version FROM %s.resources WHERE key = 'k'" % q).strip(), "2",
           "applied once")
        eq(fk.psql("SELECT key || '|' || version || '|' || token FROM %s.idempotency" % q)
           .split(), ["upgrade-1|2|2"], "the record")
        p.stop()
    finally:
        drop(name)


def test_listing_a_multibyte_prefix_returns_exactly_its_locks():
    store = fk.pg_store()
    p = store.start()
    p.wait_ready()
    inside = ["r\u00e9sum", "r\u00e9sum\u00e9", "r\u00e9sumz", "r\u00e9sum\U0010ffff"]
    outside = ["r\u00e9su", "r\u00e9sun", "r\u00e9sul\U0010ffff", "r\u00e9t"]
    for i, lock in enumerate(inside + outside):
        expect_status(p.put_fence(lock, i + 1), 200, "fence %r" % lock)
    r = p.list_fences(prefix="r\u00e9sum")
    expect_status(r, 200, "listing")
    got = [f["lock"] for f in r.json()["fences"]]
    eq(got, sorted(inside, key=lambda s: s.encode()), "exactly the prefix's locks, bytewise")
    # U+00FF's successor is U+0100, two bytes each.
    for i, lock in enumerate(["x\u00ff", "x\u00ffa", "x\u0100", "x\u00fe"]):
        expect_status(p.put_fence(lock, 1), 200, "fence %r" % lock)
    got = [f["lock"] for f in p.list_fences(prefix="x\u00ff").json()["fences"]]
    eq(got, ["x\u00ff", "x\u00ffa"], "prefix ending in U+00FF")
    p.stop()


def test_delete_tombstones_keeps_the_version_and_moves_the_fence():
    store = fk.pg_store()
    p = store.start()
    p.wait_ready()
    expect_status(p.put("k", b"a", token=1, lock="L"), 201, "create")
    expect_status(p.put("k", b"b", token=2, lock="L"), 200, "update")
    expect_status(p.delete("k", token=3, lock="L"), 204, "delete")
    expect_status(p.get("k"), 404, "GET after delete")
    rows = fk.psql("SELECT deleted, version, token FROM %s.resources WHERE key = 'k'"
                   % quoted(store.schema)).split()
    eq(rows, ["t|2|3"], "tombstone keeps version 2, records the delete's token")
    eq(p.fence("L").json()["token"], 3, "the delete moved the fence")
    expect_status(p.put("k", b"c", token=4, lock="L"), 201, "re-create")
    eq(p.get("k").header("ETag"), '"3"', "the version continues after the tombstone")
    p.stop()


if __name__ == "__main__":
    fk.main(globals())
