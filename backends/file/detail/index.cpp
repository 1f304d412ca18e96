// The file store's SQLite index (index.hpp; docs/file-store.md, "The index").
#include "backends/file/detail/index.hpp"

#include "backends/file/detail/sys.hpp"

#include <sqlite3.h>

#include <cstddef>
#include <cstdio>
#include <mutex>
#include <utility>

namespace fk::store::detail {

static_assert(index_ok == SQLITE_OK && index_row == SQLITE_ROW && index_done == SQLITE_DONE);

namespace {

// Names are TEXT compared with the BINARY collation (memcmp): listings come out in
// bytewise order. A deleted key keeps its row with lock NULL: its version stays, so a
// write after a delete continues the count (docs/api.md#words).
constexpr const char* schema_sql = R"sql(
CREATE TABLE IF NOT EXISTS fences (
  lock       TEXT PRIMARY KEY,
  token      INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS keys (
  key          TEXT PRIMARY KEY,
  version      INTEGER NOT NULL,
  lock         TEXT,
  token        INTEGER,
  ms           INTEGER,
  size         INTEGER,
  crc          INTEGER,
  content_type TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS redo (
  seq       INTEGER PRIMARY KEY,
  key       TEXT NOT NULL,
  version   INTEGER NOT NULL,
  is_delete INTEGER NOT NULL,
  tmp       TEXT,
  body      BLOB
);
CREATE TABLE IF NOT EXISTS meta (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idempotency (
  scope        TEXT NOT NULL,
  key          TEXT NOT NULL,
  fingerprint  BLOB NOT NULL,
  created      INTEGER NOT NULL,
  version      INTEGER NOT NULL,
  token        INTEGER NOT NULL,
  committed_ms INTEGER NOT NULL,
  results      TEXT,
  PRIMARY KEY (scope, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_expiry ON idempotency (committed_ms);
CREATE TABLE IF NOT EXISTS floors (
  prefix        TEXT NOT NULL PRIMARY KEY,
  token         INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

void bind_text(sqlite3_stmt* s, int i, std::string_view v) {
    // A null pointer would bind NULL: an empty name (the floor of every lock) is "".
    sqlite3_bind_text(s, i, v.data() ? v.data() : "", static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

std::string column_text(sqlite3_stmt* s, int i) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s, i))) : std::string();
}

// Steps a statement that returns no rows (or whose rows are ignored) and resets it.
int run_once(sqlite3_stmt* s) {
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc == SQLITE_ROW ? SQLITE_DONE : rc;
}

struct reset_on_exit {
    sqlite3_stmt* s;
    ~reset_on_exit() {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
};

// The "fk" VFS: SQLite's default (unix) VFS with every file's xSync routed through the
// store's fault hook (sys.hpp, sync_kind::index), so that the tests that fail a body's
// or a directory's fsync can fail the index's too, and see the store fail-stop.
namespace vfs {

struct wrapped_file {
    sqlite3_file base;  // pMethods = &methods when the real open succeeded
    sqlite3_file* real; // the unix VFS's file, right after this struct
};

sqlite3_vfs* real_vfs = nullptr;
sqlite3_vfs fk_vfs;
sqlite3_io_methods methods;
constexpr const char* name = "fk";
constexpr std::size_t header = (sizeof(wrapped_file) + 15) & ~std::size_t(15);

sqlite3_file* real(sqlite3_file* f) {
    return reinterpret_cast<wrapped_file*>(f)->real;
}

int x_close(sqlite3_file* f) {
    return real(f)->pMethods->xClose(real(f));
}
int x_read(sqlite3_file* f, void* b, int n, sqlite3_int64 o) {
    return real(f)->pMethods->xRead(real(f), b, n, o);
}
int x_write(sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
    return real(f)->pMethods->xWrite(real(f), b, n, o);
}
int x_truncate(sqlite3_file* f, sqlite3_int64 size) {
    return real(f)->pMethods->xTruncate(real(f), size);
}
int x_sync(sqlite3_file* f, int flags) {
    if (injected_sync_fault(sync_kind::index) != 0)
        return SQLITE_IOERR_FSYNC;
    return real(f)->pMethods->xSync(real(f), flags);
}
int x_file_size(sqlite3_file* f, sqlite3_int64* size) {
    return real(f)->pMethods->xFileSize(real(f), size);
}
int x_lock(sqlite3_file* f, int l) {
    return real(f)->pMethods->xLock(real(f), l);
}
int x_unlock(sqlite3_file* f, int l) {
    return real(f)->pMethods->xUnlock(real(f), l);
}
int x_check_reserved(sqlite3_file* f, int* out) {
    return real(f)->pMethods->xCheckReservedLock(real(f), out);
}
int x_file_control(sqlite3_file* f, int op, void* arg) {
    return real(f)->pMethods->xFileControl(real(f), op, arg);
}
int x_sector_size(sqlite3_file* f) {
    return real(f)->pMethods->xSectorSize(real(f));
}
int x_device_characteristics(sqlite3_file* f) {
    return real(f)->pMethods->xDeviceCharacteristics(real(f));
}
int x_shm_map(sqlite3_file* f, int page, int size, int extend, void volatile** out) {
    return real(f)->pMethods->xShmMap(real(f), page, size, extend, out);
}
int x_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
    return real(f)->pMethods->xShmLock(real(f), offset, n, flags);
}
void x_shm_barrier(sqlite3_file* f) {
    real(f)->pMethods->xShmBarrier(real(f));
}
int x_shm_unmap(sqlite3_file* f, int del) {
    return real(f)->pMethods->xShmUnmap(real(f), del);
}
int x_fetch(sqlite3_file* f, sqlite3_int64 o, int n, void** out) {
    return real(f)->pMethods->xFetch(real(f), o, n, out);
}
int x_unfetch(sqlite3_file* f, sqlite3_int64 o, void* p) {
    return real(f)->pMethods->xUnfetch(real(f), o, p);
}

int x_open(sqlite3_vfs*, sqlite3_filename path, sqlite3_file* f, int flags, int* out_flags) {
    auto* w = reinterpret_cast<wrapped_file*>(f);
    w->base.pMethods = nullptr;
    w->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(f) + header);
    int rc = real_vfs->xOpen(real_vfs, path, w->real, flags, out_flags);
    // The real file's methods decide which of ours exist (version, shared memory).
    if (w->real->pMethods)
        w->base.pMethods = &methods;
    return rc;
}

// Registers the VFS once; false when SQLite has no default VFS (never on Linux).
bool ensure() {
    static std::once_flag once;
    std::call_once(once, [] {
        real_vfs = sqlite3_vfs_find(nullptr);
        if (!real_vfs)
            return;
        fk_vfs = *real_vfs;
        fk_vfs.zName = name;
        fk_vfs.szOsFile = static_cast<int>(header) + real_vfs->szOsFile;
        fk_vfs.xOpen = x_open;
        fk_vfs.pNext = nullptr;
        methods = {};
        methods.iVersion = 3;
        methods.xClose = x_close;
        methods.xRead = x_read;
        methods.xWrite = x_write;
        methods.xTruncate = x_truncate;
        methods.xSync = x_sync;
        methods.xFileSize = x_file_size;
        methods.xLock = x_lock;
        methods.xUnlock = x_unlock;
        methods.xCheckReservedLock = x_check_reserved;
        methods.xFileControl = x_file_control;
        methods.xSectorSize = x_sector_size;
        methods.xDeviceCharacteristics = x_device_characteristics;
        methods.xShmMap = x_shm_map;
        methods.xShmLock = x_shm_lock;
        methods.xShmBarrier = x_shm_barrier;
        methods.xShmUnmap = x_shm_unmap;
        methods.xFetch = x_fetch;
        methods.xUnfetch = x_unfetch;
        sqlite3_vfs_register(&fk_vfs, 0);
    });
    return real_vfs != nullptr;
}

} // namespace vfs

} // namespace

index_connection::~index_connection() {
    close();
}

void index_connection::close() noexcept {
    for (auto* s : owned_)
        sqlite3_finalize(s);
    owned_.clear();
    if (db_)
        sqlite3_close_v2(db_);
    db_ = nullptr;
}

int index_connection::fail(int rc, std::string_view what) {
    error_ = std::string(what) + ": " + (db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
    return rc;
}

int index_connection::exec(const char* sql) {
    char* msg = nullptr;
    int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &msg);
    if (rc != SQLITE_OK) {
        error_ = msg ? msg : sqlite3_errstr(rc);
        sqlite3_free(msg);
    }
    return rc;
}

int index_connection::prepare(sqlite3_stmt*& stmt, const char* sql) {
    int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK)
        return fail(rc, std::string("prepare ") + sql);
    owned_.push_back(stmt);
    return rc;
}

int index_connection::open(const std::string& path, int flags, int cache_kib) {
    close();
    // NOMUTEX: each connection is used by one thread at a time (index.hpp).
    int rc = sqlite3_open_v2(path.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX,
                             vfs::ensure() ? vfs::name : nullptr);
    if (rc != SQLITE_OK)
        return fail(rc, "open " + path);
    sqlite3_extended_result_codes(db_, 1);
    // Another connection's checkpoint or commit holds a lock briefly; wait for it.
    sqlite3_busy_timeout(db_, 5000);
    const std::string pragmas = "PRAGMA cache_size=-" + std::to_string(cache_kib) +
                                "; PRAGMA mmap_size=0; PRAGMA temp_store=MEMORY;";
    if ((rc = exec(pragmas.c_str())) != SQLITE_OK)
        return rc;
    return SQLITE_OK;
}

int index_connection::get_fence(std::string_view lock, fence_row& out) {
    if (!get_fence_) {
        if (int rc = prepare(get_fence_, "SELECT token, updated_ms FROM fences WHERE lock = ?1");
            rc != SQLITE_OK)
            return rc;
    }
    reset_on_exit guard{get_fence_};
    bind_text(get_fence_, 1, lock);
    int rc = sqlite3_step(get_fence_);
    if (rc == SQLITE_ROW) {
        out.token = sqlite3_column_int64(get_fence_, 0);
        out.updated_ms = sqlite3_column_int64(get_fence_, 1);
    } else if (rc != SQLITE_DONE) {
        return fail(rc, "reading a fence");
    }
    return rc;
}

int index_connection::get_key(std::string_view key, key_row& out) {
    if (!get_key_) {
        if (int rc = prepare(get_key_, "SELECT version, lock, token, ms, size, crc, content_type "
                                       "FROM keys WHERE key = ?1");
            rc != SQLITE_OK)
            return rc;
    }
    reset_on_exit guard{get_key_};
    bind_text(get_key_, 1, key);
    int rc = sqlite3_step(get_key_);
    if (rc == SQLITE_ROW) {
        out = {};
        out.version = sqlite3_column_int64(get_key_, 0);
        out.exists = sqlite3_column_type(get_key_, 1) != SQLITE_NULL;
        if (out.exists) {
            out.lock = column_text(get_key_, 1);
            out.token = sqlite3_column_int64(get_key_, 2);
            out.ms = sqlite3_column_int64(get_key_, 3);
            out.size = static_cast<std::uint64_t>(sqlite3_column_int64(get_key_, 4));
            out.crc = static_cast<std::uint32_t>(sqlite3_column_int64(get_key_, 5));
            out.content_type = column_text(get_key_, 6);
        }
    } else if (rc != SQLITE_DONE) {
        return fail(rc, "reading a key");
    }
    return rc;
}

int index_connection::list_fences(std::string_view prefix, std::string_view after,
                                  std::size_t limit,
                                  std::vector<std::pair<std::string, fence_row>>& out) {
    if (!list_) {
        // Every lock is non-empty, so "> ''" starts at the first one.
        if (int rc = prepare(list_, "SELECT lock, token, updated_ms FROM fences "
                                    "WHERE lock >= ?1 AND lock > ?2 ORDER BY lock LIMIT ?3");
            rc != SQLITE_OK)
            return rc;
    }
    reset_on_exit guard{list_};
    bind_text(list_, 1, prefix);
    bind_text(list_, 2, after);
    sqlite3_bind_int64(list_, 3, static_cast<sqlite3_int64>(limit));
    int rc;
    while ((rc = sqlite3_step(list_)) == SQLITE_ROW) {
        std::string lock = column_text(list_, 0);
        if (lock.compare(0, prefix.size(), prefix) != 0)
            break; // sorted: no later lock has the prefix either
        out.emplace_back(std::move(lock),
                         fence_row{sqlite3_column_int64(list_, 1), sqlite3_column_int64(list_, 2)});
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return fail(rc, "listing fences");
    return SQLITE_DONE;
}

int index_connection::get_idem(std::string_view scope, std::string_view key, std::int64_t after_ms,
                               idem_row& out) {
    if (!get_idem_) {
        if (int rc = prepare(get_idem_,
                             "SELECT fingerprint, created, version, token, committed_ms, results "
                             "FROM idempotency WHERE scope = ?1 AND key = ?2 "
                             "AND committed_ms > ?3");
            rc != SQLITE_OK)
            return rc;
    }
    reset_on_exit guard{get_idem_};
    bind_text(get_idem_, 1, scope);
    bind_text(get_idem_, 2, key);
    sqlite3_bind_int64(get_idem_, 3, after_ms);
    int rc = sqlite3_step(get_idem_);
    if (rc == SQLITE_ROW) {
        const auto* p = static_cast<const char*>(sqlite3_column_blob(get_idem_, 0));
        out.fingerprint.assign(p ? p : "",
                               static_cast<std::size_t>(sqlite3_column_bytes(get_idem_, 0)));
        out.created = sqlite3_column_int(get_idem_, 1) != 0;
        out.version = sqlite3_column_int64(get_idem_, 2);
        out.token = sqlite3_column_int64(get_idem_, 3);
        out.committed_ms = sqlite3_column_int64(get_idem_, 4);
        out.results.reset();
        if (sqlite3_column_type(get_idem_, 5) != SQLITE_NULL)
            out.results = column_text(get_idem_, 5);
    } else if (rc != SQLITE_DONE) {
        return fail(rc, "reading an idempotency record");
    }
    return rc;
}

int index_connection::idem_usage(std::int64_t after_ms, std::int64_t overhead,
                                 std::vector<idem_scope_usage>& out) {
    if (!idem_usage_) {
        // Byte lengths: length() of TEXT counts characters. 32: the fingerprint.
        if (int rc =
                prepare(idem_usage_, "SELECT scope, count(*), sum(length(CAST(scope AS BLOB)) + "
                                     "length(CAST(key AS BLOB)) + 32 + "
                                     "coalesce(length(CAST(results AS BLOB)), 0) + ?2), "
                                     "min(committed_ms) FROM idempotency WHERE committed_ms > ?1 "
                                     "GROUP BY scope ORDER BY scope");
            rc != SQLITE_OK)
            return rc;
    }
    reset_on_exit guard{idem_usage_};
    sqlite3_bind_int64(idem_usage_, 1, after_ms);
    sqlite3_bind_int64(idem_usage_, 2, overhead);
    int rc;
    while ((rc = sqlite3_step(idem_usage_)) == SQLITE_ROW)
        out.push_back(idem_scope_usage{
            column_text(idem_usage_, 0), sqlite3_column_int64(idem_usage_, 1),
            sqlite3_column_int64(idem_usage_, 2), sqlite3_column_int64(idem_usage_, 3)});
    if (rc != SQLITE_DONE)
        return fail(rc, "counting idempotency records");
    return rc;
}

int index_connection::list_floors(std::vector<fence::floor_entry>& out) {
    if (!list_floors_) {
        if (int rc = prepare(list_floors_,
                             "SELECT prefix, token, updated_at_ms FROM floors ORDER BY prefix");
            rc != SQLITE_OK)
            return rc;
    }
    reset_on_exit guard{list_floors_};
    int rc;
    while ((rc = sqlite3_step(list_floors_)) == SQLITE_ROW)
        out.push_back(fence::floor_entry{column_text(list_floors_, 0),
                                         sqlite3_column_int64(list_floors_, 1),
                                         sqlite3_column_int64(list_floors_, 2)});
    if (rc != SQLITE_DONE)
        return fail(rc, "reading fence floors");
    return SQLITE_DONE;
}

int index_connection::floors_over(std::string_view lock, std::vector<fence::floor_entry>& out) {
    if (!floors_over_) {
        // Every floor over `lock` sorts at or before it; at most store::max_floors rows.
        if (int rc = prepare(floors_over_, "SELECT prefix, token, updated_at_ms FROM floors "
                                           "WHERE prefix <= ?1 ORDER BY prefix");
            rc != SQLITE_OK)
            return rc;
    }
    reset_on_exit guard{floors_over_};
    bind_text(floors_over_, 1, lock);
    int rc;
    while ((rc = sqlite3_step(floors_over_)) == SQLITE_ROW) {
        std::string prefix = column_text(floors_over_, 0);
        if (lock.substr(0, prefix.size()) == prefix)
            out.push_back(fence::floor_entry{std::move(prefix),
                                             sqlite3_column_int64(floors_over_, 1),
                                             sqlite3_column_int64(floors_over_, 2)});
    }
    if (rc != SQLITE_DONE)
        return fail(rc, "reading fence floors");
    return SQLITE_DONE;
}

int index_connection::begin_read() {
    if (int rc = read_begin_ ? SQLITE_OK : prepare(read_begin_, "BEGIN DEFERRED"); rc != SQLITE_OK)
        return rc;
    if (int rc = read_end_ ? SQLITE_OK : prepare(read_end_, "COMMIT"); rc != SQLITE_OK)
        return rc;
    const int rc = run_once(read_begin_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "BEGIN");
}

void index_connection::end_read() noexcept {
    if (read_end_ && !sqlite3_get_autocommit(db_))
        run_once(read_end_);
}

int index_reader::open(const std::string& path) {
    return index_connection::open(path, SQLITE_OPEN_READONLY, 4096);
}

index_open_result index_writer::open(const std::string& path, int cache_kib) {
    index_open_result r;
    r.rc = index_connection::open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, cache_kib);
    if (r.rc != SQLITE_OK)
        return r;
    {
        sqlite3_stmt* s = nullptr;
        if ((r.rc = sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &s, nullptr)) != SQLITE_OK) {
            fail(r.rc, "reading the format version");
            return r;
        }
        if (sqlite3_step(s) == SQLITE_ROW)
            r.found_format = sqlite3_column_int(s, 0);
        sqlite3_finalize(s);
    }
    if (r.found_format > index_format) {
        r.newer = true;
        return r;
    }
    // WAL: readers never block the commit, and a commit is one append + one fsync of the
    // WAL. Checkpoints run on the checkpointer's connection, never in a commit
    // (wal_autocheckpoint=0). journal_size_limit truncates the WAL after a checkpoint
    // that let it restart.
    const char* setup = "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
                        "PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit=67108864;";
    if ((r.rc = exec(setup)) != SQLITE_OK)
        return r;
    // A new file gets the whole schema; an older format gets what it lacks (format 1 → 2:
    // the idempotency table and its index; 2 → 3: the floors table), in the same one
    // transaction as its new user_version, so a crash leaves either the old format
    // untouched or the new one complete.
    const std::string create = std::string("BEGIN IMMEDIATE;") + schema_sql +
                               "PRAGMA user_version=" + std::to_string(index_format) + ";COMMIT;";
    if ((r.rc = exec(create.c_str())) != SQLITE_OK) {
        exec("ROLLBACK");
        return r;
    }
    if ((r.rc = add_results_column()) != SQLITE_OK)
        return r;
    {
        sqlite3_stmt* s = nullptr;
        sqlite3_prepare_v2(db_, "SELECT value FROM meta WHERE name = 'clean'", -1, &s, nullptr);
        // A new file has nothing to sweep after.
        r.clean =
            r.found_format == 0 || (s && sqlite3_step(s) == SQLITE_ROW && column_text(s, 0) == "1");
        sqlite3_finalize(s);
    }
    const std::pair<sqlite3_stmt**, const char*> statements[] = {
        {&begin_, "BEGIN IMMEDIATE"},
        {&commit_, "COMMIT"},
        {&rollback_, "ROLLBACK"},
        {&savepoint_, "SAVEPOINT txn"},
        {&release_, "RELEASE txn"},
        {&rollback_to_, "ROLLBACK TO txn"},
        {&put_fence_, "INSERT INTO fences (lock, token, updated_ms) VALUES (?1, ?2, ?3) "
                      "ON CONFLICT (lock) DO UPDATE SET token = excluded.token, "
                      "updated_ms = excluded.updated_ms"},
        {&put_key_, "INSERT OR REPLACE INTO keys (key, version, lock, token, ms, size, crc, "
                    "content_type) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"},
        {&tombstone_, "INSERT OR REPLACE INTO keys (key, version) VALUES (?1, ?2)"},
        {&add_redo_, "INSERT INTO redo (key, version, is_delete, tmp, body, seq) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
        {&redo_rows_, "SELECT seq, key, version, is_delete, tmp, body FROM redo ORDER BY seq"},
        {&delete_redo_, "DELETE FROM redo WHERE seq <= ?1"},
        {&put_idem_, "INSERT OR REPLACE INTO idempotency (scope, key, fingerprint, created, "
                     "version, token, committed_ms, results) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"},
        // The oldest first, through the committed_ms index (which holds the primary key).
        {&expire_idem_, "DELETE FROM idempotency WHERE (scope, key) IN (SELECT scope, key "
                        "FROM idempotency WHERE committed_ms <= ?1 ORDER BY committed_ms "
                        "LIMIT ?2)"},
        {&put_floor_, "INSERT INTO floors (prefix, token, updated_at_ms) VALUES (?1, ?2, ?3) "
                      "ON CONFLICT (prefix) DO UPDATE SET token = excluded.token, "
                      "updated_at_ms = excluded.updated_at_ms"},
    };
    for (auto [stmt, sql] : statements)
        if ((r.rc = prepare(*stmt, sql)) != SQLITE_OK)
            return r;
    sqlite3_stmt* max_seq = nullptr;
    if ((r.rc = prepare(max_seq, "SELECT coalesce(max(seq), 0) FROM redo")) != SQLITE_OK)
        return r;
    if ((r.rc = sqlite3_step(max_seq)) != SQLITE_ROW) {
        fail(r.rc, "reading the last redo seq");
        return r;
    }
    last_redo_seq_ = sqlite3_column_int64(max_seq, 0);
    sqlite3_reset(max_seq);
    if ((r.rc = mark_clean(false)) != SQLITE_OK)
        return r;
    r.rc = SQLITE_OK;
    return r;
}

int index_writer::begin() {
    int rc = run_once(begin_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "BEGIN");
}

int index_writer::commit() {
    int rc = run_once(commit_);
    if (rc == SQLITE_DONE)
        return SQLITE_OK;
    fail(rc, "COMMIT");
    // A failed COMMIT may leave the transaction open (SQLITE_BUSY) or rolled back.
    if (!sqlite3_get_autocommit(db_))
        rollback();
    return rc;
}

void index_writer::rollback() noexcept {
    if (!sqlite3_get_autocommit(db_))
        run_once(rollback_);
}

int index_writer::savepoint() {
    int rc = run_once(savepoint_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "SAVEPOINT");
}

int index_writer::release() {
    int rc = run_once(release_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "RELEASE");
}

int index_writer::rollback_to() {
    int rc = run_once(rollback_to_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "ROLLBACK TO");
}

int index_writer::add_results_column() {
    // An index made before transactions (format 3 without the column) gets it here. No
    // format bump: the column is nullable and only added, so a build that does not know
    // it reads and writes such an index as before (its records leave it NULL).
    sqlite3_stmt* s = nullptr;
    int rc = sqlite3_prepare_v2(db_, "PRAGMA table_info(idempotency)", -1, &s, nullptr);
    if (rc != SQLITE_OK)
        return fail(rc, "reading the idempotency table's columns");
    bool has = false;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        if (column_text(s, 1) == "results")
            has = true;
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE)
        return fail(rc, "reading the idempotency table's columns");
    return has ? SQLITE_OK : exec("ALTER TABLE idempotency ADD COLUMN results TEXT");
}

int index_writer::put_fence(std::string_view lock, fence::token_t token, std::int64_t ms) {
    bind_text(put_fence_, 1, lock);
    sqlite3_bind_int64(put_fence_, 2, token);
    sqlite3_bind_int64(put_fence_, 3, ms);
    int rc = run_once(put_fence_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "writing a fence");
}

int index_writer::put_key(std::string_view key, const key_row& row) {
    bind_text(put_key_, 1, key);
    sqlite3_bind_int64(put_key_, 2, row.version);
    bind_text(put_key_, 3, row.lock);
    sqlite3_bind_int64(put_key_, 4, row.token);
    sqlite3_bind_int64(put_key_, 5, row.ms);
    sqlite3_bind_int64(put_key_, 6, static_cast<sqlite3_int64>(row.size));
    sqlite3_bind_int64(put_key_, 7, row.crc);
    bind_text(put_key_, 8, row.content_type);
    int rc = run_once(put_key_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "writing a key");
}

int index_writer::tombstone_key(std::string_view key, std::int64_t version) {
    bind_text(tombstone_, 1, key);
    sqlite3_bind_int64(tombstone_, 2, version);
    int rc = run_once(tombstone_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "writing a tombstone");
}

int index_writer::add_redo(redo_row& row) {
    bind_text(add_redo_, 1, row.key);
    sqlite3_bind_int64(add_redo_, 2, row.version);
    sqlite3_bind_int(add_redo_, 3, row.is_delete ? 1 : 0);
    if (!row.tmp.empty())
        bind_text(add_redo_, 4, row.tmp);
    if (row.body)
        sqlite3_bind_blob64(add_redo_, 5, row.body->data(), row.body->size(), SQLITE_TRANSIENT);
    sqlite3_bind_int64(add_redo_, 6, last_redo_seq_ + 1);
    int rc = run_once(add_redo_);
    if (rc != SQLITE_DONE)
        return fail(rc, "writing a redo row");
    // Taken even if the batch then rolls back: a seq is never handed out twice.
    row.seq = ++last_redo_seq_;
    return SQLITE_OK;
}

int index_writer::redo_rows(std::vector<redo_row>& out) {
    reset_on_exit guard{redo_rows_};
    int rc;
    while ((rc = sqlite3_step(redo_rows_)) == SQLITE_ROW) {
        redo_row r;
        r.seq = sqlite3_column_int64(redo_rows_, 0);
        r.key = column_text(redo_rows_, 1);
        r.version = sqlite3_column_int64(redo_rows_, 2);
        r.is_delete = sqlite3_column_int(redo_rows_, 3) != 0;
        r.tmp = column_text(redo_rows_, 4);
        if (sqlite3_column_type(redo_rows_, 5) != SQLITE_NULL) {
            const auto* p = static_cast<const char*>(sqlite3_column_blob(redo_rows_, 5));
            r.body = std::string(p ? p : "",
                                 static_cast<std::size_t>(sqlite3_column_bytes(redo_rows_, 5)));
        }
        out.push_back(std::move(r));
    }
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "reading redo rows");
}

int index_writer::delete_redo_through(std::int64_t seq) {
    sqlite3_bind_int64(delete_redo_, 1, seq);
    int rc = run_once(delete_redo_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "deleting redo rows");
}

int index_writer::put_idem(std::string_view scope, std::string_view key, const idem_row& row) {
    bind_text(put_idem_, 1, scope);
    bind_text(put_idem_, 2, key);
    sqlite3_bind_blob64(put_idem_, 3, row.fingerprint.data(), row.fingerprint.size(),
                        SQLITE_TRANSIENT);
    sqlite3_bind_int(put_idem_, 4, row.created ? 1 : 0);
    sqlite3_bind_int64(put_idem_, 5, row.version);
    sqlite3_bind_int64(put_idem_, 6, row.token);
    sqlite3_bind_int64(put_idem_, 7, row.committed_ms);
    if (row.results)
        bind_text(put_idem_, 8, *row.results);
    int rc = run_once(put_idem_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "writing an idempotency record");
}

int index_writer::expire_idem(std::int64_t through_ms, int limit, int& deleted) {
    sqlite3_bind_int64(expire_idem_, 1, through_ms);
    sqlite3_bind_int(expire_idem_, 2, limit);
    int rc = run_once(expire_idem_);
    if (rc != SQLITE_DONE)
        return fail(rc, "deleting expired idempotency records");
    deleted = sqlite3_changes(db_);
    return SQLITE_OK;
}

int index_writer::put_floor(std::string_view prefix, fence::token_t token, std::int64_t ms) {
    bind_text(put_floor_, 1, prefix);
    sqlite3_bind_int64(put_floor_, 2, token);
    sqlite3_bind_int64(put_floor_, 3, ms);
    int rc = run_once(put_floor_);
    return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "writing a fence floor");
}

int index_writer::mark_clean(bool clean) {
    const std::string sql = std::string("INSERT OR REPLACE INTO meta (name, value) VALUES "
                                        "('clean', '") +
                            (clean ? "1" : "0") + "')";
    return exec(sql.c_str());
}

int index_writer::checkpoint(int& log_frames, int& done_frames) {
    int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log_frames,
                                       &done_frames);
    return rc == SQLITE_OK ? rc : fail(rc, "checkpoint");
}

void index_writer::on_wal_commit(int (*fn)(void*, sqlite3*, const char*, int), void* arg) {
    sqlite3_wal_hook(db_, fn, arg);
}

int index_checkpointer::open(const std::string& path) {
    return index_connection::open(path, SQLITE_OPEN_READWRITE, 1024);
}

int index_checkpointer::checkpoint(int& log_frames, int& done_frames) {
    int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log_frames,
                                       &done_frames);
    return rc == SQLITE_OK ? rc : fail(rc, "checkpoint");
}

namespace {

// index_writer's open() switches to WAL; the builder keeps a rollback journal so that
// the finished file stands alone (no -wal beside it) when it is renamed into place.
class builder : public index_connection {
public:
    int create(const std::string& path) {
        int rc = index_connection::open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, 65536);
        if (rc != SQLITE_OK)
            return rc;
        const std::string sql = std::string("PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;"
                                            "BEGIN IMMEDIATE;") +
                                schema_sql + "PRAGMA user_version=" + std::to_string(index_format) +
                                ";";
        if ((rc = exec(sql.c_str())) != SQLITE_OK)
            return rc;
        if ((rc = prepare(fence_, "INSERT INTO fences (lock, token, updated_ms) "
                                  "VALUES (?1, ?2, ?3)")) != SQLITE_OK)
            return rc;
        return prepare(key_, "INSERT INTO keys (key, version, lock, token, ms, size, crc, "
                             "content_type) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    }
    int add(const std::string& lock, const fence_row& f) {
        bind_text(fence_, 1, lock);
        sqlite3_bind_int64(fence_, 2, f.token);
        sqlite3_bind_int64(fence_, 3, f.updated_ms);
        int rc = run_once(fence_);
        return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "writing a fence");
    }
    int add(const std::string& key, const key_row& k) {
        bind_text(key_, 1, key);
        sqlite3_bind_int64(key_, 2, k.version);
        if (k.exists) {
            bind_text(key_, 3, k.lock);
            sqlite3_bind_int64(key_, 4, k.token);
            sqlite3_bind_int64(key_, 5, k.ms);
            sqlite3_bind_int64(key_, 6, static_cast<sqlite3_int64>(k.size));
            sqlite3_bind_int64(key_, 7, k.crc);
            bind_text(key_, 8, k.content_type);
        }
        int rc = run_once(key_);
        return rc == SQLITE_DONE ? SQLITE_OK : fail(rc, "writing a key");
    }
    int finish() {
        int rc = exec("INSERT INTO meta (name, value) VALUES ('clean', '1'); COMMIT");
        if (rc == SQLITE_OK) {
            close();
        }
        return rc;
    }

private:
    sqlite3_stmt* fence_ = nullptr;
    sqlite3_stmt* key_ = nullptr;
};

} // namespace

int build_index(const std::string& path,
                const std::vector<std::pair<std::string, fence_row>>& fences,
                const std::vector<std::pair<std::string, key_row>>& keys, std::string& error) {
    builder b;
    int rc = b.create(path);
    for (std::size_t i = 0; rc == SQLITE_OK && i < fences.size(); ++i)
        rc = b.add(fences[i].first, fences[i].second);
    for (std::size_t i = 0; rc == SQLITE_OK && i < keys.size(); ++i)
        rc = b.add(keys[i].first, keys[i].second);
    if (rc == SQLITE_OK)
        rc = b.finish();
    if (rc != SQLITE_OK)
        error = b.last_error();
    return rc;
}

} // namespace fk::store::detail
