#pragma once
// Thin POSIX helpers for the file store: an owning fd, whole-buffer I/O, and the one
// function through which every fsync / fdatasync / syncfs goes (so that tests can inject
// failures and fault tests can kill the process at named points).

#include <dirent.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace fk::store::detail {

class unique_fd {
public:
    unique_fd() = default;
    explicit unique_fd(int fd) noexcept : fd_(fd) {}
    unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& o) noexcept {
        reset(std::exchange(o.fd_, -1));
        return *this;
    }
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    ~unique_fd() { reset(); }

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    void reset(int fd = -1) noexcept;

private:
    int fd_ = -1;
};

// Both return 0 or an errno value. A short write is retried; EINTR is retried.
int write_all(int fd, std::string_view data) noexcept;
// Reads exactly `size` bytes from offset 0 into `out`; a file shorter than `size` → EIO.
int read_exact(int fd, std::string& out, std::size_t size);
// Reads a whole file.
int read_whole(int fd, std::string& out);

enum class sync_kind {
    body,       // fsync of a new body (tmp) file
    directory,  // fsync of a directory after entries were created, renamed or removed
    index,      // an fsync SQLite asks for (its WAL at each commit, the index file at a
                // checkpoint), routed here by the index's VFS (index.cpp)
    filesystem, // syncfs at startup and at a clean stop
    staged,     // syncfs before a batch's index commit (file.flush "syncfs")
    background, // the flusher's syncfs after batches, before their redo rows go ("syncfs")
};
std::string_view to_string(sync_kind k) noexcept;

// The only way the file store asks for durability. Returns 0 or an errno value. Callers
// never retry after a failure: the kernel may have dropped the dirty pages and a second
// fsync would report success for data that is gone ("fsyncgate").
int sync_fd(int fd, sync_kind kind) noexcept;

// The test hook's answer for a sync of `kind` (0: go ahead), for syncs that do not go
// through sync_fd (SQLite's own, index.cpp).
int injected_sync_fault(sync_kind kind) noexcept;

// Whether this kernel's syncfs() reports write-back errors (Linux 5.8 and later); before
// that it returned 0 even when pages could not be written. The second form takes a
// uname release string ("6.1.0-27-amd64"); anything unparsable counts as "no".
bool syncfs_reports_errors() noexcept;
bool syncfs_reports_errors(const char* release) noexcept;

// Opens directory `rel` ("" for `parent` itself) below `parent` for readdir, without
// following a symlink; nullptr when it cannot. The caller closedir()s it.
DIR* open_directory(int parent, const std::string& rel) noexcept;

// Whether entry `name` of the directory open as `dir_fd` is a directory, from readdir's
// d_type, or (DT_UNKNOWN) an fstatat that does not follow symlinks.
bool is_directory_entry(int dir_fd, const char* name, unsigned char d_type) noexcept;

// "open: No such file or directory" style text.
std::string errno_text(std::string_view what, int err);

// Test hook: when set, called before every sync_fd; a nonzero return is used as the
// errno of a failed sync and the real call is skipped. Pass nullptr to clear.
using fsync_fault = std::function<int(sync_kind)>;
void set_fsync_fault_for_tests(fsync_fault fault);

// Fault-test kill points (CMake option FK_FAILPOINTS): FK_FAILPOINT=name (or name:N for
// the N-th hit) in the environment makes the process SIGKILL itself at that point.
void failpoint_hit(const char* name) noexcept;
// Tests: whether FK_FAILPOINTS was compiled in, and a replacement for the environment
// variable (same "name" or "name:N" syntax; "" disarms).
bool failpoints_compiled() noexcept;
void set_failpoint_for_tests(const std::string& spec);

} // namespace fk::store::detail

#if defined(FK_FAILPOINTS)
#define FK_FAILPOINT(name) ::fk::store::detail::failpoint_hit(name)
#else
#define FK_FAILPOINT(name) ((void)0)
#endif
