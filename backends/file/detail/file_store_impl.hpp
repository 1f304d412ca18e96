#pragma once
// The file store's implementation class. Only file_store.cpp's factory and the unit tests
// see it; everyone else uses store (backends/store.hpp).
//
// Threads: requests start on the caller's executor (the I/O threads); body writes, reads
// and directory creation run on pool_; every decision and every journal write happens on
// the single committer_ thread, which is what makes a lock's check-and-write atomic.
// state_mutex_ guards fences_ and keys_: the committer is their only writer.

#include "backends/file/detail/journal.hpp"
#include "backends/file/detail/key_path.hpp"
#include "backends/file/detail/sys.hpp"
#include "backends/file/file_store.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace fk::store::detail {

struct fence_entry {
    token_t token = 0;
    std::int64_t updated_ms = 0;
};

struct key_meta {
    bool exists = false; // false: a tombstone, kept for its version
    std::string lock;
    token_t token = 0;
    std::int64_t version = 0;
    std::int64_t ms = 0;
    std::uint64_t size = 0;
    std::uint32_t body_crc = 0;
    std::string content_type;
};

inline key_meta tombstone(std::int64_t version, std::int64_t ms) {
    key_meta m;
    m.version = version;
    m.ms = ms;
    return m;
}

using fence_map = std::map<std::string, fence_entry>; // bytewise order for listing

// Bodies up to this size are copied into their journal record (file.flush "syncfs").
inline constexpr std::size_t journaled_body_max = 4096;
using key_map = std::unordered_map<std::string, key_meta>;

// One write, delete or fence advance on its way through the committer.
struct pending {
    enum class kind { put, remove, fence } op = kind::put;
    std::string key;
    std::string lock;
    token_t token = 0;
    fence::preconditions pre;
    // put: the staged body
    std::string content_type;
    std::uint64_t size = 0;
    std::uint32_t body_crc = 0;
    std::string tmp; // the temp file, or "" when `direct`
    // put: a copy of the body for its journal record (a small body with file.flush
    // "syncfs"): the batch commits it without a syncfs, and recovery rewrites the file
    // from the journal if the file did not reach the disk.
    std::optional<std::string> journaled_body;
    bool body_journaled = false; // the committer put journaled_body into the record
    // put: the body was created at its final path (the key had no body and no other
    // write of it was in flight), so committing it needs no rename. The store's claim
    // on the key (file_store::claims_) keeps everyone else off that path until the
    // committer has decided it.
    bool direct = false;
    bool had_body = false; // put: the key had a body when admitted (then never direct)
    // put / remove: the body's directory (opened by the stage step or by the committer)
    object_path path;
    std::shared_ptr<unique_fd> dir;
    // the decision and the waiter
    bool accepted = false;
    bool existed = false; // remove: a body was there to unlink
    write_result result;
    // optional + emplace: Boost 1.81's any_completion_handler move assignment recurses
    // forever (it re-wraps an lvalue of itself); construction is fine.
    std::optional<net::any_completion_handler<void(write_result)>> handler;
    net::any_io_executor work; // the waiter's executor, tracking outstanding work
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
    net::awaitable<write_result> advance_fence(std::string lock, token_t token) override;
    net::awaitable<fence_result> read_fence(std::string lock) override;
    net::awaitable<list_result> list_fences(list_request req) override;
    bool ready() const noexcept override;
    const commit_stats* batches() const noexcept override { return &commit_sizes_; }
    void stop() override;

private:
    // --- startup (recovery.cpp) ---
    std::optional<open_error> open_root(const std::string& root);
    std::optional<open_error> recover();
    // Does the body (or, with roll_forward, its temp file, then renamed into place) hold
    // what `r` says? Returns 0 or the errno of a failure that must stop startup.
    int verify_put(const record& r, bool roll_forward, bool& ok, bool& rolled);
    // Rewrites the body of `r` (a record carrying it) at its path, through a temp file
    // and a rename; recover() makes it durable with its final syncfs. 0 or errno.
    int restore_body(const record& r);
    // Removes temp files, and bodies of keys the journal does not have (a new key's body
    // written in place whose commit never happened).
    void remove_stray_files();
    // Writes state as a compacted journal and makes it the journal. 0 or errno.
    int write_snapshot(std::string& error);

    // --- requests (file_store.cpp) ---
    bool usable() const noexcept { return !failed_ && !stopped_; }
    // Full decision against the committed state; ok means "send it to the committer".
    // has_body (optional): set to whether the key has a body in the committed state.
    errc precheck(const std::string& key, const std::string& lock, token_t token,
                  const fence::preconditions& pre, write_result& r, bool* has_body = nullptr) const;
    // Validation + precheck shared by put and remove: the pending item to commit, or null
    // with `r` holding the answer.
    std::unique_ptr<pending> admit(pending::kind op, std::string& key, std::string& lock,
                                   token_t token, const fence::preconditions& pre,
                                   write_result& r) const;
    // Writes `body` to its file; may move it into p.journaled_body.
    write_result stage_put(pending& p, std::string& body);
    object_result read_body(const std::string& key);
    int open_dir(const object_path& p, bool create, std::shared_ptr<unique_fd>& out);
    net::awaitable<write_result> submit(std::unique_ptr<pending> p);
    // put: stages the body on pool_ and hands the item to the committer from there, so
    // the waiter is resumed once, with the final result.
    net::awaitable<write_result> stage_and_submit(std::unique_ptr<pending> p, std::string body);
    std::string unique_suffix();
    // Claims: a key maps to true while a direct body staged for it waits at its final
    // path, to false while the committer's batch is about to rename or unlink there.
    // A direct body is staged only for an unclaimed key, and a batch defers an item
    // whose key has a direct body waiting, so neither ever replaces the other's file.
    bool claim_direct(const std::string& key);
    void release_claims(const std::vector<std::string>& keys);
    // Removes a staged body that will not be committed (its temp file, or the direct
    // body at its final path); releases nothing.
    static void drop_staged(pending& p);
    // drop_staged, plus the claim of a direct body: for an item that never reaches a batch.
    void abandon_staged(pending& p);

    // --- committer (commit.cpp) ---
    void enqueue(std::unique_ptr<pending> p, bool staged = false);
    void committer_main();
    void commit_batch(std::deque<std::unique_ptr<pending>>& batch);
    void maybe_compact();
    void reply(pending& p);
    void fail(std::string_view what, int err);
    // The flusher: a syncfs() after batches that committed journaled bodies or renamed
    // or unlinked files, off the commit path, so files in place become durable soon and
    // the snapshot's syncfs and recovery have little left to do.
    void flusher_main();
    void request_flush();

    net::io_context& io_;
    // true: bodies are written without fsync; small ones are journaled with their
    // records (the flusher's syncfs writes their files later), and for a batch with a
    // larger one a syncfs makes its files (and their directory entries) durable before
    // the commit record; false: each body is fsynced when staged and each directory
    // holding one before the commit record.
    bool syncfs_batches_ = true;
    std::string root_;
    unique_fd root_fd_;
    unique_fd lock_fd_;
    std::shared_ptr<unique_fd> objects_fd_;
    unique_fd journal_fd_;
    std::uint64_t journal_bytes_ = 0;  // committer only
    std::uint64_t body_bytes_ = 0;     // committer only: journaled bodies' share of it
    std::uint64_t snapshot_bytes_ = 0; // committer only
    std::uint64_t next_compaction_ = 0;

    mutable std::shared_mutex state_mutex_;
    fence_map fences_;
    key_map keys_;

    // Directories whose entry is known durable (created and parent fsynced by us, or
    // present at startup, which ends with syncfs). Keyed by object_path::dir_id().
    std::mutex dirs_mutex_;
    std::unordered_set<std::string> durable_dirs_;

    std::uint64_t nonce_ = 0;
    std::atomic<std::uint64_t> seq_{0};

    std::atomic<bool> failed_{false};
    std::atomic<bool> stopped_{false};

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

    std::mutex flush_mutex_;
    std::condition_variable flush_cv_;
    bool flush_wanted_ = false; // guarded by flush_mutex_
    bool flusher_exit_ = false; // guarded by flush_mutex_

    net::thread_pool pool_;
    std::thread committer_;
    std::thread flusher_;
};

// Test hooks: hold the committer (items queue up and form one batch when released),
// and count items ever handed to any committer.
void set_commit_hold_for_tests(bool hold);
std::uint64_t enqueued_for_tests();
// The committer's gather window (0: back to the default).
void set_gather_window_for_tests(std::chrono::microseconds window);
// Puts of KEY wait on the pool, after writing their body, until the hold is lifted ("").
void set_stage_hold_for_tests(const std::string& key);
// Compact the journal once it reaches max(bytes, 4 × last snapshot); 0 restores 64 MiB.
void set_compaction_threshold_for_tests(std::uint64_t bytes);

} // namespace fk::store::detail
