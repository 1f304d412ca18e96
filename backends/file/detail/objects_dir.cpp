// ROOT/objects (objects_dir.hpp).
#include "backends/file/detail/objects_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fk::store::detail {

namespace {
constexpr int dir_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
} // namespace

int objects_dir::open(int root_fd, sync_failure on_sync_failure) {
    on_sync_failure_ = std::move(on_sync_failure);
    if (::mkdirat(root_fd, "objects", 0755) != 0 && errno != EEXIST)
        return errno;
    fd_ = std::make_shared<unique_fd>(::openat(root_fd, "objects", dir_flags));
    return *fd_ ? 0 : errno;
}

int objects_dir::open_dir(const object_path& p, bool create, std::shared_ptr<unique_fd>& out,
                          std::size_t* made_from, std::size_t* budget) {
    if (p.dirs.empty()) {
        out = fd_;
        return 0;
    }
    unique_fd cur;
    int parent = fd_->get();
    std::string prefix;
    for (std::size_t level = 0; level < p.dirs.size(); ++level) {
        const std::string& name = p.dirs[level];
        if (!prefix.empty())
            prefix += '/';
        prefix += name;
        if (create) {
            std::lock_guard lock(dirs_mutex_);
            if (!durable_dirs_.contains(prefix)) {
                // Out of budget: only a directory that is already there lets the walk on.
                const bool may_make = !budget || *budget > 0;
                if (may_make && ::mkdirat(parent, name.c_str(), 0755) == 0) {
                    if (budget)
                        --*budget;
                    if (made_from)
                        *made_from = std::min(*made_from, level);
                    // The new entry must be durable before anything inside it is committed.
                    if (int err = sync_fd(parent, sync_kind::directory); err != 0) {
                        on_sync_failure_("fsync of a directory after mkdir", err);
                        return err;
                    }
                } else if (may_make && errno != EEXIST) {
                    return errno;
                } else if (!may_make) {
                    struct stat st {};
                    if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
                        return errno == ENOENT ? over_budget : errno;
                }
                // EEXIST: created before this process started (made durable by the
                // startup syncfs) or by us (parent fsynced then).
                if (durable_dirs_.size() >= max_known_dirs)
                    durable_dirs_.clear();
                durable_dirs_.insert(prefix);
            }
        }
        int fd = ::openat(parent, name.c_str(), dir_flags);
        if (fd < 0)
            return errno;
        cur.reset(fd);
        parent = cur.get();
    }
    out = std::make_shared<unique_fd>(std::move(cur));
    return 0;
}

void objects_dir::reclaim_empty(const object_path& p, std::size_t levels) {
    const std::size_t n = p.dirs.size();
    levels = std::min(levels, n);
    if (levels == 0)
        return;
    std::unique_lock structure(structure_);
    // Down to the innermost directory's parent, then up through "..", removing on the
    // way; rmdir fails (ENOTEMPTY) at the first directory that still holds something, and
    // the walk stops there. ".." is the directory walked down from: directories under
    // objects/ are never renamed, and only this function (structure_ held exclusively)
    // removes them.
    unique_fd cur;
    int parent = fd_->get();
    for (std::size_t i = 0; i + 1 < n; ++i) {
        int fd = ::openat(parent, p.dirs[i].c_str(), dir_flags);
        if (fd < 0)
            return;
        cur.reset(fd);
        parent = cur.get();
    }
    std::string prefix = p.dir_id();
    for (std::size_t i = n; i-- > n - levels;) {
        if (::unlinkat(parent, p.dirs[i].c_str(), AT_REMOVEDIR) != 0)
            return;
        {
            std::lock_guard lock(dirs_mutex_);
            durable_dirs_.erase(prefix);
        }
        const auto slash = prefix.rfind('/');
        prefix.resize(slash == std::string::npos ? 0 : slash);
        if (i == n - levels)
            return;
        if (i == 1) {
            parent = fd_->get();
            cur.reset();
            continue;
        }
        int up = ::openat(parent, "..", dir_flags);
        if (up < 0)
            return;
        cur.reset(up);
        parent = cur.get();
    }
}

} // namespace fk::store::detail
