// The batch committer: the one thread that decides and commits writes (group commit), and
// its helpers, the flusher and the checkpointer. The sequence per batch and what a crash
// at each step leaves behind: docs/file-store.md, "Write sequence".

#include "backends/file/detail/file_store_impl.hpp"
#include "backends/log/logging.hpp"

#include <boost/asio/post.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fcntl.h>
#include <unistd.h>

namespace fk::store::detail {

namespace {

std::atomic<bool> hold_commits{false};
std::atomic<std::uint64_t> enqueued{0};

// How long the committer holds a non-empty batch open for puts still being staged on the
// pool (docs/file-store.md, "Write sequence", step 3).
constexpr std::chrono::microseconds default_gather_window{300};
std::atomic<std::int64_t> gather_window_us{default_gather_window.count()};

// The flusher's pause after a syncfs, so that one syncfs serves the commits of that
// pause (docs/file-store.md, "Redo rows").
constexpr std::chrono::milliseconds flush_interval{50};

// WAL pages (4 KiB) after which the checkpointer copies the WAL into the index file, and
// after which the committer catches up itself between two batches: while commits keep
// coming, the checkpointer's copy never reaches the end of the WAL, and only a
// checkpoint that does lets the WAL start over (docs/file-store.md, "Checkpoints").
constexpr int checkpoint_pages = 2048;
constexpr int catch_up_pages = 4096;

// Expired idempotency records deleted per step: inside a batch's transaction (a little
// more work for one commit), or, when the committer is idle, in a transaction of its own.
constexpr int expiry_step_in_batch = 256;
constexpr int expiry_step_idle = 1000;
// The pause after a step that found fewer than its limit (nothing more is expired yet).
constexpr std::chrono::seconds expiry_interval{1};

std::atomic<std::int64_t> clock_offset_ms{0};

} // namespace

std::int64_t store_now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() +
           clock_offset_ms.load(std::memory_order_relaxed);
}

void set_clock_offset_for_tests(std::chrono::milliseconds offset) {
    clock_offset_ms = offset.count();
}

void set_commit_hold_for_tests(bool hold) {
    hold_commits = hold;
}
std::uint64_t enqueued_for_tests() {
    return enqueued.load();
}
void set_gather_window_for_tests(std::chrono::microseconds window) {
    gather_window_us = window.count() > 0 ? window.count() : default_gather_window.count();
}

void file_store::fail(std::string_view what, int err) {
    if (!failed_.exchange(true))
        logging::write(logging::level::error, "file store failed: every request now gets 503",
                       {{"root", root_}, {"error", errno_text(what, err)}});
}

void file_store::fail_index(std::string_view what) {
    if (!failed_.exchange(true))
        logging::write(logging::level::error, "file store failed: every request now gets 503",
                       {{"root", root_}, {"step", what}, {"error", writer_.last_error()}});
}

void file_store::reply(pending& p) {
    auto work = std::move(p.work);
    if (p.txn) {
        net::post(work, [h = std::move(*p.txn->handler), r = std::move(p.txn->result)]() mutable {
            std::move(h)(std::move(r));
        });
        return;
    }
    net::post(work, [h = std::move(*p.handler), r = std::move(p.result)]() mutable {
        std::move(h)(std::move(r));
    });
}

namespace {

bool made_dirs(const pending& p) {
    if (p.txn)
        return std::any_of(p.txn->parts.begin(), p.txn->parts.end(),
                           [](const pending& part) { return made_dirs(part); });
    return p.made_from != std::string::npos;
}

} // namespace

void file_store::answer_uncommitted(std::unique_ptr<pending> p) {
    if (!made_dirs(*p)) {
        reply(*p);
        return;
    }
    {
        std::lock_guard lock(reclaim_mutex_);
        if (!reclaimer_exit_)
            reclaim_queue_.push_back(std::move(p));
    }
    if (p) { // the reclaimer has exited (stop())
        reclaim_made_dirs(*p);
        reply(*p);
        return;
    }
    reclaim_cv_.notify_one();
}

void file_store::reclaimer_main() {
    std::unique_lock lock(reclaim_mutex_);
    for (;;) {
        reclaim_cv_.wait(lock, [&] { return !reclaim_queue_.empty() || reclaimer_exit_; });
        if (reclaim_queue_.empty())
            return; // exiting, nothing left to answer
        auto p = std::move(reclaim_queue_.front());
        reclaim_queue_.pop_front();
        lock.unlock();
        // Its files are gone (drop_staged): what its staging made is empty unless another
        // write has staged there since, and then it stays.
        reclaim_made_dirs(*p);
        reply(*p);
        lock.lock();
    }
}

void file_store::enqueue(std::unique_ptr<pending> p, bool staged) {
    {
        std::lock_guard lock(queue_mutex_);
        if (staged)
            staging_.fetch_sub(1);
        if (!committer_gone_) {
            queue_.push_back(std::move(p));
            enqueued.fetch_add(1);
        }
    }
    if (p) { // the committer has exited (stop())
        abandon_staged(*p);
        set_failure(*p, errc::unavailable, "file store is stopped");
        reply(*p);
        return;
    }
    queue_cv_.notify_one();
}

void file_store::committer_main() {
    auto last_batch = std::chrono::steady_clock::now();
    bool idle_checkpointed = true; // nothing committed since the last idle checkpoint
    for (;;) {
        // Deferred items go first: they arrived before everything queued now. They wait
        // for a direct body of their key, which is queued or still being staged; until it
        // comes they are retried every millisecond.
        std::deque<std::unique_ptr<pending>> batch;
        batch.swap(deferred_);
        const std::size_t retried = batch.size();
        bool exiting = false;
        bool idle = false;
        {
            std::unique_lock lock(queue_mutex_);
            std::optional<std::chrono::steady_clock::time_point> gather_until;
            for (;;) {
                const bool held = hold_commits.load() && !committer_exit_;
                if (!held && !queue_.empty()) {
                    // Gather: while other puts are still being staged, wait for them (at
                    // most the window), so one commit (and syncfs) serves them too.
                    // Idle or single-client load has nothing staging: no wait.
                    if (staging_ == 0 || committer_exit_)
                        break;
                    const auto now = std::chrono::steady_clock::now();
                    if (!gather_until)
                        gather_until = now + std::chrono::microseconds(gather_window_us.load());
                    if (now >= *gather_until)
                        break;
                    queue_cv_.wait_until(lock, *gather_until);
                    continue;
                }
                if (!held && retried != 0) {
                    queue_cv_.wait_for(lock, std::chrono::milliseconds(1));
                    break;
                }
                if (queue_.empty() && committer_exit_) {
                    committer_gone_ = true;
                    return;
                }
                if (queue_cv_.wait_for(lock, std::chrono::milliseconds(held ? 1 : 100)) ==
                        std::cv_status::timeout &&
                    queue_.empty() && !held) {
                    idle = true;
                    break;
                }
            }
            exiting = committer_exit_;
            for (auto& p : queue_)
                batch.push_back(std::move(p));
            queue_.clear();
        }
        if (idle && batch.empty()) {
            // Nothing committed for a second: delete the redo rows the flusher has made
            // unnecessary, so that a restart has little to replay. (Under load each batch
            // deletes them in its own transaction.)
            const bool quiet =
                std::chrono::steady_clock::now() - last_batch >= std::chrono::seconds(1);
            if (!failed_ && flushed_seq_.load() > trimmed_seq_ && quiet)
                trim_redo(true);
            // And the WAL copied into the index file, so that it starts over with the next
            // commit and a start after a crash reads little of it.
            if (!failed_ && quiet && !idle_checkpointed) {
                checkpoint_on(writer_, false);
                idle_checkpointed = true;
            }
            // Idle: expired idempotency records go in larger steps, each its own short
            // transaction, so a write arriving meanwhile waits for one step at most.
            if (!failed_)
                expire_records(true, expiry_step_idle);
            continue;
        }
        const bool only_retries = batch.size() == retried;
        wait_for_flusher();
        commit_batch(batch);
        last_batch = std::chrono::steady_clock::now();
        idle_checkpointed = false;
        if (!failed_ && wal_frames_.load(std::memory_order_relaxed) >= catch_up_pages)
            checkpoint_on(writer_, false);
        if (exiting && only_retries && deferred_.size() == retried) {
            // Stopping, and nothing has come for them: answer rather than wait forever.
            for (auto& p : deferred_) {
                drop_staged(*p);
                set_failure(*p, errc::unavailable, "file store is stopped");
                answer_uncommitted(std::move(p));
            }
            deferred_.clear();
        }
    }
}

int file_store::expire_records(bool standalone, int limit) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_expiry_)
        return index_ok;
    int rc = standalone ? writer_.begin() : index_ok;
    int deleted = 0;
    if (rc == index_ok)
        rc = writer_.expire_idem(store_now_ms() - retention_ms_, limit, deleted);
    if (rc == index_ok && standalone)
        rc = writer_.commit();
    if (rc != index_ok) {
        if (standalone)
            writer_.rollback();
        fail_index("deleting expired idempotency records");
        return rc;
    }
    // A full step: more may be expired, the next step is due at once (the next batch, or
    // the next idle turn); otherwise nothing is for a while.
    next_expiry_ = deleted >= limit ? now : now + expiry_interval;
    return rc;
}

int file_store::trim_redo(bool standalone) {
    const std::int64_t through = flushed_seq_.load();
    if (through <= trimmed_seq_)
        return index_ok;
    int rc = standalone ? writer_.begin() : index_ok;
    if (rc == index_ok)
        rc = writer_.delete_redo_through(through);
    if (rc == index_ok && standalone)
        rc = writer_.commit();
    if (rc != index_ok) {
        if (standalone)
            writer_.rollback();
        fail_index("deleting redo rows");
        return rc;
    }
    if (standalone)
        trimmed_seq_ = through;
    else
        trimmed_seq_ = std::max(trimmed_seq_, through); // once the caller's COMMIT succeeds
    return rc;
}

void file_store::learn_committed(const batch_state& b, const std::vector<pending*>& leaves) {
    for (const auto& [lock_name, token] : b.raised)
        cache_.observe_fence(lock_name, token);
    for (const pending* p : leaves) {
        if (p->accepted && p->op == pending::kind::put)
            cache_.observe_key(p->key, p->lock);
        else if (p->accepted && p->op == pending::kind::remove)
            cache_.forget_key(p->key);
        else if (!p->accepted && p->result.error == errc::stale_token && !p->result.floor &&
                 p->op != pending::kind::floor)
            // The own fence (a floor's token is not one: the cache knows no floors).
            cache_.observe_fence(p->lock, p->result.current_token);
    }
}

void file_store::commit_batch(std::deque<std::unique_ptr<pending>>& batch) {
    // An item that was not committed is answered once the directories its staging made
    // are gone again (answer_uncommitted); a committed one at once.
    auto reply_all = [&] {
        for (auto& p : batch) {
            if (p->accepted)
                reply(*p);
            else
                answer_uncommitted(std::move(p));
        }
    };
    auto unlink_tmps = [&] {
        for (auto& p : batch)
            drop_staged(*p);
    };
    // Items (all, or only the accepted / rejected ones) get `e`: the batch failed.
    enum class which { all, accepted, rejected };
    auto fail_all = [&](errc e, const std::string& message, which w) {
        for (auto& p : batch) {
            if ((w == which::accepted && !p->accepted) || (w == which::rejected && p->accepted))
                continue;
            set_failure(*p, e, message);
        }
    };

    // Claims this batch holds (its direct bodies' keys, and the keys whose paths it is
    // about to rename or unlink over) are released when it is done with those paths,
    // whichever way it returns.
    std::vector<std::string> claimed;
    struct claims_release {
        file_store& store;
        std::vector<std::string>& keys;
        ~claims_release() { store.release_claims(keys); }
    } release_at_return{*this, claimed};
    for (auto& p : batch)
        held_claims(*p, claimed);

    if (failed_) {
        unlink_tmps();
        fail_all(errc::unavailable, "file store is in the failed state", which::all);
        reply_all();
        return;
    }

    // 0. An item whose key has a direct body waiting (staged, not yet decided) must not
    //    rename or unlink over it: it waits for the next batch. Every other put or delete
    //    claims its key, so no direct body is created there until this batch is applied.
    //    A transaction is one item: deferred when any part's key has another item's direct
    //    body waiting, else every part's key claimed. Deferred, it holds no claim: its own
    //    direct bodies move to temp names first (unplace_parts). Only items that wait
    //    nowhere hold claims, so no two items ever wait for each other.
    std::vector<std::unique_ptr<pending>> unplace_failed;
    {
        std::deque<std::unique_ptr<pending>> now;
        std::lock_guard lock(claims_mutex_);
        auto names_key = [](const pending& p) {
            return p.op == pending::kind::put || p.op == pending::kind::remove;
        };
        for (auto& p : batch) {
            if (p->txn) {
                const auto& parts = p->txn->parts;
                if (std::any_of(parts.begin(), parts.end(), [&](const pending& part) {
                        auto c = claims_.find(part.key);
                        return names_key(part) && !part.direct && c != claims_.end() && c->second;
                    })) {
                    if (int err = unplace_parts(*p, claimed); err != 0) {
                        // Answered now, its bodies dropped; its remaining claims go with
                        // the batch's.
                        drop_staged(*p);
                        set_failure(*p, errc::unavailable,
                                    errno_text("moving a staged body aside", err));
                        unplace_failed.push_back(std::move(p));
                        continue;
                    }
                    deferred_.push_back(std::move(p));
                    continue;
                }
                for (const auto& part : parts)
                    if (names_key(part) && !part.direct &&
                        claims_.try_emplace(part.key, false).second)
                        claimed.push_back(part.key);
            } else if (names_key(*p) && !p->direct) {
                auto [c, fresh] = claims_.try_emplace(p->key, false);
                if (c->second) { // a direct body (of an item in a later batch, or later here)
                    deferred_.push_back(std::move(p));
                    continue;
                }
                if (fresh)
                    claimed.push_back(p->key);
            }
            now.push_back(std::move(p));
        }
        batch.swap(now);
    }
    for (auto& p : unplace_failed)
        answer_uncommitted(std::move(p));
    if (batch.empty())
        return;
    commit_sizes_.observe(batch.size());

    // An index error before the COMMIT: nothing was written; the store fails (fail-stop),
    // and every item of the batch gets 503.
    auto index_failed = [&](std::string_view what) {
        writer_.rollback();
        fail_index(what);
        unlink_tmps();
        fail_all(errc::unavailable, std::string(what) + ": the file store's index failed",
                 which::all);
        reply_all();
    };
    if (writer_.begin() != index_ok)
        return index_failed("BEGIN");
    if (trim_redo(false) != index_ok)
        return index_failed("deleting redo rows");
    if (expire_records(false, expiry_step_in_batch) != index_ok)
        return index_failed("deleting expired idempotency records");

    // 1. Decide, in FIFO order, inside the transaction: each read sees the batch's earlier
    //    accepted items, which is what makes check-and-write atomic per lock.
    batch_state b;
    b.ms = store_now_ms();
    const std::int64_t unexpired_after = b.ms - retention_ms_;
    for (auto& up : batch) {
        pending& p = *up;
        if (p.idem) {
            // The record decides first (before the fence: a replay tells what happened
            // then). Read in this transaction, it includes the records of this batch's
            // earlier items, so two writes with one key in a batch apply once. An
            // answered item is not applied; its staged body is dropped below.
            idem_row rec;
            const int rc = writer_.get_idem(p.idem->scope, p.idem->key, unexpired_after, rec);
            if (rc != index_row && rc != index_done)
                return index_failed("reading an idempotency record");
            if (rc == index_row) {
                if (p.txn)
                    p.txn->result = txn_answer_from(rec, *p.idem);
                else
                    p.result = answer_from(rec, *p.idem);
                continue;
            }
        }
        if (const char* step = p.txn ? decide_txn(p, b) : decide(p, b))
            return index_failed(step);
    }
    for (auto& p : batch)
        if (!p->accepted)
            drop_staged(*p);
    // From here on a transaction's parts are handled like single items (its parts are
    // accepted exactly when it is), and the transaction is answered once, as one item.
    std::vector<pending*> leaves;
    leaves.reserve(batch.size());
    for (auto& p : batch) {
        if (!p->txn)
            leaves.push_back(p.get());
        else
            for (auto& part : p->txn->parts)
                leaves.push_back(&part);
    }

    // 2. The new bodies and temp entries must be durable before the index names them, so
    //    that recovery can roll a committed write forward: one syncfs covers them all, or
    //    (file.flush "fsync") each directory is fsynced, its bodies having been fsynced
    //    when staged. A body in its redo row needs neither: recovery rewrites the file
    //    from there. A batch of only those (and deletes and fence advances) goes straight
    //    to the commit.
    std::unordered_map<std::string, int> new_dirs, touched_dirs;
    for (pending* p : leaves) {
        if (!p->accepted || !p->dir)
            continue;
        if (p->op == pending::kind::put && !p->journaled)
            new_dirs.emplace(p->path.dir_id(), p->dir->get());
        if ((p->op == pending::kind::put && !p->direct) || p->existed)
            touched_dirs.emplace(p->path.dir_id(), p->dir->get());
    }
    auto sync_failed = [&](std::string_view what, int err) {
        fail(what, err);
        writer_.rollback();
        unlink_tmps();
        // Rejections may have been decided on this batch's uncommitted fences: they must
        // not be reported, so the whole batch is "unavailable" (nothing written).
        fail_all(errc::unavailable, errno_text(what, err), which::all);
        reply_all();
    };
    if (syncfs_batches_ && !new_dirs.empty()) {
        new_dirs.clear();
        if (int err = sync_fd(objects_.fd(), sync_kind::staged); err != 0)
            return sync_failed("syncfs before the commit", err);
    }
    for (auto& [id, fd] : new_dirs)
        if (int err = sync_fd(fd, sync_kind::directory); err != 0)
            return sync_failed("fsync of a directory holding new bodies", err);

    // 3. The commit point, then 4. the files made to match, both under the exclusive
    //    state lock: a GET never pairs a body with another version's row.
    FK_FAILPOINT("before_index_commit");
    int err = 0;
    {
        std::unique_lock lock(state_mutex_);
        if (writer_.commit() != index_ok) {
            lock.unlock();
            fail_index("COMMIT");
            // Rejections may rest on fences of this batch that never became durable.
            fail_all(errc::outcome_unknown, "the file store's index commit failed",
                     which::accepted);
            fail_all(errc::unavailable, "the file store's index commit failed", which::rejected);
            // The staged files stay: if the commit did reach the disk, recovery needs them.
            reply_all();
            return;
        }
        if (b.staged_floors) {
            // Committed: every later batch is decided against them, and from here on reads
            // see them.
            std::unique_lock floors_guard(floors_mutex_);
            floors_ = std::move(*b.staged_floors);
        }
        FK_FAILPOINT("after_index_commit");
        for (pending* p : leaves) {
            if (!p->accepted || !p->dir)
                continue;
            int rc = 0;
            if (p->op == pending::kind::put && p->direct)
                continue; // already in place
            if (p->op == pending::kind::put)
                rc = ::renameat(p->dir->get(), p->tmp.c_str(), p->dir->get(), p->path.file.c_str());
            else if (p->existed)
                rc = ::unlinkat(p->dir->get(), p->path.file.c_str(), 0);
            if (rc != 0 && !(p->op == pending::kind::remove && errno == ENOENT)) {
                err = errno;
                break;
            }
        }
        // The cache learns only committed fences, and before any reader can see them
        // (reads of keys and fences hold state_mutex_ shared): a rejection it answers
        // reports the fence that holds at that moment (docs/api.md, current_token).
        if (err == 0)
            learn_committed(b, leaves);
    }
    if (err != 0) {
        fail("rename of a committed body", err);
        fail_all(errc::outcome_unknown, errno_text("rename of a committed body", err),
                 which::accepted);
        reply_all();
        return;
    }
    FK_FAILPOINT("after_rename");

    // 5. Make the renames and unlinks durable. With syncfs batches this is the flusher's
    //    syncfs, after which the batch's redo rows go; until then recovery redoes a rename
    //    that a power loss undid and rewrites a body that it lost.
    if (syncfs_batches_) {
        if (b.last_redo != 0)
            note_committed(b.last_redo, b.redo_bytes);
    } else {
        for (auto& [id, fd] : touched_dirs) {
            if (int e = sync_fd(fd, sync_kind::directory); e != 0) {
                fail("fsync of a directory after rename", e);
                fail_all(errc::outcome_unknown, errno_text("fsync of a directory", e),
                         which::accepted);
                reply_all();
                return;
            }
        }
        if (b.last_redo != 0) {
            std::lock_guard lock(flush_mutex_);
            committed_seq_ = b.last_redo;
            flushed_seq_ = b.last_redo;
        }
    }
    // Deletes may have left directories empty.
    for (pending* p : leaves)
        if (p->accepted && p->existed)
            objects_.reclaim_empty(p->path);
    FK_FAILPOINT("before_reply");
    // No log line here: the handler logs each applied request's "fence advanced" line,
    // with its request_id and peer, which the store does not know.
    reply_all();
}

const char* file_store::decide(pending& p, batch_state& b) {
    write_result& r = p.result;
    // The fence of `lock` in the transaction, raised to `token` when that is higher.
    auto advance = [&](const std::string& lock, std::optional<token_t> fence,
                       token_t token) -> int {
        if (fence && token <= *fence)
            return index_ok;
        b.raised[lock] = token;
        return writer_.put_fence(lock, token, b.ms);
    };
    // An applied keyed write's record, in the same transaction as the write.
    auto record = [&]() -> int {
        if (!p.idem)
            return index_ok;
        idem_row rec;
        rec.fingerprint = p.idem->fingerprint;
        rec.created = r.created;
        rec.version = r.version;
        rec.token = r.token;
        rec.committed_ms = b.ms;
        return writer_.put_idem(p.idem->scope, p.idem->key, rec);
    };
    if (p.op == pending::kind::floor) {
        if (!b.staged_floors)
            b.staged_floors = floors_;
        switch (b.staged_floors->raise(p.lock, p.token, b.ms, max_floors)) {
        case fence::floor_set::raise_outcome::not_above:
            r.error = errc::stale_token;
            r.current_token = b.staged_floors->floor_of(p.lock).value_or(0);
            return nullptr;
        case fence::floor_set::raise_outcome::full:
            r.error = errc::invalid_request;
            r.message = "there are already " + std::to_string(max_floors) +
                        " fence floors (the most a store keeps); raise an existing "
                        "prefix's floor, or one with a shorter prefix, instead";
            return nullptr;
        case fence::floor_set::raise_outcome::raised:
            break;
        }
        if (writer_.put_floor(p.lock, p.token, b.ms) != index_ok)
            return "writing a fence floor";
        // Before the COMMIT: a fence read that finds it unset knows its snapshot of the
        // index has no floor (read_fence).
        has_floors_.store(true);
        r.token = p.token;
        if (record() != index_ok)
            return "writing an idempotency record";
        p.accepted = true;
        return nullptr;
    }
    key_row k;
    if (p.op == pending::kind::check_version) {
        // Absent: no row, or a tombstone (whose version is not "found").
        const int rc = writer_.get_key(p.key, k);
        if (rc != index_row && rc != index_done)
            return "reading a key";
        const bool exists = rc == index_row && k.exists;
        r.version = exists ? k.version : 0;
        if (p.pre.if_match ? !exists || k.version != *p.pre.if_match : exists)
            r.error = errc::precondition_failed;
        else
            p.accepted = true;
        return nullptr;
    }
    fence_row f;
    int rc = writer_.get_fence(p.lock, f);
    if (rc != index_row && rc != index_done)
        return "reading a fence";
    // The lock's own fence, and the effective one: the own fence raised to the highest
    // floor over the lock. A write is decided against the effective fence; an accepted
    // one moves the own fence as without floors.
    const std::optional<token_t> fence =
        rc == index_row ? std::optional<token_t>(f.token) : std::nullopt;
    const fence::effective_fence eff =
        (b.staged_floors ? *b.staged_floors : floors_).effective(p.lock, fence);
    auto stale = [&] {
        r.error = errc::stale_token;
        r.current_token = eff.token.value_or(0);
        if (eff.floor)
            r.floor = std::string(eff.floor->prefix);
    };
    if (p.op == pending::kind::fence || p.op == pending::kind::check) {
        if (!fence::accepts(eff.token, p.token)) {
            stale();
            return nullptr;
        }
        if (p.op == pending::kind::check) {
            // A guard: nothing written; the answer is the fence it was checked against.
            r.token = eff.token.value_or(0);
            p.accepted = true;
            return nullptr;
        }
        if (advance(p.lock, fence, p.token) != index_ok)
            return "writing a fence";
        r.token = fence::advanced(fence, p.token);
        if (record() != index_ok)
            return "writing an idempotency record";
        p.accepted = true;
        return nullptr;
    }
    rc = writer_.get_key(p.key, k);
    if (rc != index_row && rc != index_done)
        return "reading a key";
    const bool exists = rc == index_row && k.exists;
    const std::int64_t version = rc == index_row ? k.version : 0;
    fence::key_state ks{exists, exists ? std::string_view(k.lock) : "", version};
    errc e = fence::check_write(ks, p.lock, eff.token, p.token, p.pre);
    if (e != errc::ok) {
        // Data only: the proxy words the reply (proxy/error_response.hpp).
        r.error = e;
        if (e == errc::stale_token)
            stale();
        else if (e == errc::lock_mismatch)
            r.lock = k.lock;
        return nullptr;
    }
    if (p.op == pending::kind::put) {
        key_row next;
        next.exists = true;
        next.version = version + 1;
        next.lock = p.lock;
        next.token = p.token;
        next.ms = b.ms;
        next.size = p.size;
        next.crc = p.body_crc;
        next.content_type = p.content_type;
        if (writer_.put_key(p.key, next) != index_ok)
            return "writing a key";
        // A redo row for a write whose files are not yet known durable: a temp file to
        // rename, or a body that only its row holds durably (docs/file-store.md).
        if (!p.tmp.empty() || p.journaled_body) {
            redo_row row;
            row.key = p.key;
            row.version = next.version;
            row.tmp = p.tmp;
            row.body = std::move(p.journaled_body);
            p.journaled_body.reset();
            p.journaled = row.body.has_value();
            if (writer_.add_redo(row) != index_ok)
                return "writing a redo row";
            b.last_redo = row.seq;
            b.redo_bytes += static_cast<std::int64_t>(p.size);
        }
        r.created = !exists;
        r.version = next.version;
    } else if (exists) {
        if (!p.dir) {
            if (int err = objects_.open_dir(p.path, false, p.dir); err != 0) {
                r = {};
                r.error = errc::unavailable;
                r.message = errno_text("opening the key's directory", err);
                return nullptr;
            }
        }
        if (writer_.tombstone_key(p.key, version) != index_ok)
            return "writing a tombstone";
        redo_row row;
        row.key = p.key;
        row.version = version;
        row.is_delete = true;
        if (writer_.add_redo(row) != index_ok)
            return "writing a redo row";
        b.last_redo = row.seq;
        p.existed = true;
        r.version = version;
    } else {
        // Deleting a missing key still checks and advances the fence
        // (docs/api.md#delete-resource).
        r.version = version;
    }
    if (advance(p.lock, fence, p.token) != index_ok)
        return "writing a fence";
    r.token = fence::advanced(fence, p.token);
    if (record() != index_ok)
        return "writing an idempotency record";
    p.accepted = true;
    return nullptr;
}

const char* file_store::decide_txn(pending& t, batch_state& b) {
    txn_state& x = *t.txn;
    if (writer_.savepoint() != index_ok)
        return "SAVEPOINT";
    // What the parts change outside the index, put back when one is refused: the batch's
    // raised fences (each lock's entry before the transaction) and its last redo row.
    std::vector<std::pair<std::string_view, std::optional<token_t>>> raised_before;
    const std::int64_t last_redo = b.last_redo;
    const std::int64_t redo_bytes = b.redo_bytes;
    std::optional<std::size_t> refused;
    for (std::size_t i = 0; i < x.parts.size(); ++i) {
        pending& part = x.parts[i];
        if (part.op != pending::kind::check_version &&
            std::none_of(raised_before.begin(), raised_before.end(),
                         [&](const auto& e) { return e.first == part.lock; })) {
            auto it = b.raised.find(part.lock);
            raised_before.emplace_back(part.lock, it == b.raised.end()
                                                      ? std::nullopt
                                                      : std::optional<token_t>(it->second));
        }
        if (const char* step = decide(part, b))
            return step;
        if (!part.accepted) {
            refused = i;
            break;
        }
    }
    if (refused) {
        // Nothing of the transaction stays: its rows go with the savepoint, its bodies
        // are dropped with the batch's other refused items.
        if (writer_.rollback_to() != index_ok || writer_.release() != index_ok)
            return "ROLLBACK TO a transaction's savepoint";
        for (auto& [lock, before] : raised_before) {
            if (before)
                b.raised[std::string(lock)] = *before;
            else
                b.raised.erase(std::string(lock));
        }
        b.last_redo = last_redo;
        b.redo_bytes = redo_bytes;
        for (auto& part : x.parts) {
            part.accepted = false;
            part.existed = false;
            part.journaled = false;
        }
        // The refused op's data (proxy/error_response.hpp words the reply).
        const write_result& r = x.parts[*refused].result;
        x.result = {};
        x.result.error = r.error;
        if (r.error == errc::stale_token || r.error == errc::lock_mismatch ||
            r.error == errc::precondition_failed)
            x.result.op_index = *refused;
        x.result.current_token = r.current_token;
        x.result.floor = r.floor;
        x.result.lock = r.lock;
        x.result.message = r.message;
        return nullptr;
    }
    FK_FAILPOINT("txn_decided");
    std::vector<txn_op_result> results(x.parts.size());
    for (std::size_t i = 0; i < x.parts.size(); ++i) {
        const pending& part = x.parts[i];
        const write_result& r = part.result;
        // A delete of a key that does not exist (never written, or deleted: its tombstone
        // keeps its last version) reports 0, as docs/api.md says.
        results[i].version = part.op == pending::kind::remove && !part.existed ? 0 : r.version;
        results[i].created = r.created;
        results[i].token = r.token;
    }
    x.result = {};
    x.result.results_json = render_txn_results(x.ops, results);
    if (t.idem) {
        // In the savepoint, so in the batch's one COMMIT with the parts' rows.
        idem_row rec;
        rec.fingerprint = t.idem->fingerprint;
        rec.committed_ms = b.ms;
        rec.results = x.result.results_json;
        if (writer_.put_idem(t.idem->scope, t.idem->key, rec) != index_ok)
            return "writing an idempotency record";
    }
    if (writer_.release() != index_ok)
        return "RELEASE of a transaction's savepoint";
    t.accepted = true;
    return nullptr;
}

void file_store::note_committed(std::int64_t seq, std::int64_t bytes) {
    {
        std::lock_guard lock(flush_mutex_);
        committed_seq_ = seq;
        committed_bytes_ += bytes;
        health_.redo_backlog_rows.store(seq - flushed_seq_.load(), std::memory_order_relaxed);
        if (flush_wanted_)
            return;
        flush_wanted_ = true;
    }
    flush_cv_.notify_one();
}

void file_store::wait_for_flusher() {
    std::unique_lock lock(flush_mutex_);
    // Seqs have gaps (a refused transaction's rows): the count is at most the rows.
    auto over = [&] {
        const std::int64_t rows = committed_seq_.load() - flushed_seq_.load();
        return rows > 0 &&
               (rows >= max_redo_rows_ || committed_bytes_ - flushed_bytes_ >= max_redo_bytes_);
    };
    if (!over())
        return;
    const auto t0 = std::chrono::steady_clock::now();
    flush_wanted_ = true;
    flush_urgent_ = true;
    flush_cv_.notify_one();
    flushed_cv_.wait(lock, [&] { return !over() || failed_ || flusher_exit_; });
    flush_urgent_ = false;
    health_.flush_waits.fetch_add(1, std::memory_order_relaxed);
    health_.flush_wait_ns.fetch_add(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - t0)
                                       .count()),
        std::memory_order_relaxed);
}

void file_store::flusher_main() {
    std::unique_lock lock(flush_mutex_);
    for (;;) {
        flush_cv_.wait(lock, [&] { return flush_wanted_ || flusher_exit_; });
        if (!flush_wanted_)
            return; // exiting, nothing left to flush
        flush_wanted_ = false;
        // Every batch through `through` renamed its files before this syncfs starts.
        const std::int64_t through = committed_seq_.load();
        const std::int64_t through_bytes = committed_bytes_;
        lock.unlock();
        // A write-back error means bodies in place were lost: fail like any other.
        int err = -1;
        if (!failed_ && (err = sync_fd(objects_.fd(), sync_kind::background)) != 0)
            fail("background syncfs", err);
        lock.lock();
        if (err == 0) {
            flushed_seq_ = through;
            flushed_bytes_ = through_bytes;
            health_.redo_backlog_rows.store(committed_seq_.load() - through,
                                            std::memory_order_relaxed);
        }
        flushed_cv_.notify_all();
        // The pause lets one syncfs serve the commits meanwhile; a waiting committer has
        // nothing more coming.
        flush_cv_.wait_for(lock, flush_interval, [&] { return flusher_exit_ || flush_urgent_; });
    }
}

int file_store::on_wal_commit(void* self, sqlite3*, const char*, int pages) {
    auto* s = static_cast<file_store*>(self);
    s->wal_frames_.store(pages, std::memory_order_relaxed);
    s->checkpoints_.committed(pages, checkpoint_pages, std::chrono::steady_clock::now());
    if (pages >= checkpoint_pages) {
        {
            std::lock_guard lock(s->checkpoint_mutex_);
            s->wal_pages_ = pages;
        }
        s->checkpoint_cv_.notify_one();
    }
    return 0;
}

template <class Connection> void file_store::checkpoint_on(Connection& conn, bool wait) {
    std::unique_lock run(checkpoint_run_mutex_, std::defer_lock);
    if (wait)
        run.lock();
    else if (!run.try_lock())
        return; // the checkpointer is copying: the next batch looks again
    // PASSIVE: copies what it can without blocking the committer or readers; the WAL
    // starts over at the first commit after a checkpoint that copied everything.
    int log = 0, done = 0;
    const bool ok = conn.checkpoint(log, done) == index_ok;
    const auto n = checkpoints_.checkpointed(ok, log, done, ok ? std::string() : conn.last_error(),
                                             std::chrono::steady_clock::now());
    run.unlock();
    if (n.what == checkpoint_watch::notice::kind::stalled)
        logging::write(logging::level::warn, "file store checkpoints are behind",
                       {{"root", root_},
                        {"behind_s", n.lag_s},
                        {"wal_pages", health_.wal_pages.load(std::memory_order_relaxed)},
                        {"error", n.error.empty() ? nlohmann::json() : nlohmann::json(n.error)}});
    else if (n.what == checkpoint_watch::notice::kind::resumed)
        logging::write(logging::level::info, "file store checkpoints caught up",
                       {{"root", root_}, {"behind_s", n.lag_s}});
}

void file_store::checkpointer_main() {
    index_checkpointer cp;
    if (cp.open(index_path_) != index_ok) {
        logging::write(logging::level::error, "file store checkpointer could not open the index",
                       {{"root", root_}, {"error", cp.last_error()}});
        return;
    }
    std::unique_lock lock(checkpoint_mutex_);
    for (;;) {
        checkpoint_cv_.wait(lock, [&] { return wal_pages_ > 0 || checkpointer_exit_; });
        if (checkpointer_exit_)
            return;
        wal_pages_ = 0;
        lock.unlock();
        checkpoint_on(cp, true);
        lock.lock();
    }
}

} // namespace fk::store::detail
