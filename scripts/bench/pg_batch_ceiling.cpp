// pg_batch_ceiling: a reference for P in scripts/bench.sh. What the database itself
// delivers for fencekeeper's group-commit batches when nothing else is in the way: one
// connection sends fencekeeper's own batch pipeline
//
//   [fk_batch_begin, fk_write_batch(BATCH fresh keys, each under its own lock), Sync]
//
// one batch at a time, back to back, for SECONDS, and checks that every write of every
// batch was applied. The statements and their binary array parameters come from the very
// functions the store uses (backends/postgres/sql/: batch_begin_sql, write_batch_sql,
// write_batch_params), so this measures the statement fencekeeper sends, minus HTTP, the
// proxy's own CPU and its turnaround between batches. Keys and locks are TAG-n, the
// token is n, bodies BODY_BYTES of 'x', as in P's wrk load. The schema must exist (start
// a fencekeeper on the database once). SHAPE (optional) is `plain` (the default: no
// Idempotency-Key, the plain statement fencekeeper sends for such batches) or `keyed`
// (every write with a fresh Idempotency-Key, the keyed statement): the two side by side
// are what the keys cost the database (docs/benchmarks.md, "Where the time goes").
// Prints "batches=N writes=W seconds=S writes_per_s=R".
//
// Build (after the fencekeeper target, whose libraries it links), from the repository:
//   g++ -O2 -std=c++20 -I. -I/usr/include/postgresql scripts/bench/pg_batch_ceiling.cpp
//       build/libfk_store_pg.a build/libfk_asio.a build/libfk_fence.a -lpq
// Usage: pg_batch_ceiling CONNINFO SCHEMA BATCH SECONDS BODY_BYTES TAG [SHAPE]

#include "backends/postgres/sql.hpp"

#include <libpq-fe.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace sql = fk::store::pg::sql;

namespace {

[[noreturn]] void fail(const char* what, PGconn* c) {
    std::fprintf(stderr, "pg_batch_ceiling: %s: %s", what, c ? PQerrorMessage(c) : "\n");
    std::exit(1);
}

void prepare(PGconn* c, const char* name, const std::string& text) {
    PGresult* r = PQprepare(c, name, text.c_str(), 0, nullptr);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok)
        fail("prepare", c);
}

// Reads one batch's results up to its Sync; returns how many rows the batch statement
// reported as applied (column "applied" not NULL).
long collect(PGconn* c) {
    long applied = 0;
    for (;;) {
        PGresult* r = PQgetResult(c);
        if (!r) {
            if (PQstatus(c) != CONNECTION_OK)
                fail("connection lost", c);
            continue; // end of one statement's results
        }
        const auto st = PQresultStatus(r);
        if (st == PGRES_FATAL_ERROR) {
            std::fprintf(stderr, "pg_batch_ceiling: batch failed: %s", PQresultErrorMessage(r));
            std::exit(1);
        }
        if (st == PGRES_TUPLES_OK && PQnfields(r) > 1) {
            const int col = PQfnumber(r, "applied");
            for (int i = 0; col >= 0 && i < PQntuples(r); ++i)
                applied += PQgetisnull(r, i, col) ? 0 : 1;
        }
        PQclear(r);
        if (st == PGRES_PIPELINE_SYNC)
            return applied;
    }
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 7 && argc != 8) {
        std::fprintf(stderr,
                     "usage: %s CONNINFO SCHEMA BATCH SECONDS BODY_BYTES TAG [plain|keyed]\n",
                     argv[0]);
        return 2;
    }
    const std::string schema = argv[2], tag = argv[6];
    const std::string shape = argc == 8 ? argv[7] : "plain";
    const bool keyed = shape == "keyed";
    if (!keyed && shape != "plain") {
        std::fprintf(stderr, "pg_batch_ceiling: SHAPE is plain or keyed\n");
        return 2;
    }
    const long batch = std::atol(argv[3]);
    const double seconds = std::atof(argv[4]);
    const std::string body(static_cast<std::size_t>(std::atol(argv[5])), 'x');
    const std::string content_type = "application/octet-stream";
    if (batch < 2 || batch > 1024 || seconds <= 0) {
        // A batch of one goes out as the single-row statement, which pgbench measures.
        std::fprintf(stderr, "pg_batch_ceiling: BATCH must be 2..1024, SECONDS > 0\n");
        return 2;
    }

    PGconn* c = PQconnectdb(argv[1]);
    if (PQstatus(c) != CONNECTION_OK)
        fail("connect", c);
    prepare(c, sql::name::batch_begin, sql::batch_begin_sql());
    prepare(c, sql::name::write_batch, sql::write_batch_sql(schema, sql::batch_shape::plain));
    prepare(c, sql::name::write_batch_keyed, sql::write_batch_sql(schema, sql::batch_shape::keyed));
    if (PQenterPipelineMode(c) != 1)
        fail("pipeline mode", c);

    long n = 0, batches = 0, writes = 0;
    std::vector<std::string> names(static_cast<std::size_t>(batch));
    std::vector<sql::batch_item> items(static_cast<std::size_t>(batch));
    std::vector<fk::store::idempotency> keys(keyed ? items.size() : 0);
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
        for (std::size_t i = 0; i < items.size(); ++i) {
            ++n;
            names[i] = tag + std::to_string(n);
            items[i].key = names[i];
            items[i].lock = names[i];
            items[i].token = n;
            items[i].body = body;
            items[i].content_type = content_type;
            if (keyed) {
                keys[i] = {"", names[i], std::string(32, 'f')};
                items[i].idem = &keys[i];
            }
        }
        const auto st = sql::write_batch_statement(items, std::chrono::seconds(86'400));
        const sql::param_arrays a(st.params); // as the store sends them
        if (!PQsendQueryPrepared(c, sql::name::batch_begin, 0, nullptr, nullptr, nullptr, 0) ||
            !PQsendQueryPrepared(c, st.statement, a.size(), a.values.data(), a.lengths.data(),
                                 a.formats.data(), 0) ||
            !PQpipelineSync(c) || PQflush(c) != 0)
            fail("send", c);
        const long applied = collect(c);
        if (applied != batch) {
            std::fprintf(stderr, "pg_batch_ceiling: a batch applied %ld of %ld writes\n", applied,
                         batch);
            return 1;
        }
        ++batches;
        writes += applied;
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("batches=%ld writes=%ld seconds=%.3f writes_per_s=%.1f\n", batches, writes, took,
                static_cast<double>(writes) / took);
    PQfinish(c);
    return 0;
}
