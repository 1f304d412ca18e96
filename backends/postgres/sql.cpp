#include "backends/postgres/sql.hpp"

#include <cstdint>

namespace fk::store::pg::sql {
namespace {

std::string quote_literal(std::string_view text) {
    std::string out = "'";
    for (char c : text) {
        if (c == '\'')
            out += '\'';
        out += c;
    }
    out += '\'';
    return out;
}

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
    for (std::size_t pos = 0; (pos = text.find(from, pos)) != std::string::npos; pos += to.size())
        text.replace(pos, from.size(), to);
    return text;
}

// SQL templates use @S for the quoted schema, so that they read like the SQL they are.
std::string with_schema(std::string_view templ, std::string_view schema) {
    return replace_all(std::string(templ), "@S", quote_ident(schema));
}

// Milliseconds since the epoch of a timestamptz, as bigint.
constexpr std::string_view ms_of_updated_at =
    "floor(extract(epoch FROM updated_at) * 1000)::bigint";

// The fence step shared by every write: advance the fence row when the token is at least
// the fence. ON CONFLICT DO UPDATE locks the latest version of the row and evaluates the
// WHERE against it, so concurrent writers to one lock serialize on that row lock even
// under READ COMMITTED; an equal token still updates (and so locks) the row, which keeps a
// concurrent higher advance from committing between our check and our data write.
// updated_at moves only when the token does.
constexpr std::string_view fence_upsert_tail =
    "ON CONFLICT (lock) DO UPDATE SET token = EXCLUDED.token,\n"
    "    updated_at = CASE WHEN fe.token < EXCLUDED.token THEN EXCLUDED.updated_at\n"
    "                      ELSE fe.updated_at END\n"
    "  WHERE fe.token <= EXCLUDED.token\n";

struct write_params {
    std::string key, lock, token, body, content_type, if_match, if_match_any, if_none_match;
};

// The write statement shared by PUT and DELETE (see docs/postgres.md):
//   k  locks the key's row FOR UPDATE and yields its latest committed version, so the
//      lock and precondition checks below see the state we are about to change, and
//      concurrent writers of one key serialize on that row;
//   c  decides lock_mismatch and the preconditions on that row;
//   f  advances the fence only when c passed (a mismatch or failed precondition must
//      leave the fence alone) and the token is >= the fence;
//   w  writes or tombstones the row only when f returned a row.
// The only case k cannot lock is a key that does not exist yet: when a concurrent
// transaction creates it first, w's ON CONFLICT WHERE re-checks lock and preconditions
// on the new row and, if they now fail, the statement raises FKR01 so the fence advance
// is rolled back with everything else and the caller re-runs the statement.
std::string write_sql(std::string_view schema, const write_params& p, bool is_delete) {
    std::string s;
    s += "WITH k AS MATERIALIZED (\n"
         "  SELECT r.lock, r.version, r.deleted FROM @S.resources r\n"
         "  WHERE r.key = " +
         p.key +
         " FOR UPDATE\n"
         "), x AS MATERIALIZED (\n"
         "  SELECT coalesce(bool_or(NOT k.deleted AND k.lock <> " +
         p.lock +
         "), false) AS mismatch,\n"
         "         coalesce(bool_or(NOT k.deleted), false) AS ex,\n"
         "         max(k.version) FILTER (WHERE NOT k.deleted) AS ver,\n"
         "         max(k.lock) FILTER (WHERE NOT k.deleted) AS key_lock\n"
         "  FROM k\n"
         "), c AS MATERIALIZED (\n"
         "  SELECT x.mismatch, x.ex, x.key_lock,\n"
         "         ((" +
         p.if_none_match + " AND x.ex) OR (" + p.if_match_any +
         " AND NOT x.ex)\n"
         "          OR (" +
         p.if_match + " IS NOT NULL AND x.ver IS DISTINCT FROM " + p.if_match +
         "))\n"
         "           AS pre_failed\n"
         "  FROM x\n"
         "), f AS (\n"
         "  INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
         "  SELECT " +
         p.lock + ", " + p.token +
         ", now() FROM c WHERE NOT c.mismatch AND NOT c.pre_failed\n"
         "  ";
    s += fence_upsert_tail;
    s += "  RETURNING fe.token\n";
    if (!is_delete) {
        s +=
            "), w AS (\n"
            "  INSERT INTO @S.resources AS r\n"
            "    (key, lock, body, content_type, version, token, deleted, created_at, updated_at)\n"
            "  SELECT " +
            p.key + ", " + p.lock + ", " + p.body + ", " + p.content_type + ", 1, " + p.token +
            ", false, now(), now() FROM f\n"
            "  ON CONFLICT (key) DO UPDATE SET lock = EXCLUDED.lock, body = EXCLUDED.body,\n"
            "    content_type = EXCLUDED.content_type, version = r.version + 1,\n"
            "    token = EXCLUDED.token, deleted = false,\n"
            "    created_at = CASE WHEN r.deleted THEN EXCLUDED.created_at ELSE r.created_at END,\n"
            "    updated_at = EXCLUDED.updated_at\n"
            "  WHERE (r.deleted OR r.lock = EXCLUDED.lock)\n"
            "    AND NOT (" +
            p.if_none_match +
            " AND NOT r.deleted)\n"
            "    AND NOT (" +
            p.if_match_any +
            " AND r.deleted)\n"
            "    AND (" +
            p.if_match + " IS NULL OR (NOT r.deleted AND r.version = " + p.if_match +
            "))\n"
            "  RETURNING r.version, r.created_at = now() AS created\n";
    } else {
        // A tombstone keeps the version, so a later write continues the count.
        s += "), w AS (\n"
             "  UPDATE @S.resources r SET deleted = true, body = NULL, content_type = NULL,\n"
             "    token = " +
             p.token +
             ", updated_at = now()\n"
             "  WHERE r.key = " +
             p.key + " AND NOT r.deleted AND r.lock = " + p.lock +
             "\n"
             "    AND EXISTS (SELECT 1 FROM f)\n"
             "  RETURNING r.version, false AS created\n";
    }
    // seen_fence reads the statement's snapshot (before f): it tells stale from a
    // failed precondition, and when f found a higher fence than the snapshot shows, the
    // caller re-runs the statement to report the fence that rejected it.
    const char* must_write = is_delete ? "c.ex" : "true";
    s += ")\n"
         "SELECT c.mismatch, c.pre_failed, c.key_lock,\n"
         "       (SELECT f.token FROM f) AS applied,\n"
         "       (SELECT w.version FROM w) AS version,\n"
         "       (SELECT w.created FROM w) AS created,\n"
         "       (SELECT fs.token FROM @S.fences fs WHERE fs.lock = " +
         p.lock +
         ") AS seen_fence,\n"
         "       CASE WHEN " +
         must_write +
         " AND EXISTS (SELECT 1 FROM f)\n"
         "                 AND NOT EXISTS (SELECT 1 FROM w)\n"
         "            THEN @S.fk_raise('" +
         std::string(sqlstate_retry) +
         "', 'a concurrent write created the key, retry') END AS raced\n"
         "FROM c";
    return with_schema(s, schema);
}

std::string token_text(token_t t) {
    return std::to_string(t);
}

// If-Match travels as a bigint where 0 means "none" instead of NULL, so that pgbench
// (which cannot send NULL) runs the very statement text the store prepares (see
// bench_pgbench_script). Versions start at 1, so a client's If-Match of 0 or below can
// never match; it is sent as -1, which keeps it a failing precondition.
std::string_view if_match_param(int n) {
    return n == 4 ? "nullif($4::bigint, 0)" : "nullif($6::bigint, 0)";
}

void add_preconditions(param_list& out, const fence::preconditions& pre) {
    out.push_back(param::of(!pre.if_match        ? "0"
                            : *pre.if_match <= 0 ? "-1"
                                                 : std::to_string(*pre.if_match)));
    out.push_back(param::of(pre.if_match_any ? "true" : "false"));
    out.push_back(param::of(pre.if_none_match_any ? "true" : "false"));
}

} // namespace

std::string op_statement_name(std::size_t index) {
    return "fk_op_" + std::to_string(index);
}

std::string quote_ident(std::string_view ident) {
    std::string out = "\"";
    for (char c : ident) {
        if (c == '"')
            out += '"';
        out += c;
    }
    out += '"';
    return out;
}

bool valid_schema_name(std::string_view schema) noexcept {
    if (schema.empty() || schema.size() > 63)
        return false;
    for (char c : schema)
        if (c == '\0' || c == '$')
            return false;
    return true;
}

std::optional<std::string> prefix_successor(std::string_view prefix) {
    // Decode the last code point; drop it if it is U+10FFFF and try the one before.
    std::string p(prefix);
    while (!p.empty()) {
        std::size_t start = p.size() - 1;
        while (start > 0 && (static_cast<unsigned char>(p[start]) & 0xC0) == 0x80)
            --start;
        auto b = [&](std::size_t i) {
            return static_cast<std::uint32_t>(static_cast<unsigned char>(p[i]));
        };
        std::uint32_t cp = 0;
        const std::size_t len = p.size() - start;
        if (len == 1)
            cp = b(start);
        else if (len == 2)
            cp = ((b(start) & 0x1F) << 6) | (b(start + 1) & 0x3F);
        else if (len == 3)
            cp = ((b(start) & 0x0F) << 12) | ((b(start + 1) & 0x3F) << 6) | (b(start + 2) & 0x3F);
        else
            cp = ((b(start) & 0x07) << 18) | ((b(start + 1) & 0x3F) << 12) |
                 ((b(start + 2) & 0x3F) << 6) | (b(start + 3) & 0x3F);
        p.resize(start);
        if (cp >= 0x10FFFF)
            continue;
        ++cp;
        if (cp >= 0xD800 && cp <= 0xDFFF)
            cp = 0xE000;
        if (cp < 0x80) {
            p += static_cast<char>(cp);
        } else if (cp < 0x800) {
            p += static_cast<char>(0xC0 | (cp >> 6));
            p += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            p += static_cast<char>(0xE0 | (cp >> 12));
            p += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            p += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            p += static_cast<char>(0xF0 | (cp >> 18));
            p += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            p += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            p += static_cast<char>(0x80 | (cp & 0x3F));
        }
        return p;
    }
    return std::nullopt;
}

std::string migration_script(std::string_view schema) {
    // One simple-query string runs as one implicit transaction: the advisory lock (held
    // to its end) serializes proxies that start together, and a failure rolls back all.
    std::string s;
    s += "SELECT pg_catalog.pg_advisory_xact_lock(1718511979, pg_catalog.hashtext(" +
         quote_literal(schema) + "));\n";
    s += "CREATE SCHEMA IF NOT EXISTS @S;\n"
         "CREATE TABLE IF NOT EXISTS @S.schema_version (\n"
         "  version integer PRIMARY KEY,\n"
         "  applied_at timestamptz NOT NULL DEFAULT now());\n"
         "DO $fk_migrate$\n"
         "DECLARE v integer;\n"
         "BEGIN\n"
         "  SELECT coalesce(max(version), 0) INTO v FROM @S.schema_version;\n"
         "  IF v > " +
         std::to_string(schema_version) +
         " THEN\n"
         "    RAISE EXCEPTION USING ERRCODE = 'FKV01', MESSAGE = format(\n"
         "      'schema version %s is newer than this fencekeeper knows (%s)', v, " +
         std::to_string(schema_version) +
         ");\n"
         "  END IF;\n"
         "  IF v < 1 THEN\n"
         // Keys and locks compare bytewise (COLLATE \"C\"), as the contract's listing
         // order requires, and the primary keys then serve prefix range scans.
         "    CREATE TABLE @S.fences (\n"
         "      lock text COLLATE \"C\" PRIMARY KEY,\n"
         "      token bigint NOT NULL,\n"
         "      updated_at timestamptz NOT NULL DEFAULT now()\n"
         "    ) WITH (fillfactor = 80);\n"
         "    CREATE TABLE @S.resources (\n"
         "      key text COLLATE \"C\" PRIMARY KEY,\n"
         "      lock text COLLATE \"C\" NOT NULL,\n"
         "      body bytea,\n"
         "      content_type text,\n"
         "      version bigint NOT NULL,\n"
         "      token bigint NOT NULL,\n"
         "      deleted boolean NOT NULL DEFAULT false,\n"
         "      created_at timestamptz NOT NULL DEFAULT now(),\n"
         "      updated_at timestamptz NOT NULL DEFAULT now()\n"
         "    ) WITH (fillfactor = 80);\n"
         "    CREATE FUNCTION @S.fk_raise(code text, msg text) RETURNS boolean\n"
         "      LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fk_fn$\n"
         "    BEGIN\n"
         "      RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg;\n"
         "    END $fk_fn$;\n"
         // The fence step of a named operation: raises FKST1 (DETAIL = the fence) when
         // stale, which aborts the pipeline's implicit transaction with the user's
         // statement in it. Each statement of a VOLATILE function takes a new snapshot,
         // so the SELECT sees the fence that rejected the token.
         "    CREATE FUNCTION @S.fk_fence_step(p_lock text, p_token bigint) RETURNS bigint\n"
         "      LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fk_fn$\n"
         "    DECLARE cur bigint;\n"
         "    BEGIN\n"
         "      INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
         "      VALUES (p_lock, p_token, now())\n"
         "      ";
    s += fence_upsert_tail;
    s += "      ;\n"
         "      IF FOUND THEN RETURN p_token; END IF;\n"
         "      SELECT f.token INTO cur FROM @S.fences f WHERE f.lock = p_lock;\n"
         "      RAISE EXCEPTION USING ERRCODE = '" +
         std::string(sqlstate_stale) +
         "',\n"
         "        MESSAGE = 'stale fencing token', DETAIL = coalesce(cur::text, '');\n"
         "    END $fk_fn$;\n"
         "    INSERT INTO @S.schema_version (version) VALUES (1);\n"
         "  END IF;\n"
         "END\n"
         "$fk_migrate$;\n";
    return with_schema(s, schema);
}

std::string session_setup(std::chrono::milliseconds statement_timeout) {
    return "SET statement_timeout = " + std::to_string(statement_timeout.count());
}

std::string put_sql(std::string_view schema) {
    return write_sql(schema,
                     {"$1::text", "$2::text", "$3::bigint", "$4::bytea", "$5::text",
                      std::string(if_match_param(6)), "$7::boolean", "$8::boolean"},
                     false);
}

std::string delete_sql(std::string_view schema) {
    return write_sql(schema,
                     {"$1::text", "$2::text", "$3::bigint", "", "", std::string(if_match_param(4)),
                      "$5::boolean", "$6::boolean"},
                     true);
}

std::string advance_sql(std::string_view schema) {
    std::string s = "WITH f AS (\n"
                    "  INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
                    "  VALUES ($1::text, $2::bigint, now())\n  ";
    s += fence_upsert_tail;
    s += "  RETURNING fe.token\n"
         ")\n"
         "SELECT (SELECT f.token FROM f) AS applied,\n"
         "       (SELECT fs.token FROM @S.fences fs WHERE fs.lock = $1::text) AS seen_fence";
    return with_schema(s, schema);
}

std::string get_sql(std::string_view schema, bool with_body) {
    std::string s = "SELECT lock, token, version, content_type, "
                    "coalesce(octet_length(body), 0)::bigint AS size";
    if (with_body)
        s += ", body";
    s += " FROM @S.resources WHERE key = $1::text AND NOT deleted";
    return with_schema(s, schema);
}

std::string read_fence_sql(std::string_view schema) {
    return with_schema("SELECT token, " + std::string(ms_of_updated_at) +
                           " AS updated_ms FROM @S.fences WHERE lock = $1::text",
                       schema);
}

std::string list_sql(std::string_view schema, bool bounded) {
    std::string s = "SELECT lock, token, " + std::string(ms_of_updated_at) +
                    " AS updated_ms FROM @S.fences\n"
                    "WHERE lock >= $1::text AND lock > $2::text";
    if (bounded)
        s += " AND lock < $3::text ORDER BY lock LIMIT $4::bigint";
    else
        s += " ORDER BY lock LIMIT $3::bigint";
    return with_schema(s, schema);
}

std::string op_fence_sql(std::string_view schema) {
    return with_schema("SELECT @S.fk_fence_step($1::text, $2::bigint)", schema);
}

std::string bench_single_write_sql(std::string_view schema) {
    static constexpr std::string_view vars[] = {"key",          "lock",         "token",
                                                "body",         "content_type", "if_match",
                                                "if_match_any", "if_none_match"};
    std::string s = put_sql(schema);
    std::string from, to;
    for (std::size_t i = 0; i < std::size(vars); ++i) {
        // Built by append: GCC 12 at -O3 warns (-Wrestrict, falsely) about "$" + string.
        from.assign(1, '$');
        from.append(std::to_string(i + 1));
        to.assign(1, ':');
        to.append(vars[i]);
        s = replace_all(std::move(s), from, to);
    }
    s.append(";\n");
    return s;
}

std::string bench_pgbench_script(std::string_view schema) {
    std::string s =
        "-- The fenced single-row upsert fencekeeper prepares as \"fk_put\" for every PUT\n"
        "-- (backends/postgres/sql.cpp, put_sql), with $1..$8 written as pgbench variables.\n"
        "-- GENERATED: do not edit. tests/unit/postgres_bench_sql_test.cpp checks that it equals\n"
        "-- sql::bench_pgbench_script(\"" +
        std::string(schema) +
        "\"); FK_UPDATE_BENCH_SQL=1 ./unit_postgres rewrites it.\n"
        "--\n"
        "-- The schema must exist: start fencekeeper once against the database (it migrates\n"
        "-- at start), then stop it. Run, for example:\n"
        "--   pgbench -n -M prepared -c 32 -j 4 -T 20 -D body=0123456789abcdef \\\n"
        "--           -D content_type=application/octet-stream -f pg_fenced_upsert.sql DB\n"
        "-- Many locks, one key per lock (key = lock); token 1 equals the fence after the\n"
        "-- first write, so every write is accepted and rewrites its row (an equal token\n"
        "-- passes the fence). if_match 0 means no If-Match (pgbench cannot send NULL).\n"
        "\\set key random(1, 1000000)\n"
        "\\set lock :key\n"
        "\\set token 1\n"
        "\\set if_match 0\n"
        "\\set if_match_any false\n"
        "\\set if_none_match false\n";
    return s + bench_single_write_sql(schema);
}

// Group commit. Why batches never deadlock, with each other or with the fence-only
// statements (advance_sql, fk_fence_step), under READ COMMITTED:
//
// A batch takes its row locks in three phases, each in one global order:
//   K  write_batch_sql's k locks every existing key row FOR UPDATE, sorted by key (the
//      LockRows node sits above the Sort, so rows are locked in that order). It waits
//      only for committed rows: a key another transaction is creating is invisible to it;
//   F  its f upserts the fence rows, sorted by lock (INSERT ... SELECT ... ORDER BY
//      feeds ON CONFLICT in that order);
//   N  its v inserts the rows of keys k found absent, sorted by key (its Sort reads all of
//      u, hence all of f, before the first insert: F is over when N starts). An insert
//      waits only for a transaction that is itself inserting that key;
//   and w updates only rows the batch already holds: no waiting.
// A transaction waiting in a phase waits only for one that is in the same or a later
// phase, and within a phase, for one that holds a lock later in that phase's order. A
// wait-for cycle would have to stay inside one phase and go strictly up the sorted order
// all the way round: impossible. The fence-only statements take one fence row and
// nothing else. The single-row statement (a lone write, batch_max 1) takes key row,
// fence row, then (creating) the key's index entry: the same order, and it waits for
// nothing once it holds the new key. Within one process it never meets a batch on one
// key or lock anyway: a key and a lock are never in flight twice (detail/batch_queue.hpp).
// (Earlier builds claimed a batch's new keys first, with placeholder rows, before phase
// K. Such a process on the same database can deadlock with this one when both create and
// update the same keys at once; Postgres detects that, aborts one side (40P01, nothing
// written) and that side's writes are re-run.)
//
// A create race: k found no row for a key, the checks passed on "absent", the fence
// moved, and by the time v inserts, another transaction has created the key (committed
// after our snapshot, or waited for). v's ON CONFLICT DO NOTHING then writes nothing for
// that row, the final SELECT sees a row fenced but not written and raises FKR01, and the
// whole batch rolls back: fence advances included, nothing is written. Every write of the
// batch is then re-run alone (map_batch), where the single-row statement decides the race
// on the row that now exists. Neighbours are delayed, never failed.
//
// The batch statement's only sensible plan is index lookups for every row. Left to
// itself, the plan cache goes wrong twice: a generic plan costed while the tables were
// young seq-scans them on every batch until autovacuum re-analyzes; and since a generic
// plan assumes other array sizes than a small batch's, Postgres may keep planning the
// large statement afresh for every batch. So the batch transaction turns seq scans off
// and forces the (then index-only) generic plan, for itself only (set_config is_local);
// other statements and named operations keep the session's settings. Measured at 128
// clients on young tables: 254 us of database CPU per write without, 36 with seq scans
// off, 27 with both.
std::string batch_begin_sql() {
    return "SELECT pg_catalog.set_config('enable_seqscan', 'off', true),\n"
           "       pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true)";
}

std::string write_batch_sql(std::string_view schema) {
    std::string s =
        "WITH i AS MATERIALIZED (\n"
        "  SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::text[],\n"
        "                       $6::bigint[], $7::boolean[], $8::boolean[], $9::boolean[])\n"
        "    WITH ORDINALITY AS t(key, lock, token, body, content_type, if_match,\n"
        "                         if_match_any, if_none_match, is_delete, n)\n"
        "), k AS MATERIALIZED (\n"
        "  SELECT r.key, r.lock, r.version, r.deleted FROM @S.resources r\n"
        "  WHERE r.key = ANY ($1::text[]) ORDER BY r.key COLLATE \"C\" FOR UPDATE\n"
        "), x AS MATERIALIZED (\n"
        // ex: the key exists (not a tombstone); absent: it has no row at all.
        "  SELECT i.n, i.key, i.lock, i.token, i.is_delete, i.if_match, i.if_match_any,\n"
        "         i.if_none_match, k.key IS NULL AS absent,\n"
        "         coalesce(NOT k.deleted, false) AS ex, k.lock AS row_lock,\n"
        "         k.version AS row_version\n"
        "  FROM i LEFT JOIN k ON k.key = i.key\n"
        "), c AS MATERIALIZED (\n"
        "  SELECT x.n, x.key, x.lock, x.token, x.is_delete, x.absent, x.ex,\n"
        "         x.ex AND x.row_lock <> x.lock AS mismatch,\n"
        "         CASE WHEN x.ex THEN x.row_lock END AS key_lock,\n"
        "         ((x.if_none_match AND x.ex) OR (x.if_match_any AND NOT x.ex)\n"
        "          OR (x.if_match <> 0 AND (NOT x.ex OR x.row_version <> x.if_match)))\n"
        "           AS pre_failed\n"
        "  FROM x\n"
        "), f AS (\n"
        "  INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
        "  SELECT c.lock, c.token, now() FROM c\n"
        "  WHERE NOT c.mismatch AND NOT c.pre_failed\n"
        "  ORDER BY c.lock COLLATE \"C\"\n"
        "  ";
    s += fence_upsert_tail;
    s += "  RETURNING fe.lock, fe.token\n"
         "), u AS MATERIALIZED (\n"
         // The rows to write: fenced, and not the delete of a key that does not exist.
         "  SELECT c.n, c.key, c.lock, c.token, c.is_delete, c.absent, i.body, i.content_type\n"
         "  FROM c JOIN f ON f.lock = c.lock JOIN i ON i.n = c.n\n"
         "  WHERE NOT (c.is_delete AND NOT c.ex)\n"
         "), w AS (\n"
         // Every row updated here was locked by k; a tombstone keeps its version.
         "  UPDATE @S.resources r SET lock = u.lock,\n"
         "    body = CASE WHEN u.is_delete THEN NULL ELSE u.body END,\n"
         "    content_type = CASE WHEN u.is_delete THEN NULL ELSE u.content_type END,\n"
         "    version = CASE WHEN u.is_delete THEN r.version ELSE r.version + 1 END,\n"
         "    token = u.token, deleted = u.is_delete,\n"
         "    created_at = CASE WHEN r.deleted AND NOT u.is_delete THEN now()\n"
         "                      ELSE r.created_at END,\n"
         "    updated_at = now()\n"
         "  FROM u WHERE NOT u.absent AND r.key = u.key\n"
         "  RETURNING u.n, r.version\n"
         "), v AS (\n"
         // New keys, in key order. A key created meanwhile by another transaction is
         // skipped here and raised below.
         "  INSERT INTO @S.resources AS r\n"
         "    (key, lock, body, content_type, version, token, deleted, created_at, updated_at)\n"
         "  SELECT u.key, u.lock, u.body, u.content_type, 1, u.token, false, now(), now()\n"
         "  FROM u WHERE u.absent\n"
         "  ORDER BY u.key COLLATE \"C\"\n"
         "  ON CONFLICT (key) DO NOTHING\n"
         "  RETURNING r.key, r.version\n"
         ")\n"
         // Columns as in put_sql/delete_sql (map_write_row), plus n. A row whose fence
         // moved but whose data was not written is a create race (see above): raise, so
         // the whole batch rolls back rather than commit it, and its writes are re-run.
         "SELECT c.n, c.mismatch, c.pre_failed, c.key_lock, f.token AS applied,\n"
         "       coalesce(w.version, v.version) AS version, NOT c.ex AS created,\n"
         // seen_fence only matters for a refused row (map_write_cells): not looked up
         // for the accepted ones.
         "       CASE WHEN f.token IS NULL\n"
         "            THEN (SELECT fs.token FROM @S.fences fs WHERE fs.lock = c.lock) END\n"
         "         AS seen_fence,\n"
         "       CASE WHEN f.token IS NOT NULL AND (NOT c.is_delete OR c.ex)\n"
         "                 AND w.n IS NULL AND v.key IS NULL\n"
         "            THEN @S.fk_raise('" +
         std::string(sqlstate_retry) +
         "', 'a concurrent write created the key, retry') END\n"
         "         AS unwritten\n"
         "FROM c LEFT JOIN f ON f.lock = c.lock LEFT JOIN w ON w.n = c.n\n"
         "  LEFT JOIN v ON v.key = c.key\n"
         "ORDER BY c.n";
    return with_schema(s, schema);
}

array_builder::array_builder(unsigned elem_oid, std::size_t count) {
    auto be32 = [this](std::uint32_t v) {
        for (int shift = 24; shift >= 0; shift -= 8)
            out_ += static_cast<char>((v >> shift) & 0xFF);
    };
    out_.reserve(20 + count * 12);
    be32(1);        // dimensions
    be32(0);        // has nulls: never
    be32(elem_oid); // element type
    be32(static_cast<std::uint32_t>(count));
    be32(1); // lower bound
}

void array_builder::add(std::string_view bytes) {
    const auto n = static_cast<std::uint32_t>(bytes.size());
    for (int shift = 24; shift >= 0; shift -= 8)
        out_ += static_cast<char>((n >> shift) & 0xFF);
    out_.append(bytes);
}

void array_builder::add_int8(std::int64_t v) {
    char b[8];
    const auto u = static_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i)
        b[i] = static_cast<char>((u >> (56 - 8 * i)) & 0xFF);
    add(std::string_view(b, 8));
}

void array_builder::add_bool(bool v) {
    const char b = v ? 1 : 0;
    add(std::string_view(&b, 1));
}

std::string array_builder::finish() && {
    return std::move(out_);
}

param_list single_write_params(const batch_item& item) {
    param_list out;
    out.reserve(8);
    out.push_back(param::of(std::string(item.key)));
    out.push_back(param::of(std::string(item.lock)));
    out.push_back(param::of(token_text(item.token)));
    if (!item.is_delete) {
        out.push_back(param::bytes(item.body));
        out.push_back(param::of(std::string(item.content_type)));
    }
    add_preconditions(out, item.pre);
    return out;
}

param_list write_batch_params(const std::vector<batch_item>& items) {
    const std::size_t n = items.size();
    array_builder key(oid_text, n), lock(oid_text, n), token(oid_int8, n), body(oid_bytea, n),
        ctype(oid_text, n), if_match(oid_int8, n), any(oid_bool, n), none(oid_bool, n),
        del(oid_bool, n);
    for (const auto& it : items) {
        key.add(it.key);
        lock.add(it.lock);
        token.add_int8(it.token);
        body.add(it.is_delete ? std::string_view() : it.body);
        ctype.add(it.is_delete ? std::string_view() : it.content_type);
        // 0 = no If-Match; an If-Match that can never match stays failing (see put_params).
        if_match.add_int8(!it.pre.if_match ? 0 : *it.pre.if_match <= 0 ? -1 : *it.pre.if_match);
        any.add_bool(it.pre.if_match_any);
        none.add_bool(it.pre.if_none_match_any);
        del.add_bool(it.is_delete);
    }
    param_list out;
    out.reserve(9);
    for (auto* b : {&key, &lock, &token, &body, &ctype, &if_match, &any, &none, &del})
        out.push_back(param::owned_bytes(std::move(*b).finish()));
    return out;
}

std::vector<statement> prepared_statements(std::string_view schema) {
    return {
        {name::put, put_sql(schema), 8},
        {name::remove, delete_sql(schema), 6},
        {name::advance, advance_sql(schema), 2},
        {name::get_body, get_sql(schema, true), 1},
        {name::get_meta, get_sql(schema, false), 1},
        {name::read_fence, read_fence_sql(schema), 1},
        {name::list_bounded, list_sql(schema, true), 4},
        {name::list_open, list_sql(schema, false), 3},
        {name::op_fence, op_fence_sql(schema), 2},
        {name::batch_begin, batch_begin_sql(), 0},
        {name::write_batch, write_batch_sql(schema), 9},
    };
}

param_list put_params(const put_request& req) {
    param_list out;
    out.reserve(8);
    out.push_back(param::of(req.key));
    out.push_back(param::of(req.lock));
    out.push_back(param::of(token_text(req.token)));
    out.push_back(param::bytes(req.body));
    out.push_back(param::of(req.content_type));
    add_preconditions(out, req.pre);
    return out;
}

param_list delete_params(const delete_request& req) {
    param_list out;
    out.reserve(6);
    out.push_back(param::of(req.key));
    out.push_back(param::of(req.lock));
    out.push_back(param::of(token_text(req.token)));
    add_preconditions(out, req.pre);
    return out;
}

param_list advance_params(std::string_view lock, token_t token) {
    return {param::of(std::string(lock)), param::of(token_text(token))};
}

param_list key_params(std::string_view key) {
    return {param::of(std::string(key))};
}

param_list lock_params(std::string_view lock) {
    return {param::of(std::string(lock))};
}

list_query list_params(const list_request& req) {
    list_query q;
    const std::string limit = std::to_string(req.limit + 1);
    q.params.push_back(param::of(req.prefix));
    // Lock names are never empty, so "" excludes nothing.
    q.params.push_back(param::of(req.after.value_or(std::string())));
    if (auto upper = prefix_successor(req.prefix)) {
        q.statement = name::list_bounded;
        q.params.push_back(param::of(std::move(*upper)));
    } else {
        q.statement = name::list_open;
    }
    q.params.push_back(param::of(limit));
    return q;
}

param_list op_fence_params(std::string_view lock, token_t token) {
    return advance_params(lock, token);
}

param_list op_params(const std::vector<std::optional<std::string>>& values) {
    param_list out;
    out.reserve(values.size());
    for (const auto& v : values)
        out.push_back(v ? param::of(*v) : param::null());
    return out;
}

} // namespace fk::store::pg::sql
