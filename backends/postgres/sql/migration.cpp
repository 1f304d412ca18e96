#include "backends/postgres/sql/fragments.hpp"
#include "backends/postgres/sql/quoting.hpp"
#include "backends/postgres/sql/statements.hpp"

namespace fk::store::pg::sql {

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
         // Version 2: Idempotency-Key records (docs/postgres.md, "Idempotency-Key
         // records"). It only adds a table and an index, so proxies of version 1 that are
         // running keep working while the others are upgraded; a version-1 binary that
         // (re)starts afterwards stops at the FKV01 check above.
         "  IF v < 2 THEN\n"
         "    CREATE TABLE @S.idempotency (\n"
         "      scope text COLLATE \"C\" NOT NULL,\n"
         "      key text COLLATE \"C\" NOT NULL,\n"
         "      fingerprint bytea NOT NULL,\n"
         "      created boolean NOT NULL DEFAULT false,\n"
         "      version bigint NOT NULL DEFAULT 0,\n"
         "      token bigint NOT NULL,\n"
         "      rows_affected bigint NOT NULL DEFAULT 0,\n"
         "      rows text,\n"
         "      committed_at timestamptz NOT NULL DEFAULT now(),\n"
         "      PRIMARY KEY (scope, key)\n"
         "    );\n"
         "    CREATE INDEX idempotency_committed_at ON @S.idempotency (committed_at);\n"
         "    INSERT INTO @S.schema_version (version) VALUES (2);\n"
         "  END IF;\n"
         // Version 3: fence floors (docs/postgres.md, "Fence floors"). Adds the table and
         // gives the operations' fence step the floor check (the write statements of
         // this binary have it in their text). Version-2 proxies still running keep
         // working, without enforcing floors on puts, deletes and fence advances: raise
         // floors once every proxy is upgraded.
         "  IF v < 3 THEN\n"
         "    CREATE TABLE @S.floors (\n"
         "      prefix text COLLATE \"C\" PRIMARY KEY,\n"
         "      token bigint NOT NULL,\n"
         "      updated_at timestamptz NOT NULL DEFAULT now()\n"
         "    );\n"
         // The fence step first (it takes the lock on fences that a floor raise's SHARE
         // lock waits for), then the floor, read by a statement whose snapshot is taken
         // with that lock held: it sees every floor committed before this transaction
         // could write (sql/floors.cpp). A stale token raises FKST1 with DETAIL = the
         // effective fence and, when the floor sets it, HINT = 'floor:' || its prefix.
         "    CREATE OR REPLACE FUNCTION @S.fk_fence_step(p_lock text, p_token bigint)\n"
         "      RETURNS bigint\n"
         "      LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fk_fn$\n"
         "    DECLARE cur bigint; applied boolean; fp text; ft bigint;\n"
         "    BEGIN\n"
         "      INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
         "      VALUES (p_lock, p_token, now())\n"
         "      ";
    s += fence_upsert_tail;
    s += "      ;\n"
         "      applied := FOUND;\n"
         "      SELECT h.prefix, h.token INTO fp, ft FROM (" +
         floor_for("p_lock") +
         ") h;\n"
         "      IF applied AND (ft IS NULL OR ft <= p_token) THEN RETURN p_token; END IF;\n"
         // Applied but below the floor: the own fence was at most p_token, so the floor
         // is above it. Refused: the own fence, in a snapshot newer than the upsert's.
         "      IF NOT applied THEN\n"
         "        SELECT f.token INTO cur FROM @S.fences f WHERE f.lock = p_lock;\n"
         "      END IF;\n"
         "      IF ft IS NOT NULL AND ft > p_token AND (cur IS NULL OR ft > cur) THEN\n"
         "        RAISE EXCEPTION USING ERRCODE = '" +
         std::string(sqlstate_stale) +
         "',\n"
         "          MESSAGE = 'stale fencing token', DETAIL = ft::text, HINT = 'floor:' || fp;\n"
         "      END IF;\n"
         "      RAISE EXCEPTION USING ERRCODE = '" +
         std::string(sqlstate_stale) +
         "',\n"
         "        MESSAGE = 'stale fencing token', DETAIL = coalesce(cur::text, '');\n"
         "    END $fk_fn$;\n"
         "    INSERT INTO @S.schema_version (version) VALUES (3);\n"
         "  END IF;\n"
         // Version 4: fk_key_live, the create/delete race's fresh look (docs/postgres.md,
         // "A delete racing a create"). The statements of this binary call it; proxies of
         // version 3 still running keep working, without it: upgrade every proxy.
         "  IF v < 4 THEN\n"
         "    CREATE OR REPLACE FUNCTION @S.fk_key_live(p_key text) RETURNS boolean\n"
         "      LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fk_fn$\n"
         // A VOLATILE function's statement takes a new snapshot (READ COMMITTED): it sees
         // a row committed after the calling statement's snapshot was taken.
         "    BEGIN\n"
         "      PERFORM 1 FROM @S.resources r WHERE r.key = p_key AND NOT r.deleted;\n"
         "      RETURN FOUND;\n"
         "    END $fk_fn$;\n"
         "    INSERT INTO @S.schema_version (version) VALUES (4);\n"
         "  END IF;\n"
         "END\n"
         "$fk_migrate$;\n";
    return with_schema(s, schema);
}

} // namespace fk::store::pg::sql
