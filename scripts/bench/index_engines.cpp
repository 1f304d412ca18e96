// index_engines: SQLite vs LMDB as the file store's metadata index (issue 31), on the
// workload of the file store's committer. One engine and one phase per process, so that
// every phase starts with a fresh process (its RSS is its own, as after a restart):
//
//   load     grow the store to --to rows with durability off and big transactions
//            (a fast way to reach N rows; not timed as a result beyond its rate)
//   measure  one writer thread commits batches of --batch writes back to back for
//            --seconds, each batch one durable transaction; --readers threads do paced
//            point reads meanwhile on their own connections / read transactions
//   reopen   open the store, first fence read, first key read, then --cold-reads random
//            lookups, then a full scan of both tables; RSS after each (the runner drops
//            the page cache before this phase)
//   churn    delete --churn random keys (fences stay: a fence is never forgotten), then
//            write the same keys again, both in durable transactions of --churn-txn;
//            file sizes and free pages after each step
//
// One write, as the committer does it: read the lock's fence row (lock -> token,
// updated_ms) and the key's row (key -> lock, token, version, ms, size, crc32,
// content_type), then upsert both. A write overwrites a random existing key with
// probability --update-frac (default 0.5) and creates a new one otherwise. Lock name = key name (as
// `fk.lua put`: a fresh lock per key), so N keys means N fences too. Names are `t<p>/k<s>` with s a
// 32-bit bijection of the row's id (random insertion order) and p = s % 1000; --name-len L pads
// every name to exactly L bytes in the middle (`t<p>/ppp…/k<s>`).
//
// SQLite: WAL, synchronous=FULL, mmap_size=0, cache_size = -cache_kib on the writer and
// -reader_cache_kib on each reader, one BEGIN IMMEDIATE … COMMIT per batch, prepared
// statements, WITHOUT ROWID tables keyed by name. --ckpt writer: wal_autocheckpoint=1000
// (PASSIVE, run inside the COMMIT that crosses it); --ckpt thread: wal_autocheckpoint=0, a
// wal_hook on the writer wakes a checkpointer thread (own connection) that runs a PASSIVE
// checkpoint once the WAL holds >= 1000 frames; once it holds >= --catchup-frames (default
// 4096 = 16 MiB; 0 = never) the writer runs a PASSIVE checkpoint itself between two
// batches, which lets the WAL restart (see wal_hook).
// LMDB: default flags (no MDB_NOSYNC, no MDB_WRITEMAP): a commit writes the dirty pages,
// fdatasyncs, then writes the meta page through an O_DSYNC descriptor. LMDB keys are at
// most 511 bytes (MDB_MAXKEYSIZE of Debian's build): a name of at most 495 bytes is the
// key itself; a longer one becomes its first 495 bytes + a 128-bit hash of the whole name,
// and the value carries the rest of the name, which every read compares (a mismatch would
// be a hash collision: counted, and an error in a real store).
//
// Output: one line per phase, `phase=… engine=… key=value …`, for index_engines.sh.
//
// Build: g++ -std=c++20 -O2 -Wall -Wextra -pthread index_engines.cpp -lsqlite3 -llmdb
// Usage: index_engines --engine sqlite|lmdb --dir DIR --phase load|measure|reopen|churn
//        [--to N] [--seconds S] [--batch B] [--readers R] [--read-rate PER_S]
//        [--update-frac F] [--name-len L] [--ckpt writer|thread]
//        [--catchup-frames N] [--cache-kib K]
//        [--reader-cache-kib K] [--cold-reads N] [--scan 0|1] [--page-size BYTES]
//        [--churn N] [--churn-txn N] [--samples FILE]
//
// --samples FILE (measure): also append every batch latency ("b <µs>") and read latency
// ("r <µs>") to FILE, so that the runner can pool the percentiles of several rounds.

#include <lmdb.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "index_engines: %s\n", what.c_str());
    std::exit(1);
}

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double micros_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double process_cpu_seconds() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// ---------------------------------------------------------------- options

struct options {
    std::string engine;
    std::string dir;
    std::string phase;
    long long to = 0;
    double seconds = 20;
    int batch = 32;
    int readers = 2;
    int read_rate = 1000;
    double update_frac = 0.5;
    int name_len = 0;
    std::string ckpt = "writer";
    std::string samples;
    int catchup_frames = 4096;
    long long cache_kib = 65536;
    long long reader_cache_kib = 16384;
    int cold_reads = 1000;
    bool scan = true;
    int page_size = 0;
    long long churn = 1000000;
    int churn_txn = 10000;
};

options parse_options(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc)
            die("missing value for " + a);
        const std::string v = argv[++i];
        if (a == "--engine")
            o.engine = v;
        else if (a == "--dir")
            o.dir = v;
        else if (a == "--phase")
            o.phase = v;
        else if (a == "--to")
            o.to = std::atoll(v.c_str());
        else if (a == "--seconds")
            o.seconds = std::atof(v.c_str());
        else if (a == "--batch")
            o.batch = std::atoi(v.c_str());
        else if (a == "--readers")
            o.readers = std::atoi(v.c_str());
        else if (a == "--read-rate")
            o.read_rate = std::atoi(v.c_str());
        else if (a == "--update-frac")
            o.update_frac = std::atof(v.c_str());
        else if (a == "--name-len")
            o.name_len = std::atoi(v.c_str());
        else if (a == "--samples")
            o.samples = v;
        else if (a == "--ckpt")
            o.ckpt = v;
        else if (a == "--catchup-frames")
            o.catchup_frames = std::atoi(v.c_str());
        else if (a == "--cache-kib")
            o.cache_kib = std::atoll(v.c_str());
        else if (a == "--reader-cache-kib")
            o.reader_cache_kib = std::atoll(v.c_str());
        else if (a == "--cold-reads")
            o.cold_reads = std::atoi(v.c_str());
        else if (a == "--scan")
            o.scan = v != "0";
        else if (a == "--page-size")
            o.page_size = std::atoi(v.c_str());
        else if (a == "--churn")
            o.churn = std::atoll(v.c_str());
        else if (a == "--churn-txn")
            o.churn_txn = std::atoi(v.c_str());
        else
            die("unknown option " + a);
    }
    if ((o.engine != "sqlite" && o.engine != "lmdb") || o.dir.empty() ||
        (o.phase != "load" && o.phase != "measure" && o.phase != "reopen" && o.phase != "churn") ||
        (o.ckpt != "writer" && o.ckpt != "thread") || o.batch < 1 || o.readers < 0 ||
        o.read_rate < 1 || o.name_len < 0 || o.name_len > 1024 || o.churn_txn < 1)
        die("bad arguments (see the usage at the top of index_engines.cpp)");
    return o;
}

// ---------------------------------------------------------------- names and rows

// murmur3's fmix32: a bijection on 32 bits, so distinct ids give distinct names.
std::uint32_t scramble(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x85ebca6bU;
    x ^= x >> 13;
    x *= 0xc2b2ae35U;
    x ^= x >> 16;
    return x;
}

std::string name_of(std::uint64_t id, int name_len) {
    const std::uint32_t s = scramble(static_cast<std::uint32_t>(id));
    const std::string head = "t" + std::to_string(s % 1000) + "/";
    const std::string tail = "k" + std::to_string(s);
    const std::size_t bare = head.size() + tail.size();
    if (name_len == 0 || static_cast<std::size_t>(name_len) <= bare + 1)
        return head + tail;
    return head + std::string(static_cast<std::size_t>(name_len) - bare - 1, 'p') + "/" + tail;
}

struct key_row {
    std::string lock;
    std::int64_t token = 0;
    std::int64_t version = 0;
    std::int64_t ms = 0;
    std::int64_t size = 0;
    std::uint32_t crc32 = 0;
    std::string content_type;
};

std::int64_t wall_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The store's count of ids handed out so far (ids 0..count-1 were written; the churn
// phase deletes some of them, and is the last phase).
std::string count_path(const options& o) {
    return o.dir + "/ids";
}

long long read_count(const options& o) {
    std::ifstream in(count_path(o));
    long long n = 0;
    in >> n;
    return n;
}

void write_count(const options& o, long long n) {
    std::ofstream out(count_path(o), std::ios::trunc);
    out << n << "\n";
}

long long file_size(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : 0;
}

long long file_blocks_bytes(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<long long>(st.st_blocks) * 512 : 0;
}

// p-quantile of sorted values (nearest rank).
double quantile(const std::vector<double>& sorted, double p) {
    if (sorted.empty())
        return 0;
    const auto idx = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
    return sorted[std::min(idx, sorted.size() - 1)];
}

// ---------------------------------------------------------------- the engines

struct engine_stats {
    std::vector<std::pair<std::string, std::string>> fields;
    void add(const std::string& k, long long v) { fields.emplace_back(k, std::to_string(v)); }
};

class writer {
public:
    virtual ~writer() = default;
    virtual void begin() = 0;
    virtual std::optional<std::int64_t> get_fence(const std::string& lock) = 0;
    virtual std::optional<key_row> get_key(const std::string& key) = 0;
    virtual void put_fence(const std::string& lock, std::int64_t token, std::int64_t ms) = 0;
    virtual void put_key(const std::string& key, const key_row& row) = 0;
    virtual void erase_key(const std::string& key) = 0;
    virtual void commit() = 0;

    // One write of the committer: both reads, the fence rule's arithmetic, both upserts.
    void write(const std::string& key, const std::string& lock, std::int64_t ms) {
        const auto fence = get_fence(lock);
        const auto old = get_key(key);
        const std::int64_t token = std::max(fence.value_or(0), old ? old->token : 0) + 1;
        key_row row;
        row.lock = lock;
        row.token = token;
        row.version = old ? old->version + 1 : 1;
        row.ms = ms;
        row.size = 256;
        row.crc32 = static_cast<std::uint32_t>(token * 2654435761U);
        row.content_type = "application/octet-stream";
        put_fence(lock, token, ms);
        put_key(key, row);
    }
};

class reader {
public:
    virtual ~reader() = default;
    virtual bool fence(const std::string& lock) = 0;
    virtual bool key(const std::string& key) = 0;
};

class engine {
public:
    virtual ~engine() = default;
    virtual std::unique_ptr<writer> make_writer() = 0;
    virtual std::unique_ptr<reader> make_reader() = 0;
    virtual long long full_scan() = 0; // rows visited in both tables
    virtual engine_stats stats() = 0;  // sizes, free pages
    virtual long long wal_bytes() { return 0; }
    virtual void checkpoint_truncate() {}
    virtual void stop_background() {}
    virtual engine_stats background_stats() { return {}; }
    virtual long long collisions() { return 0; }
};

// ---------------------------------------------------------------- SQLite

void sq_check(sqlite3* db, int rc, const char* what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
        die(std::string("sqlite ") + what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
}

void sq_exec(sqlite3* db, const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        const std::string msg = err ? err : "?";
        sqlite3_free(err);
        die("sqlite exec `" + sql + "`: " + msg);
    }
}

long long sq_pragma_int(sqlite3* db, const std::string& pragma) {
    sqlite3_stmt* st = nullptr;
    sq_check(db, sqlite3_prepare_v2(db, ("PRAGMA " + pragma).c_str(), -1, &st, nullptr),
             "prepare pragma");
    long long v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

struct sq_db_deleter {
    void operator()(sqlite3* db) const { sqlite3_close(db); }
};
using sq_db = std::unique_ptr<sqlite3, sq_db_deleter>;

struct sq_stmt_deleter {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using sq_stmt = std::unique_ptr<sqlite3_stmt, sq_stmt_deleter>;

sq_stmt sq_prepare(sqlite3* db, const char* sql) {
    sqlite3_stmt* st = nullptr;
    sq_check(db, sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr), sql);
    return sq_stmt(st);
}

void sq_text(sqlite3_stmt* st, int i, const std::string& s) {
    sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
}

std::string sq_column_text(sqlite3_stmt* st, int i) {
    const auto* p = sqlite3_column_text(st, i);
    return std::string(reinterpret_cast<const char*>(p),
                       static_cast<std::size_t>(sqlite3_column_bytes(st, i)));
}

sq_db sq_open(const std::string& path, bool read_only, long long cache_kib) {
    sqlite3* raw = nullptr;
    const int flags =
        (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
        SQLITE_OPEN_NOMUTEX;
    const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
    sq_db db(raw);
    sq_check(raw, rc, "open");
    sqlite3_busy_timeout(raw, 10000);
    sq_exec(raw, "PRAGMA cache_size=-" + std::to_string(cache_kib));
    sq_exec(raw, "PRAGMA mmap_size=0");
    return db;
}

class sqlite_writer final : public writer {
public:
    explicit sqlite_writer(sqlite3* db)
        : db_(db), begin_(sq_prepare(db, "BEGIN IMMEDIATE")), commit_(sq_prepare(db, "COMMIT")),
          get_fence_(sq_prepare(db, "SELECT token FROM fences WHERE lock=?1")),
          get_key_(sq_prepare(db, "SELECT lock, token, version, ms, size, crc32, content_type "
                                  "FROM keys WHERE key=?1")),
          put_fence_(sq_prepare(db, "INSERT INTO fences(lock, token, updated_ms) VALUES(?1,?2,?3) "
                                    "ON CONFLICT(lock) DO UPDATE SET token=excluded.token, "
                                    "updated_ms=excluded.updated_ms")),
          put_key_(sq_prepare(
              db, "INSERT INTO keys(key, lock, token, version, ms, size, crc32, content_type) "
                  "VALUES(?1,?2,?3,?4,?5,?6,?7,?8) ON CONFLICT(key) DO UPDATE SET "
                  "lock=excluded.lock, token=excluded.token, version=excluded.version, "
                  "ms=excluded.ms, size=excluded.size, crc32=excluded.crc32, "
                  "content_type=excluded.content_type")),
          erase_key_(sq_prepare(db, "DELETE FROM keys WHERE key=?1")) {}

    void begin() override { run(begin_.get(), "begin"); }
    void commit() override { run(commit_.get(), "commit"); }

    std::optional<std::int64_t> get_fence(const std::string& lock) override {
        sqlite3_stmt* st = get_fence_.get();
        sq_text(st, 1, lock);
        std::optional<std::int64_t> r;
        const int rc = sqlite3_step(st);
        sq_check(db_, rc, "get fence");
        if (rc == SQLITE_ROW)
            r = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        return r;
    }

    std::optional<key_row> get_key(const std::string& key) override {
        sqlite3_stmt* st = get_key_.get();
        sq_text(st, 1, key);
        std::optional<key_row> r;
        const int rc = sqlite3_step(st);
        sq_check(db_, rc, "get key");
        if (rc == SQLITE_ROW) {
            key_row k;
            k.lock = sq_column_text(st, 0);
            k.token = sqlite3_column_int64(st, 1);
            k.version = sqlite3_column_int64(st, 2);
            k.ms = sqlite3_column_int64(st, 3);
            k.size = sqlite3_column_int64(st, 4);
            k.crc32 = static_cast<std::uint32_t>(sqlite3_column_int64(st, 5));
            k.content_type = sq_column_text(st, 6);
            r = std::move(k);
        }
        sqlite3_reset(st);
        return r;
    }

    void put_fence(const std::string& lock, std::int64_t token, std::int64_t ms) override {
        sqlite3_stmt* st = put_fence_.get();
        sq_text(st, 1, lock);
        sqlite3_bind_int64(st, 2, token);
        sqlite3_bind_int64(st, 3, ms);
        run(st, "put fence");
    }

    void put_key(const std::string& key, const key_row& row) override {
        sqlite3_stmt* st = put_key_.get();
        sq_text(st, 1, key);
        sq_text(st, 2, row.lock);
        sqlite3_bind_int64(st, 3, row.token);
        sqlite3_bind_int64(st, 4, row.version);
        sqlite3_bind_int64(st, 5, row.ms);
        sqlite3_bind_int64(st, 6, row.size);
        sqlite3_bind_int64(st, 7, row.crc32);
        sq_text(st, 8, row.content_type);
        run(st, "put key");
    }

    void erase_key(const std::string& key) override {
        sq_text(erase_key_.get(), 1, key);
        run(erase_key_.get(), "erase key");
    }

private:
    void run(sqlite3_stmt* st, const char* what) {
        sq_check(db_, sqlite3_step(st), what);
        sqlite3_reset(st);
    }

    sqlite3* db_;
    sq_stmt begin_, commit_, get_fence_, get_key_, put_fence_, put_key_, erase_key_;
};

class sqlite_reader final : public reader {
public:
    sqlite_reader(const std::string& path, long long cache_kib)
        : db_(sq_open(path, true, cache_kib)),
          fence_(sq_prepare(db_.get(), "SELECT token, updated_ms FROM fences WHERE lock=?1")),
          key_(sq_prepare(db_.get(), "SELECT lock, token, version, ms, size, crc32, "
                                     "content_type FROM keys WHERE key=?1")) {}

    bool fence(const std::string& lock) override {
        sqlite3_stmt* st = fence_.get();
        sq_text(st, 1, lock);
        const int rc = sqlite3_step(st);
        sq_check(db_.get(), rc, "read fence");
        volatile std::int64_t sink = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
        (void)sink;
        sqlite3_reset(st);
        return rc == SQLITE_ROW;
    }

    bool key(const std::string& key) override {
        sqlite3_stmt* st = key_.get();
        sq_text(st, 1, key);
        const int rc = sqlite3_step(st);
        sq_check(db_.get(), rc, "read key");
        if (rc == SQLITE_ROW) {
            key_row k;
            k.lock = sq_column_text(st, 0);
            k.token = sqlite3_column_int64(st, 1);
            k.version = sqlite3_column_int64(st, 2);
            k.content_type = sq_column_text(st, 6);
        }
        sqlite3_reset(st);
        return rc == SQLITE_ROW;
    }

private:
    sq_db db_;
    sq_stmt fence_, key_;
};

class sqlite_engine final : public engine {
public:
    // load: journal off, no syncs, a 1 GiB cache (the load phase only); else WAL,
    // synchronous=FULL and the configured cache and checkpoints.
    sqlite_engine(const options& o, bool load)
        : o_(o), path_(o.dir + "/index.db"),
          db_(sq_open(path_, false, load ? std::max(o.cache_kib, 1048576LL) : o.cache_kib)) {
        sqlite3* db = db_.get();
        if (load && o.page_size > 0) // takes effect only on a new, empty database
            sq_exec(db, "PRAGMA page_size=" + std::to_string(o.page_size));
        if (load) {
            sq_exec(db, "PRAGMA journal_mode=OFF");
            sq_exec(db, "PRAGMA synchronous=OFF");
        } else {
            sq_exec(db, "PRAGMA journal_mode=WAL");
            sq_exec(db, "PRAGMA synchronous=FULL");
        }
        sq_exec(db, "CREATE TABLE IF NOT EXISTS fences(lock TEXT PRIMARY KEY, token INTEGER "
                    "NOT NULL, updated_ms INTEGER NOT NULL) WITHOUT ROWID");
        sq_exec(db, "CREATE TABLE IF NOT EXISTS keys(key TEXT PRIMARY KEY, lock TEXT NOT NULL, "
                    "token INTEGER NOT NULL, version INTEGER NOT NULL, ms INTEGER NOT NULL, "
                    "size INTEGER NOT NULL, crc32 INTEGER NOT NULL, content_type TEXT NOT "
                    "NULL) WITHOUT ROWID");
        if (!load && o.ckpt == "thread") {
            sq_exec(db, "PRAGMA wal_autocheckpoint=0");
            sqlite3_wal_hook(db, &sqlite_engine::wal_hook, this);
            checkpointer_ = std::thread([this] { checkpoint_loop(); });
        } else if (!load) {
            sq_exec(db, "PRAGMA wal_autocheckpoint=1000");
        }
    }

    ~sqlite_engine() override { stop_background(); }

    std::unique_ptr<writer> make_writer() override {
        return std::make_unique<sqlite_writer>(db_.get());
    }
    std::unique_ptr<reader> make_reader() override {
        return std::make_unique<sqlite_reader>(path_, o_.reader_cache_kib);
    }

    long long full_scan() override {
        long long rows = 0;
        for (const char* sql : {"SELECT lock, token, updated_ms FROM fences",
                                "SELECT key, lock, token, version, ms, size, crc32, "
                                "content_type FROM keys"}) {
            sq_stmt st = sq_prepare(db_.get(), sql);
            int rc = 0;
            while ((rc = sqlite3_step(st.get())) == SQLITE_ROW)
                ++rows;
            sq_check(db_.get(), rc, "scan");
        }
        return rows;
    }

    engine_stats stats() override {
        engine_stats s;
        s.add("db_bytes", file_size(path_));
        s.add("wal_bytes", file_size(path_ + "-wal"));
        s.add("page_size", sq_pragma_int(db_.get(), "page_size"));
        s.add("page_count", sq_pragma_int(db_.get(), "page_count"));
        s.add("free_pages", sq_pragma_int(db_.get(), "freelist_count"));
        return s;
    }

    long long wal_bytes() override { return file_size(path_ + "-wal"); }
    void checkpoint_truncate() override { sq_exec(db_.get(), "PRAGMA wal_checkpoint(TRUNCATE)"); }

    void stop_background() override {
        if (!checkpointer_.joinable())
            return;
        {
            std::lock_guard lk(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        checkpointer_.join();
    }

    engine_stats background_stats() override {
        engine_stats s;
        if (o_.ckpt != "thread")
            return s;
        std::lock_guard lk(mu_);
        for (auto [name, v] : {std::pair{"bg", ckpt_us_}, std::pair{"catchup", catchup_us_}}) {
            std::sort(v.begin(), v.end());
            s.add(std::string(name) + "_ckpts", static_cast<long long>(v.size()));
            s.add(std::string(name) + "_ckpt_p50_ms",
                  static_cast<long long>(quantile(v, 0.5) / 1000));
            s.add(std::string(name) + "_ckpt_max_ms",
                  v.empty() ? 0 : static_cast<long long>(v.back() / 1000));
        }
        s.add("bg_ckpt_busy", ckpt_busy_);
        s.add("catchup_busy", catchup_busy_);
        return s;
    }

private:
    // Runs in the writer's thread after each commit.
    static int wal_hook(void* self, sqlite3* db, const char*, int frames) {
        auto* e = static_cast<sqlite_engine*>(self);
        if (e->o_.catchup_frames > 0 && frames >= e->o_.catchup_frames) {
            // The background PASSIVE checkpoints never let the WAL restart while the
            // writer keeps committing (they never catch up with it), so the WAL would grow
            // without bound. Here the writer itself, between two batches, finishes what
            // they left; its next BEGIN then restarts the WAL from the start. SQLITE_BUSY:
            // the checkpointer is running; try again after the next batch.
            const auto t0 = clock_type::now();
            const int rc =
                sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
            if (rc == SQLITE_BUSY) {
                ++e->catchup_busy_;
            } else {
                sq_check(db, rc, "writer checkpoint");
                e->catchup_us_.push_back(micros_between(t0, clock_type::now()));
            }
        } else if (frames >= 1000) {
            std::lock_guard lk(e->mu_);
            e->wanted_ = true;
            e->cv_.notify_one();
        }
        return SQLITE_OK;
    }

    void checkpoint_loop() {
        sq_db db = sq_open(path_, false, 2048);
        std::unique_lock lk(mu_);
        while (true) {
            cv_.wait(lk, [this] { return stop_ || wanted_; });
            if (stop_)
                return;
            wanted_ = false;
            lk.unlock();
            const auto t0 = clock_type::now();
            const int rc = sqlite3_wal_checkpoint_v2(db.get(), "main", SQLITE_CHECKPOINT_PASSIVE,
                                                     nullptr, nullptr);
            if (rc == SQLITE_BUSY)
                ++ckpt_busy_; // the writer's catch-up checkpoint is running
            else
                sq_check(db.get(), rc, "checkpoint");
            const double us = micros_between(t0, clock_type::now());
            lk.lock();
            ckpt_us_.push_back(us);
        }
    }

    const options& o_;
    std::string path_;
    sq_db db_;
    std::thread checkpointer_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    bool wanted_ = false;
    std::vector<double> ckpt_us_;    // background checkpointer (under mu_)
    std::vector<double> catchup_us_; // writer thread
    long long ckpt_busy_ = 0;
    long long catchup_busy_ = 0;
};

// ---------------------------------------------------------------- LMDB

void mdb_check(int rc, const char* what) {
    if (rc != MDB_SUCCESS)
        die(std::string("lmdb ") + what + ": " + mdb_strerror(rc));
}

constexpr std::size_t lmdb_plain_max = 495; // longer names are prefix + hash

std::uint64_t hash64(std::string_view s, std::uint64_t seed) {
    std::uint64_t h = seed ^ (s.size() * 0x9E3779B97F4A7C15ULL);
    std::size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        std::uint64_t w = 0;
        std::memcpy(&w, s.data() + i, 8);
        h ^= w * 0xBF58476D1CE4E5B9ULL;
        h = ((h << 31) | (h >> 33)) * 0x94D049BB133111EBULL;
    }
    for (; i < s.size(); ++i)
        h = (h ^ static_cast<unsigned char>(s[i])) * 0x100000001B3ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

// The LMDB key of a name, and the part of the name the value must carry.
struct lmdb_name {
    std::string key;
    std::string_view tail;
    explicit lmdb_name(const std::string& name) {
        if (name.size() <= lmdb_plain_max) {
            key = name;
            return;
        }
        key.assign(name, 0, lmdb_plain_max);
        const std::uint64_t h[2] = {hash64(name, 0x243F6A8885A308D3ULL),
                                    hash64(name, 0x13198A2E03707344ULL)};
        key.append(reinterpret_cast<const char*>(h), sizeof h);
        tail = std::string_view(name).substr(lmdb_plain_max);
    }
    MDB_val val() { return MDB_val{key.size(), key.data()}; }
};

// Values use LEB128 varints for the integers, as SQLite's record format does, so that
// neither engine's file size is inflated by a fixed-width encoding.
void put_varint(std::string& out, std::uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7F) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

std::uint64_t get_varint(const char*& p) {
    std::uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
        const auto b = static_cast<unsigned char>(*p++);
        v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
        if (b < 0x80)
            return v;
    }
}

std::int64_t get_int(const char*& p) {
    return static_cast<std::int64_t>(get_varint(p));
}

// fence value: token, updated_ms, then the rest of the name (hashed keys only)
// key value:   token, version, ms, size, crc32 (4 bytes), lock length, lock,
//              content-type length, content type, then the rest of the name
std::string encode_fence(std::int64_t token, std::int64_t ms, std::string_view tail) {
    std::string v;
    put_varint(v, static_cast<std::uint64_t>(token));
    put_varint(v, static_cast<std::uint64_t>(ms));
    v.append(tail);
    return v;
}

std::string encode_key(const key_row& r, std::string_view tail) {
    std::string v;
    put_varint(v, static_cast<std::uint64_t>(r.token));
    put_varint(v, static_cast<std::uint64_t>(r.version));
    put_varint(v, static_cast<std::uint64_t>(r.ms));
    put_varint(v, static_cast<std::uint64_t>(r.size));
    v.append(reinterpret_cast<const char*>(&r.crc32), 4);
    put_varint(v, r.lock.size());
    v.append(r.lock);
    put_varint(v, r.content_type.size());
    v.append(r.content_type);
    v.append(tail);
    return v;
}

std::atomic<long long> lmdb_collisions{0};

bool tail_matches(const MDB_val& v, const char* p, std::string_view tail) {
    const char* end = static_cast<const char*>(v.mv_data) + v.mv_size;
    if (std::string_view(p, static_cast<std::size_t>(end - p)) == tail)
        return true;
    ++lmdb_collisions;
    return false;
}

// nullopt when the value's tail shows a different name (a hash collision).
std::optional<std::int64_t> decode_fence(const MDB_val& v, std::string_view tail) {
    const char* p = static_cast<const char*>(v.mv_data);
    const std::int64_t token = get_int(p);
    get_varint(p);
    if (!tail_matches(v, p, tail))
        return std::nullopt;
    return token;
}

std::optional<key_row> decode_key(const MDB_val& v, std::string_view tail) {
    const char* p = static_cast<const char*>(v.mv_data);
    key_row r;
    r.token = get_int(p);
    r.version = get_int(p);
    r.ms = get_int(p);
    r.size = get_int(p);
    std::memcpy(&r.crc32, p, 4);
    p += 4;
    const auto lock_len = get_varint(p);
    r.lock.assign(p, lock_len);
    p += lock_len;
    const auto ct_len = get_varint(p);
    r.content_type.assign(p, ct_len);
    p += ct_len;
    if (!tail_matches(v, p, tail))
        return std::nullopt;
    return r;
}

class lmdb_writer final : public writer {
public:
    lmdb_writer(MDB_env* env, MDB_dbi fences, MDB_dbi keys)
        : env_(env), fences_(fences), keys_(keys) {}
    ~lmdb_writer() override {
        if (txn_)
            mdb_txn_abort(txn_);
    }

    void begin() override { mdb_check(mdb_txn_begin(env_, nullptr, 0, &txn_), "begin"); }
    void commit() override {
        const int rc = mdb_txn_commit(txn_);
        txn_ = nullptr;
        mdb_check(rc, "commit");
    }

    std::optional<std::int64_t> get_fence(const std::string& lock) override {
        lmdb_name n(lock);
        MDB_val k = n.val(), v{};
        const int rc = mdb_get(txn_, fences_, &k, &v);
        if (rc == MDB_NOTFOUND)
            return std::nullopt;
        mdb_check(rc, "get fence");
        return decode_fence(v, n.tail);
    }

    std::optional<key_row> get_key(const std::string& key) override {
        lmdb_name n(key);
        MDB_val k = n.val(), v{};
        const int rc = mdb_get(txn_, keys_, &k, &v);
        if (rc == MDB_NOTFOUND)
            return std::nullopt;
        mdb_check(rc, "get key");
        return decode_key(v, n.tail);
    }

    void put_fence(const std::string& lock, std::int64_t token, std::int64_t ms) override {
        lmdb_name n(lock);
        std::string value = encode_fence(token, ms, n.tail);
        MDB_val k = n.val(), v{value.size(), value.data()};
        mdb_check(mdb_put(txn_, fences_, &k, &v, 0), "put fence");
    }

    void put_key(const std::string& key, const key_row& row) override {
        lmdb_name n(key);
        std::string value = encode_key(row, n.tail);
        MDB_val k = n.val(), v{value.size(), value.data()};
        mdb_check(mdb_put(txn_, keys_, &k, &v, 0), "put key");
    }

    void erase_key(const std::string& key) override {
        lmdb_name n(key);
        MDB_val k = n.val();
        const int rc = mdb_del(txn_, keys_, &k, nullptr);
        if (rc != MDB_NOTFOUND)
            mdb_check(rc, "erase key");
    }

private:
    MDB_env* env_;
    MDB_dbi fences_, keys_;
    MDB_txn* txn_ = nullptr;
};

class lmdb_reader final : public reader {
public:
    lmdb_reader(MDB_env* env, MDB_dbi fences, MDB_dbi keys) : fences_(fences), keys_(keys) {
        mdb_check(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn_), "begin read");
        mdb_txn_reset(txn_);
    }
    ~lmdb_reader() override { mdb_txn_abort(txn_); }

    // A read transaction per lookup, renewed: the cheap path LMDB documents for readers.
    bool fence(const std::string& lock) override {
        mdb_check(mdb_txn_renew(txn_), "renew");
        lmdb_name n(lock);
        MDB_val k = n.val(), v{};
        const int rc = mdb_get(txn_, fences_, &k, &v);
        bool found = false;
        if (rc == MDB_SUCCESS)
            found = decode_fence(v, n.tail).has_value();
        else if (rc != MDB_NOTFOUND)
            mdb_check(rc, "read fence");
        mdb_txn_reset(txn_);
        return found;
    }

    bool key(const std::string& key) override {
        mdb_check(mdb_txn_renew(txn_), "renew");
        lmdb_name n(key);
        MDB_val k = n.val(), v{};
        const int rc = mdb_get(txn_, keys_, &k, &v);
        bool found = false;
        if (rc == MDB_SUCCESS)
            found = decode_key(v, n.tail).has_value();
        else if (rc != MDB_NOTFOUND)
            mdb_check(rc, "read key");
        mdb_txn_reset(txn_);
        return found;
    }

private:
    MDB_dbi fences_, keys_;
    MDB_txn* txn_ = nullptr;
};

class lmdb_engine final : public engine {
public:
    lmdb_engine(const options& o, bool load) : path_(o.dir + "/lmdb") {
        ::mkdir(path_.c_str(), 0755);
        mdb_check(mdb_env_create(&env_), "env create");
        mdb_check(mdb_env_set_maxdbs(env_, 4), "maxdbs");
        mdb_check(mdb_env_set_mapsize(env_, std::size_t{64} << 30), "mapsize");
        mdb_check(mdb_env_open(env_, path_.c_str(), load ? MDB_NOSYNC : 0, 0644), "env open");
        MDB_txn* txn = nullptr;
        mdb_check(mdb_txn_begin(env_, nullptr, 0, &txn), "begin");
        mdb_check(mdb_dbi_open(txn, "fences", MDB_CREATE, &fences_), "dbi fences");
        mdb_check(mdb_dbi_open(txn, "keys", MDB_CREATE, &keys_), "dbi keys");
        mdb_check(mdb_txn_commit(txn), "commit dbi");
        load_ = load;
    }
    ~lmdb_engine() override {
        if (load_)
            mdb_env_sync(env_, 1);
        mdb_env_close(env_);
    }

    std::unique_ptr<writer> make_writer() override {
        return std::make_unique<lmdb_writer>(env_, fences_, keys_);
    }
    std::unique_ptr<reader> make_reader() override {
        return std::make_unique<lmdb_reader>(env_, fences_, keys_);
    }

    long long full_scan() override {
        MDB_txn* txn = nullptr;
        mdb_check(mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn), "begin scan");
        long long rows = 0;
        for (MDB_dbi dbi : {fences_, keys_}) {
            MDB_cursor* c = nullptr;
            mdb_check(mdb_cursor_open(txn, dbi, &c), "cursor");
            MDB_val k{}, v{};
            volatile unsigned char sink = 0;
            for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
                 rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
                sink = sink + static_cast<const unsigned char*>(v.mv_data)[0];
                ++rows;
            }
            mdb_cursor_close(c);
        }
        mdb_txn_abort(txn);
        return rows;
    }

    engine_stats stats() override {
        engine_stats s;
        s.add("db_bytes", file_size(path_ + "/data.mdb"));
        s.add("db_alloc_bytes", file_blocks_bytes(path_ + "/data.mdb"));
        MDB_envinfo info{};
        mdb_check(mdb_env_info(env_, &info), "env info");
        s.add("page_count", static_cast<long long>(info.me_last_pgno) + 1);
        // Free pages: the entries of LMDB's free DB (dbi 0), each a list of page numbers
        // whose first word is its length (what `mdb_stat -f` adds up).
        MDB_txn* txn = nullptr;
        mdb_check(mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn), "begin stat");
        MDB_cursor* c = nullptr;
        mdb_check(mdb_cursor_open(txn, 0, &c), "free cursor");
        long long free_pages = 0;
        MDB_val k{}, v{};
        for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
             rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            std::size_t n = 0;
            std::memcpy(&n, v.mv_data, sizeof n);
            free_pages += static_cast<long long>(n);
        }
        mdb_cursor_close(c);
        mdb_txn_abort(txn);
        s.add("free_pages", free_pages);
        return s;
    }

    long long collisions() override { return lmdb_collisions.load(); }

private:
    std::string path_;
    MDB_env* env_ = nullptr;
    MDB_dbi fences_ = 0, keys_ = 0;
    bool load_ = false;
};

std::unique_ptr<engine> open_engine(const options& o, bool load) {
    if (o.engine == "sqlite")
        return std::make_unique<sqlite_engine>(o, load);
    return std::make_unique<lmdb_engine>(o, load);
}

// ---------------------------------------------------------------- measurement helpers

// Bytes this process passed to write()/pwrite() so far (/proc/self/io "wchar"): for both
// engines every page and WAL frame they write goes through pwrite (LMDB without
// MDB_WRITEMAP), so the delta over a phase is the engine's write volume.
long long written_bytes() {
    std::ifstream in("/proc/self/io");
    std::string key;
    long long value = 0;
    while (in >> key >> value)
        if (key == "wchar:")
            return value;
    return 0;
}

struct proc_mem {
    long long rss_kib = 0, anon_kib = 0, file_kib = 0, hwm_kib = 0;
};

proc_mem read_mem() {
    proc_mem m;
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        auto field = [&](const char* name, long long& out) {
            if (line.rfind(name, 0) == 0)
                out = std::atoll(line.c_str() + std::strlen(name));
        };
        field("VmRSS:", m.rss_kib);
        field("RssAnon:", m.anon_kib);
        field("RssFile:", m.file_kib);
        field("VmHWM:", m.hwm_kib);
    }
    return m;
}

// Samples memory (and the WAL's size) every 50 ms; keeps the maxima.
class monitor {
public:
    explicit monitor(engine& e) : engine_(e), thread_([this] { loop(); }) {}
    ~monitor() { stop(); }
    void stop() {
        if (!thread_.joinable())
            return;
        stop_ = true;
        thread_.join();
    }
    proc_mem peak;
    long long wal_peak = 0;

private:
    void loop() {
        while (!stop_) {
            const proc_mem m = read_mem();
            peak.rss_kib = std::max(peak.rss_kib, m.rss_kib);
            peak.anon_kib = std::max(peak.anon_kib, m.anon_kib);
            peak.file_kib = std::max(peak.file_kib, m.file_kib);
            wal_peak = std::max(wal_peak, engine_.wal_bytes());
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    engine& engine_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

struct line_out {
    std::ostringstream s;
    template <typename T> line_out& kv(const std::string& k, const T& v) {
        s << (s.tellp() > 0 ? " " : "") << k << "=" << v;
        return *this;
    }
    line_out& add(const engine_stats& st) {
        for (const auto& [k, v] : st.fields)
            kv(k, v);
        return *this;
    }
    ~line_out() { std::printf("%s\n", s.str().c_str()); }
};

std::string fixed(double v, int digits = 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

void add_latency(line_out& out, const std::string& prefix, std::vector<double> us) {
    std::sort(us.begin(), us.end());
    out.kv(prefix + "_n", us.size())
        .kv(prefix + "_p50_us", fixed(quantile(us, 0.5)))
        .kv(prefix + "_p99_us", fixed(quantile(us, 0.99)))
        .kv(prefix + "_p999_us", fixed(quantile(us, 0.999)))
        .kv(prefix + "_max_us", fixed(us.empty() ? 0 : us.back()));
}

void add_mem(line_out& out, const std::string& prefix, const proc_mem& m) {
    out.kv(prefix + "_rss_mib", fixed(static_cast<double>(m.rss_kib) / 1024))
        .kv(prefix + "_anon_mib", fixed(static_cast<double>(m.anon_kib) / 1024))
        .kv(prefix + "_file_mib", fixed(static_cast<double>(m.file_kib) / 1024));
}

// ---------------------------------------------------------------- phases

// The new names are sorted and cut into transactions of 100,000 consecutive names, each
// inserted in random order: every transaction touches only its own key range (so neither
// engine rewrites its whole tree per transaction, which for LMDB's copy-on-write would
// also leave a file several times the data), yet the pages fill as under random inserts,
// as in a store grown by small batches.
void phase_load(const options& o) {
    long long n = read_count(o);
    const long long start_n = n;
    const auto t0 = clock_type::now();
    {
        std::vector<std::string> names;
        names.reserve(static_cast<std::size_t>(std::max(0LL, o.to - n)));
        for (long long id = n; id < o.to; ++id)
            names.push_back(name_of(static_cast<std::uint64_t>(id), o.name_len));
        std::sort(names.begin(), names.end());
        auto e = open_engine(o, true);
        auto w = e->make_writer();
        const std::int64_t ms = wall_ms();
        const std::size_t per_txn = 100000;
        std::mt19937_64 rng(99);
        for (std::size_t i = 0; i < names.size(); i += per_txn) {
            const auto first = names.begin() + static_cast<std::ptrdiff_t>(i);
            const auto last =
                names.begin() + static_cast<std::ptrdiff_t>(std::min(names.size(), i + per_txn));
            std::shuffle(first, last, rng);
            w->begin();
            for (auto it = first; it != last; ++it)
                w->write(*it, *it, ms);
            w->commit();
        }
        n = std::max(n, o.to);
    } // closing syncs (LMDB: mdb_env_sync; SQLite: synchronous=OFF, so no sync: do one)
    if (o.engine == "sqlite") {
        sq_db db = sq_open(o.dir + "/index.db", false, 2048);
        sq_exec(db.get(), "PRAGMA journal_mode=WAL"); // persistent; fsyncs the file
    }
    ::sync();
    write_count(o, n);
    const double secs = seconds_since(t0);
    line_out out;
    out.kv("phase", "load").kv("engine", o.engine).kv("name_len", o.name_len).kv("rows", n);
    out.kv("added", n - start_n).kv("seconds", fixed(secs, 1));
    out.kv("rows_per_s", static_cast<long long>(static_cast<double>(n - start_n) / secs));
}

void phase_measure(const options& o) {
    const long long count0 = read_count(o);
    if (count0 < 1)
        die("measure: the store is empty (run the load phase first)");
    auto e = open_engine(o, false);
    auto w = e->make_writer();
    std::vector<std::unique_ptr<reader>> readers;
    for (int i = 0; i < o.readers; ++i)
        readers.push_back(e->make_reader());

    std::atomic<bool> stop{false};
    std::vector<std::vector<double>> read_us(static_cast<std::size_t>(o.readers));
    std::vector<long long> read_missing(static_cast<std::size_t>(o.readers), 0);
    monitor mon(*e);
    const double cpu0 = process_cpu_seconds();
    std::vector<std::thread> threads;
    for (int i = 0; i < o.readers; ++i)
        threads.emplace_back([&, i] {
            std::mt19937_64 rng(1000 + static_cast<unsigned>(i));
            std::uniform_int_distribution<long long> pick(0, count0 - 1);
            const auto period = std::chrono::nanoseconds(1000000000LL / o.read_rate);
            auto next = clock_type::now();
            auto& lat = read_us[static_cast<std::size_t>(i)];
            reader& r = *readers[static_cast<std::size_t>(i)];
            for (long long op = 0; !stop.load(std::memory_order_relaxed); ++op) {
                next += period;
                std::this_thread::sleep_until(next);
                if (clock_type::now() - next > std::chrono::seconds(1))
                    next = clock_type::now(); // fell behind: no burst to catch up
                const std::string name = name_of(static_cast<std::uint64_t>(pick(rng)), o.name_len);
                const auto t0 = clock_type::now();
                const bool found = op % 2 == 0 ? r.fence(name) : r.key(name);
                lat.push_back(micros_between(t0, clock_type::now()));
                if (!found)
                    ++read_missing[static_cast<std::size_t>(i)];
            }
        });

    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> coin(0, 1);
    std::uniform_int_distribution<long long> pick(0, count0 - 1);
    long long next_id = count0;
    long long writes = 0;
    std::vector<double> batch_us, commit_us;
    std::vector<long long> per_second;
    const double wcpu0 = thread_cpu_seconds();
    const long long wchar0 = written_bytes();
    const auto start = clock_type::now();
    const auto deadline = start + std::chrono::duration<double>(o.seconds);
    while (clock_type::now() < deadline) {
        const auto t0 = clock_type::now();
        w->begin();
        const std::int64_t ms = wall_ms();
        for (int i = 0; i < o.batch; ++i) {
            const long long id = coin(rng) < o.update_frac ? pick(rng) : next_id++;
            const std::string name = name_of(static_cast<std::uint64_t>(id), o.name_len);
            w->write(name, name, ms);
        }
        const auto t1 = clock_type::now();
        w->commit();
        const auto t2 = clock_type::now();
        writes += o.batch;
        batch_us.push_back(micros_between(t0, t2));
        commit_us.push_back(micros_between(t1, t2));
        const auto sec =
            static_cast<std::size_t>(std::chrono::duration<double>(t2 - start).count());
        if (per_second.size() <= sec)
            per_second.resize(sec + 1, 0);
        per_second[sec] += o.batch;
    }
    const double elapsed = seconds_since(start);
    const double wcpu = thread_cpu_seconds() - wcpu0;
    stop = true;
    for (auto& t : threads)
        t.join();
    e->stop_background();
    const double cpu = process_cpu_seconds() - cpu0;
    const long long wchar = written_bytes() - wchar0;
    mon.stop();
    const proc_mem end_mem = read_mem();
    write_count(o, next_id);

    std::vector<double> reads;
    long long missing = 0;
    for (std::size_t i = 0; i < read_us.size(); ++i) {
        reads.insert(reads.end(), read_us[i].begin(), read_us[i].end());
        missing += read_missing[i];
    }
    // Whole seconds only (the last one is partial).
    if (!per_second.empty())
        per_second.pop_back();
    const long long worst_sec =
        per_second.empty() ? 0 : *std::min_element(per_second.begin(), per_second.end());

    line_out out;
    out.kv("phase", "measure").kv("engine", o.engine);
    if (o.engine == "sqlite")
        out.kv("ckpt", o.ckpt == "thread" ? "thread-" + std::to_string(o.catchup_frames) : o.ckpt);
    out.kv("name_len", o.name_len).kv("rows", count0).kv("batch", o.batch);
    out.kv("seconds", fixed(elapsed, 1)).kv("writes", writes);
    out.kv("writes_per_s", static_cast<long long>(static_cast<double>(writes) / elapsed));
    out.kv("worst_1s_writes", worst_sec);
    add_latency(out, "batch", batch_us);
    add_latency(out, "commit", commit_us);
    add_latency(out, "read", reads);
    out.kv("read_missing", missing);
    out.kv("writer_cpu_us_per_write", fixed(wcpu * 1e6 / static_cast<double>(writes)));
    out.kv("process_cpu_us_per_write", fixed(cpu * 1e6 / static_cast<double>(writes)));
    out.kv("written_kib_per_write", fixed(static_cast<double>(wchar) / 1024 / writes, 2));
    add_mem(out, "peak", mon.peak);
    add_mem(out, "end", end_mem);
    out.kv("wal_peak_mib", fixed(static_cast<double>(mon.wal_peak) / 1048576));
    out.add(e->stats()).add(e->background_stats());
    out.kv("collisions", e->collisions());
    if (!o.samples.empty()) {
        std::FILE* f = std::fopen(o.samples.c_str(), "a");
        if (!f)
            die("cannot open " + o.samples);
        for (double us : batch_us)
            std::fprintf(f, "b %.1f\n", us);
        for (double us : reads)
            std::fprintf(f, "r %.1f\n", us);
        std::fclose(f);
    }
}

void phase_reopen(const options& o) {
    const long long count = read_count(o);
    const auto t0 = clock_type::now();
    auto e = open_engine(o, false);
    auto r = e->make_reader();
    const auto t1 = clock_type::now();
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<long long> pick(0, count - 1);
    const std::string first = name_of(static_cast<std::uint64_t>(pick(rng)), o.name_len);
    const bool f1 = r->fence(first);
    const auto t2 = clock_type::now();
    const bool f2 = r->key(first);
    const auto t3 = clock_type::now();
    std::vector<double> cold;
    for (int i = 0; i < o.cold_reads; ++i) {
        const std::string name = name_of(static_cast<std::uint64_t>(pick(rng)), o.name_len);
        const auto a = clock_type::now();
        const bool found = i % 2 == 0 ? r->fence(name) : r->key(name);
        cold.push_back(micros_between(a, clock_type::now()));
        if (!found)
            die("reopen: a written name is missing");
    }
    const proc_mem after_reads = read_mem();
    const auto t4 = clock_type::now();
    const long long rows = o.scan ? e->full_scan() : 0;
    const double scan_s = seconds_since(t4);
    const proc_mem after_scan = read_mem();

    line_out out;
    out.kv("phase", "reopen").kv("engine", o.engine).kv("name_len", o.name_len);
    out.kv("rows", count);
    out.kv("open_ms", fixed(micros_between(t0, t1) / 1000, 2));
    out.kv("first_fence_ms", fixed(micros_between(t1, t2) / 1000, 2));
    out.kv("first_key_ms", fixed(micros_between(t2, t3) / 1000, 2));
    out.kv("first_found", f1 && f2 ? 1 : 0);
    add_latency(out, "cold", cold);
    add_mem(out, "after_reads", after_reads);
    if (o.scan) {
        out.kv("scan_rows", rows).kv("scan_s", fixed(scan_s, 1));
        add_mem(out, "after_scan", after_scan);
    }
    out.add(e->stats());
}

void phase_churn(const options& o) {
    long long count = read_count(o);
    const long long d = std::min(o.churn, count);
    auto e = open_engine(o, false);
    auto w = e->make_writer();
    line_out out;
    out.kv("phase", "churn").kv("engine", o.engine).kv("name_len", o.name_len);
    out.kv("rows", count).kv("deleted", d).kv("txn", o.churn_txn);
    // Sizes after a TRUNCATE checkpoint (SQLite), so that they are the database's, not
    // its WAL's high-water mark.
    auto sizes = [&](const std::string& when) {
        e->checkpoint_truncate();
        for (const auto& [k, v] : e->stats().fields)
            out.kv(when + "_" + k, v);
    };
    sizes("before");
    // Distinct ids: j * stride mod count, stride coprime with count.
    long long stride = 2654435761LL % count;
    while (stride < 2 || std::gcd(stride, count) != 1)
        ++stride;
    auto t0 = clock_type::now();
    for (long long j = 0; j < d;) {
        w->begin();
        const long long end = std::min(d, j + o.churn_txn);
        for (; j < end; ++j)
            w->erase_key(name_of(static_cast<std::uint64_t>((j * stride) % count), o.name_len));
        w->commit();
    }
    out.kv("delete_s", fixed(seconds_since(t0), 1));
    sizes("deleted");
    // Write the deleted keys again: their fences are still there (a fence is never
    // forgotten), so the store's content is back to its size before the deletes and any
    // growth of the file is space not reused.
    t0 = clock_type::now();
    const std::int64_t ms = wall_ms();
    for (long long j = 0; j < d;) {
        w->begin();
        const long long end = std::min(d, j + o.churn_txn);
        for (; j < end; ++j) {
            const std::string name =
                name_of(static_cast<std::uint64_t>((j * stride) % count), o.name_len);
            w->write(name, name, ms);
        }
        w->commit();
    }
    out.kv("reinsert_s", fixed(seconds_since(t0), 1));
    sizes("reinserted");
}

} // namespace

int main(int argc, char** argv) {
    const options o = parse_options(argc, argv);
    ::mkdir(o.dir.c_str(), 0755);
    if (o.phase == "load")
        phase_load(o);
    else if (o.phase == "measure")
        phase_measure(o);
    else if (o.phase == "reopen")
        phase_reopen(o);
    else
        phase_churn(o);
    return 0;
}
