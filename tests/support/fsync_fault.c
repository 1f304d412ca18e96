/* LD_PRELOAD shim that injects disk faults for the crash and fault tests (issue 7).
 *
 *   FK_FSYNC_FAIL_AFTER=N   let N eligible fsync/fdatasync/syncfs calls succeed, then fail
 *                           every later one with -1/EIO: once a disk has lost a write,
 *                           every later fsync on Linux reports it too, so a store that
 *                           retries must not believe a later success.
 *   FK_FSYNC_FAIL_PATH=S    only calls on files whose path (readlink /proc/self/fd/N)
 *                           contains S are eligible; alone it means N=0.
 *   FK_FSYNC_FAIL_ERRNO=E   the errno to return instead of EIO (a number, or EIO, ENOSPC,
 *                           EDQUOT, EROFS).
 *   FK_WRITE_ENOSPC_AFTER=B let B bytes of write/pwrite/writev/pwritev to regular files
 *                           through; the write that crosses B is cut short at B, every
 *                           later one fails with -1/ENOSPC. Eligibility also follows
 *                           FK_WRITE_FAIL_PATH=S (path substring) when set.
 *   FK_FAULT_LOG=1          one line on stderr per injected failure.
 *
 * Without these variables every call passes straight through. Sockets, pipes and ttys
 * are never failed, so the process can still answer with its error. Counters are
 * process-wide and atomic, and children inherit the settings but not the counts.
 * Works with uninstrumented and clang-sanitized binaries; with GCC's dynamic ASan runtime
 * preload it first or set ASAN_OPTIONS=verify_asan_link_order=0 (docs/fuzzing.md). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { setting_unset = -1 };

static struct {
    atomic_int ready; /* 0: not read, 1: reading, 2: done */
    long long fsync_fail_after;
    const char* fsync_path;
    int fsync_errno;
    long long write_budget;
    const char* write_path;
    int log;
} cfg;

static atomic_llong fsync_passed;  /* eligible fsync calls let through */
static atomic_llong bytes_written; /* eligible bytes let through */

static long long env_number(const char* name) {
    const char* v = getenv(name);
    if (!v || !*v)
        return setting_unset;
    char* end = NULL;
    long long n = strtoll(v, &end, 10);
    if (*end != '\0' || n < 0) {
        fprintf(stderr, "fk_fsync_fault: ignoring %s=%s (not a count)\n", name, v);
        return setting_unset;
    }
    return n;
}

static int env_errno(const char* name, int fallback) {
    const char* v = getenv(name);
    if (!v || !*v)
        return fallback;
    static const struct {
        const char* name;
        int value;
    } known[] = {{"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT}, {"EROFS", EROFS}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; ++i)
        if (strcmp(v, known[i].name) == 0)
            return known[i].value;
    int n = atoi(v);
    return n > 0 ? n : fallback;
}

static const char* env_string(const char* name) {
    const char* v = getenv(name);
    return v && *v ? v : NULL;
}

static void load_config(void) {
    int expected = 0;
    if (atomic_load(&cfg.ready) == 2)
        return;
    if (!atomic_compare_exchange_strong(&cfg.ready, &expected, 1)) {
        while (atomic_load(&cfg.ready) != 2) {
        }
        return;
    }
    cfg.fsync_fail_after = env_number("FK_FSYNC_FAIL_AFTER");
    cfg.fsync_path = env_string("FK_FSYNC_FAIL_PATH");
    if (cfg.fsync_fail_after == setting_unset && cfg.fsync_path)
        cfg.fsync_fail_after = 0;
    cfg.fsync_errno = env_errno("FK_FSYNC_FAIL_ERRNO", EIO);
    cfg.write_budget = env_number("FK_WRITE_ENOSPC_AFTER");
    cfg.write_path = env_string("FK_WRITE_FAIL_PATH");
    cfg.log = env_number("FK_FAULT_LOG") > 0;
    atomic_store(&cfg.ready, 2);
}

/* The real function behind `name`; looked up once per call site. */
static void* next_symbol(const char* name) {
    void* f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "fk_fsync_fault: no next definition of %s\n", name);
        abort();
    }
    return f;
}

typedef int (*fsync_t)(int);
typedef int (*fdatasync_t)(int);
typedef int (*syncfs_t)(int);
typedef ssize_t (*write_t)(int, const void*, size_t);
typedef ssize_t (*pwrite_t)(int, const void*, size_t, off_t);
typedef ssize_t (*pwrite64_t)(int, const void*, size_t, off64_t);
typedef ssize_t (*writev_t)(int, const struct iovec*, int);
typedef ssize_t (*pwritev_t)(int, const struct iovec*, int, off_t);

/* Declares name_fn, the real `name`. dlsym returns an object pointer; POSIX guarantees it
 * converts to a function pointer, and memcpy says so without a pedantic warning. */
#define REAL(name)                                                                                 \
    static _Atomic(name##_t) real_##name;                                                          \
    name##_t name##_fn = atomic_load(&real_##name);                                                \
    if (!name##_fn) {                                                                              \
        void* sym = next_symbol(#name);                                                            \
        memcpy(&name##_fn, &sym, sizeof name##_fn);                                                \
        atomic_store(&real_##name, name##_fn);                                                     \
    }

/* Whether the file behind fd has `needle` in its path. */
static int path_matches(int fd, const char* needle, char* path, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, size - 1);
    if (n < 0) {
        path[0] = '\0';
        return needle == NULL;
    }
    path[n] = '\0';
    return needle == NULL || strstr(path, needle) != NULL;
}

/* 0: let the fsync through; else the errno to fail it with. */
static int fsync_fault(int fd, const char* call) {
    load_config();
    if (cfg.fsync_fail_after == setting_unset)
        return 0;
    char path[PATH_MAX];
    if (!path_matches(fd, cfg.fsync_path, path, sizeof path))
        return 0;
    if (atomic_fetch_add(&fsync_passed, 1) < cfg.fsync_fail_after)
        return 0;
    atomic_fetch_sub(&fsync_passed, 1); /* count only successes, so it never wraps */
    if (cfg.log)
        fprintf(stderr, "fk_fsync_fault: %s(%d) on '%s' -> %s\n", call, fd, path,
                strerror(cfg.fsync_errno));
    return cfg.fsync_errno;
}

int fsync(int fd) {
    REAL(fsync);
    int e = fsync_fault(fd, "fsync");
    if (e) {
        errno = e;
        return -1;
    }
    return fsync_fn(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync);
    int e = fsync_fault(fd, "fdatasync");
    if (e) {
        errno = e;
        return -1;
    }
    return fdatasync_fn(fd);
}

/* syncfs(fd) counts like an fsync of the file behind fd (the store passes a directory). */
int syncfs(int fd) {
    REAL(syncfs);
    int e = fsync_fault(fd, "syncfs");
    if (e) {
        errno = e;
        return -1;
    }
    return syncfs_fn(fd);
}

/* How many of `count` bytes may be written to fd: count (no fault), fewer (the write
 * that fills the disk), or -1 with errno = ENOSPC. */
static ssize_t write_allowance(int fd, size_t count, const char* call) {
    load_config();
    if (cfg.write_budget == setting_unset || fd <= 2 || count == 0)
        return (ssize_t)count;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return (ssize_t)count;
    char path[PATH_MAX];
    if (!path_matches(fd, cfg.write_path, path, sizeof path))
        return (ssize_t)count;
    long long before = atomic_fetch_add(&bytes_written, (long long)count);
    long long left = cfg.write_budget - before;
    if (left >= (long long)count)
        return (ssize_t)count;
    /* Give back what was not written, so the counter says what reached the file. */
    long long allowed = left > 0 ? left : 0;
    atomic_fetch_sub(&bytes_written, (long long)count - allowed);
    if (cfg.log)
        fprintf(stderr, "fk_fsync_fault: %s(%d, %zu) on '%s' -> %s\n", call, fd, count, path,
                allowed ? "short write" : strerror(ENOSPC));
    if (allowed > 0)
        return (ssize_t)allowed;
    errno = ENOSPC;
    return -1;
}

ssize_t write(int fd, const void* buf, size_t count) {
    REAL(write);
    ssize_t n = write_allowance(fd, count, "write");
    return n < 0 ? n : write_fn(fd, buf, (size_t)n);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
    REAL(pwrite);
    ssize_t n = write_allowance(fd, count, "pwrite");
    return n < 0 ? n : pwrite_fn(fd, buf, (size_t)n, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off64_t offset) {
    REAL(pwrite64);
    ssize_t n = write_allowance(fd, count, "pwrite64");
    return n < 0 ? n : pwrite64_fn(fd, buf, (size_t)n, offset);
}

static size_t iov_total(const struct iovec* iov, int iovcnt) {
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    return total;
}

/* A short vectored write is done as a plain write of the allowed prefix's first
 * buffers; stores treat any short write as "retry the rest", which then fails. */
static ssize_t short_writev(int fd, const struct iovec* iov, int iovcnt, size_t allowed,
                            off_t offset, int positioned) {
    REAL(write);
    REAL(pwrite);
    for (int i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len == 0)
            continue;
        size_t n = iov[i].iov_len < allowed ? iov[i].iov_len : allowed;
        return positioned ? pwrite_fn(fd, iov[i].iov_base, n, offset)
                          : write_fn(fd, iov[i].iov_base, n);
    }
    return 0;
}

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
    REAL(writev);
    size_t total = iov_total(iov, iovcnt);
    ssize_t n = write_allowance(fd, total, "writev");
    if (n < 0)
        return n;
    if ((size_t)n < total)
        return short_writev(fd, iov, iovcnt, (size_t)n, 0, 0);
    return writev_fn(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec* iov, int iovcnt, off_t offset) {
    REAL(pwritev);
    size_t total = iov_total(iov, iovcnt);
    ssize_t n = write_allowance(fd, total, "pwritev");
    if (n < 0)
        return n;
    if ((size_t)n < total)
        return short_writev(fd, iov, iovcnt, (size_t)n, offset, 1);
    return pwritev_fn(fd, iov, iovcnt, offset);
}
