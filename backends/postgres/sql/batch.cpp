#include "backends/postgres/sql/fragments.hpp"
#include "backends/postgres/sql/quoting.hpp"
#include "backends/postgres/sql/statements.hpp"

namespace fk::store::pg::sql {

// Group commit. Why batches never deadlock, with each other, with the fence-only
// statements (advance_sql, advance_idem_sql, fk_fence_step) or with the expiry sweep,
// under READ COMMITTED:
//
// A batch takes its row locks in four phases, each in one global order:
//   K  write_batch_sql's k locks every existing key row FOR UPDATE, sorted by key (the
//      LockRows node sits above the Sort, so rows are locked in that order). It waits
//      only for committed rows: a key another transaction is creating is invisible to it;
//   F  its f upserts the fence rows, sorted by lock (INSERT ... SELECT ... ORDER BY
//      feeds ON CONFLICT in that order);
//   N  its v inserts the rows of keys k found absent, sorted by key (its Sort reads all of
//      u, hence all of f, before the first insert: F is over when N starts). An insert
//      waits only for a transaction that is itself inserting that key;
//   I  (the keyed shape only) its rec claims the Idempotency-Key records of its keyed
//      rows, sorted by (scope, key) (its one-time filter reads all of w and v, and its
//      Sort all of f, before the first claim: N is over when I starts). A claim waits
//      only for a transaction that is inserting, renewing or deleting that record;
//   and w updates only rows the batch already holds: no waiting. e reads records and h
//   the fence floors without locking them (a floor raise's table locks never wait for
//   anything a batch holds except its end: sql/floors.cpp).
// The plain shape (no row of the batch carries an Idempotency-Key) is the keyed one
// without e and rec: phases K, F, N, in the same orders, so the argument holds for any
// mix of the two shapes on one database.
// A transaction waiting in a phase waits only for one that is in the same or a later
// phase, and within a phase, for one that holds a lock later in that phase's order. A
// wait-for cycle would have to stay inside one phase and go strictly up the sorted order
// all the way round: impossible. The fence-only statements take one fence row, and
// advance_idem_sql then one record (F then I). The expiry sweep (idem_expire_sql) locks
// records with SKIP LOCKED and so never waits at all. A keyed named operation takes its
// fence row, whatever its own statement locks, then its one record as its last step:
// it holds no record while it waits for anything else. The single-row statement (a lone
// unkeyed write, batch_max 1) takes key row, fence row, then (creating) the key's index
// entry: the same order, and it waits for nothing once it holds the new key (a lone
// keyed write goes as a batch of one). Within one process it never meets another single
// write on one key or lock: a write's key and lock are never in flight twice
// (detail/batch_queue.hpp); it may meet a transaction, on row locks, in this order.
// A transaction (txn_sql, sql/txn.cpp) takes K, F (one upsert over its locks, check-only
// ones locked without a change) and N in the same orders, then runs its operations'
// statements (which may lock anything, as a keyed operation's do: a deadlock there is
// detected and the transaction re-run), then claims its record (I) last. Its keys and
// locks are not in the batch queue's in-flight sets, so it may meet a batch on one key
// or lock: on row locks, in this order. A transaction that shares a batch's database
// transaction (write_batcher.cpp, run_mixed_on) runs after the batch statement or
// another transaction's: its waits are out of this order, and lock_timeout
// (batch_lock_timeout_sql) bounds them, so they cannot close a lasting cycle; one that
// times out aborts the batch, which is re-run item by item.
// (Mixed versions on one database: docs/postgres.md, on the claim statement.)
//
// A create race: k found no row for a key, the checks passed on "absent", the fence
// moved, and by the time v inserts, another transaction has created the key (committed
// after our snapshot, or waited for). v's ON CONFLICT DO NOTHING then writes nothing for
// that row, the final SELECT sees a row fenced but not written and raises FKR01, and the
// whole batch rolls back: fence advances included, nothing is written. Every write of the
// batch is then re-run alone (map_batch), where the single-row statement decides the race
// on the row that now exists. Neighbours are delayed, never failed. A delete of a key k
// found no row for meets the same race without an insert to catch it: once its fence
// step applied, the final SELECT looks again with a new snapshot
// (fragments.hpp, raise_if_created_meanwhile) and raises FKR01 when the key exists by
// then, with the same effect.
//
// An Idempotency-Key race is handled the same way: e found no record for a keyed row (or
// an expired one), the row applied, and rec's claim found a record that another
// transaction committed meanwhile (or one it waited for). rec returns nothing for that
// row, the final SELECT raises FKR01, the batch rolls back, and the re-run alone sees
// the committed record in e and answers from it. So two writes under one (scope, key)
// are never both applied, on one proxy or several: whichever commits its record second
// rolls back. Two rows of one batch under one (scope, key) (which one proxy's in-flight
// registry prevents) make ON CONFLICT fail with 21000, with the same effect.
//
// The batch statement's only sensible plan is index lookups for every row. Left to
// itself, the plan cache goes wrong twice: a generic plan costed while the tables were
// young seq-scans them on every batch until autovacuum re-analyzes; and since a generic
// plan assumes other array sizes than a small batch's, Postgres may keep planning the
// large statement afresh for every batch. So the batch transaction turns seq scans off
// and forces the (then index-only) generic plan, for itself only (set_config is_local);
// other statements and named operations keep the session's settings (the measurement is
// in docs/postgres.md).
//
// JIT is off in the batch transaction too: a plan that keeps a disabled node anyway (a
// seq scan where no index serves) is costed above jit_above_cost, and compiling it took
// 5 s at every execution (measured, when the floors were first read by a seq scan).
std::string batch_begin_sql() {
    return "SELECT pg_catalog.set_config('enable_seqscan', 'off', true),\n"
           "       pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true),\n"
           "       pg_catalog.set_config('jit', 'off', true)";
}

std::string batch_lock_timeout_sql() {
    return "SELECT pg_catalog.set_config('lock_timeout', '" +
           std::to_string(batch_lock_timeout_ms) + "ms', true)";
}

std::string write_batch_sql(std::string_view schema, batch_shape shape) {
    // The two shapes share every CTE but e and rec; the plain one (no row carries an
    // Idempotency-Key) takes nine arrays, the keyed one twelve and the retention, and
    // only the keyed one reads or writes the idempotency table. Both read the floors in
    // h, once per batch, in the statement's snapshot: whether any floor exists is only
    // known there (fragments.hpp, floor_for), so no shape leaves that read out.
    const bool keyed = shape == batch_shape::keyed;
    std::string s =
        "WITH i AS MATERIALIZED (\n"
        "  SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::text[],\n";
    s += keyed
             ? "                       $6::bigint[], $7::boolean[], $8::boolean[], $9::boolean[],\n"
               "                       $10::text[], $11::text[], $12::bytea[])\n"
               "    WITH ORDINALITY AS t(key, lock, token, body, content_type, if_match,\n"
               "                         if_match_any, if_none_match, is_delete, scope, ikey,\n"
               "                         fingerprint, n)\n"
             : "                       $6::bigint[], $7::boolean[], $8::boolean[], $9::boolean[])\n"
               "    WITH ORDINALITY AS t(key, lock, token, body, content_type, if_match,\n"
               "                         if_match_any, if_none_match, is_delete, n)\n";
    if (keyed)
        s += "), e AS MATERIALIZED (\n"
             // The unexpired records of the keyed rows, in the statement's snapshot (no
             // lock): such a row is answered from its record and applies nothing. One
             // primary-key probe per keyed row: as a plain join, the generic plan (costed
             // while the table was small) read every unexpired record through the
             // committed_at index and hashed them, which made keyed batches slower the
             // more records there were (measured: 5 ms a batch, keyed writes at a fifth
             // of the unkeyed rate). OFFSET 0 keeps the expiry condition out of the probe.
             "  SELECT i.n, d.fingerprint = i.fingerprint AS same, d.created, d.version, d.token\n"
             "  FROM i CROSS JOIN LATERAL (\n"
             "    SELECT d.fingerprint, d.created, d.version, d.token, d.committed_at\n"
             "    FROM @S.idempotency d WHERE d.scope = i.scope AND d.key = i.ikey OFFSET 0) d\n"
             "  WHERE " +
             idem_unexpired("$13::bigint") + "\n";
    s += "), k AS MATERIALIZED (\n"
         "  SELECT r.key, r.lock, r.version, r.deleted FROM @S.resources r\n"
         "  WHERE r.key = ANY ($1::text[]) ORDER BY r.key COLLATE \"C\" FOR UPDATE\n"
         "), h AS MATERIALIZED (\n"
         // The fence floors, read once per batch in the statement's snapshot (see
         // fragments.hpp, floor_for, for why that snapshot sees every floor raised before
         // the batch could write); at most max_floors rows, usually none. ORDER BY makes
         // it an index scan: the seq scan, disabled here, would be costed 1e10.
         "  SELECT fl.prefix, fl.token FROM @S.floors fl ORDER BY fl.prefix\n"
         "), hf AS MATERIALIZED (\n"
         // The floor over each row's lock: the highest whose prefix it starts with, on a
         // tie the longest (fence::floor_set::highest_for; two prefixes of one lock of
         // the same length are the same prefix). One join and one sort for the batch,
         // not a sort per row: with no floor, the join reads nothing and sorts nothing.
         "  SELECT DISTINCT ON (i.n) i.n, h.prefix, h.token\n"
         "  FROM i JOIN h ON starts_with(i.lock, h.prefix)\n"
         "  ORDER BY i.n, h.token DESC, octet_length(h.prefix) DESC\n"
         "), x AS MATERIALIZED (\n"
         // ex: the key exists (not a tombstone); absent: it has no row at all.
         "  SELECT i.n, i.key, i.lock, i.token, i.is_delete, i.if_match, i.if_match_any,\n"
         "         i.if_none_match, k.key IS NULL AS absent,\n"
         "         coalesce(NOT k.deleted, false) AS ex, k.lock AS row_lock,\n";
    s +=
        keyed
            ? "         k.version AS row_version, e.n IS NOT NULL AS answered,\n"
              "         i.scope, i.ikey, i.fingerprint, e.same AS rec_same,\n"
              "         e.created AS rec_created, e.version AS rec_version, e.token AS rec_token,\n"
            : "         k.version AS row_version, false AS answered,\n";
    s += "         hf.prefix AS floor_prefix, hf.token AS floor_token\n"
         "  FROM i LEFT JOIN k ON k.key = i.key";
    s += keyed ? " LEFT JOIN e ON e.n = i.n\n" : "\n";
    s += "    LEFT JOIN hf ON hf.n = i.n\n"
         "), c AS MATERIALIZED (\n"
         "  SELECT x.n, x.key, x.lock, x.token, x.is_delete, x.absent, x.ex, x.answered,\n";
    // The keyed row's record columns ride along in x and c, so that rec and the final
    // SELECT need no join of their own with i or e (each join is one more hash table in
    // the statement's memory: measured in docs/benchmarks.md, "Where the time goes").
    if (keyed)
        s += "         x.scope, x.ikey, x.fingerprint, x.rec_same, x.rec_created, x.rec_version,\n"
             "         x.rec_token,\n";
    s += "         x.floor_prefix, x.floor_token,\n"
         "         coalesce(x.token < x.floor_token, false) AS below_floor,\n"
         "         x.ex AND x.row_lock <> x.lock AS mismatch,\n"
         "         CASE WHEN x.ex THEN x.row_lock END AS key_lock,\n"
         "         ((x.if_none_match AND x.ex) OR (x.if_match_any AND NOT x.ex)\n"
         "          OR (x.if_match <> 0 AND (NOT x.ex OR x.row_version <> x.if_match)))\n"
         "           AS pre_failed\n"
         "  FROM x\n"
         "), f AS (\n"
         "  INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
         "  SELECT c.lock, c.token, now() FROM c\n"
         "  WHERE NOT c.mismatch AND NOT c.pre_failed AND NOT c.answered AND NOT c.below_floor\n"
         "  ORDER BY c.lock COLLATE \"C\"\n"
         "  ";
    s += fence_upsert_tail;
    s += "  RETURNING fe.lock, fe.token\n"
         "), u AS MATERIALIZED (\n"
         // The rows to write: fenced, and not the delete of a key that does not exist.
         "  SELECT c.n, c.key, c.lock, c.token, c.is_delete, c.absent, i.body, i.content_type\n"
         "  FROM c JOIN f ON f.lock = c.lock JOIN i ON i.n = c.n\n"
         "  WHERE NOT (c.is_delete AND NOT c.ex)\n";
    // w and v: the rows written (fragments.hpp); a key created meanwhile is raised below.
    s += write_rows_ctes;
    if (keyed) {
        s += "), rec AS (\n"
             // The records of the keyed rows that applied, in (scope, key) order, with
             // the outcome their replies are rendered from. The one-time filter counts w
             // and v first, so phase N is over before the first record is claimed (I).
             "  INSERT INTO @S.idempotency AS d\n"
             "    (scope, key, fingerprint, created, version, token, committed_at)\n"
             "  SELECT c.scope, c.ikey, c.fingerprint, NOT c.is_delete AND NOT c.ex,\n"
             "         coalesce(w.version, v.version, 0), f.token, now()\n"
             "  FROM c JOIN f ON f.lock = c.lock\n"
             "    LEFT JOIN w ON w.n = c.n LEFT JOIN v ON v.key = c.key\n"
             "  WHERE c.ikey IS NOT NULL\n"
             "    AND (SELECT count(*) FROM w) + (SELECT count(*) FROM v) >= 0\n"
             "  ORDER BY c.scope COLLATE \"C\", c.ikey COLLATE \"C\"\n"
             "  ";
        s += idem_claim_tail("$13::bigint");
        s += "  RETURNING d.scope, d.key\n";
    }
    s += ")\n"
         // Columns as in put_sql/delete_sql (map_write_row), plus n, plus the record that
         // answered the row (rec_same NULL when none; always NULL in the plain shape). A
         // row whose fence moved but whose data or record was not written is a race (see
         // above): raise, so the whole batch rolls back rather than commit it, and its
         // writes are re-run.
         "SELECT c.n, c.mismatch, c.pre_failed, c.key_lock, f.token AS applied,\n"
         "       coalesce(w.version, v.version) AS version, NOT c.ex AS created,\n"
         // seen_fence, the effective fence (the own fence or the floor), only matters
         // for a refused row (map_write_cells): the own fence is not looked up for the
         // accepted or answered ones.
         "       CASE WHEN f.token IS NULL AND NOT c.answered\n"
         "            THEN greatest((SELECT fs.token FROM @S.fences fs WHERE fs.lock = c.lock),\n"
         "                          c.floor_token) END\n"
         "         AS seen_fence,\n"
         "       CASE WHEN f.token IS NOT NULL AND (NOT c.is_delete OR c.ex)\n"
         "                 AND w.n IS NULL AND v.key IS NULL\n"
         "            THEN @S.fk_raise('" +
         std::string(sqlstate_retry) + "', '" + std::string(created_raced_message) +
         "')\n"
         "            WHEN f.token IS NOT NULL AND c.is_delete AND c.absent\n"
         "            THEN " +
         raise_if_created_meanwhile("c.key") + "\n";
    if (keyed)
        s += "            WHEN f.token IS NOT NULL AND c.ikey IS NOT NULL AND rec.key IS NULL\n"
             "            THEN @S.fk_raise('" +
             std::string(sqlstate_retry) + "', '" + std::string(idem_raced_message) + "')\n";
    s += "            END\n"
         "         AS unwritten,\n";
    s += keyed ? "       c.rec_same, c.rec_created, c.rec_version, c.rec_token,\n"
               : "       NULL::boolean AS rec_same, NULL::boolean AS rec_created,\n"
                 "       NULL::bigint AS rec_version, NULL::bigint AS rec_token,\n";
    // floor: a refused row's floor, when it is above the own fence (or there is none);
    // looked up only for a refused row under a floor.
    s += "       CASE WHEN f.token IS NULL AND NOT c.answered AND c.floor_token IS NOT NULL\n"
         "                 AND NOT EXISTS (SELECT 1 FROM @S.fences fs\n"
         "                                 WHERE fs.lock = c.lock AND fs.token >= c.floor_token)\n"
         "            THEN c.floor_prefix END AS floor\n";
    s += "FROM c LEFT JOIN f ON f.lock = c.lock LEFT JOIN w ON w.n = c.n\n"
         "  LEFT JOIN v ON v.key = c.key\n";
    if (keyed)
        s += "  LEFT JOIN rec ON rec.scope = c.scope AND rec.key = c.ikey\n";
    s += "ORDER BY c.n";
    return with_schema(s, schema);
}

} // namespace fk::store::pg::sql
