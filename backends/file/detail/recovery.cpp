// Startup: the directory lock, journal replay, roll-forward of committed writes, removal
// of stray temp files, and the compacted snapshot that records those decisions.
// See docs/file-store.md, "Recovery".

#include "backends/file/detail/crc32c.hpp"
#include "backends/file/detail/file_store_impl.hpp"
#include "backends/log/logging.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fk::store::detail {

namespace {

open_error io_error(const std::string& root, std::string_view what, int err) {
    return open_error{"file store " + root + ": " + errno_text(what, err), 1};
}

// 0 and `ok` set when the file exists; ENOENT is "no file" (ok = false, returns 0).
int file_matches(int dir, const std::string& name, std::uint64_t size, std::uint32_t crc,
                 bool& ok) {
    ok = false;
    unique_fd fd(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd)
        return errno == ENOENT ? 0 : errno;
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        return errno;
    if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != size)
        return 0;
    std::string buf(1 << 20, '\0');
    std::uint32_t c = 0;
    for (;;) {
        ssize_t n = ::read(fd.get(), buf.data(), buf.size());
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            break;
        c = crc32c(c, std::string_view(buf.data(), static_cast<std::size_t>(n)));
    }
    ok = c == crc;
    return 0;
}

key_meta meta_of(const record& r) {
    key_meta m;
    m.exists = r.type == record_type::put;
    m.version = r.version;
    m.ms = r.ms;
    if (m.exists) {
        m.lock = r.lock;
        m.token = r.token;
        m.size = r.size;
        m.body_crc = r.body_crc;
        m.content_type = r.content_type;
    }
    return m;
}

} // namespace

std::optional<open_error> file_store::open_root(const std::string& root) {
    root_ = root;
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
    if (ec)
        return open_error{"file store " + root + ": cannot create the directory: " + ec.message(),
                          1};
    root_fd_.reset(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root_fd_)
        return io_error(root, "open", errno);

    lock_fd_.reset(::openat(root_fd_.get(), "LOCK", O_CREAT | O_RDWR | O_CLOEXEC, 0644));
    if (!lock_fd_)
        return io_error(root, "open LOCK", errno);
    if (::flock(lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK)
            return io_error(root, "flock LOCK", errno);
        char buf[32] = {};
        ssize_t n = ::pread(lock_fd_.get(), buf, sizeof buf - 1, 0);
        std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "unknown";
        while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' '))
            pid.pop_back();
        return open_error{
            "file store " + root + " is locked by another fencekeeper (pid " + pid + ")", 2};
    }
    std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock_fd_.get(), 0) != 0 ||
        ::pwrite(lock_fd_.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
        return io_error(root, "write LOCK", errno);

    if (::mkdirat(root_fd_.get(), "objects", 0755) != 0 && errno != EEXIST)
        return io_error(root, "mkdir objects", errno);
    objects_fd_ = std::make_shared<unique_fd>(
        ::openat(root_fd_.get(), "objects", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!*objects_fd_)
        return io_error(root, "open objects", errno);
    return std::nullopt;
}

int file_store::verify_put(const record& r, bool roll_forward, bool& ok, bool& rolled) {
    ok = rolled = false;
    auto path = object_path_for(r.key);
    if (!path)
        return 0;
    std::shared_ptr<unique_fd> dir;
    if (int err = open_dir(*path, false, dir); err != 0)
        return err == ENOENT ? 0 : err;
    if (roll_forward && !r.tmp.empty()) {
        // Committed but not yet renamed when the process stopped: finish the rename.
        if (int err = file_matches(dir->get(), r.tmp, r.size, r.body_crc, ok); err != 0)
            return err;
        if (ok) {
            if (::renameat(dir->get(), r.tmp.c_str(), dir->get(), path->file.c_str()) != 0)
                return errno;
            rolled = true;
            FK_FAILPOINT("recovery_after_roll_forward");
            return sync_fd(dir->get(), sync_kind::directory);
        }
    }
    return file_matches(dir->get(), path->file, r.size, r.body_crc, ok);
}

int file_store::restore_body(const record& r) {
    auto path = object_path_for(r.key);
    if (!path || !r.body)
        return EINVAL;
    std::shared_ptr<unique_fd> dir;
    if (int err = open_dir(*path, true, dir); err != 0)
        return err;
    const std::string tmp = tmp_name(path->file, unique_suffix());
    unique_fd fd(::openat(dir->get(), tmp.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd)
        return errno;
    int err = write_all(fd.get(), *r.body);
    fd.reset();
    if (err == 0 && ::renameat(dir->get(), tmp.c_str(), dir->get(), path->file.c_str()) != 0)
        err = errno;
    if (err != 0)
        ::unlinkat(dir->get(), tmp.c_str(), 0);
    return err;
}

std::optional<open_error> file_store::recover() {
    std::string text;
    {
        unique_fd fd(::openat(root_fd_.get(), "journal", O_RDONLY | O_CLOEXEC));
        if (!fd && errno != ENOENT)
            return io_error(root_, "open journal", errno);
        if (fd)
            if (int err = read_whole(fd.get(), text); err != 0)
                return io_error(root_, "read journal", err);
    }
    auto parsed = parse_journal(text);
    if (parsed.intact_after_damage)
        return open_error{"file store " + root_ + ": the journal is damaged at byte " +
                              std::to_string(parsed.valid_bytes) +
                              " and intact records follow; refusing to start because dropping "
                              "them could lower a fence (see docs/file-store.md, Recovery)",
                          1};
    if (parsed.damaged)
        logging::write(logging::level::warn, "file store: dropped a torn journal tail",
                       {{"root", root_},
                        {"offset", parsed.valid_bytes},
                        {"bytes", text.size() - parsed.valid_bytes}});

    // Replay. A key keeps its last record and the one before it.
    struct replayed {
        record last;
        std::optional<record> prev;
        bool verified = false;
    };
    std::unordered_map<std::string, replayed> replay;
    std::size_t verified_until = 0;
    for (std::size_t i = 0; i < parsed.records.size(); ++i) {
        record& r = parsed.records[i];
        if (r.type == record_type::verified) {
            if (i != 0)
                return open_error{"file store " + root_ + ": journal record " + std::to_string(i) +
                                      " is a misplaced snapshot header",
                                  1};
            verified_until = 1 + r.count;
            continue;
        }
        if (!r.lock.empty()) {
            auto [f, fresh] = fences_.try_emplace(r.lock, fence_entry{r.token, r.ms});
            if (!fresh && r.token > f->second.token)
                f->second = {r.token, r.ms};
        }
        if (r.type == record_type::fence)
            continue;
        auto& k = replay[r.key];
        if (k.verified || !k.last.key.empty())
            k.prev = std::move(k.last);
        k.last = std::move(r);
        k.verified = i < verified_until;
    }

    // Make each key's body agree with its last record.
    std::size_t rolled = 0, fell_back = 0, restored = 0;
    // A put whose body is neither in place nor in its temp file: rewritten from the copy
    // in its record, if it has one (a journaled body whose file a power loss took).
    auto settle = [&](const record& r, bool roll_forward, bool& ok, bool& rolled_this) -> int {
        if (int err = verify_put(r, roll_forward, ok, rolled_this); err != 0 || ok || !r.body)
            return err;
        if (int err = restore_body(r); err != 0)
            return err;
        ok = true;
        ++restored;
        return 0;
    };
    for (auto& [key, k] : replay) {
        if (k.verified) {
            keys_.emplace(key, meta_of(k.last));
            continue;
        }
        if (k.last.type == record_type::del) {
            // Committed delete whose unlink may not have happened or reached the disk.
            auto path = object_path_for(key);
            std::shared_ptr<unique_fd> dir;
            if (path && open_dir(*path, false, dir) == 0 &&
                ::unlinkat(dir->get(), path->file.c_str(), 0) == 0)
                if (int err = sync_fd(dir->get(), sync_kind::directory); err != 0)
                    return io_error(root_, "fsync of a directory", err);
            keys_.emplace(key, meta_of(k.last));
            continue;
        }
        bool ok = false, rolled_this = false;
        if (int err = settle(k.last, true, ok, rolled_this); err != 0)
            return io_error(root_, "checking the body of '" + key + "'", err);
        if (ok) {
            rolled += rolled_this ? 1 : 0;
            keys_.emplace(key, meta_of(k.last));
            continue;
        }
        // Neither body nor temp file holds the last write, and its record has no copy.
        // Such a body was durable before its record was written, so a correct run
        // cannot get here: fall back to the record before it (an error is logged). Its
        // fence advance stays (a fence may only move up).
        ++fell_back;
        logging::write(logging::level::error,
                       "file store: journaled write not found on disk, falling back",
                       {{"root", root_}, {"key", key}, {"version", k.last.version}});
        if (!k.prev)
            continue; // the key never existed
        if (k.prev->type == record_type::put) {
            if (int err = settle(*k.prev, false, ok, rolled_this); err != 0)
                return io_error(root_, "checking the body of '" + key + "'", err);
            if (!ok) {
                logging::write(logging::level::error,
                               "file store: body lost, the key is now absent",
                               {{"root", root_}, {"key", key}});
                keys_.emplace(key, tombstone(k.last.version, k.last.ms));
                continue;
            }
        }
        keys_.emplace(key, meta_of(*k.prev));
    }
    if (rolled != 0 || fell_back != 0 || restored != 0)
        logging::write(logging::level::info, "file store recovered",
                       {{"root", root_},
                        {"rolled_forward", rolled},
                        {"restored_from_journal", restored},
                        {"fell_back", fell_back}});

    remove_stray_files();

    // Whatever a killed predecessor left in the page cache (directories it created, files it
    // renamed) is durable from here on; open_dir relies on that for existing directories.
    if (int err = sync_fd(root_fd_.get(), sync_kind::filesystem); err != 0)
        return io_error(root_, "syncfs", err);

    std::string error;
    if (write_snapshot(error) != 0)
        return open_error{"file store " + root_ + ": " + error, 1};
    return std::nullopt;
}

void file_store::remove_stray_files() {
    // Iterative walk with one directory open at a time (keys can nest hundreds deep).
    std::vector<std::string> todo{""};
    std::size_t removed = 0, orphans = 0;
    while (!todo.empty()) {
        std::string rel = std::move(todo.back());
        todo.pop_back();
        int fd = ::openat(objects_fd_->get(), rel.empty() ? "." : rel.c_str(),
                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        DIR* d = ::fdopendir(fd);
        if (!d) {
            ::close(fd);
            continue;
        }
        if (!rel.empty())
            durable_dirs_.insert(rel); // durable once the syncfs below returns
        while (dirent* e = ::readdir(d)) {
            std::string_view name = e->d_name;
            if (name == "." || name == "..")
                continue;
            if (is_tmp_name(name)) {
                if (::unlinkat(::dirfd(d), e->d_name, 0) == 0)
                    ++removed;
                continue;
            }
            bool is_dir = e->d_type == DT_DIR;
            if (e->d_type == DT_UNKNOWN) {
                struct stat st {};
                is_dir = ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                         S_ISDIR(st.st_mode);
            }
            if (is_dir) {
                todo.push_back(rel.empty() ? std::string(name) : rel + "/" + std::string(name));
                continue;
            }
            // The body of a key the journal does not have (or has as a tombstone): a new
            // key's body written in place whose commit never happened.
            if (auto key = key_for_object(rel, name)) {
                auto k = keys_.find(*key);
                if ((k == keys_.end() || !k->second.exists) &&
                    ::unlinkat(::dirfd(d), e->d_name, 0) == 0)
                    ++orphans;
            }
        }
        ::closedir(d);
    }
    if (removed != 0 || orphans != 0)
        logging::write(logging::level::info, "file store removed stray files",
                       {{"root", root_}, {"temp_files", removed}, {"uncommitted_bodies", orphans}});
}

int file_store::write_snapshot(std::string& error) {
    // The snapshot trusts every body in place (its records name no temp file), so the
    // renames and unlinks before it must be durable: at startup recovery's syncfs made
    // them so; while running, maybe_compact() does (with syncfs batches).
    unique_fd fd(
        ::openat(root_fd_.get(), "journal.new", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) {
        error = errno_text("create journal.new", errno);
        return errno ? errno : EIO;
    }
    auto abandon = [&](std::string_view what, int err) {
        error = errno_text(what, err);
        ::unlinkat(root_fd_.get(), "journal.new", 0);
        return err;
    };
    std::string text;
    std::uint64_t total = 0;
    auto flush = [&](bool force) {
        if (!force && text.size() < (1u << 20))
            return 0;
        total += text.size();
        int err = write_all(fd.get(), text);
        text.clear();
        return err;
    };
    append_record(text, header_record(fences_.size() + keys_.size()));
    for (const auto& [lock, f] : fences_) {
        append_record(text, fence_record(lock, f.token, f.updated_ms));
        if (int err = flush(false); err != 0)
            return abandon("write journal.new", err);
    }
    for (const auto& [key, k] : keys_) {
        if (k.exists) {
            record r = put_record(key, k.lock, k.token, k.version, k.ms);
            r.size = k.size;
            r.body_crc = k.body_crc;
            r.content_type = k.content_type;
            append_record(text, r);
        } else {
            append_record(text, del_record(key, "", k.token, k.version, k.ms));
        }
        if (int err = flush(false); err != 0)
            return abandon("write journal.new", err);
    }
    if (int err = flush(true); err != 0)
        return abandon("write journal.new", err);
    // The old journal stays authoritative until the rename; a failure up to there costs
    // nothing but the attempt.
    if (int err = sync_fd(fd.get(), sync_kind::snapshot); err != 0)
        return abandon("fsync journal.new", err);
    FK_FAILPOINT("snapshot_before_rename");
    if (::renameat(root_fd_.get(), "journal.new", root_fd_.get(), "journal") != 0)
        return abandon("rename journal.new", errno);
    FK_FAILPOINT("snapshot_after_rename");
    // Commits now go to the new file: if this rename were lost, a power failure would bring
    // back the old journal without them.
    if (int err = sync_fd(root_fd_.get(), sync_kind::directory); err != 0) {
        fail("fsync of ROOT after replacing the journal", err);
        error = errno_text("fsync of ROOT after replacing the journal", err);
        return err;
    }
    journal_fd_ = std::move(fd); // positioned at the end: the committer appends here
    journal_bytes_ = snapshot_bytes_ = total;
    body_bytes_ = 0; // a snapshot carries no bodies
    return 0;
}

} // namespace fk::store::detail
