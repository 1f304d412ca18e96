#include "backends/postgres/sql/fragments.hpp"
#include "backends/postgres/sql/quoting.hpp"
#include "backends/postgres/sql/statements.hpp"
#include "backends/store.hpp"

namespace fk::store::pg::sql {

// Raising a floor (docs/postgres.md, "Fence floors"). The promise: once raise_floor
// returns, no write below the floor can commit under its prefix. Writes check floors in
// the statement that moves the fence (floor_for), reading the floors table without a
// lock, in their snapshot. Two table locks make that snapshot see the new floor:
//
//   fences IN SHARE MODE  conflicts with the ROW EXCLUSIVE lock every write statement
//     takes on fences (it inserts or updates a fence row), and with nothing that only
//     reads. Granting it waits for every transaction that has written, or is writing,
//     a fence to end: those commit before the floor (or roll back). A write statement that
//     starts meanwhile waits for its ROW EXCLUSIVE lock (behind us in the lock queue)
//     until we commit, and Postgres takes a statement's snapshot only after the locks
//     of its plan are held (extended protocol: Bind acquires them, the portal's snapshot
//     comes later; in a PL/pgSQL function, each statement's plan is locked before its
//     snapshot): so it sees the floor. Reads (GET, read_fence, listings) go on.
//   floors IN SHARE ROW EXCLUSIVE MODE  conflicts with itself and not with the plain
//     reads of writers: raises are serialized, so the check against the prefix's floor
//     and the max_floors count are exact in raise_floor_sql's snapshot. Taken first:
//     a raise waiting for another never holds the fences lock, which would stop every
//     write meanwhile.
//
// Neither lock can take part in a deadlock with writes: a write never waits for a
// floors lock, and the raise waits for the fences lock holding only the floors lock and
// nothing any write could need. Its record claim (idempotency) comes last, when no
// write transaction is running (they all hold ROW EXCLUSIVE on fences until they end).
std::string floor_lock_floors_sql(std::string_view schema) {
    return with_schema("LOCK TABLE @S.floors IN SHARE ROW EXCLUSIVE MODE", schema);
}

std::string floor_lock_fences_sql(std::string_view schema) {
    return with_schema("LOCK TABLE @S.fences IN SHARE MODE", schema);
}

std::string raise_floor_sql(std::string_view schema) {
    // e: the record of a keyed raise, in the snapshot, as in advance_idem_sql; cur: the
    // prefix's floor; n: how many floors exist. g raises only without a record, above
    // cur, and (a new prefix) below the limit; its ON CONFLICT WHERE repeats "above" on
    // the row it locks (the floors lock makes it the same row cur read). r claims the
    // record with the new floor.
    std::string s = "WITH e AS MATERIALIZED (\n"
                    "  SELECT d.fingerprint = $5::bytea AS same, d.token\n" +
                    idem_record_from("$3::text", "$4::text", "$6::bigint", "  ") +
                    "\n"
                    "), cur AS MATERIALIZED (\n"
                    "  SELECT fl.token FROM @S.floors fl WHERE fl.prefix = $1::text\n"
                    "), n AS MATERIALIZED (\n"
                    "  SELECT count(*) AS floors FROM @S.floors\n"
                    "), g AS (\n"
                    "  INSERT INTO @S.floors AS fl (prefix, token, updated_at)\n"
                    "  SELECT $1::text, $2::bigint, now()\n"
                    "  WHERE NOT EXISTS (SELECT 1 FROM e)\n"
                    "    AND NOT EXISTS (SELECT 1 FROM cur WHERE cur.token >= $2::bigint)\n"
                    "    AND (EXISTS (SELECT 1 FROM cur) OR (SELECT n.floors FROM n) < " +
                    std::to_string(max_floors) +
                    ")\n"
                    "  ON CONFLICT (prefix) DO UPDATE SET token = EXCLUDED.token,\n"
                    "    updated_at = EXCLUDED.updated_at\n"
                    "  WHERE fl.token < EXCLUDED.token\n"
                    "  RETURNING fl.token\n"
                    "), r AS (\n"
                    "  INSERT INTO @S.idempotency AS d (scope, key, fingerprint, token, "
                    "committed_at)\n"
                    "  SELECT $3::text, $4::text, $5::bytea, g.token, now() FROM g\n"
                    "  WHERE $5::bytea IS NOT NULL\n  ";
    s += idem_claim_tail("$6::bigint");
    s += "  RETURNING d.token\n"
         ")\n"
         "SELECT (SELECT g.token FROM g) AS applied,\n"
         "       (SELECT cur.token FROM cur) AS floor_token,\n"
         "       CASE WHEN EXISTS (SELECT 1 FROM g) AND $5::bytea IS NOT NULL\n"
         "                 AND NOT EXISTS (SELECT 1 FROM r)\n"
         "            THEN @S.fk_raise('" +
         std::string(sqlstate_retry) + "', '" + std::string(idem_raced_message) +
         "') END AS raced,\n"
         "       (SELECT e.same FROM e) AS rec_same,\n"
         "       (SELECT e.token FROM e) AS rec_token,\n"
         "       (SELECT n.floors FROM n) AS floor_count";
    return with_schema(s, schema);
}

std::string list_floors_sql(std::string_view schema) {
    // The prefix column is COLLATE "C": bytewise order.
    return with_schema("SELECT prefix, token, " + std::string(ms_of_updated_at) +
                           " AS updated_ms FROM @S.floors ORDER BY prefix",
                       schema);
}

} // namespace fk::store::pg::sql
