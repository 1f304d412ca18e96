#pragma once
// The file store's implementation class. Only file_store.cpp's factory and the unit tests
// see it; everyone else uses store (backends/store.hpp). docs/file-store.md describes the
// layout, the write sequence and recovery.
//
// Roles and threads:
// - requests (file_store.cpp) start on the caller's executor (the I/O threads), which
//   only consult the fence cache and hand work on; reads of the index (GET, HEAD,
//   fence reads, listings) and body staging run on pool_ (the body I/O pool), a read with an
//   index_reader leased from readers_;
// - the committer thread (commit.cpp) is the only writer of the index: it decides every
//   write against the index inside one transaction per batch, which is what makes a
//   lock's check-and-write atomic, commits, then renames bodies into place;
// - the flusher thread syncfs()es after batches, so that their redo rows can go;
// - the checkpointer thread copies the WAL into the index file (PASSIVE checkpoints);
// - the directory lane (dir_lane_) stages requests that make more than stage_dir_budget
//   new directories, so that they never hold pool_;
// - the reclaimer thread removes the directories of writes that were not committed, then
//   answers them;
// - the sweeper thread removes what a crash left in objects/ (recovery.cpp), after
//   startup, only when the last run did not stop cleanly.
// state_mutex_: the committer holds it exclusively from its COMMIT through the renames,
// and a GET holds it shared while it reads a key's row and opens its body, so a body is
// never paired with another version's metadata.
// floors_mutex_: the committer owns the fence floors (floors_) and decides every write
// against them in its batch; it holds this exclusively only to install the floors a batch
// committed, and floor listings and the fast stale checks hold it shared. Fence reads
// take the floors from the index, in the snapshot they read the fence from.

#include "backends/fence_cache.hpp"
#include "backends/file/detail/checkpoint_watch.hpp"
#include "backends/file/detail/index.hpp"
#include "backends/file/detail/key_path.hpp"
#include "backends/file/detail/objects_dir.hpp"
#include "backends/file/detail/sys.hpp"
#include "backends/file/file_store.hpp"
#include "fence/floors.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace fk::store::detail {

// New directories one request may make on the shared staging pool (pool_); one that
// needs more is staged on the directory lane (dir_lane_), one request at a time, so
// that deep new keys never hold both pool threads for long (docs/file-store.md,
// "Directories of refused writes").
inline constexpr std::size_t stage_dir_budget = 64;

// Bodies up to this size are copied into their redo row (file.flush "syncfs"), so their
// files need not be durable before the commit.
inline constexpr std::size_t journaled_body_max = 4096;

// How long the index's WAL may be behind (a checkpoint due and none complete since)
// before the store says so in its log (docs/file-store.md, "Checkpoints").
inline constexpr std::chrono::seconds checkpoint_warn_after{10};

// The store's clock, Unix ms: fences' and keys' times, and idempotency records' commit
// times and expiry. Tests can move it (set_clock_offset_for_tests).
std::int64_t store_now_ms();

// A write's answer from its idempotency record: the recorded outcome with `replayed` for
// the same fingerprint, idempotency_key_reused for another.
write_result answer_from(const idem_row& rec, const idempotency& idem);
// A transaction's answer from its record: the recorded results with `replayed` for the
// same fingerprint; idempotency_key_reused for another, or for a single write's record.
txn_result txn_answer_from(const idem_row& rec, const idempotency& idem);

struct txn_state;

// One write, delete, fence advance or floor raise on its way through the committer; or a
// transaction (kind::txn), one item whose parts are decided together (docs/file-store.md,
// "Transactions"). check and check_version occur only as a transaction's parts.
struct pending {
    enum class kind { put, remove, fence, floor, check, check_version, txn } op = kind::put;
    std::string key;
    std::string lock; // floor: the prefix
    token_t token = 0;
    // check_version: if_match is the version the key must have, nullopt "absent".
    fence::preconditions pre;
    // The write's Idempotency-Key: the committer answers it from its record, or records
    // its outcome in the batch's transaction (docs/file-store.md, "Idempotency records").
    std::optional<idempotency> idem;
    // put: the staged body
    std::string content_type;
    std::uint64_t size = 0;
    std::uint32_t body_crc = 0;
    std::string tmp; // the temp file, or "" when `direct`
    // put: a copy of a small body for its redo row (file.flush "syncfs"): the batch commits
    // it without a syncfs, and recovery rewrites the file from the row if the file did not
    // reach the disk.
    std::optional<std::string> journaled_body;
    // put: the body was created at its final path (no file was there and no other write
    // of the key was in flight), so committing it needs no rename. The store's claim on
    // the key (claims_) keeps everyone else off that path until the committer decided.
    bool direct = false;
    // put / remove: the body's directory (opened by the stage step or by the committer)
    object_path path;
    std::shared_ptr<unique_fd> dir;
    // put: the level (index into path.dirs) of the outermost directory its staging made,
    // or npos. A put that is not committed takes them back before it is answered
    // (reclaim_made_dirs; docs/file-store.md, "Directories of refused writes").
    std::size_t made_from = std::string::npos;
    // put: staging stopped because the key needs more new directories than the shared
    // pool's budget (stage_dir_budget); it goes on on the directory lane.
    bool over_budget = false;
    // the decision and the waiter
    bool accepted = false;
    bool existed = false;   // remove: a body was there to unlink
    bool journaled = false; // put: its body went into its redo row
    write_result result;
    // optional + emplace: Boost 1.81's any_completion_handler move assignment recurses
    // forever (it re-wraps an lvalue of itself); construction is fine.
    std::optional<net::any_completion_handler<void(write_result)>> handler;
    net::any_io_executor work; // the waiter's executor, tracking outstanding work
    // txn: its parts and its answer (null for every other kind).
    std::unique_ptr<txn_state> txn;
};

struct txn_state {
    // One item per op, in op order; a put of a new key is `direct`, as a single put is.
    // Parts are accepted together, when the whole transaction is.
    std::vector<pending> parts;
    std::vector<txn_op> ops; // the request's ops without their bodies: for the results text
    txn_result result;
    std::optional<net::any_completion_handler<void(txn_result)>> handler;
};

// An item that failed as a whole (the batch, the stage, a stop): `e` and `message` for
// its waiter, a single write's or a transaction's.
void set_failure(pending& p, errc e, std::string message);

// What the decisions of one batch share (commit_batch, file_store::decide).
struct batch_state {
    std::int64_t ms = 0; // the batch's time: fences', keys' and records' times
    std::unordered_map<std::string, token_t> raised; // lock → fence after the batch
    // The floors every item is decided against: the committed ones, or, from the batch's
    // first floor raise on, a copy with this batch's raises, installed after the COMMIT (a
    // batch that does not commit leaves the committed floors as they were).
    std::optional<fence::floor_set> staged_floors;
    std::int64_t last_redo = 0;  // the seq of the batch's last redo row
    std::int64_t redo_bytes = 0; // the bodies' bytes of the batch's redo rows
};

class file_store final : public store {
public:
    static std::variant<std::unique_ptr<store>, open_error>
    open(net::io_context& io, const std::string& root, const file_store_options& opts);

    file_store(net::io_context& io, const file_store_options& opts);
    ~file_store() override;

    net::awaitable<write_result> put(put_request req) override;
    net::awaitable<write_result> remove(delete_request req) override;
    net::awaitable<object_result> get(std::string key, bool with_body) override;
    net::awaitable<write_result> advance_fence(fence_request req) override;
    net::awaitable<fence_result> read_fence(std::string lock) override;
    net::awaitable<list_result> list_fences(list_request req) override;
    net::awaitable<write_result> raise_floor(floor_request req) override;
    net::awaitable<floors_result> list_floors() override;
    net::awaitable<txn_result> transact(txn_request req) override;
    net::awaitable<idem_usage_result> idempotency_usage() override;
    net::awaitable<idem_presence> has_idempotency_record(std::string scope,
                                                         std::string key) override;
    bool ready() const noexcept override;
    const commit_stats* batches() const noexcept override { return &commit_sizes_; }
    const file_store_health* file_health() const noexcept override { return &health_; }
    void stop() override;

    // Tests: block until the sweep after an unclean start has finished (true), or
    // there is none (false).
    bool wait_for_sweep();

private:
    // --- startup (recovery.cpp) ---
    std::optional<open_error> open_root(const std::string& root);
    std::optional<open_error> open_index();
    bool objects_empty() const;
    // Makes the files of every write in a redo row match the index (roll forward,
    // restore from the row, remove what a delete or a later write superseded).
    std::optional<open_error> replay_redo();
    // The sweeper: removes temp files of earlier runs, and bodies of keys the index does
    // not have (a new key's body written in place whose commit never happened).
    void sweep_main();

    // --- requests (file_store.cpp) ---
    bool usable() const noexcept { return !failed_ && !stopped_; }
    // The cache's answer: stale_token (r filled) when it proves `token` stale for a write
    // of `key` under `lock` ("" for a fence advance), ok otherwise.
    // A floor above the cached fence leaves the decision to the committer: only it knows
    // the own fence exactly, and with it the effective fence and whether a floor sets it.
    errc cached_stale(const std::string& key, const std::string& lock, token_t token,
                      write_result& r);
    // A committed floor matching `lock` is above `token` (any thread).
    bool floor_above(std::string_view lock, token_t token) const;
    // Key validation and the cache (put and remove): the item to go on with, or null with
    // `r` holding the answer.
    // A keyed write skips the cache here (`check_cache` false): its record is looked up
    // first (keyed_submit).
    std::unique_ptr<pending> admit(pending::kind op, std::string& key, std::string& lock,
                                   token_t token, const fence::preconditions& pre, write_result& r,
                                   bool check_cache = true);
    // On the pool: the unexpired record of p.idem, read without the state lock (a committed
    // record never changes until it expires), answers p (true, p.result set); absent or
    // unreadable: false, the committer decides.
    bool answered_by_record(pending& p);
    // A keyed write: on the pool, its record first, then the cache's stale check, then (a
    // put) staging, then the committer; the waiter is resumed once, with the answer.
    net::awaitable<write_result> keyed_submit(std::unique_ptr<pending> p, std::string body);
    // On the pool, for a put counted in staging_: stage the body, then queue the item
    // (or answer it with the stage's error). One that needs more new directories than
    // stage_dir_budget moves to the directory lane (`on_lane`: it is there, no longer
    // counted in staging_, with no budget).
    void stage_then_enqueue(std::unique_ptr<pending> item, std::string& body, bool on_lane = false);
    // The body written to its file (at its final path only when `direct_ok` and the key
    // can be claimed); ok: queued for the committer. `budget`: the new directories it
    // may make (null: any number), decremented by those it made; over it, p.over_budget
    // is set and nothing but directories was made.
    write_result stage_put(pending& p, std::string& body, bool direct_ok = true,
                           std::size_t* budget = nullptr);
    // A transaction: on the pool when it has a record to look up or bodies to stage
    // (`stages`: counted in staging_), its record first, then every put's body, then the
    // committer; the waiter is resumed once, with the answer.
    net::awaitable<txn_result> submit_txn(std::unique_ptr<pending> t,
                                          std::vector<std::string> bodies, bool stages);
    void stage_txn_then_enqueue(std::unique_ptr<pending> t, std::vector<std::string>& bodies,
                                bool on_lane = false);
    // Removes the directories that p's staging (every part's, for a transaction) made and
    // that are empty again: for a put that will not be committed, after drop_staged.
    void reclaim_made_dirs(pending& p);
    // Answers an item that was not committed: at once, or, when its staging made
    // directories, from the reclaimer thread once they are removed (so the answer comes
    // after the disk holds nothing of it, and the committer never walks them).
    void answer_uncommitted(std::unique_ptr<pending> p);
    void reclaimer_main();
    // A put counted in staging_ is queued or answered: the committer stops gathering for it.
    void staging_done();
    object_result read_object(const std::string& key, bool with_body);
    net::awaitable<write_result> submit(std::unique_ptr<pending> p);
    // put: stages the body on pool_ and hands the item to the committer
    // from there, so the waiter is resumed once, with the final result.
    net::awaitable<write_result> stage_and_submit(std::unique_ptr<pending> p, std::string body);
    std::string unique_suffix();
    // Claims: a key maps to true while a direct body staged for it waits at its final
    // path (or the sweeper checks it), to false while the committer's batch is about to
    // rename or unlink there. A direct body is staged only for an unclaimed key, and a
    // batch defers an item whose key has a direct body waiting, so neither ever replaces
    // the other's file.
    bool claim_direct(const std::string& key);
    void release_claims(const std::vector<std::string>& keys);
    // Removes a staged body that will not be committed (its temp file, or the direct
    // body at its final path; a transaction's: every part's); releases nothing.
    static void drop_staged(pending& p);
    // drop_staged, plus held_claims(p), which it then holds no more: for an item that
    // never reaches a batch.
    void abandon_staged(pending& p);
    // Appends the claims `p` took before its batch to `keys`: a direct body's, a
    // transaction's direct parts'. (Per item of every batch: no vector of its own.)
    static void held_claims(const pending& p, std::vector<std::string>& keys);
    // A transaction about to wait for another item's direct body gives up its own claims
    // first: each direct part's body is renamed to a temp name and its claim released
    // (claims_mutex_ held). 0, or the errno of a failed rename (the part stays direct).
    int unplace_parts(pending& t, std::vector<std::string>& claimed);

    // A reader for the calling pool thread, returned when the lease ends.
    struct reader_lease {
        file_store* owner;
        std::unique_ptr<index_reader> reader;
        reader_lease(file_store* o, std::unique_ptr<index_reader> r)
            : owner(o), reader(std::move(r)) {}
        reader_lease(reader_lease&& o) noexcept = default;
        reader_lease& operator=(reader_lease&&) = delete;
        ~reader_lease();
        index_reader& operator*() const { return *reader; }
        index_reader* operator->() const { return reader.get(); }
    };
    reader_lease lease_reader();

    // --- committer (commit.cpp) ---
    void enqueue(std::unique_ptr<pending> p, bool staged = false);
    void committer_main();
    void commit_batch(std::deque<std::unique_ptr<pending>>& batch);
    // What the fence cache learns from a committed batch: its fences and key bindings.
    // REQUIRES: state_mutex_ held exclusively, after the COMMIT.
    void learn_committed(const batch_state& b, const std::vector<pending*>& leaves);
    // Decides one item (not a transaction) in the batch's transaction: the fence rule
    // against the effective fence, then (accepted) its rows, its fence advance and its
    // Idempotency-Key record. Sets p.accepted, or p.result's error. Returns the step whose
    // index call failed (the batch fails), or nullptr.
    const char* decide(pending& p, batch_state& b);
    // Decides a transaction under a savepoint: each part with decide(), in op order; the
    // first part refused rolls back to the savepoint and undoes what the parts decided so
    // far in `b`; else the record is written and the savepoint released. Returns as
    // decide().
    const char* decide_txn(pending& t, batch_state& b);
    // Deletes redo rows whose files the flusher has made durable (in its own
    // transaction when `standalone`, else in the caller's).
    int trim_redo(bool standalone);
    // Loads the committed floors from the index (open, before the committer starts).
    std::optional<open_error> load_floors();
    // Deletes at most `limit` expired idempotency records (in its own transaction when
    // `standalone`, else in the caller's) when a step is due, and schedules the next.
    int expire_records(bool standalone, int limit);
    void reply(pending& p);
    void fail(std::string_view what, int err);
    void fail_index(std::string_view what);
    void flusher_main();
    // A batch renamed its files: its redo rows (through `seq`, with `bytes` of bodies) are
    // the flusher's to make durable; the flusher is woken.
    void note_committed(std::int64_t seq, std::int64_t bytes);
    // The committer, before a batch: while the flusher's backlog is at max_redo_rows_ or
    // max_redo_bytes_, wait for its syncfs (which then runs without its pause), so that a
    // crash never leaves a start more to verify (docs/file-store.md, "Bounded restarts").
    void wait_for_flusher();
    void checkpointer_main();
    // A PASSIVE checkpoint on `conn` (the committer's writer or the checkpointer's own
    // connection), one at a time: `wait` false gives up at once when the other is running
    // one (the committer never waits for the checkpointer). Logs only what
    // checkpoint_watch says is worth it.
    template <class Connection> void checkpoint_on(Connection& conn, bool wait);
    static int on_wal_commit(void* self, struct sqlite3*, const char*, int pages);

    net::io_context& io_;
    // true: bodies are written without fsync; small ones are copied into their redo rows
    // (the flusher's syncfs writes their files later), and for a batch with a larger one a
    // syncfs makes its files (and their directory entries) durable before the commit;
    // false: each body is fsynced when staged and each directory holding one before the
    // commit.
    bool syncfs_batches_ = true;
    std::string root_;
    std::string index_path_;
    unique_fd root_fd_;
    unique_fd lock_fd_;
    objects_dir objects_;

    index_writer writer_; // committer only (and open/stop, when the committer is not running)
    std::mutex readers_mutex_;
    std::vector<std::unique_ptr<index_reader>> readers_;
    fence_cache cache_;
    // How long an idempotency record answers retries, in ms (file_store_options).
    std::int64_t retention_ms_ = 0;

    mutable std::shared_mutex state_mutex_;

    // The committed fence floors, as in the index's floors table (docs/file-store.md, "Fence
    // floors"). Written only by the committer (and open) under the exclusive floors_mutex_,
    // after the COMMIT that made them durable; the committer reads them without the lock,
    // every other thread under the shared lock. has_floors_: the index may hold a floor
    // (set at open, or by the committer before the COMMIT of the first raise; never reset),
    // so that reads and the fast paths skip the floors entirely while there are none.
    fence::floor_set floors_;
    mutable std::shared_mutex floors_mutex_;
    std::atomic<bool> has_floors_{false};

    std::uint64_t nonce_ = 0;
    std::atomic<std::uint64_t> seq_{0};

    std::atomic<bool> failed_{false};
    std::atomic<bool> stopped_{false};
    bool clean_start_ = true; // the last run stopped cleanly (no sweep needed)
    bool opened_ = false;     // open() finished: stop() has threads to end and a mark to set
    std::atomic<bool> sweep_done_{false};

    std::mutex claims_mutex_;
    std::unordered_map<std::string, bool> claims_; // see claim_direct()

    std::mutex queue_mutex_;
    std::condition_variable queue_cv_;
    std::deque<std::unique_ptr<pending>> queue_;
    bool committer_exit_ = false; // guarded by queue_mutex_
    // Puts handed to the pool and not yet queued (or answered). Incremented on the I/O
    // thread, decremented under queue_mutex_; the committer gathers while it is not 0.
    std::atomic<int> staging_{0};
    bool committer_gone_ = false; // guarded by queue_mutex_
    commit_stats commit_sizes_;   // items per committed batch (metrics)
    // Items whose key had a direct body waiting: retried, in order, with the next batch.
    std::deque<std::unique_ptr<pending>> deferred_; // committer only

    // Redo rows (docs/file-store.md, "Redo rows"): the last seq whose batch has renamed
    // its files; the last seq whose files are durable (the flusher's syncfs, or the
    // committer's directory fsyncs with file.flush "fsync"); the last seq deleted.
    std::atomic<std::int64_t> committed_seq_{0};
    std::atomic<std::int64_t> flushed_seq_{0};
    std::int64_t trimmed_seq_ = 0; // committer only
    // When the next step of deleting expired idempotency records is due: at once after a
    // step that hit its limit, else a second later (committer only).
    std::chrono::steady_clock::time_point next_expiry_{};

    std::mutex flush_mutex_;
    std::condition_variable flush_cv_;
    std::condition_variable flushed_cv_; // the flusher ended a syncfs (wait_for_flusher)
    bool flush_wanted_ = false;          // guarded by flush_mutex_
    bool flush_urgent_ = false;          // guarded by flush_mutex_: the committer waits, no pause
    bool flusher_exit_ = false;          // guarded by flush_mutex_
    // Bodies' bytes of the redo rows through committed_seq_ and through flushed_seq_, summed
    // since the start; guarded by flush_mutex_ (like the two seqs, when they change).
    std::int64_t committed_bytes_ = 0;
    std::int64_t flushed_bytes_ = 0;
    std::int64_t max_redo_rows_ = 0;  // file_store_options
    std::int64_t max_redo_bytes_ = 0; // file_store_options
    file_store_health health_;

    std::atomic<int> wal_frames_{0}; // frames in the WAL after the last commit (its hook)
    // Held while a checkpoint runs (checkpoint_on): two connections' checkpoints never
    // meet in SQLite, where one of them would fail with SQLITE_BUSY.
    std::mutex checkpoint_run_mutex_;
    checkpoint_watch checkpoints_; // REQUIRES: checkpoint_run_mutex_ for checkpointed()
    std::mutex checkpoint_mutex_;
    std::condition_variable checkpoint_cv_;
    int wal_pages_ = 0;              // guarded by checkpoint_mutex_
    bool checkpointer_exit_ = false; // guarded by checkpoint_mutex_

    // Items answered by the reclaimer (answer_uncommitted), and its exit once the
    // committer has gone.
    std::mutex reclaim_mutex_;
    std::condition_variable reclaim_cv_;
    std::deque<std::unique_ptr<pending>> reclaim_queue_; // guarded by reclaim_mutex_
    bool reclaimer_exit_ = false;                        // guarded by reclaim_mutex_

    std::mutex sweep_mutex_;
    std::condition_variable sweep_cv_;
    bool sweep_running_ = false; // guarded by sweep_mutex_

    net::thread_pool pool_;
    // The directory lane: staging of requests over stage_dir_budget, one at a time.
    net::thread_pool dir_lane_{1};
    std::thread committer_;
    std::thread reclaimer_;
    std::thread flusher_;
    std::thread checkpointer_;
    std::thread sweeper_;
};

// Test hooks: hold the committer (items queue up and form one batch when released),
// and count items ever handed to any committer.
void set_commit_hold_for_tests(bool hold);
std::uint64_t enqueued_for_tests();
// The committer's gather window (0: back to the default).
void set_gather_window_for_tests(std::chrono::microseconds window);
// Puts of KEY wait on the pool, after writing their body, until the hold is lifted ("").
void set_stage_hold_for_tests(const std::string& key);
// Moves store_now_ms() by `offset` (0: the real clock): records age without waiting.
void set_clock_offset_for_tests(std::chrono::milliseconds offset);

} // namespace fk::store::detail
