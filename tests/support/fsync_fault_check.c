/* Checks the fk_fsync_fault LD_PRELOAD shim: runs itself once per scenario under the shim
 * with that scenario's environment, and each child checks what its calls return.
 *
 *   fk_fsync_fault_check PATH/TO/libfk_fsync_fault.so   exits 0 when every scenario held */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: expected %s (errno %d: %s)\n", __FILE__, __LINE__, #cond,      \
                    errno, strerror(errno));                                                       \
            ++failures;                                                                            \
        }                                                                                          \
    } while (0)

static int open_file(const char* dir, const char* name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0) {
        perror(path);
        exit(2);
    }
    return fd;
}

/* --- scenarios, each run in its own process under the shim --- */

static void passthrough(const char* dir) {
    int fd = open_file(dir, "plain");
    for (int i = 0; i < 5; ++i)
        EXPECT(fsync(fd) == 0 && fdatasync(fd) == 0 && syncfs(fd) == 0);
    EXPECT(write(fd, "hello", 5) == 5);
    close(fd);
}

static void fail_after(const char* dir) { /* FK_FSYNC_FAIL_AFTER=2 */
    int fd = open_file(dir, "data");
    EXPECT(fsync(fd) == 0);
    EXPECT(fdatasync(fd) == 0);
    errno = 0;
    EXPECT(fsync(fd) == -1 && errno == EIO);
    errno = 0;
    EXPECT(fdatasync(fd) == -1 && errno == EIO);
    errno = 0;
    EXPECT(fsync(fd) == -1 && errno == EIO); /* stays failed */
    errno = 0;
    EXPECT(syncfs(fd) == -1 && errno == EIO);
    EXPECT(write(fd, "x", 1) == 1); /* writes are not affected */
    close(fd);
}

static void fail_path(const char* dir) { /* FK_FSYNC_FAIL_PATH=victim FK_FSYNC_FAIL_AFTER=1 */
    int other = open_file(dir, "bystander");
    int victim = open_file(dir, "victim.tmp");
    EXPECT(fsync(other) == 0);
    EXPECT(fsync(victim) == 0); /* the one allowed */
    EXPECT(fsync(other) == 0);
    errno = 0;
    EXPECT(fsync(victim) == -1 && errno == EIO);
    errno = 0;
    EXPECT(syncfs(victim) == -1 && errno == EIO);
    EXPECT(fsync(other) == 0);
    EXPECT(syncfs(other) == 0);
    close(other);
    close(victim);
}

static void fail_errno(const char* dir) { /* FK_FSYNC_FAIL_AFTER=0 FK_FSYNC_FAIL_ERRNO=ENOSPC */
    int fd = open_file(dir, "data");
    errno = 0;
    EXPECT(fsync(fd) == -1 && errno == ENOSPC);
    close(fd);
}

static void write_enospc(const char* dir) { /* FK_WRITE_ENOSPC_AFTER=10 */
    int fd = open_file(dir, "body");
    int pipefd[2];
    EXPECT(pipe(pipefd) == 0);
    EXPECT(write(fd, "123456", 6) == 6);
    EXPECT(pwrite(fd, "abcdef", 6, 6) == 4); /* fills the disk: short */
    errno = 0;
    EXPECT(write(fd, "z", 1) == -1 && errno == ENOSPC);
    struct iovec iov[2] = {{"ab", 2}, {"cd", 2}};
    errno = 0;
    EXPECT(writev(fd, iov, 2) == -1 && errno == ENOSPC);
    EXPECT(write(pipefd[1], "still", 5) == 5); /* pipes and sockets are never failed */
    EXPECT(fsync(fd) == 0);
    EXPECT(lseek(fd, 0, SEEK_END) == 10); /* exactly the budget reached the file */
    close(pipefd[0]);
    close(pipefd[1]);
    close(fd);
}

static void write_path(const char* dir) { /* FK_WRITE_ENOSPC_AFTER=0 FK_WRITE_FAIL_PATH=full */
    int ok = open_file(dir, "roomy");
    int full = open_file(dir, "full.dat");
    EXPECT(write(ok, "fine", 4) == 4);
    errno = 0;
    EXPECT(write(full, "no", 2) == -1 && errno == ENOSPC);
    close(ok);
    close(full);
}

struct scenario {
    const char* name;
    void (*run)(const char* dir);
    const char* env[3];
};

static const struct scenario scenarios[] = {
    {"passthrough", passthrough, {NULL}},
    {"fail_after", fail_after, {"FK_FSYNC_FAIL_AFTER=2", NULL}},
    {"fail_path", fail_path, {"FK_FSYNC_FAIL_PATH=victim", "FK_FSYNC_FAIL_AFTER=1", NULL}},
    {"fail_errno", fail_errno, {"FK_FSYNC_FAIL_AFTER=0", "FK_FSYNC_FAIL_ERRNO=ENOSPC", NULL}},
    {"write_enospc", write_enospc, {"FK_WRITE_ENOSPC_AFTER=10", NULL}},
    {"write_path", write_path, {"FK_WRITE_ENOSPC_AFTER=0", "FK_WRITE_FAIL_PATH=full", NULL}},
};
enum { scenario_count = sizeof scenarios / sizeof scenarios[0] };

int main(int argc, char** argv) {
    if (argc == 4 && strcmp(argv[1], "--scenario") == 0) {
        for (int i = 0; i < scenario_count; ++i)
            if (strcmp(scenarios[i].name, argv[2]) == 0) {
                scenarios[i].run(argv[3]);
                return failures ? 1 : 0;
            }
        return 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/TO/libfk_fsync_fault.so\n", argv[0]);
        return 2;
    }
    char dir[] = "/tmp/fk_fsync_fault_check.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    char preload[4200];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", argv[1]);
    int failed = 0;
    for (int i = 0; i < scenario_count; ++i) {
        /* A clean environment: only the shim, the scenario's settings and the log. */
        const char* env[8] = {preload, "FK_FAULT_LOG=1"};
        int n = 2;
        for (int j = 0; scenarios[i].env[j]; ++j)
            env[n++] = scenarios[i].env[j];
        env[n] = NULL;
        pid_t pid = fork();
        if (pid == 0) {
            char* child_argv[] = {argv[0], "--scenario", (char*)scenarios[i].name, dir, NULL};
            execve("/proc/self/exe", child_argv, (char**)env);
            _exit(127);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        printf("%s: %s\n", scenarios[i].name, ok ? "ok" : "FAILED");
        failed |= !ok;
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return failed;
}
