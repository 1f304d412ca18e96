#pragma once
// The file store's index: every fence and every key's metadata, in SQLite
// (ROOT/index.db, WAL mode, synchronous=FULL). Layout, format version and how an operator
// reads it: docs/file-store.md, "The index".
//
// Threads: an index_writer belongs to the committer thread (the only writer; one write
// transaction per group-commit batch). Every other thread that reads uses its own
// index_reader (SQLite connections are not shared between threads here); readers never
// block the writer and see only committed transactions (WAL snapshot isolation). The
// checkpointer runs WAL checkpoints on a connection of its own (index_checkpointer).
//
// Errors: calls return an int SQLite result code (SQLITE_OK / SQLITE_ROW / SQLITE_DONE
// on success) and keep the last message in last_error(); none throws.

#include "fence/floors.hpp"
#include "fence/token.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace fk::store::detail {

// SQLite's result codes, for callers that do not include sqlite3.h (checked in index.cpp).
inline constexpr int index_ok = 0;     // SQLITE_OK
inline constexpr int index_row = 100;  // SQLITE_ROW: found
inline constexpr int index_done = 101; // SQLITE_DONE: absent, or finished

// The format this build writes and the newest it reads (PRAGMA user_version). 2 added the
// idempotency table, 3 the floors table; opening an older index adds what it lacks in
// place (index_writer::open).
inline constexpr int index_format = 3;
inline constexpr const char* index_file = "index.db";

struct fence_row {
    fence::token_t token = 0;
    std::int64_t updated_ms = 0;
};

struct key_row {
    std::int64_t version = 0;
    bool exists = false; // false: a tombstone, which keeps only the version
    std::string lock;
    fence::token_t token = 0;
    std::int64_t ms = 0;
    std::uint64_t size = 0;
    std::uint32_t crc = 0;
    std::string content_type;
};

// An Idempotency-Key record (backends/store.hpp, `struct idempotency`): the outcome a
// retry with the same (scope, key) and fingerprint is answered with.
struct idem_row {
    std::string fingerprint; // 32 opaque bytes
    bool created = false;    // put
    std::int64_t version = 0;
    fence::token_t token = 0;
    std::int64_t committed_ms = 0; // Unix ms of the commit; expires after the retention
    // A transaction's record: its "results" text (render_txn_results), which a replay
    // returns; nullopt (NULL) for a single write's record.
    std::optional<std::string> results;
};

// The unexpired Idempotency-Key records of one scope (index_connection::idem_usage).
struct idem_scope_usage {
    std::string scope;
    std::int64_t records = 0;
    std::int64_t bytes = 0;     // as store::idem_record_bytes counts them
    std::int64_t oldest_ms = 0; // the oldest commit, Unix ms
};

// A write whose files may not be durable yet (docs/file-store.md, "Redo rows").
struct redo_row {
    std::int64_t seq = 0;
    std::string key;
    std::int64_t version = 0;
    bool is_delete = false;
    std::string tmp;                 // put: its temp file, "" when written in place
    std::optional<std::string> body; // put: a copy of a small body
};

// One SQLite connection with its prepared statements; the base of the three roles.
class index_connection {
public:
    index_connection() = default;
    index_connection(const index_connection&) = delete;
    index_connection& operator=(const index_connection&) = delete;
    ~index_connection();

    const std::string& last_error() const noexcept { return error_; }
    sqlite3* handle() const noexcept { return db_; }
    void close() noexcept;

    // Lookups; SQLITE_ROW when found (out filled), SQLITE_DONE when absent.
    int get_fence(std::string_view lock, fence_row& out);
    int get_key(std::string_view key, key_row& out);
    // Fences whose lock starts with `prefix`, after `after` (exclusive; "" = from the
    // start), in bytewise order, at most `limit`.
    int list_fences(std::string_view prefix, std::string_view after, std::size_t limit,
                    std::vector<std::pair<std::string, fence_row>>& out);
    // The record under (scope, key) committed after `after_ms` (older ones count as
    // expired, absent); SQLITE_ROW when found.
    int get_idem(std::string_view scope, std::string_view key, std::int64_t after_ms,
                 idem_row& out);
    // Per scope, the records committed after `after_ms`: appended to `out` in scope order,
    // one pass over the table's primary key; SQLITE_DONE when read. `overhead` is
    // store::idem_record_overhead.
    int idem_usage(std::int64_t after_ms, std::int64_t overhead,
                   std::vector<idem_scope_usage>& out);
    // Every fence floor (docs/file-store.md, "Fence floors"), appended to `out` in bytewise
    // order of prefix; SQLITE_DONE when read.
    int list_floors(std::vector<fence::floor_entry>& out);
    // The floors whose prefix `lock` starts with, appended to `out`; SQLITE_DONE when read.
    int floors_over(std::string_view lock, std::vector<fence::floor_entry>& out);
    // A read transaction (not on the writer inside its own): the reads until end_read()
    // see one snapshot. SQLITE_OK when begun; end_read() after every successful begin.
    int begin_read();
    void end_read() noexcept;

protected:
    int open(const std::string& path, int flags, int cache_kib);
    int exec(const char* sql);
    int prepare(sqlite3_stmt*& stmt, const char* sql);
    int fail(int rc, std::string_view what);

    sqlite3* db_ = nullptr;
    std::string error_;

private:
    sqlite3_stmt* get_fence_ = nullptr;
    sqlite3_stmt* get_key_ = nullptr;
    sqlite3_stmt* list_ = nullptr;
    sqlite3_stmt* get_idem_ = nullptr;
    sqlite3_stmt* idem_usage_ = nullptr;
    sqlite3_stmt* list_floors_ = nullptr;
    sqlite3_stmt* floors_over_ = nullptr;
    sqlite3_stmt* read_begin_ = nullptr;
    sqlite3_stmt* read_end_ = nullptr;
    std::vector<sqlite3_stmt*> owned_;
};

// A read-only connection (GET, HEAD, fence reads, listings, the sweep).
class index_reader : public index_connection {
public:
    int open(const std::string& path);
};

// What index_writer::open found.
struct index_open_result {
    int rc = 0;           // SQLITE_OK or the error
    int found_format = 0; // the file's user_version before open (0: a new file; lower than
                          // index_format: upgraded in place by this open)
    bool newer = false;   // written by a newer format than this build reads: refused
    bool clean = false;   // the last process to use it stopped cleanly
};

// The committer's connection.
class index_writer : public index_connection {
public:
    // Opens (creating if needed) the index at `path`, checks its format, creates the
    // schema, and records "not cleanly stopped" until mark_clean().
    index_open_result open(const std::string& path, int cache_kib);

    int begin();  // BEGIN IMMEDIATE
    int commit(); // COMMIT: the commit point of a batch
    void rollback() noexcept;
    // Inside a batch's transaction, around one transaction item (docs/file-store.md,
    // "Transactions"): SAVEPOINT, RELEASE (keep its writes in the batch), ROLLBACK TO
    // (undo them; the savepoint stays open until RELEASE).
    int savepoint();
    int release();
    int rollback_to();

    int put_fence(std::string_view lock, fence::token_t token, std::int64_t ms);
    int put_key(std::string_view key, const key_row& row);
    // Makes `key` a tombstone: its version stays, everything else is dropped.
    int tombstone_key(std::string_view key, std::int64_t version);
    // Appends a redo row; seq is assigned (returned through row.seq): one more than any
    // seq this connection has seen, in the table at open or written since, so seqs only
    // grow for the life of the writer even after every row was deleted. (SQLite's own
    // rowid restarts at 1 in an empty table, and the committer's trim, "delete through
    // the last flushed seq", would then skip every row until the seqs passed the old
    // ones again: issue 54.)
    int add_redo(redo_row& row);
    int redo_rows(std::vector<redo_row>& out);
    int delete_redo_through(std::int64_t seq);
    // Inserts the record under (scope, key), replacing an expired one.
    int put_idem(std::string_view scope, std::string_view key, const idem_row& row);
    // Deletes at most `limit` records committed at or before `through_ms`, oldest first;
    // `deleted` gets how many went.
    int expire_idem(std::int64_t through_ms, int limit, int& deleted);
    // Sets the floor of `prefix` ("" allowed) to `token`; the caller has checked that it
    // goes up.
    int put_floor(std::string_view prefix, fence::token_t token, std::int64_t ms);

    // Outside a transaction: the clean-shutdown flag.
    int mark_clean(bool clean);
    // Outside a transaction: a PASSIVE checkpoint on this connection. Run between
    // batches, when no frame is being appended, it can copy the whole WAL, which lets the
    // next commit start the WAL over (docs/file-store.md, "Checkpoints").
    int checkpoint(int& log_frames, int& done_frames);
    // Registers `fn(arg, wal_pages)`, called after each commit (SQLite's WAL hook).
    void on_wal_commit(int (*fn)(void*, sqlite3*, const char*, int), void* arg);

private:
    // Adds idempotency.results to an index created before transactions.
    int add_results_column();

    sqlite3_stmt* begin_ = nullptr;
    sqlite3_stmt* commit_ = nullptr;
    sqlite3_stmt* rollback_ = nullptr;
    sqlite3_stmt* savepoint_ = nullptr;
    sqlite3_stmt* release_ = nullptr;
    sqlite3_stmt* rollback_to_ = nullptr;
    sqlite3_stmt* put_fence_ = nullptr;
    sqlite3_stmt* put_key_ = nullptr;
    sqlite3_stmt* tombstone_ = nullptr;
    sqlite3_stmt* add_redo_ = nullptr;
    sqlite3_stmt* redo_rows_ = nullptr;
    sqlite3_stmt* delete_redo_ = nullptr;
    sqlite3_stmt* put_idem_ = nullptr;
    sqlite3_stmt* expire_idem_ = nullptr;
    sqlite3_stmt* put_floor_ = nullptr;
    std::int64_t last_redo_seq_ = 0; // see add_redo
};

// Runs PASSIVE checkpoints (which never block the writer) on its own connection.
class index_checkpointer : public index_connection {
public:
    int open(const std::string& path);
    // Copies committed WAL frames into the database file; `log` / `done` as in
    // sqlite3_wal_checkpoint_v2.
    int checkpoint(int& log_frames, int& done_frames);
};

// Writes a complete index file at `path` (which must not exist) in one transaction, in
// rollback-journal mode, synced when this returns SQLITE_OK: converting a journal-format
// directory (legacy_import.hpp) builds ROOT/index.db.new with it, then renames it.
int build_index(const std::string& path,
                const std::vector<std::pair<std::string, fence_row>>& fences,
                const std::vector<std::pair<std::string, key_row>>& keys, std::string& error);

} // namespace fk::store::detail
