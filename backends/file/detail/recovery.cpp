// Startup and shutdown: the directory lock, the conversion of a journal-format directory,
// opening the index, replaying redo rows, and the sweep after an unclean stop.
// See docs/file-store.md, "Recovery".

#include "backends/file/detail/crc32c.hpp"
#include "backends/file/detail/file_store_impl.hpp"
#include "backends/file/detail/legacy_import.hpp"
#include "backends/log/logging.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fk::store::detail {

namespace {

open_error io_error(const std::string& root, std::string_view what, int err) {
    return open_error{"file store " + root + ": " + errno_text(what, err), 1};
}

} // namespace

bool file_store::objects_empty() const {
    int fd = ::openat(objects_.fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return false;
    DIR* d = ::fdopendir(fd);
    if (!d) {
        ::close(fd);
        return false;
    }
    bool empty = true;
    while (dirent* e = ::readdir(d)) {
        const std::string_view name = e->d_name;
        if (name != "." && name != "..") {
            empty = false;
            break;
        }
    }
    ::closedir(d);
    return empty;
}

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

    if (int err =
            objects_.open(root_fd_.get(), [this](std::string_view what, int e) { fail(what, e); });
        err != 0)
        return io_error(root, "open objects", err);
    return std::nullopt;
}

std::optional<open_error> file_store::open_index() {
    // A directory written by fencekeeper 0.1 (ROOT/journal) is converted first.
    if (auto err = import_legacy_journal(root_, root_fd_.get(), objects_.fd()))
        return err;
    index_path_ = root_ + "/" + index_file;
    // 32 MiB of page cache for the committer's connection: the upper levels of both
    // tables' B-trees and the pages recent batches touched (docs/file-store.md, "Memory").
    const index_open_result r = writer_.open(index_path_, 32 * 1024);
    if (r.newer)
        return open_error{"file store " + root_ + ": " + index_file + " has format " +
                              std::to_string(r.found_format) +
                              ", written by a newer fencekeeper; " +
                              "this one reads formats up to " + std::to_string(index_format),
                          2};
    if (r.rc != index_ok)
        return open_error{
            "file store " + root_ + ": opening " + index_file + ": " + writer_.last_error(), 1};
    if (r.found_format == 0 && !objects_empty()) {
        // A new index beside bodies: index.db was lost or deleted (a journal would have
        // been converted above). Starting empty would forget every fence.
        writer_.close();
        ::unlinkat(root_fd_.get(), index_file, 0);
        for (const char* side : {"index.db-wal", "index.db-shm"})
            ::unlinkat(root_fd_.get(), side, 0);
        return open_error{"file store " + root_ + ": objects/ holds bodies but there is no " +
                              index_file +
                              "; refusing to start empty, which would forget every fence "
                              "(restore the index from a backup; docs/file-store.md, Recovery)",
                          1};
    }
    if (r.found_format != 0 && r.found_format < index_format)
        logging::write(
            logging::level::info, "file store upgraded its index in place",
            {{"root", root_}, {"from_format", r.found_format}, {"to_format", index_format}});
    clean_start_ = r.clean;
    writer_.on_wal_commit(&file_store::on_wal_commit, this);
    return std::nullopt;
}

std::optional<open_error> file_store::load_floors() {
    // The index is the truth: a floor is in memory exactly when its raise committed
    // (docs/file-store.md, "Fence floors"), whatever way the last run ended.
    std::vector<fence::floor_entry> rows;
    if (writer_.list_floors(rows) != index_done)
        return open_error{"file store " + root_ + ": reading fence floors: " + writer_.last_error(),
                          1};
    std::unique_lock guard(floors_mutex_);
    for (auto& f : rows)
        floors_.load(std::move(f));
    has_floors_.store(!floors_.empty());
    return std::nullopt;
}

std::optional<open_error> file_store::replay_redo() {
    std::vector<redo_row> rows;
    if (writer_.redo_rows(rows) != index_ok)
        return open_error{"file store " + root_ + ": reading redo rows: " + writer_.last_error(),
                          1};
    // Per key, in commit order; only the key's current row decides what its files must be.
    std::map<std::string, std::vector<redo_row*>> by_key;
    for (auto& r : rows)
        by_key[r.key].push_back(&r);
    std::size_t rolled = 0, restored = 0, removed = 0;
    for (auto& [key, list] : by_key) {
        key_row cur;
        const int rc = writer_.get_key(key, cur);
        if (rc != index_row && rc != index_done)
            return open_error{"file store " + root_ + ": " + writer_.last_error(), 1};
        const bool exists = rc == index_row && cur.exists;
        auto path = object_path_for(key);
        if (!path)
            continue;
        std::shared_ptr<unique_fd> dir;
        if (int err = objects_.open_dir(*path, exists, dir); err != 0) {
            if (err == ENOENT && !exists)
                continue; // nothing of the key on disk
            return io_error(root_, "opening the directory of '" + key + "'", err);
        }
        const redo_row* current = nullptr;
        for (const redo_row* r : list)
            if (exists && !r->is_delete && r->version == cur.version)
                current = r;
        // Temp files of every other row are superseded (or were already renamed).
        for (const redo_row* r : list)
            if (r != current && !r->tmp.empty() && ::unlinkat(dir->get(), r->tmp.c_str(), 0) == 0)
                ++removed;
        if (!exists) {
            // A committed delete whose unlink may not have happened or reached the disk.
            if (::unlinkat(dir->get(), path->file.c_str(), 0) == 0)
                ++removed;
            continue;
        }
        if (!current)
            continue; // the body in place was already durable when its row went
        bool ok = false;
        if (!current->tmp.empty()) {
            // Committed but not yet renamed (or the rename was lost): finish it.
            if (int err = file_matches(dir->get(), current->tmp, cur.size, cur.crc, ok); err != 0)
                return io_error(root_, "checking a temp file of '" + key + "'", err);
            if (ok) {
                if (::renameat(dir->get(), current->tmp.c_str(), dir->get(), path->file.c_str()) !=
                    0)
                    return io_error(root_, "renaming the body of '" + key + "'", errno);
                ++rolled;
                FK_FAILPOINT("recovery_after_roll_forward");
                continue;
            }
        }
        if (int err = file_matches(dir->get(), path->file, cur.size, cur.crc, ok); err != 0)
            return io_error(root_, "checking the body of '" + key + "'", err);
        if (!current->tmp.empty())
            ::unlinkat(dir->get(), current->tmp.c_str(), 0);
        if (ok)
            continue;
        if (!current->body)
            // A body without a copy in its row was durable before its COMMIT: a correct run
            // cannot get here. Refuse rather than serve a key whose body is gone.
            return open_error{"file store " + root_ + ": the body of '" + key + "' (version " +
                                  std::to_string(cur.version) +
                                  ") is missing or damaged on disk; see docs/file-store.md, "
                                  "Recovery",
                              1};
        // The body lived only in its row (a power loss took the file): write it again.
        const std::string tmp = tmp_name(path->file, unique_suffix());
        unique_fd fd(::openat(dir->get(), tmp.c_str(),
                              O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
        int err = fd ? write_all(fd.get(), *current->body) : errno;
        fd.reset();
        if (err == 0 && ::renameat(dir->get(), tmp.c_str(), dir->get(), path->file.c_str()) != 0)
            err = errno;
        if (err != 0) {
            ::unlinkat(dir->get(), tmp.c_str(), 0);
            return io_error(root_, "restoring the body of '" + key + "'", err);
        }
        ++restored;
    }
    // Whatever a killed predecessor left in the page cache (directories it created, files
    // it renamed) and what was just repaired is durable from here on; objects_dir relies
    // on that for directories that exist.
    if (int err = sync_fd(root_fd_.get(), sync_kind::filesystem); err != 0)
        return io_error(root_, "syncfs", err);
    if (!rows.empty()) {
        int rc = writer_.begin();
        if (rc == index_ok)
            rc = writer_.delete_redo_through(rows.back().seq);
        if (rc == index_ok)
            rc = writer_.commit();
        if (rc != index_ok) {
            writer_.rollback();
            return open_error{
                "file store " + root_ + ": deleting redo rows: " + writer_.last_error(), 1};
        }
        // Nothing before it is left to flush or trim; new rows come after it (add_redo).
        trimmed_seq_ = rows.back().seq;
        committed_seq_ = trimmed_seq_;
        flushed_seq_ = trimmed_seq_;
    }
    logging::write(logging::level::info, "file store opened",
                   {{"root", root_},
                    {"clean_stop", clean_start_},
                    {"redo_rows", rows.size()},
                    {"rolled_forward", rolled},
                    {"restored_from_redo", restored},
                    {"removed", removed},
                    {"floors", floors_.size()}});
    return std::nullopt;
}

void file_store::sweep_main() {
    // Iterative walk with one directory open at a time (keys can nest hundreds deep). Runs
    // beside requests: a body is removed only while the sweeper holds its key's claim and
    // the index says the key has no body, so no write of the key is in flight.
    std::vector<std::string> todo{""};
    std::size_t temp_files = 0, orphans = 0, dirs = 0;
    const std::string own = unique_suffix().substr(0, 16); // this process's temp files
    std::unique_ptr<index_reader> idx;
    try {
        idx = std::move(lease_reader().reader);
    } catch (const std::exception&) {
    }
    while (idx && !todo.empty() && !stopped_) {
        std::string rel = std::move(todo.back());
        todo.pop_back();
        DIR* d = open_directory(objects_.fd(), rel);
        if (!d)
            continue;
        // Empty once the sweep removed what it found there: a crash that made a directory
        // for a new key's body leaves nothing else in it.
        bool empty = true;
        while (dirent* e = ::readdir(d)) {
            std::string_view name = e->d_name;
            if (name == "." || name == "..")
                continue;
            if (is_tmp_name(name)) {
                if (name.find(own) == std::string_view::npos &&
                    ::unlinkat(::dirfd(d), e->d_name, 0) == 0)
                    ++temp_files;
                else
                    empty = false;
                continue;
            }
            const bool is_dir = is_directory_entry(::dirfd(d), e->d_name, e->d_type);
            if (is_dir) {
                // Removed, if it turns out empty, when its own walk ends.
                empty = false;
                todo.push_back(rel.empty() ? std::string(name) : rel + "/" + std::string(name));
                continue;
            }
            auto key = key_for_object(rel, name);
            if (!key || !claim_direct(*key)) {
                empty = false;
                continue; // not a body, or a write of the key is in flight
            }
            key_row k;
            const int rc = idx->get_key(*key, k);
            const bool no_body = rc == index_done || (rc == index_row && !k.exists);
            if (no_body && ::unlinkat(::dirfd(d), e->d_name, 0) == 0)
                ++orphans;
            else
                empty = false;
            release_claims({*key});
        }
        ::closedir(d);
        if (empty && !rel.empty()) {
            // An empty directory: removed like one that a delete left behind.
            object_path p;
            for (std::size_t at = 0;;) {
                const auto slash = rel.find('/', at);
                p.dirs.push_back(rel.substr(at, slash - at));
                if (slash == std::string::npos)
                    break;
                at = slash + 1;
            }
            objects_.reclaim_empty(p);
            ++dirs;
        }
    }
    sweep_done_ = idx && !stopped_;
    if (idx) {
        std::lock_guard lock(readers_mutex_);
        readers_.push_back(std::move(idx));
    }
    logging::write(logging::level::info, "file store swept what an unclean stop left behind",
                   {{"root", root_},
                    {"temp_files", temp_files},
                    {"uncommitted_bodies", orphans},
                    {"empty_directories", dirs},
                    {"finished", !stopped_.load()}});
    {
        std::lock_guard lock(sweep_mutex_);
        sweep_running_ = false;
    }
    sweep_cv_.notify_all();
}

void file_store::stop() {
    if (stopped_.exchange(true) && !opened_)
        return;
    // Staged writes still on the pool (or the directory lane) hand their items to the committer,
    // which drains everything queued before it exits; later items are answered "unavailable".
    pool_.join();
    dir_lane_.join(); // after pool_: the pool hands deep stagings to it, never the reverse
    {
        std::lock_guard lock(queue_mutex_);
        committer_exit_ = true;
    }
    queue_cv_.notify_all();
    if (committer_.joinable())
        committer_.join();
    // After the committer, which hands it what it did not commit.
    {
        std::lock_guard lock(reclaim_mutex_);
        reclaimer_exit_ = true;
    }
    reclaim_cv_.notify_all();
    if (reclaimer_.joinable())
        reclaimer_.join();
    {
        std::lock_guard lock(flush_mutex_);
        flusher_exit_ = true;
    }
    flush_cv_.notify_all();
    if (flusher_.joinable())
        flusher_.join();
    {
        std::lock_guard lock(checkpoint_mutex_);
        checkpointer_exit_ = true;
    }
    checkpoint_cv_.notify_all();
    if (checkpointer_.joinable())
        checkpointer_.join();
    if (sweeper_.joinable())
        sweeper_.join();
    {
        std::lock_guard lock(readers_mutex_);
        readers_.clear();
    }
    if (!opened_)
        return;
    // A clean stop: every file durable, no redo rows left, and the mark that spares the
    // next start its sweep. Closing the last connection checkpoints the WAL into the
    // index file and removes it, so the next start reads no WAL.
    if (opened_ && !failed_) {
        int rc = index_ok;
        if (int err = sync_fd(root_fd_.get(), sync_kind::filesystem); err != 0) {
            fail("syncfs at stop", err);
        } else {
            flushed_seq_ = committed_seq_.load();
            rc = trim_redo(true);
            // The sweep that this start owed, if it did not finish, is owed again.
            if (rc == index_ok && !failed_)
                rc = writer_.mark_clean(clean_start_ || sweep_done_);
        }
        if (rc != index_ok)
            logging::write(logging::level::warn, "file store: could not record a clean stop",
                           {{"root", root_}, {"error", writer_.last_error()}});
    }
    writer_.close();
    opened_ = false;
}

} // namespace fk::store::detail
