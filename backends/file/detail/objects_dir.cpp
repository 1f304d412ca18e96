// ROOT/objects (objects_dir.hpp).
#include "backends/file/detail/objects_dir.hpp"

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

int objects_dir::open_dir(const object_path& p, bool create, std::shared_ptr<unique_fd>& out) {
    if (p.dirs.empty()) {
        out = fd_;
        return 0;
    }
    unique_fd cur;
    int parent = fd_->get();
    std::string prefix;
    for (const auto& name : p.dirs) {
        if (!prefix.empty())
            prefix += '/';
        prefix += name;
        if (create) {
            std::lock_guard lock(dirs_mutex_);
            if (!durable_dirs_.contains(prefix)) {
                if (::mkdirat(parent, name.c_str(), 0755) == 0) {
                    // The new entry must be durable before anything inside it is committed.
                    if (int err = sync_fd(parent, sync_kind::directory); err != 0) {
                        on_sync_failure_("fsync of a directory after mkdir", err);
                        return err;
                    }
                } else if (errno != EEXIST) {
                    return errno;
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

void objects_dir::reclaim_empty(const object_path& p) {
    if (p.dirs.empty())
        return;
    std::unique_lock structure(structure_);
    // Open the chain, then remove from the innermost outwards; rmdir fails (ENOTEMPTY)
    // at the first directory that still holds something, and the walk stops there.
    std::vector<unique_fd> chain;
    int parent = fd_->get();
    for (std::size_t i = 0; i + 1 < p.dirs.size(); ++i) {
        int fd = ::openat(parent, p.dirs[i].c_str(), dir_flags);
        if (fd < 0)
            return;
        chain.emplace_back(fd);
        parent = fd;
    }
    std::string prefix = p.dir_id();
    for (std::size_t i = p.dirs.size(); i-- > 0;) {
        const int in = i == 0 ? fd_->get() : chain[i - 1].get();
        if (::unlinkat(in, p.dirs[i].c_str(), AT_REMOVEDIR) != 0)
            return;
        {
            std::lock_guard lock(dirs_mutex_);
            durable_dirs_.erase(prefix);
        }
        const auto slash = prefix.rfind('/');
        prefix.resize(slash == std::string::npos ? 0 : slash);
    }
}

} // namespace fk::store::detail
