// Longer than 400 lines and not split by role: the file store's journal and in-memory
// index are next to be replaced by an embedded engine, which removes most of this file;
// a split first would be thrown away.
// The committer: the one thread that decides and commits writes (group commit).
// The sequence per batch and what a crash at each step leaves behind are described in
// docs/file-store.md, "Write sequence".

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

std::atomic<std::uint64_t> min_compaction_bytes{64ull << 20};

// How long the committer holds a non-empty batch open for puts still being staged on the
// pool (docs/file-store.md, "Write sequence", step 3).
constexpr std::chrono::microseconds default_gather_window{300};
std::atomic<std::int64_t> gather_window_us{default_gather_window.count()};

// The flusher's pause after a syncfs, so that one syncfs serves the commits of that
// pause (docs/file-store.md, "Journaled bodies").
constexpr std::chrono::milliseconds flush_interval{50};

std::int64_t now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

} // namespace

void set_commit_hold_for_tests(bool hold) {
    hold_commits = hold;
}
void set_compaction_threshold_for_tests(std::uint64_t bytes) {
    min_compaction_bytes = bytes ? bytes : 64ull << 20;
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

void file_store::reply(pending& p) {
    auto work = std::move(p.work);
    net::post(work, [h = std::move(*p.handler), r = std::move(p.result)]() mutable {
        std::move(h)(std::move(r));
    });
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
        p->result.error = errc::unavailable;
        p->result.message = "file store is stopped";
        reply(*p);
        return;
    }
    queue_cv_.notify_one();
}

void file_store::committer_main() {
    for (;;) {
        // Deferred items go first: they arrived before everything queued now. They wait
        // for a direct body of their key, which is queued or still being staged; until it
        // comes they are retried every millisecond.
        std::deque<std::unique_ptr<pending>> batch;
        batch.swap(deferred_);
        const std::size_t retried = batch.size();
        bool exiting = false;
        {
            std::unique_lock lock(queue_mutex_);
            std::optional<std::chrono::steady_clock::time_point> gather_until;
            for (;;) {
                const bool held = hold_commits.load() && !committer_exit_;
                if (!held && !queue_.empty()) {
                    // Gather: while other puts are still being staged, wait for them (at
                    // most the window), so one journal sync (and syncfs) serves them too.
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
                queue_cv_.wait_for(lock, std::chrono::milliseconds(held ? 1 : 100));
            }
            exiting = committer_exit_;
            for (auto& p : queue_)
                batch.push_back(std::move(p));
            queue_.clear();
        }
        const bool only_retries = batch.size() == retried;
        commit_batch(batch);
        if (exiting && only_retries && deferred_.size() == retried) {
            // Stopping, and nothing has come for them: answer rather than wait forever.
            for (auto& p : deferred_) {
                drop_staged(*p);
                p->result = {};
                p->result.error = errc::unavailable;
                p->result.message = "file store is stopped";
                reply(*p);
            }
            deferred_.clear();
        }
        maybe_compact();
    }
}

void file_store::commit_batch(std::deque<std::unique_ptr<pending>>& batch) {
    auto reply_all = [&] {
        for (auto& p : batch)
            reply(*p);
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
            p->result = {};
            p->result.error = e;
            p->result.message = message;
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
        if (p->direct)
            claimed.push_back(p->key);

    if (failed_) {
        unlink_tmps();
        fail_all(errc::unavailable, "file store is in the failed state", which::all);
        reply_all();
        return;
    }

    // 0. An item whose key has a direct body waiting (staged, not yet decided) must not
    //    rename or unlink over it: it waits for the next batch. Every other put or delete
    //    claims its key, so no direct body is created there until this batch is applied.
    {
        std::deque<std::unique_ptr<pending>> now;
        std::lock_guard lock(claims_mutex_);
        for (auto& p : batch) {
            if (p->op != pending::kind::fence && !p->direct) {
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
    if (batch.empty())
        return;
    commit_sizes_.observe(batch.size());

    // 1. Decide, in FIFO order, against committed state overlaid with earlier accepted
    //    items of this batch. Only this thread writes fences_/keys_, so reading them
    //    without the lock is safe here.
    const std::int64_t ms = now_ms();
    std::unordered_map<std::string, fence_entry> fence_overlay;
    key_map key_overlay;
    auto fence_of = [&](const std::string& lock) -> std::optional<fence_entry> {
        if (auto f = fence_overlay.find(lock); f != fence_overlay.end())
            return f->second;
        if (auto f = fences_.find(lock); f != fences_.end())
            return f->second;
        return std::nullopt;
    };
    auto key_of = [&](const std::string& key) -> key_meta {
        if (auto k = key_overlay.find(key); k != key_overlay.end())
            return k->second;
        if (auto k = keys_.find(key); k != keys_.end())
            return k->second;
        return {};
    };
    auto advance = [&](const std::string& lock, token_t token) {
        auto f = fence_of(lock);
        if (!f || token > f->token)
            fence_overlay[lock] = {token, ms};
        return fence::advanced(f ? std::optional(f->token) : std::nullopt, token);
    };

    std::string records;
    std::size_t accepted = 0;
    std::size_t journaled = 0; // accepted puts whose body is in their record
    std::uint64_t batch_body_bytes = 0;
    for (auto& up : batch) {
        pending& p = *up;
        auto f = fence_of(p.lock);
        std::optional<token_t> fence = f ? std::optional(f->token) : std::nullopt;
        write_result& r = p.result;
        if (p.op == pending::kind::fence) {
            if (!fence::accepts(fence, p.token)) {
                r.error = errc::stale_token;
                r.current_token = *fence;
                continue;
            }
            r.token = advance(p.lock, p.token);
            append_record(records, fence_record(p.lock, p.token, ms));
            p.accepted = true;
            ++accepted;
            continue;
        }
        key_meta km = key_of(p.key);
        fence::key_state ks{km.exists, km.exists ? std::string_view(km.lock) : "", km.version};
        errc e = fence::check_write(ks, p.lock, fence, p.token, p.pre);
        if (e != errc::ok) {
            // Data only: the proxy words the reply (proxy/error_response.hpp).
            r.error = e;
            if (e == errc::stale_token)
                r.current_token = fence.value_or(0);
            else if (e == errc::lock_mismatch)
                r.lock = km.lock;
            continue;
        }
        if (p.op == pending::kind::put) {
            key_meta next;
            next.exists = true;
            next.lock = p.lock;
            next.token = p.token;
            next.version = km.version + 1;
            next.ms = ms;
            next.size = p.size;
            next.body_crc = p.body_crc;
            next.content_type = p.content_type;
            r.created = !km.exists;
            r.version = next.version;
            r.token = advance(p.lock, p.token);
            record rec = put_record(p.key, p.lock, p.token, next.version, ms);
            rec.size = p.size;
            rec.body_crc = p.body_crc;
            rec.tmp = p.tmp;
            rec.content_type = p.content_type;
            rec.body = std::move(p.journaled_body);
            p.journaled_body.reset();
            p.body_journaled = rec.body.has_value();
            journaled += p.body_journaled ? 1 : 0;
            batch_body_bytes += rec.body ? rec.body->size() : 0;
            append_record(records, rec);
            key_overlay[p.key] = std::move(next);
        } else if (km.exists) {
            if (!p.dir) {
                if (int err = open_dir(p.path, false, p.dir); err != 0) {
                    r = {};
                    r.error = errc::unavailable;
                    r.message = errno_text("opening the key's directory", err);
                    continue;
                }
            }
            p.existed = true;
            r.version = km.version;
            r.token = advance(p.lock, p.token);
            append_record(records, del_record(p.key, p.lock, p.token, km.version, ms));
            key_overlay[p.key] = tombstone(km.version, ms);
        } else {
            // Deleting a missing key still checks and advances the fence
            // (docs/api.md#delete-resource).
            r.version = km.version;
            r.token = advance(p.lock, p.token);
            append_record(records, fence_record(p.lock, p.token, ms));
        }
        p.accepted = true;
        ++accepted;
    }
    for (auto& p : batch)
        if (!p->accepted)
            drop_staged(*p);
    if (accepted == 0) {
        reply_all(); // decided on committed state only
        return;
    }

    // 2. The new bodies and tmp entries must be durable before the journal names them,
    //    so that recovery can roll a committed write forward: one syncfs covers them
    //    all, or (file.flush "fsync") each directory is fsynced, its bodies having been
    //    fsynced when staged. A journaled body needs neither: its record carries it,
    //    and recovery rewrites the file from there. A batch of only those (and deletes
    //    and fence advances) goes straight to the commit.
    std::unordered_map<std::string, int> tmp_dirs, touched_dirs;
    for (auto& p : batch) {
        if (!p->accepted || !p->dir)
            continue;
        if (p->op == pending::kind::put && !p->body_journaled)
            tmp_dirs.emplace(p->path.dir_id(), p->dir->get());
        if ((p->op == pending::kind::put && !p->direct) || p->existed)
            touched_dirs.emplace(p->path.dir_id(), p->dir->get());
    }
    if (syncfs_batches_ && !tmp_dirs.empty()) {
        tmp_dirs.clear();
        if (int err = sync_fd(objects_fd_->get(), sync_kind::staged); err != 0) {
            fail("syncfs before the commit", err);
            unlink_tmps();
            fail_all(errc::unavailable, errno_text("syncfs before the commit", err), which::all);
            reply_all();
            return;
        }
    }
    for (auto& [id, fd] : tmp_dirs) {
        if (int err = sync_fd(fd, sync_kind::directory); err != 0) {
            fail("fsync of a directory holding new temp files", err);
            unlink_tmps();
            // Rejections may have been decided on this batch's uncommitted fences: they
            // must not be reported, so the whole batch is "unavailable" (nothing written).
            fail_all(errc::unavailable, errno_text("fsync of a directory", err), which::all);
            reply_all();
            return;
        }
    }

    // 3. The commit point: one write, one fdatasync.
    FK_FAILPOINT("before_journal_write");
    int err = write_all(journal_fd_.get(), records);
    if (err == 0) {
        FK_FAILPOINT("after_journal_write");
        err = sync_fd(journal_fd_.get(), sync_kind::journal);
        if (err != 0)
            fail("fdatasync of the journal", err);
    } else {
        fail("append to the journal", err);
    }
    if (err != 0) {
        // Rejections may rest on fences of this batch that never became durable.
        fail_all(errc::outcome_unknown, errno_text("journal commit", err), which::accepted);
        fail_all(errc::unavailable, errno_text("journal commit", err), which::rejected);
        reply_all();
        return;
    }
    journal_bytes_ += records.size();
    body_bytes_ += batch_body_bytes;
    FK_FAILPOINT("after_journal_sync");

    // 4. Make the bodies match the journal, atomically with the in-memory state.
    {
        std::unique_lock lock(state_mutex_);
        for (auto& p : batch) {
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
        if (err == 0) {
            for (auto& [lock_name, f] : fence_overlay)
                fences_[lock_name] = f;
            for (auto& [key, k] : key_overlay)
                keys_[key] = std::move(k);
        }
    }
    if (err != 0) {
        fail("rename of a committed body", err);
        fail_all(errc::outcome_unknown, errno_text("rename of a committed body", err),
                 which::accepted);
        reply_all();
        return;
    }
    FK_FAILPOINT("after_rename");

    // 5. Make the renames and unlinks durable. With syncfs batches this is left to the
    //    flusher's syncfs (or a later batch's, or the one before a snapshot), as are
    //    journaled bodies: the write is already durable through its journal record and
    //    its synced temp file or journaled body, and recovery redoes a rename that a
    //    power loss undid and rewrites a journaled body that it lost.
    if (syncfs_batches_) {
        if (journaled != 0 || !touched_dirs.empty())
            request_flush();
        touched_dirs.clear();
    }
    for (auto& [id, fd] : touched_dirs) {
        if (int e = sync_fd(fd, sync_kind::directory); e != 0) {
            fail("fsync of a directory after rename", e);
            fail_all(errc::outcome_unknown, errno_text("fsync of a directory", e), which::accepted);
            reply_all();
            return;
        }
    }
    FK_FAILPOINT("before_reply");
    // No log line here: the handler logs each applied request's "fence advanced" line,
    // with its request_id and peer, which the store does not know.
    reply_all();
}

void file_store::request_flush() {
    {
        std::lock_guard lock(flush_mutex_);
        if (flush_wanted_)
            return;
        flush_wanted_ = true;
    }
    flush_cv_.notify_one();
}

void file_store::flusher_main() {
    std::unique_lock lock(flush_mutex_);
    for (;;) {
        flush_cv_.wait(lock, [&] { return flush_wanted_ || flusher_exit_; });
        if (!flush_wanted_)
            return; // exiting, nothing left to flush
        flush_wanted_ = false;
        lock.unlock();
        // Nothing depends on this syncfs for correctness (the journal holds the bodies),
        // but a write-back error means bodies in place were lost: fail like any other.
        if (!failed_)
            if (int err = sync_fd(objects_fd_->get(), sync_kind::background); err != 0)
                fail("background syncfs of journaled bodies", err);
        lock.lock();
        flush_cv_.wait_for(lock, flush_interval, [&] { return flusher_exit_; });
    }
}

void file_store::maybe_compact() {
    if (failed_)
        return;
    const std::uint64_t min_bytes = min_compaction_bytes.load();
    // A snapshot costs the committer time in proportion to the number of keys (the
    // writes wait meanwhile), so journaled bodies, which replay needs no more work for,
    // do not bring it forward; they only bound the whole file, at four times as much.
    const std::uint64_t threshold = std::max({min_bytes, 4 * snapshot_bytes_, next_compaction_});
    const std::uint64_t records_bytes = journal_bytes_ - body_bytes_;
    if (records_bytes < threshold && journal_bytes_ < 4 * threshold)
        return;
    std::string error;
    // With syncfs batches the last batches' renames are durable only after the next
    // syncfs, and the snapshot is about to trust the bodies in place.
    if (syncfs_batches_) {
        if (int err = sync_fd(objects_fd_->get(), sync_kind::filesystem); err != 0) {
            fail("syncfs before a journal snapshot", err);
            return;
        }
    }
    if (write_snapshot(error) == 0) {
        next_compaction_ = 0;
    } else {
        logging::write(logging::level::warn, "file store journal compaction failed",
                       {{"root", root_}, {"error", error}});
        next_compaction_ = records_bytes + min_bytes; // try again later
    }
}

} // namespace fk::store::detail
