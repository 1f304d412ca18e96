#include "backends/file/detail/sys.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include <cstdio>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

namespace fk::store::detail {

void unique_fd::reset(int fd) noexcept {
    if (fd_ >= 0)
        ::close(fd_); // close errors carry no durability information after a sync
    fd_ = fd;
}

int write_all(int fd, std::string_view data) noexcept {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EIO;
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    return 0;
}

int read_exact(int fd, std::string& out, std::size_t size) {
    out.resize(size);
    std::size_t done = 0;
    while (done < size) {
        ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EIO;
        done += static_cast<std::size_t>(n);
    }
    return 0;
}

int read_whole(int fd, std::string& out) {
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        return errno;
    out.clear();
    out.reserve(static_cast<std::size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return 0;
        out.append(buf, static_cast<std::size_t>(n));
    }
}

DIR* open_directory(int parent, const std::string& rel) noexcept {
    const int fd = ::openat(parent, rel.empty() ? "." : rel.c_str(),
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return nullptr;
    DIR* d = ::fdopendir(fd);
    if (!d)
        ::close(fd);
    return d;
}

bool is_directory_entry(int dir_fd, const char* name, unsigned char d_type) noexcept {
    if (d_type != DT_UNKNOWN)
        return d_type == DT_DIR;
    struct stat st {};
    return ::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

std::string_view to_string(sync_kind k) noexcept {
    switch (k) {
    case sync_kind::body:
        return "body";
    case sync_kind::directory:
        return "directory";
    case sync_kind::index:
        return "index";
    case sync_kind::filesystem:
        return "filesystem";
    case sync_kind::staged:
        return "staged";
    case sync_kind::background:
        return "background";
    }
    return "?";
}

namespace {

std::mutex fault_mutex;
fsync_fault fault_hook;
std::atomic<bool> fault_set{false};

} // namespace

void set_fsync_fault_for_tests(fsync_fault fault) {
    std::lock_guard lock(fault_mutex);
    fault_hook = std::move(fault);
    fault_set = static_cast<bool>(fault_hook);
}

int injected_sync_fault(sync_kind kind) noexcept {
    if (fault_set.load(std::memory_order_relaxed)) {
        std::lock_guard lock(fault_mutex);
        if (fault_hook)
            return fault_hook(kind);
    }
    return 0;
}

int sync_fd(int fd, sync_kind kind) noexcept {
    if (int err = injected_sync_fault(kind); err != 0)
        return err;
    int rc = 0;
    switch (kind) {
    case sync_kind::filesystem:
    case sync_kind::staged:
    case sync_kind::background:
        rc = ::syncfs(fd);
        break;
    default:
        rc = ::fsync(fd);
        break;
    }
    return rc == 0 ? 0 : errno;
}

bool syncfs_reports_errors(const char* release) noexcept {
    unsigned major = 0, minor = 0;
    if (std::sscanf(release, "%u.%u", &major, &minor) != 2)
        return false;
    return major > 5 || (major == 5 && minor >= 8);
}

bool syncfs_reports_errors() noexcept {
    utsname u{};
    return ::uname(&u) == 0 && syncfs_reports_errors(u.release);
}

std::string errno_text(std::string_view what, int err) {
    std::string s(what);
    s += ": ";
    s += std::strerror(err);
    return s;
}

namespace {

struct failpoint_target {
    std::string name;
    long at_hit = 1;
    long hits = 0;
};
std::mutex failpoint_mutex;
std::optional<failpoint_target> failpoint;

failpoint_target parse_failpoint(std::string spec) {
    failpoint_target t;
    if (auto colon = spec.find(':'); colon != std::string::npos) {
        t.at_hit = std::strtol(spec.c_str() + colon + 1, nullptr, 10);
        spec.resize(colon);
    }
    t.name = std::move(spec);
    return t;
}

} // namespace

void failpoint_hit(const char* name) noexcept {
    std::lock_guard lock(failpoint_mutex);
    if (!failpoint) {
        const char* env = std::getenv("FK_FAILPOINT");
        failpoint = parse_failpoint(env ? env : "");
    }
    if (failpoint->name.empty() || failpoint->name != name)
        return;
    if (++failpoint->hits >= failpoint->at_hit)
        ::raise(SIGKILL);
}

void set_failpoint_for_tests(const std::string& spec) {
    std::lock_guard lock(failpoint_mutex);
    failpoint = parse_failpoint(spec);
}

bool failpoints_compiled() noexcept {
#if defined(FK_FAILPOINTS)
    return true;
#else
    return false;
#endif
}

} // namespace fk::store::detail
