// The file store's request side: admission (the fence cache, then the full rule against
// the index on the body I/O pool), body staging and reads. Threads: file_store_impl.hpp.
#include "backends/file/file_store.hpp"

#include "backends/file/detail/crc32c.hpp"
#include "backends/file/detail/file_store_impl.hpp"
#include "backends/log/logging.hpp"
#include "fence/names.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <fcntl.h>
#include <mutex>
#include <random>
#include <sys/stat.h>
#include <thread>
#include <type_traits>
#include <unistd.h>

namespace fk::store {

std::variant<std::unique_ptr<store>, open_error>
open_file_store(net::io_context& io, const std::string& root, const file_store_options& opts) {
    return detail::file_store::open(io, root, opts);
}

int file_io_threads(int configured, bool syncfs_batches) noexcept {
    if (configured > 0)
        return configured;
    return syncfs_batches ? 2 : 4;
}

namespace detail {

namespace {

// Runs `f` (returning a result with `error` and `message`) on `pool`, then resumes the
// awaiting coroutine on its own executor, which is kept busy meanwhile.
template <typename F>
net::awaitable<std::invoke_result_t<F&>> on_pool(net::thread_pool& pool,
                                                 net::any_io_executor fallback, F f) {
    using result = std::invoke_result_t<F&>;
    auto init = [&pool, fallback](auto handler, F fn) {
        net::any_io_executor ex = net::get_associated_executor(handler, fallback);
        auto work = net::prefer(ex, net::execution::outstanding_work.tracked);
        net::post(pool,
                  [fn = std::move(fn), h = std::move(handler), work = std::move(work)]() mutable {
                      result r;
                      try {
                          r = fn();
                      } catch (const std::exception& e) {
                          r = result{};
                          r.error = errc::internal;
                          r.message = e.what();
                      }
                      net::post(work, [h = std::move(h), r = std::move(r)]() mutable {
                          std::move(h)(std::move(r));
                      });
                  });
    };
    co_return co_await net::async_initiate<const net::use_awaitable_t<>&, void(result)>(
        std::move(init), net::use_awaitable, std::move(f));
}

// Makes `item` carry the awaiting coroutine's handler; reply() answers it on the
// handler's own executor, which is kept busy meanwhile.
template <typename Handler>
void attach_waiter(pending& item, Handler handler, const net::any_io_executor& fallback) {
    net::any_io_executor ex = net::get_associated_executor(handler, fallback);
    item.work = net::prefer(ex, net::execution::outstanding_work.tracked);
    item.handler.emplace(std::move(handler));
}

// attach_waiter for a transaction, whose waiter takes a txn_result.
template <typename Handler>
void attach_txn_waiter(pending& t, Handler handler, const net::any_io_executor& fallback) {
    net::any_io_executor ex = net::get_associated_executor(handler, fallback);
    t.work = net::prefer(ex, net::execution::outstanding_work.tracked);
    t.txn->handler.emplace(std::move(handler));
}

// set_stage_hold_for_tests: puts of held_key wait after writing their body.
std::atomic<bool> stage_hold_on{false};
std::mutex stage_hold_mutex;
std::string stage_hold_key;

bool stage_held(const std::string& key) {
    if (!stage_hold_on.load(std::memory_order_relaxed))
        return false;
    std::lock_guard lock(stage_hold_mutex);
    return stage_hold_key == key;
}

// The fence of `lock` (SQLITE_ROW, or SQLITE_DONE when it has none) and the floors over
// it, read in one read transaction: one snapshot, which in WAL mode waits for no writer.
int fence_and_floors(index_reader& idx, const std::string& lock, fence_row& f,
                     fence::floor_set& over) {
    if (int rc = idx.begin_read(); rc != index_ok)
        return rc;
    std::vector<fence::floor_entry> rows;
    int rc = idx.get_fence(lock, f);
    if (rc == index_row || rc == index_done)
        if (const int floors = idx.floors_over(lock, rows); floors != index_done)
            rc = floors;
    idx.end_read();
    for (auto& row : rows)
        over.load(std::move(row));
    return rc;
}

write_result unavailable(std::string message) {
    write_result r;
    r.error = errc::unavailable;
    r.message = std::move(message);
    return r;
}

} // namespace

void set_stage_hold_for_tests(const std::string& key) {
    std::lock_guard lock(stage_hold_mutex);
    stage_hold_key = key;
    stage_hold_on = !key.empty();
}

std::variant<std::unique_ptr<store>, open_error>
file_store::open(net::io_context& io, const std::string& root, const file_store_options& opts) {
    auto s = std::make_unique<file_store>(io, opts);
    if (auto err = s->open_root(root))
        return *err;
    if (auto err = s->open_index())
        return *err;
    if (auto err = s->load_floors())
        return *err;
    if (auto err = s->replay_redo())
        return *err;
    s->committer_ = std::thread([p = s.get()] { p->committer_main(); });
    s->reclaimer_ = std::thread([p = s.get()] { p->reclaimer_main(); });
    s->flusher_ = std::thread([p = s.get()] { p->flusher_main(); });
    s->checkpointer_ = std::thread([p = s.get()] { p->checkpointer_main(); });
    if (!s->clean_start_) {
        std::lock_guard lock(s->sweep_mutex_);
        s->sweep_running_ = true;
        s->sweeper_ = std::thread([p = s.get()] { p->sweep_main(); });
    }
    s->opened_ = true;
    return std::unique_ptr<store>(std::move(s));
}

file_store::file_store(net::io_context& io, const file_store_options& opts)
    : io_(io), syncfs_batches_(opts.flush == config::file_flush::syncfs && syncfs_reports_errors()),
      cache_(opts.fence_cache_size),
      retention_ms_(
          std::chrono::duration_cast<std::chrono::milliseconds>(opts.idempotency_retention)
              .count()),
      max_redo_rows_(opts.max_redo_rows), max_redo_bytes_(opts.max_redo_bytes),
      checkpoints_(health_, checkpoint_warn_after),
      pool_(static_cast<std::size_t>(file_io_threads(opts.io_threads, syncfs_batches_))) {
    if (opts.flush == config::file_flush::syncfs && !syncfs_batches_)
        logging::write(logging::level::warn,
                       "file store: this kernel's syncfs() does not report write errors "
                       "(Linux < 5.8); using file.flush \"fsync\"",
                       {});
    std::random_device rd;
    nonce_ = (std::uint64_t(rd()) << 32) ^ rd() ^ std::uint64_t(::getpid());
}

file_store::~file_store() {
    stop();
}

bool file_store::ready() const noexcept {
    return usable();
}

bool file_store::wait_for_sweep() {
    std::unique_lock lock(sweep_mutex_);
    const bool had = sweeper_.joinable();
    sweep_cv_.wait(lock, [&] { return !sweep_running_; });
    return had;
}

std::string file_store::unique_suffix() {
    static constexpr char hex[] = "0123456789abcdef";
    std::uint64_t parts[2] = {nonce_, seq_.fetch_add(1)};
    std::string s;
    for (auto v : parts) {
        if (!s.empty())
            s += '-';
        for (int shift = 60; shift >= 0; shift -= 4)
            s += hex[(v >> shift) & 0xF];
    }
    return s;
}

file_store::reader_lease::~reader_lease() {
    if (!reader)
        return;
    std::lock_guard lock(owner->readers_mutex_);
    owner->readers_.push_back(std::move(reader));
}

file_store::reader_lease file_store::lease_reader() {
    {
        std::lock_guard lock(readers_mutex_);
        if (!readers_.empty()) {
            reader_lease l{this, std::move(readers_.back())};
            readers_.pop_back();
            return l;
        }
    }
    auto r = std::make_unique<index_reader>();
    if (r->open(index_path_) != 0)
        throw std::runtime_error("file store index: " + r->last_error());
    return reader_lease{this, std::move(r)};
}

errc file_store::cached_stale(const std::string& key, const std::string& lock, token_t token,
                              write_result& r) {
    // A key known to belong to `lock`: lock_mismatch cannot come first (it is checked
    // before the fence, docs/api.md#the-fence-rule). A fence advance names no key.
    if (!key.empty() && !cache_.key_known_under(key, lock))
        return errc::ok;
    if (auto bound = cache_.stale_bound(lock, token)) {
        if (floor_above(lock, *bound))
            return errc::ok;
        r.error = errc::stale_token;
        r.current_token = *bound;
        return r.error;
    }
    return errc::ok;
}

bool file_store::floor_above(std::string_view lock, token_t token) const {
    if (!has_floors_.load(std::memory_order_acquire))
        return false;
    std::shared_lock guard(floors_mutex_);
    const auto hit = floors_.highest_for(lock);
    return hit && hit->token > token;
}

net::awaitable<write_result> file_store::submit(std::unique_ptr<pending> p) {
    net::any_io_executor fallback = io_.get_executor();
    auto init = [this, fallback](auto handler, std::unique_ptr<pending> item) {
        attach_waiter(*item, std::move(handler), fallback);
        enqueue(std::move(item));
    };
    co_return co_await net::async_initiate<const net::use_awaitable_t<>&, void(write_result)>(
        std::move(init), net::use_awaitable, std::move(p));
}

net::awaitable<write_result> file_store::stage_and_submit(std::unique_ptr<pending> p,
                                                          std::string body) {
    // The pool thread that staged the body queues the item itself: the waiter is resumed
    // once, with the committer's answer (or the stage's error), not in between.
    net::any_io_executor fallback = io_.get_executor();
    auto init = [this, fallback](auto handler, std::unique_ptr<pending> item, std::string data) {
        attach_waiter(*item, std::move(handler), fallback);
        staging_.fetch_add(1);
        net::post(pool_, [this, item = std::move(item), data = std::move(data)]() mutable {
            stage_then_enqueue(std::move(item), data);
        });
    };
    co_return co_await net::async_initiate<const net::use_awaitable_t<>&, void(write_result)>(
        std::move(init), net::use_awaitable, std::move(p), std::move(body));
}

void file_store::stage_then_enqueue(std::unique_ptr<pending> item, std::string& body,
                                    bool on_lane) {
    write_result r;
    std::size_t budget = stage_dir_budget;
    try {
        r = stage_put(*item, body, true, on_lane ? nullptr : &budget);
    } catch (const std::exception& e) {
        r = {};
        r.error = errc::internal;
        r.message = e.what();
    }
    if (item->over_budget) {
        // Its directories are made on the lane, one request at a time: the pool stays free
        // for everyone else, and the committer no longer gathers for it.
        item->over_budget = false;
        staging_done();
        net::post(dir_lane_, [this, item = std::move(item), data = std::move(body)]() mutable {
            stage_then_enqueue(std::move(item), data, true);
        });
        return;
    }
    if (r.error != errc::ok) {
        abandon_staged(*item); // its body, its claim and the directories it made
        if (!on_lane)
            staging_done();
        item->result = std::move(r);
        reply(*item);
        return;
    }
    enqueue(std::move(item), !on_lane);
}

void file_store::staging_done() {
    {
        std::lock_guard lock(queue_mutex_);
        staging_.fetch_sub(1);
    }
    queue_cv_.notify_one();
}

write_result answer_from(const idem_row& rec, const idempotency& idem) {
    // A transaction's record never answers a single write (their fingerprints differ
    // anyway: the proxy hashes the method and path too).
    return replay_from_record(rec.results ? std::string_view() : rec.fingerprint, idem.fingerprint,
                              rec.created, rec.version, rec.token);
}

txn_result txn_answer_from(const idem_row& rec, const idempotency& idem) {
    txn_result r;
    if (!rec.results || rec.fingerprint != idem.fingerprint) {
        r.error = errc::idempotency_key_reused;
        r.message = idempotency_key_reused_message;
        return r;
    }
    r.replayed = true;
    r.results_json = *rec.results;
    return r;
}

void set_failure(pending& p, errc e, std::string message) {
    if (p.txn) {
        p.txn->result = {};
        p.txn->result.error = e;
        p.txn->result.message = std::move(message);
        return;
    }
    p.result = {};
    p.result.error = e;
    p.result.message = std::move(message);
}

bool file_store::answered_by_record(pending& p) {
    idem_row rec;
    int rc = index_done;
    try {
        // No state lock: a committed record stays as it is until it expires, and a WAL
        // reader sees a commit only once it is durable.
        rc = lease_reader()->get_idem(p.idem->scope, p.idem->key, store_now_ms() - retention_ms_,
                                      rec);
    } catch (const std::exception&) {
        return false; // no reader: the committer decides
    }
    if (rc != index_row)
        return false;
    if (p.txn)
        p.txn->result = txn_answer_from(rec, *p.idem);
    else
        p.result = answer_from(rec, *p.idem);
    return true;
}

net::awaitable<write_result> file_store::keyed_submit(std::unique_ptr<pending> p,
                                                      std::string body) {
    net::any_io_executor fallback = io_.get_executor();
    auto init = [this, fallback](auto handler, std::unique_ptr<pending> item, std::string data) {
        attach_waiter(*item, std::move(handler), fallback);
        const bool stages = item->op == pending::kind::put;
        if (stages)
            staging_.fetch_add(1); // the committer may gather for it
        net::post(pool_, [this, stages, item = std::move(item), data = std::move(data)]() mutable {
            // The record first: a replay answers even a write the fence has since moved
            // past (the replay tells what happened then). Only then the cache's stale check.
            bool answered = answered_by_record(*item);
            // A floor raise is not a write to a lock: the committer decides it.
            if (!answered && item->op != pending::kind::floor) {
                write_result r;
                answered = cached_stale(item->key, item->lock, item->token, r) != errc::ok;
                if (answered)
                    item->result = std::move(r);
            }
            if (answered) {
                if (stages)
                    staging_done();
                reply(*item);
                return;
            }
            if (stages)
                stage_then_enqueue(std::move(item), data);
            else
                enqueue(std::move(item));
        });
    };
    co_return co_await net::async_initiate<const net::use_awaitable_t<>&, void(write_result)>(
        std::move(init), net::use_awaitable, std::move(p), std::move(body));
}

write_result file_store::stage_put(pending& p, std::string& body, bool direct_ok,
                                   std::size_t* budget) {
    if (!usable())
        return unavailable("file store is not available");
    // No read of the index here: the committer decides every write against it, and a
    // write the fence cache could not refuse is almost always accepted. (Reading it here
    // too cost two lookups per write: docs/file-store.md, "Write sequence".)
    constexpr int create_flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    unique_fd fd;
    {
        // Shared: no empty directory is removed between opening it and creating in it.
        std::shared_lock structure(objects_.structure());
        if (int err = objects_.open_dir(p.path, true, p.dir, &p.made_from, budget); err != 0) {
            p.dir.reset();
            if (err == objects_dir::over_budget) {
                p.over_budget = true;
                return {};
            }
            return unavailable(errno_text("creating the key's directory", err));
        }
        // A key without a body gets its body written in place: no temp file, no rename
        // (two directory changes fewer per write; docs/file-store.md, "Write sequence").
        // The claim keeps every other write of the key away from that path; EEXIST means a
        // body is there (the key has one, or a crash left one).
        if (direct_ok && claim_direct(p.key)) {
            fd.reset(::openat(p.dir->get(), p.path.file.c_str(), create_flags, 0644));
            if (fd) {
                p.direct = true;
            } else {
                const int err = errno;
                release_claims({p.key});
                if (err != EEXIST)
                    return unavailable(errno_text("creating a body", err));
            }
        }
        if (!p.direct) {
            p.tmp = tmp_name(p.path.file, unique_suffix());
            fd.reset(::openat(p.dir->get(), p.tmp.c_str(), create_flags, 0644));
            if (!fd)
                return unavailable(errno_text("creating a temp file", errno));
        }
    }
    auto give_up = [&](std::string_view what, int err) {
        abandon_staged(p);
        return unavailable(errno_text(what, err));
    };
    p.body_crc = crc32c(0, body);
    p.size = body.size();
    if (int err = write_all(fd.get(), body); err != 0)
        return give_up("writing a body", err);
    // A small body also goes into its redo row: then neither this file nor its directory
    // entry has to be durable before the commit (docs/file-store.md, "Redo rows").
    if (syncfs_batches_ && body.size() <= journaled_body_max)
        p.journaled_body = std::move(body);
    while (stage_held(p.key))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    FK_FAILPOINT("before_body_fsync");
    // With syncfs batches the body is in its redo row, or (a large one) the committer's
    // syncfs makes it durable.
    if (int err = syncfs_batches_ ? 0 : sync_fd(fd.get(), sync_kind::body); err != 0) {
        fail("fsync of a body", err);
        return give_up("fsync of a body", err);
    }
    FK_FAILPOINT("after_body_fsync");
    return {};
}

bool file_store::claim_direct(const std::string& key) {
    std::lock_guard lock(claims_mutex_);
    return claims_.try_emplace(key, true).second;
}

void file_store::release_claims(const std::vector<std::string>& keys) {
    if (keys.empty())
        return;
    std::lock_guard lock(claims_mutex_);
    for (const auto& k : keys)
        claims_.erase(k);
}

void file_store::abandon_staged(pending& p) {
    drop_staged(p);
    reclaim_made_dirs(p);
    std::vector<std::string> keys;
    held_claims(p, keys);
    release_claims(keys);
    // Released once: the key may be claimed by another write afterwards.
    if (p.txn)
        for (auto& part : p.txn->parts)
            part.direct = false;
    p.direct = false;
}

void file_store::reclaim_made_dirs(pending& p) {
    if (p.txn) {
        for (auto& part : p.txn->parts)
            reclaim_made_dirs(part);
        return;
    }
    if (p.made_from == std::string::npos)
        return;
    objects_.reclaim_empty(p.path, p.path.dirs.size() - p.made_from);
    p.made_from = std::string::npos;
}

void file_store::held_claims(const pending& p, std::vector<std::string>& keys) {
    if (p.txn) {
        for (const auto& part : p.txn->parts)
            if (part.direct)
                keys.push_back(part.key);
    } else if (p.direct) {
        keys.push_back(p.key);
    }
}

int file_store::unplace_parts(pending& t, std::vector<std::string>& claimed) {
    for (auto& part : t.txn->parts) {
        if (!part.direct)
            continue;
        std::string tmp = tmp_name(part.path.file, unique_suffix());
        if (::renameat(part.dir->get(), part.path.file.c_str(), part.dir->get(), tmp.c_str()) != 0)
            return errno;
        part.tmp = std::move(tmp);
        part.direct = false;
        claims_.erase(part.key);
        std::erase(claimed, part.key);
    }
    return 0;
}

void file_store::drop_staged(pending& p) {
    if (p.txn) {
        for (auto& part : p.txn->parts)
            drop_staged(part);
        return;
    }
    if (p.op != pending::kind::put || !p.dir)
        return;
    if (p.direct)
        ::unlinkat(p.dir->get(), p.path.file.c_str(), 0);
    else if (!p.tmp.empty())
        ::unlinkat(p.dir->get(), p.tmp.c_str(), 0);
    p.tmp.clear();
    p.dir.reset(); // dropped once: the path may belong to another write afterwards
}

std::unique_ptr<pending> file_store::admit(pending::kind op, std::string& key, std::string& lock,
                                           token_t token, const fence::preconditions& pre,
                                           write_result& r, bool check_cache) {
    if (fence::validate_key(key) != errc::ok) {
        r.error = errc::invalid_name;
        r.message = "invalid key";
        return nullptr;
    }
    if (check_cache && cached_stale(key, lock, token, r) != errc::ok)
        return nullptr;
    auto p = std::make_unique<pending>();
    p->op = op;
    p->path = *object_path_for(key);
    p->key = std::move(key);
    p->lock = std::move(lock);
    p->token = token;
    p->pre = pre;
    return p;
}

net::awaitable<write_result> file_store::put(put_request req) {
    if (!usable())
        co_return unavailable("file store is not available");
    write_result r;
    const bool keyed = req.idem.has_value();
    auto p = admit(pending::kind::put, req.key, req.lock, req.token, req.pre, r, !keyed);
    if (!p)
        co_return r;
    p->content_type = std::move(req.content_type);
    if (keyed) {
        p->idem = std::move(req.idem);
        co_return co_await keyed_submit(std::move(p), std::move(req.body));
    }
    co_return co_await stage_and_submit(std::move(p), std::move(req.body));
}

net::awaitable<write_result> file_store::remove(delete_request req) {
    if (!usable())
        co_return unavailable("file store is not available");
    write_result r;
    // The committer decides against the index; a delete has no body to stage.
    const bool keyed = req.idem.has_value();
    auto p = admit(pending::kind::remove, req.key, req.lock, req.token, req.pre, r, !keyed);
    if (!p)
        co_return r;
    if (keyed) {
        p->idem = std::move(req.idem);
        std::string no_body;
        co_return co_await keyed_submit(std::move(p), std::move(no_body));
    }
    co_return co_await submit(std::move(p));
}

net::awaitable<write_result> file_store::advance_fence(fence_request req) {
    std::string lock = std::move(req.lock);
    const token_t token = req.token;
    if (!usable())
        co_return unavailable("file store is not available");
    if (req.idem) {
        // Its record first, then the stale check; and no "already there" shortcut: an
        // applied keyed advance commits its record.
        auto p = std::make_unique<pending>();
        p->op = pending::kind::fence;
        p->lock = std::move(lock);
        p->token = token;
        p->idem = std::move(req.idem);
        std::string no_body;
        co_return co_await keyed_submit(std::move(p), std::move(no_body));
    }
    write_result r;
    if (cached_stale("", lock, token, r) != errc::ok)
        co_return r;
    // A floor above the token refuses it: the committer says so.
    if (auto f = cache_.fence(lock); f && *f == token && !floor_above(lock, token)) {
        r.token = token; // already durable: nothing to write
        co_return r;
    }
    auto p = std::make_unique<pending>();
    p->op = pending::kind::fence;
    p->lock = std::move(lock);
    p->token = token;
    co_return co_await submit(std::move(p));
}

net::awaitable<txn_result> file_store::transact(txn_request req) {
    txn_result r;
    if (!usable()) {
        r.error = errc::unavailable;
        r.message = "file store is not available";
        co_return r;
    }
    auto refuse = [&r](std::size_t i, std::string message) {
        r.error = errc::invalid_request;
        r.op_index = i;
        r.message = std::move(message);
        return r;
    };
    // The HTTP side has validated the shape; the parts' claims and paths rely on it.
    if (auto bad = validate_txn(req.ops, req.ops.size()))
        co_return refuse(bad->op_index, std::move(bad->message));
    auto item = std::make_unique<pending>();
    item->op = pending::kind::txn;
    item->idem = std::move(req.idem);
    item->txn = std::make_unique<txn_state>();
    auto& parts = item->txn->parts;
    parts.resize(req.ops.size());
    std::vector<std::string> bodies(req.ops.size());
    bool stages = false;
    for (std::size_t i = 0; i < req.ops.size(); ++i) {
        txn_op& op = req.ops[i];
        pending& part = parts[i];
        switch (op.op) {
        case txn_op::kind::operation:
            co_return refuse(i, "op " + std::to_string(i) + " is an operation ('" + op.name +
                                    "'): named operations run on the Postgres store only");
        case txn_op::kind::put:
            part.op = pending::kind::put;
            break;
        case txn_op::kind::remove:
            part.op = pending::kind::remove;
            break;
        case txn_op::kind::fence:
            part.op = pending::kind::fence;
            break;
        case txn_op::kind::check:
            part.op = pending::kind::check;
            break;
        case txn_op::kind::check_version:
            part.op = pending::kind::check_version;
            break;
        }
        if (part.op == pending::kind::put || part.op == pending::kind::remove ||
            part.op == pending::kind::check_version) {
            if (fence::validate_key(op.key) != errc::ok)
                co_return refuse(i, "op " + std::to_string(i) + ": invalid key");
            part.path = *object_path_for(op.key);
            part.key = op.key;
        }
        part.lock = op.lock;
        part.token = op.token;
        part.pre = op.pre;
        if (part.op == pending::kind::check_version) {
            part.pre = {};
            part.pre.if_match = op.version;
        }
        if (part.op == pending::kind::put) {
            part.content_type = std::move(op.content_type);
            bodies[i] = std::move(op.body);
            op.body.clear();
            stages = true;
        }
    }
    item->txn->ops = std::move(req.ops);
    // No fast stale answer from the cache: the committer decides which op fails first.
    co_return co_await submit_txn(std::move(item), std::move(bodies), stages);
}

net::awaitable<txn_result> file_store::submit_txn(std::unique_ptr<pending> t,
                                                  std::vector<std::string> bodies, bool stages) {
    net::any_io_executor fallback = io_.get_executor();
    auto init = [this, fallback, stages](auto handler, std::unique_ptr<pending> item,
                                         std::vector<std::string> data) {
        attach_txn_waiter(*item, std::move(handler), fallback);
        if (!stages && !item->idem) {
            enqueue(std::move(item));
            return;
        }
        if (stages)
            staging_.fetch_add(1); // the committer may gather for it
        net::post(pool_, [this, stages, item = std::move(item), data = std::move(data)]() mutable {
            // The record first, as for a keyed write (keyed_submit).
            if (item->idem && answered_by_record(*item)) {
                if (stages)
                    staging_done();
                reply(*item);
                return;
            }
            if (stages)
                stage_txn_then_enqueue(std::move(item), data);
            else
                enqueue(std::move(item));
        });
    };
    co_return co_await net::async_initiate<const net::use_awaitable_t<>&, void(txn_result)>(
        std::move(init), net::use_awaitable, std::move(t), std::move(bodies));
}

void file_store::stage_txn_then_enqueue(std::unique_ptr<pending> t,
                                        std::vector<std::string>& bodies, bool on_lane) {
    write_result r;
    auto& parts = t->txn->parts;
    // One budget for the whole transaction on the pool; on the lane, none. Parts staged
    // before it moved to the lane (their directory is open) are not staged again.
    std::size_t budget = stage_dir_budget;
    bool over = false;
    for (std::size_t i = 0; i < parts.size() && r.error == errc::ok; ++i) {
        if (parts[i].op != pending::kind::put || parts[i].dir)
            continue;
        // A new key's body in place, as for a single put (docs/file-store.md,
        // "Transactions": the batch moves it aside if the transaction has to wait).
        try {
            r = stage_put(parts[i], bodies[i], true, on_lane ? nullptr : &budget);
        } catch (const std::exception& e) {
            r = {};
            r.error = errc::internal;
            r.message = e.what();
        }
        if (parts[i].over_budget) {
            parts[i].over_budget = false;
            over = true;
            break;
        }
    }
    if (over && r.error == errc::ok) {
        staging_done();
        net::post(dir_lane_, [this, t = std::move(t), data = std::move(bodies)]() mutable {
            stage_txn_then_enqueue(std::move(t), data, true);
        });
        return;
    }
    if (r.error != errc::ok) {
        abandon_staged(*t); // every body staged so far, its claims and its directories
        if (!on_lane)
            staging_done();
        set_failure(*t, r.error, std::move(r.message));
        reply(*t);
        return;
    }
    enqueue(std::move(t), !on_lane);
}

object_result file_store::read_object(const std::string& key, bool with_body) {
    object_result r;
    auto idx = lease_reader();
    key_row k;
    unique_fd fd;
    int err = 0;
    {
        // The committer renames under the exclusive lock, after its COMMIT: the fd opened
        // here is the body that the row read here describes.
        std::shared_lock lock(state_mutex_);
        const int rc = idx->get_key(key, k);
        if (rc != index_row && rc != index_done) {
            r.error = errc::unavailable;
            r.message = "reading the index: " + idx->last_error();
            return r;
        }
        if (rc == index_done || !k.exists) {
            r.error = errc::not_found;
            r.message = "no such key";
            return r;
        }
        if (with_body) {
            auto path = object_path_for(key);
            std::shared_ptr<unique_fd> dir;
            err = objects_.open_dir(*path, false, dir);
            if (err == 0) {
                fd.reset(
                    ::openat(dir->get(), path->file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
                if (!fd)
                    err = errno;
            }
        }
    }
    if (with_body && err == 0)
        err = read_exact(fd.get(), r.body, k.size);
    if (err != 0) {
        r.error = errc::unavailable;
        r.message = errno_text("reading the body of '" + key + "'", err);
        r.body.clear();
        logging::write(logging::level::error, "file store read failed",
                       {{"key", key}, {"error", r.message}});
        return r;
    }
    r.size = k.size;
    r.content_type = std::move(k.content_type);
    r.version = k.version;
    r.token = k.token;
    r.lock = std::move(k.lock);
    return r;
}

net::awaitable<object_result> file_store::get(std::string key, bool with_body) {
    object_result r;
    if (!usable()) {
        r.error = errc::unavailable;
        r.message = "file store is not available";
        co_return r;
    }
    if (fence::validate_key(key) != errc::ok) {
        r.error = errc::not_found;
        r.message = "no such key";
        co_return r;
    }
    auto read = [this, key = std::move(key), with_body] { return read_object(key, with_body); };
    co_return co_await on_pool(pool_, io_.get_executor(), std::move(read));
}

// On a reader, off the committer: a pass over the index's records, the time it takes.
net::awaitable<idem_usage_result> file_store::idempotency_usage() {
    auto count = [this] {
        idem_usage_result r;
        if (!usable()) {
            r.error = errc::unavailable;
            r.message = "file store is not available";
            return r;
        }
        std::vector<idem_scope_usage> rows;
        auto idx = lease_reader(); // throws: on_pool answers internal
        if (idx->idem_usage(store_now_ms() - retention_ms_,
                            static_cast<std::int64_t>(idem_record_overhead), rows) != index_done) {
            r.error = errc::unavailable;
            r.message = "reading the index: " + idx->last_error();
            return r;
        }
        for (auto& u : rows)
            r.scopes.push_back({std::move(u.scope), static_cast<std::uint64_t>(u.records),
                                static_cast<std::uint64_t>(u.bytes), u.oldest_ms});
        return r;
    };
    co_return co_await on_pool(pool_, io_.get_executor(), std::move(count));
}

net::awaitable<idem_presence> file_store::has_idempotency_record(std::string scope,
                                                                 std::string key) {
    auto look = [this, scope = std::move(scope), key = std::move(key)] {
        idem_presence r;
        r.error = errc::unavailable;
        if (!usable()) {
            r.message = "file store is not available";
            return r;
        }
        auto idx = lease_reader();
        idem_row rec;
        const int rc = idx->get_idem(scope, key, store_now_ms() - retention_ms_, rec);
        if (rc != index_row && rc != index_done) {
            r.message = "reading the index: " + idx->last_error();
            return r;
        }
        r.error = errc::ok;
        r.found = rc == index_row;
        return r;
    };
    co_return co_await on_pool(pool_, io_.get_executor(), std::move(look));
}

net::awaitable<fence_result> file_store::read_fence(std::string lock) {
    fence_result r;
    if (!usable()) {
        r.error = errc::unavailable;
        r.message = "file store is not available";
        co_return r;
    }
    auto read = [this, lock = std::move(lock)] {
        fence_result out;
        auto idx = lease_reader();
        fence_row f;
        fence::floor_set over;
        // As a GET does: a fence the committer has just committed is read only once the
        // fence cache knows it (commit.cpp, learn_committed), so a rejection the cache
        // answers later never reports a lower fence than this read.
        std::shared_lock state(state_mutex_);
        // The effective fence of one snapshot of the index (a batch may commit a raise and
        // writes under it at once). has_floors_ is set before the COMMIT of the first
        // raise: still unset after the fence was read, it proves that snapshot has no floor.
        const bool floors = has_floors_.load();
        int rc = floors ? fence_and_floors(*idx, lock, f, over) : idx->get_fence(lock, f);
        if (!floors && (rc == index_row || rc == index_done) && has_floors_.load())
            rc = fence_and_floors(*idx, lock, f, over);
        if (rc != index_row && rc != index_done) {
            out.error = errc::unavailable;
            out.message = "reading the index";
            return out;
        }
        std::optional<token_t> own;
        if (rc == index_row) {
            cache_.observe_fence(lock, f.token); // the own fence: the cache knows no floors
            own = f.token;
            out.fence = {lock, f.token, f.updated_ms, std::nullopt};
        }
        if (auto e = over.effective(lock, own); e.floor)
            out.fence = {lock, e.floor->token, e.floor->updated_at_ms,
                         std::string(e.floor->prefix)};
        if (!own && !out.fence.floor) {
            out.error = errc::not_found;
            out.message = "no fence for lock '" + lock + "'";
        }
        return out;
    };
    co_return co_await on_pool(pool_, io_.get_executor(), std::move(read));
}

net::awaitable<write_result> file_store::raise_floor(floor_request req) {
    if (!usable())
        co_return unavailable("file store is not available");
    // Decided and committed by the committer, in FIFO order with every write: once the
    // batch that raises it has committed, every later batch is checked against it.
    auto p = std::make_unique<pending>();
    p->op = pending::kind::floor;
    p->lock = std::move(req.prefix);
    p->token = req.token;
    if (req.idem) {
        p->idem = std::move(req.idem);
        std::string no_body;
        co_return co_await keyed_submit(std::move(p), std::move(no_body));
    }
    co_return co_await submit(std::move(p));
}

net::awaitable<floors_result> file_store::list_floors() {
    floors_result r;
    if (!usable()) {
        r.error = errc::unavailable;
        r.message = "file store is not available";
        co_return r;
    }
    // From memory (at most store::max_floors entries), under the shared lock that the
    // committer takes exclusively only to install a committed raise.
    std::vector<fence::floor_entry> floors;
    {
        std::shared_lock guard(floors_mutex_);
        floors = floors_.list();
    }
    r.floors.reserve(floors.size());
    for (auto& f : floors)
        r.floors.push_back({std::move(f.prefix), f.token, f.updated_at_ms});
    co_return r;
}

net::awaitable<list_result> file_store::list_fences(list_request req) {
    list_result r;
    if (!usable()) {
        r.error = errc::unavailable;
        r.message = "file store is not available";
        co_return r;
    }
    auto list = [this, req = std::move(req)] {
        list_result out;
        std::vector<std::pair<std::string, fence_row>> rows;
        // One row more than asked: whether there is a next page.
        const std::string after = req.after && *req.after >= req.prefix ? *req.after : "";
        auto idx = lease_reader();
        std::shared_lock state(state_mutex_); // as read_fence
        if (idx->list_fences(req.prefix, after, req.limit + 1, rows) != index_done) {
            out.error = errc::unavailable;
            out.message = "reading the index";
            return out;
        }
        for (std::size_t i = 0; i < rows.size() && i < req.limit; ++i)
            out.fences.push_back(
                {rows[i].first, rows[i].second.token, rows[i].second.updated_ms, std::nullopt});
        if (rows.size() > req.limit && !out.fences.empty())
            out.next = out.fences.back().lock;
        return out;
    };
    co_return co_await on_pool(pool_, io_.get_executor(), std::move(list));
}

} // namespace detail
} // namespace fk::store
