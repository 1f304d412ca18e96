// Longer than 400 lines and not split by role: the file store's journal and in-memory
// index are next to be replaced by an embedded engine, which removes most of this file;
// a split first would be thrown away.
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

constexpr int dir_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// Runs `f` (returning write_result or object_result) on `pool`, then resumes the
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
    if (auto err = s->recover())
        return *err;
    s->committer_ = std::thread([p = s.get()] { p->committer_main(); });
    s->flusher_ = std::thread([p = s.get()] { p->flusher_main(); });
    return std::unique_ptr<store>(std::move(s));
}

file_store::file_store(net::io_context& io, const file_store_options& opts)
    : io_(io), syncfs_batches_(opts.flush == config::file_flush::syncfs && syncfs_reports_errors()),
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

void file_store::stop() {
    stopped_ = true;
    // Staged writes still on the pool hand their items to the committer, which drains
    // everything queued before it exits; later items are answered "unavailable".
    pool_.join();
    {
        std::lock_guard lock(queue_mutex_);
        committer_exit_ = true;
    }
    queue_cv_.notify_all();
    if (committer_.joinable())
        committer_.join();
    // After the committer: its last batches may still ask for a flush, done before exit.
    {
        std::lock_guard lock(flush_mutex_);
        flusher_exit_ = true;
    }
    flush_cv_.notify_all();
    if (flusher_.joinable())
        flusher_.join();
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

int file_store::open_dir(const object_path& p, bool create, std::shared_ptr<unique_fd>& out) {
    if (p.dirs.empty()) {
        out = objects_fd_;
        return 0;
    }
    const std::string id = p.dir_id();
    auto walk = [&](bool make) -> int {
        int parent = objects_fd_->get();
        unique_fd cur;
        std::string prefix;
        for (const auto& name : p.dirs) {
            if (!prefix.empty())
                prefix += '/';
            prefix += name;
            if (make && !durable_dirs_.contains(prefix)) {
                if (::mkdirat(parent, name.c_str(), 0755) == 0) {
                    // The new entry must be durable before anything inside it is committed.
                    if (int err = sync_fd(parent, sync_kind::directory); err != 0) {
                        fail("fsync of a directory after mkdir", err);
                        return err;
                    }
                } else if (errno != EEXIST) {
                    return errno;
                }
                // EEXIST: created before this process started (made durable by the
                // startup syncfs) or by us under dirs_mutex_ (parent already fsynced).
                durable_dirs_.insert(prefix);
            }
            int fd = ::openat(parent, name.c_str(), dir_flags);
            if (fd < 0)
                return errno;
            cur.reset(fd);
            parent = cur.get();
        }
        out = std::make_shared<unique_fd>(std::move(cur));
        return 0;
    };
    if (!create)
        return walk(false);
    {
        std::lock_guard lock(dirs_mutex_);
        if (!durable_dirs_.contains(id))
            return walk(true);
    }
    return walk(false);
}

errc file_store::precheck(const std::string& key, const std::string& lock, token_t token,
                          const fence::preconditions& pre, write_result& r, bool* has_body) const {
    std::shared_lock lock_state(state_mutex_);
    std::optional<token_t> fence;
    if (auto f = fences_.find(lock); f != fences_.end())
        fence = f->second.token;
    fence::key_state ks;
    if (auto k = keys_.find(key); k != keys_.end()) {
        ks.exists = k->second.exists;
        ks.version = k->second.version;
        if (ks.exists)
            ks.lock = k->second.lock;
    }
    if (has_body)
        *has_body = ks.exists;
    errc e = fence::check_write(ks, lock, fence, token, pre);
    // Data only: the proxy words the reply (proxy/error_response.hpp).
    r.error = e;
    if (e == errc::stale_token)
        r.current_token = fence.value_or(0);
    else if (e == errc::lock_mismatch)
        r.lock = std::string(ks.lock);
    return e;
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
    // once, with the committer's answer (or the stage's error), not once in between.
    net::any_io_executor fallback = io_.get_executor();
    auto init = [this, fallback](auto handler, std::unique_ptr<pending> item, std::string data) {
        attach_waiter(*item, std::move(handler), fallback);
        staging_.fetch_add(1);
        net::post(pool_, [this, item = std::move(item), data = std::move(data)]() mutable {
            write_result r;
            try {
                r = stage_put(*item, data);
            } catch (const std::exception& e) {
                abandon_staged(*item);
                r = {};
                r.error = errc::internal;
                r.message = e.what();
            }
            if (r.error != errc::ok) {
                {
                    std::lock_guard lock(queue_mutex_);
                    staging_.fetch_sub(1);
                }
                queue_cv_.notify_one();
                item->result = std::move(r);
                reply(*item);
                return;
            }
            enqueue(std::move(item), true);
        });
    };
    co_return co_await net::async_initiate<const net::use_awaitable_t<>&, void(write_result)>(
        std::move(init), net::use_awaitable, std::move(p), std::move(body));
}

write_result file_store::stage_put(pending& p, std::string& body) {
    if (!usable())
        return unavailable("file store is not available");
    if (int err = open_dir(p.path, true, p.dir); err != 0)
        return unavailable(errno_text("creating the key's directory", err));
    constexpr int create_flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    unique_fd fd;
    // A key without a body gets its body written in place: no temp file, no rename
    // (two directory changes fewer per write; docs/file-store.md, "Write sequence").
    // The claim keeps every other write of the key away from that path; EEXIST means a
    // body is there after all (committed since the pre-check).
    if (!p.had_body && claim_direct(p.key)) {
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
    auto give_up = [&](std::string_view what, int err) {
        abandon_staged(p);
        return unavailable(errno_text(what, err));
    };
    p.body_crc = crc32c(0, body);
    p.size = body.size();
    if (int err = write_all(fd.get(), body); err != 0)
        return give_up("writing a body", err);
    // A small body also goes into its journal record: then neither this file nor its
    // directory entry has to be durable before the commit (docs/file-store.md).
    if (syncfs_batches_ && body.size() <= journaled_body_max)
        p.journaled_body = std::move(body);
    while (stage_held(p.key))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    FK_FAILPOINT("before_body_fsync");
    // With syncfs batches the body is journaled with its record, or (a large one) the
    // committer's syncfs makes it durable.
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
    if (p.direct)
        release_claims({p.key});
}

void file_store::drop_staged(pending& p) {
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
                                           write_result& r) const {
    if (fence::validate_key(key) != errc::ok) {
        r.error = errc::invalid_name;
        r.message = "invalid key";
        return nullptr;
    }
    bool has_body = false;
    if (precheck(key, lock, token, pre, r, &has_body) != errc::ok)
        return nullptr;
    auto p = std::make_unique<pending>();
    p->op = op;
    p->had_body = has_body;
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
    auto p = admit(pending::kind::put, req.key, req.lock, req.token, req.pre, r);
    if (!p)
        co_return r;
    p->content_type = std::move(req.content_type);
    co_return co_await stage_and_submit(std::move(p), std::move(req.body));
}

net::awaitable<write_result> file_store::remove(delete_request req) {
    if (!usable())
        co_return unavailable("file store is not available");
    write_result r;
    auto p = admit(pending::kind::remove, req.key, req.lock, req.token, req.pre, r);
    if (!p)
        co_return r;
    co_return co_await submit(std::move(p));
}

net::awaitable<write_result> file_store::advance_fence(std::string lock, token_t token) {
    if (!usable())
        co_return unavailable("file store is not available");
    write_result r;
    {
        std::shared_lock lock_state(state_mutex_);
        if (auto f = fences_.find(lock); f != fences_.end()) {
            if (token < f->second.token) {
                r.error = errc::stale_token;
                r.current_token = f->second.token;
                co_return r;
            }
            if (token == f->second.token) {
                r.token = token; // already durable: nothing to write
                co_return r;
            }
        }
    }
    auto p = std::make_unique<pending>();
    p->op = pending::kind::fence;
    p->lock = std::move(lock);
    p->token = token;
    co_return co_await submit(std::move(p));
}

object_result file_store::read_body(const std::string& key) {
    object_result r;
    auto path = object_path_for(key);
    std::shared_ptr<unique_fd> dir;
    int dir_err = open_dir(*path, false, dir);
    unique_fd fd;
    key_meta meta;
    {
        // Renames happen under the exclusive lock: the fd opened here is the body that
        // the metadata copied here describes.
        std::shared_lock lock(state_mutex_);
        auto k = keys_.find(key);
        if (k == keys_.end() || !k->second.exists) {
            r.error = errc::not_found;
            r.message = "no such key";
            return r;
        }
        meta = k->second;
        if (dir_err == 0)
            fd.reset(::openat(dir->get(), path->file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
        if (dir_err == 0 && !fd)
            dir_err = errno;
    }
    int err = dir_err != 0 ? dir_err : read_exact(fd.get(), r.body, meta.size);
    if (err != 0) {
        r.error = errc::unavailable;
        r.message = errno_text("reading the body of '" + key + "'", err);
        r.body.clear();
        logging::write(logging::level::error, "file store read failed",
                       {{"key", key}, {"error", r.message}});
        return r;
    }
    r.size = meta.size;
    r.content_type = std::move(meta.content_type);
    r.version = meta.version;
    r.token = meta.token;
    r.lock = std::move(meta.lock);
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
    if (!with_body) {
        std::shared_lock lock(state_mutex_);
        auto k = keys_.find(key);
        if (k == keys_.end() || !k->second.exists) {
            r.error = errc::not_found;
            r.message = "no such key";
            co_return r;
        }
        r.size = k->second.size;
        r.content_type = k->second.content_type;
        r.version = k->second.version;
        r.token = k->second.token;
        r.lock = k->second.lock;
        co_return r;
    }
    auto read = [this, key = std::move(key)] { return read_body(key); };
    co_return co_await on_pool(pool_, io_.get_executor(), std::move(read));
}

net::awaitable<fence_result> file_store::read_fence(std::string lock) {
    fence_result r;
    if (!usable()) {
        r.error = errc::unavailable;
        r.message = "file store is not available";
        co_return r;
    }
    std::shared_lock lock_state(state_mutex_);
    auto f = fences_.find(lock);
    if (f == fences_.end()) {
        r.error = errc::not_found;
        r.message = "no fence for lock '" + lock + "'";
        co_return r;
    }
    r.fence = {f->first, f->second.token, f->second.updated_ms};
    co_return r;
}

net::awaitable<list_result> file_store::list_fences(list_request req) {
    list_result r;
    if (!usable()) {
        r.error = errc::unavailable;
        r.message = "file store is not available";
        co_return r;
    }
    std::shared_lock lock_state(state_mutex_);
    auto it = fences_.lower_bound(req.prefix);
    if (req.after && *req.after >= req.prefix)
        it = fences_.upper_bound(*req.after);
    auto matches = [&](const auto& i) {
        return i != fences_.end() && i->first.compare(0, req.prefix.size(), req.prefix) == 0;
    };
    for (; matches(it) && r.fences.size() < req.limit; ++it)
        r.fences.push_back({it->first, it->second.token, it->second.updated_ms});
    if (matches(it) && !r.fences.empty())
        r.next = r.fences.back().lock;
    co_return r;
}

} // namespace detail
} // namespace fk::store
