/*
 * POSIX semantics of a pvfs FUSE mount, checked one by one.
 *
 *   semantics DIR FIXTURES
 *
 * DIR is an empty directory on the mount that the caller owns; FIXTURES is a
 * directory prepared by root (see crates/cli/tests/fuse_posix.rs) holding objects
 * owned by root for the permission checks of an unprivileged run:
 *   FIXTURES/rootfile       0666 root:root, contains "root"
 *   FIXTURES/rootfile_ro    0644 root:root
 *   FIXTURES/suidfile       06777 root:root
 *   FIXTURES/ro_dir         0555 root:root, empty
 *   FIXTURES/sticky         01777 root:root, holding victim (0666 root:root)
 *
 * Run as root, and as an unprivileged user: checks that only make sense for one
 * of them say so. Prints one line per check ("ok NAME" or "FAIL NAME: why") and
 * exits 1 if any check failed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static int failures;
static int checks;
static const char *dir;
static int is_root;

static void pass(const char *name) {
    checks++;
    printf("ok   %s\n", name);
}

static void fail(const char *name, const char *fmt, ...) {
    va_list ap;
    checks++;
    failures++;
    printf("FAIL %s: ", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/* A path under DIR. Several may be live at once (ring of buffers). */
static const char *P(const char *rel) {
    static char bufs[8][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, PATH_MAX, "%s/%s", dir, rel);
    return b;
}

/* Expects `r` == -1 with errno `want`. */
static void expect_err(const char *name, long r, int got_errno, int want) {
    if (r == -1 && got_errno == want)
        pass(name);
    else
        fail(name, "expected errno %d (%s), got result %ld errno %d (%s)", want,
             strerror(want), r, got_errno, strerror(got_errno));
}
#define EXPECT_ERR(name, call, want)                                                  \
    do {                                                                              \
        errno = 0;                                                                    \
        long r_ = (long)(call);                                                       \
        expect_err(name, r_, errno, want);                                            \
    } while (0)

/* Expects `call` not to return -1. */
#define EXPECT_OK(name, call)                                                         \
    do {                                                                              \
        errno = 0;                                                                    \
        long r_ = (long)(call);                                                       \
        if (r_ != -1)                                                                 \
            pass(name);                                                               \
        else                                                                          \
            fail(name, "%s failed: %s", #call, strerror(errno));                      \
    } while (0)

#define CHECK(name, cond, ...)                                                        \
    do {                                                                              \
        if (cond)                                                                     \
            pass(name);                                                               \
        else                                                                          \
            fail(name, __VA_ARGS__);                                                  \
    } while (0)

static int write_file(const char *path, const void *data, size_t len, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, data, len);
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)len ? 0 : -1;
}

/* Reads up to `max` bytes of `path`; returns the count or -1. */
static ssize_t read_file(const char *path, char *buf, size_t max) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got < max) {
        ssize_t n = read(fd, buf + got, max - got);
        if (n < 0) {
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        got += n;
    }
    close(fd);
    return got;
}

static long long ts_ns(struct timespec t) {
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return ts_ns(t);
}

/* ----- files: create, read, write, sizes, times ------------------------------- */

static void files(void) {
    const char *f = P("file");
    int fd = open(f, O_RDWR | O_CREAT | O_EXCL, 0644);
    CHECK("create O_CREAT|O_EXCL", fd >= 0, "open: %s", strerror(errno));
    EXPECT_ERR("O_EXCL on an existing file is EEXIST", open(f, O_RDWR | O_CREAT | O_EXCL, 0644),
               EEXIST);
    long long before = now_ns();
    CHECK("write", write(fd, "hello world", 11) == 11, "write: %s", strerror(errno));
    long long after = now_ns();
    char buf[64] = {0};
    CHECK("pread", pread(fd, buf, sizeof buf, 0) == 11 && memcmp(buf, "hello world", 11) == 0,
          "pread got %.11s", buf);
    struct stat st;
    CHECK("fstat size after write", fstat(fd, &st) == 0 && st.st_size == 11, "size %lld",
          (long long)st.st_size);
    CHECK("stat size after write", stat(f, &st) == 0 && st.st_size == 11, "size %lld",
          (long long)st.st_size);
    CHECK("mtime is the time of the write",
          ts_ns(st.st_mtim) >= before - 1000000000LL && ts_ns(st.st_mtim) <= after + 1000000000LL,
          "mtime %lld, write between %lld and %lld", ts_ns(st.st_mtim), before, after);
    CHECK("regular file mode and owner",
          S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0644 && st.st_uid == geteuid(),
          "mode %o uid %d", st.st_mode, st.st_uid);
    CHECK("link count 1", st.st_nlink == 1, "nlink %lu", (unsigned long)st.st_nlink);

    /* pwrite past the end leaves a hole of zeros. */
    CHECK("pwrite at 1 MiB", pwrite(fd, "tail", 4, 1 << 20) == 4, "pwrite: %s", strerror(errno));
    CHECK("size after pwrite past the end", fstat(fd, &st) == 0 && st.st_size == (1 << 20) + 4,
          "size %lld", (long long)st.st_size);
    char hole[4096];
    memset(hole, 1, sizeof hole);
    CHECK("hole reads as zeros",
          pread(fd, hole, sizeof hole, 4096) == (ssize_t)sizeof hole && hole[0] == 0 &&
              hole[4095] == 0,
          "got %d", hole[0]);
    CHECK("read at the end returns 0", pread(fd, buf, 10, (1 << 20) + 4) == 0, "not EOF");

    /* ftruncate shrinks and grows. */
    CHECK("ftruncate shrink", ftruncate(fd, 5) == 0 && fstat(fd, &st) == 0 && st.st_size == 5,
          "size %lld", (long long)st.st_size);
    CHECK("ftruncate grow", ftruncate(fd, 100) == 0 && fstat(fd, &st) == 0 && st.st_size == 100,
          "size %lld", (long long)st.st_size);
    memset(buf, 1, sizeof buf);
    CHECK("bytes after a truncate-grow are zeros",
          pread(fd, buf, 20, 0) == 20 && memcmp(buf, "hello", 5) == 0 && buf[5] == 0 &&
              buf[19] == 0,
          "got %.5s %d", buf, buf[5]);
    EXPECT_OK("fsync", fsync(fd));
    EXPECT_OK("fdatasync", fdatasync(fd));
    close(fd);
    /* fsync of a directory syncs the metadata servers. */
    fd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK("open a directory", fd >= 0, "errno %d", errno);
    EXPECT_OK("fsync of a directory", fsync(fd));
    close(fd);

    /* O_TRUNC */
    fd = open(f, O_WRONLY | O_TRUNC);
    CHECK("O_TRUNC empties the file", fd >= 0 && fstat(fd, &st) == 0 && st.st_size == 0,
          "size %lld", (long long)st.st_size);
    close(fd);
    CHECK("stat after O_TRUNC", stat(f, &st) == 0 && st.st_size == 0, "size %lld",
          (long long)st.st_size);

    /* O_APPEND: every write goes to the end, whatever the offset. */
    fd = open(f, O_WRONLY | O_APPEND);
    CHECK("O_APPEND open", fd >= 0, "%s", strerror(errno));
    write(fd, "one", 3);
    lseek(fd, 0, SEEK_SET);
    write(fd, "two", 3);
    close(fd);
    fd = open(f, O_WRONLY | O_APPEND);
    write(fd, "three", 5);
    close(fd);
    memset(buf, 0, sizeof buf);
    CHECK("O_APPEND writes land at the end", read_file(f, buf, sizeof buf) == 11 &&
                                                 memcmp(buf, "onetwothree", 11) == 0,
          "content %s", buf);

    /* A large write through several FUSE requests, read back. */
    size_t big = (3 << 20) + 12345;
    char *data = malloc(big), *back = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i * 7 + i / 4096);
    CHECK("3 MiB write", write_file(P("big"), data, big, 0644) == 0, "%s", strerror(errno));
    CHECK("3 MiB read back", read_file(P("big"), back, big) == (ssize_t)big &&
                                 memcmp(data, back, big) == 0,
          "content differs");
    free(data);
    free(back);

    /* utimensat: explicit times, UTIME_OMIT, UTIME_NOW. */
    struct timespec ts[2] = {{1000000000, 123456789}, {1100000000, 987654321}};
    EXPECT_OK("utimensat explicit", utimensat(AT_FDCWD, f, ts, 0));
    CHECK("explicit atime and mtime", stat(f, &st) == 0 && st.st_atim.tv_sec == 1000000000 &&
                                          st.st_atim.tv_nsec == 123456789 &&
                                          st.st_mtim.tv_sec == 1100000000 &&
                                          st.st_mtim.tv_nsec == 987654321,
          "atime %lld mtime %lld", ts_ns(st.st_atim), ts_ns(st.st_mtim));
    struct timespec omit[2] = {{0, UTIME_OMIT}, {1200000000, 0}};
    EXPECT_OK("utimensat UTIME_OMIT", utimensat(AT_FDCWD, f, omit, 0));
    CHECK("UTIME_OMIT keeps atime", stat(f, &st) == 0 && st.st_atim.tv_sec == 1000000000 &&
                                        st.st_mtim.tv_sec == 1200000000,
          "atime %lld mtime %lld", (long long)st.st_atim.tv_sec, (long long)st.st_mtim.tv_sec);
    struct timespec nowt[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    long long t0 = now_ns();
    EXPECT_OK("utimensat UTIME_NOW", utimensat(AT_FDCWD, f, nowt, 0));
    CHECK("UTIME_NOW sets the current time",
          stat(f, &st) == 0 && ts_ns(st.st_mtim) >= t0 - 1000000000LL &&
              ts_ns(st.st_mtim) <= now_ns() + 1000000000LL && st.st_atim.tv_sec == 1000000000,
          "mtime %lld, now %lld", ts_ns(st.st_mtim), t0);
    /* An explicit mtime set after data was written stays (cp -p, tar x). */
    EXPECT_OK("utimensat after writing data", utimensat(AT_FDCWD, P("big"), ts, 0));
    CHECK("mtime set after a write stays", stat(P("big"), &st) == 0 &&
                                               st.st_mtim.tv_sec == 1100000000,
          "mtime %lld", (long long)st.st_mtim.tv_sec);
    /* A write after that moves it again. */
    fd = open(P("big"), O_WRONLY);
    usleep(20000);
    pwrite(fd, "x", 1, 0);
    close(fd);
    CHECK("a write after utimes moves the mtime", stat(P("big"), &st) == 0 &&
                                                      st.st_mtim.tv_sec > 1100000000,
          "mtime %lld", (long long)st.st_mtim.tv_sec);
    /* chmod keeps the mtime of the data. */
    long long m = ts_ns(st.st_mtim);
    EXPECT_OK("chmod", chmod(P("big"), 0600));
    CHECK("chmod sets the mode and keeps the mtime",
          stat(P("big"), &st) == 0 && (st.st_mode & 07777) == 0600 && ts_ns(st.st_mtim) == m,
          "mode %o mtime %lld (was %lld)", st.st_mode & 07777, ts_ns(st.st_mtim), m);

    /* mknod of a regular file, FIFOs, sockets and device nodes (metadata in pvfs). */
    EXPECT_OK("mknod S_IFREG", mknod(P("node"), S_IFREG | 0640, 0));
    CHECK("mknod made a regular file", stat(P("node"), &st) == 0 && S_ISREG(st.st_mode) &&
                                           (st.st_mode & 0777) == 0640,
          "mode %o", st.st_mode);
    EXPECT_OK("mkfifo", mkfifo(P("fifo"), 0640));
    CHECK("mkfifo made a FIFO", lstat(P("fifo"), &st) == 0 && S_ISFIFO(st.st_mode) &&
                                    (st.st_mode & 0777) == 0640 && st.st_size == 0,
          "mode %o", st.st_mode);
    {
        /* The local kernel makes it a pipe: a child writes, we read. */
        pid_t child = fork();
        if (child == 0) {
            int w = open(P("fifo"), O_WRONLY);
            _exit(w >= 0 && write(w, "through the fifo", 16) == 16 ? 0 : 1);
        }
        int r = open(P("fifo"), O_RDONLY);
        char pbuf[32] = {0};
        ssize_t got = r >= 0 ? read(r, pbuf, sizeof pbuf) : -1;
        int wst = 0;
        waitpid(child, &wst, 0);
        CHECK("a FIFO on the mount works as a pipe",
              r >= 0 && got == 16 && memcmp(pbuf, "through the fifo", 16) == 0 &&
                  WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
              "open %d read %zd: %s", r, got, strerror(errno));
        if (r >= 0) close(r);
    }
    EXPECT_OK("mknod S_IFSOCK", mknod(P("sock"), S_IFSOCK | 0600, 0));
    CHECK("mknod made a socket", lstat(P("sock"), &st) == 0 && S_ISSOCK(st.st_mode), "mode %o",
          st.st_mode);
    if (is_root) {
        EXPECT_OK("mknod S_IFCHR as root", mknod(P("null"), S_IFCHR | 0666, makedev(1, 3)));
        CHECK("a character device keeps its device number",
              lstat(P("null"), &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 &&
                  minor(st.st_rdev) == 3,
              "mode %o rdev %u,%u", st.st_mode, major(st.st_rdev), minor(st.st_rdev));
        EXPECT_OK("mknod S_IFBLK as root", mknod(P("blk"), S_IFBLK | 0600, makedev(259, 70000)));
        CHECK("a block device keeps a large minor number",
              lstat(P("blk"), &st) == 0 && S_ISBLK(st.st_mode) && major(st.st_rdev) == 259 &&
                  minor(st.st_rdev) == 70000,
              "mode %o rdev %u,%u", st.st_mode, major(st.st_rdev), minor(st.st_rdev));
        EXPECT_OK("unlink a device node", unlink(P("blk")));
    } else {
        EXPECT_ERR("mknod S_IFCHR by a user is EPERM",
                   mknod(P("null"), S_IFCHR | 0666, makedev(1, 3)), EPERM);
    }
    {
        DIR *d = opendir(dir);
        int fifo_type = 0, sock_type = 0;
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, "fifo") == 0) fifo_type = e->d_type;
            if (strcmp(e->d_name, "sock") == 0) sock_type = e->d_type;
        }
        if (d != NULL) closedir(d);
        CHECK("readdir types of special files", fifo_type == DT_FIFO && sock_type == DT_SOCK,
              "fifo %d sock %d", fifo_type, sock_type);
    }
    EXPECT_OK("rename a FIFO", rename(P("fifo"), P("fifo2")));
    EXPECT_OK("unlink a FIFO", unlink(P("fifo2")));
    EXPECT_OK("unlink a socket", unlink(P("sock")));
}

/* ----- names and errors ---------------------------------------------------------- */

static void names(void) {
    char name[300];
    memset(name, 'n', 255);
    name[255] = 0;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    CHECK("255-byte name", fd >= 0, "%s", strerror(errno));
    close(fd);
    struct stat st;
    CHECK("255-byte name stats", stat(path, &st) == 0, "%s", strerror(errno));
    memset(name, 'n', 256);
    name[256] = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    EXPECT_ERR("256-byte name is ENAMETOOLONG", open(path, O_CREAT | O_WRONLY, 0644),
               ENAMETOOLONG);
    EXPECT_ERR("stat of a 256-byte name is ENAMETOOLONG", stat(path, &st), ENAMETOOLONG);
    EXPECT_ERR("mkdir of a 256-byte name is ENAMETOOLONG", mkdir(path, 0755), ENAMETOOLONG);

    write_file(P("plain"), "x", 1, 0644);
    EXPECT_ERR("path through a file is ENOTDIR", open(P("plain/x"), O_RDONLY), ENOTDIR);
    EXPECT_ERR("create through a file is ENOTDIR", open(P("plain/x"), O_CREAT | O_WRONLY, 0644),
               ENOTDIR);
    EXPECT_ERR("missing file is ENOENT", open(P("missing"), O_RDONLY), ENOENT);
    EXPECT_ERR("missing parent is ENOENT", open(P("nodir/x"), O_CREAT | O_WRONLY, 0644), ENOENT);
    EXPECT_OK("mkdir", mkdir(P("d"), 0755));
    EXPECT_ERR("mkdir of an existing name is EEXIST", mkdir(P("d"), 0755), EEXIST);
    EXPECT_ERR("mkdir over a file is EEXIST", mkdir(P("plain"), 0755), EEXIST);
    write_file(P("d/inner"), "y", 1, 0644);
    EXPECT_ERR("rmdir of a non-empty directory is ENOTEMPTY", rmdir(P("d")), ENOTEMPTY);
    EXPECT_ERR("rmdir of a file is ENOTDIR", rmdir(P("plain")), ENOTDIR);
    EXPECT_ERR("unlink of a directory is EISDIR", unlink(P("d")), EISDIR);
    EXPECT_ERR("open a directory for writing is EISDIR", open(P("d"), O_WRONLY), EISDIR);
    EXPECT_ERR("O_DIRECTORY on a file is ENOTDIR", open(P("plain"), O_RDONLY | O_DIRECTORY),
               ENOTDIR);
    EXPECT_OK("unlink", unlink(P("d/inner")));
    EXPECT_ERR("unlink again is ENOENT", unlink(P("d/inner")), ENOENT);
    EXPECT_OK("rmdir", rmdir(P("d")));
    CHECK("rmdir removed it", stat(P("d"), &st) == -1 && errno == ENOENT, "still there");
}

/* ----- symlinks -------------------------------------------------------------------- */

static void symlinks(void) {
    write_file(P("target"), "target data", 11, 0644);
    EXPECT_OK("symlink", symlink("target", P("link")));
    char buf[PATH_MAX + 1];
    ssize_t n = readlink(P("link"), buf, sizeof buf);
    CHECK("readlink", n == 6 && memcmp(buf, "target", 6) == 0, "got %zd", n);
    struct stat st;
    CHECK("lstat sees the link", lstat(P("link"), &st) == 0 && S_ISLNK(st.st_mode) && st.st_size == 6,
          "mode %o size %lld", st.st_mode, (long long)st.st_size);
    char data[32] = {0};
    CHECK("open follows the link", read_file(P("link"), data, sizeof data) == 11 &&
                                       memcmp(data, "target data", 11) == 0,
          "got %s", data);
    EXPECT_OK("symlink loop a->b", symlink("loop_b", P("loop_a")));
    EXPECT_OK("symlink loop b->a", symlink("loop_a", P("loop_b")));
    EXPECT_ERR("a symlink loop is ELOOP", open(P("loop_a"), O_RDONLY), ELOOP);
    EXPECT_ERR("O_NOFOLLOW on a symlink is ELOOP", open(P("link"), O_RDONLY | O_NOFOLLOW), ELOOP);
    /* Targets up to PATH_MAX - 1 bytes. */
    char target[PATH_MAX + 2];
    memset(target, 'a', PATH_MAX - 1);
    target[PATH_MAX - 1] = 0;
    EXPECT_OK("symlink with a 4095-byte target", symlink(target, P("longlink")));
    n = readlink(P("longlink"), buf, sizeof buf);
    CHECK("4095-byte target reads back", n == PATH_MAX - 1 && memcmp(buf, target, n) == 0,
          "got %zd bytes", n);
    memset(target, 'a', PATH_MAX);
    target[PATH_MAX] = 0;
    EXPECT_ERR("a 4096-byte target is ENAMETOOLONG", symlink(target, P("toolong")), ENAMETOOLONG);
    EXPECT_OK("symlink to an absolute dangling path", symlink("/nonexistent/x", P("dangling")));
    EXPECT_ERR("a dangling symlink is ENOENT", open(P("dangling"), O_RDONLY), ENOENT);
    EXPECT_ERR("symlink over an existing name is EEXIST", symlink("x", P("target")), EEXIST);
}

/* ----- rename in all forms ----------------------------------------------------- */

static int renameat2_(const char *a, const char *b, unsigned flags) {
    return syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, flags);
}

static void renames(void) {
    char buf[32];
    struct stat st;
    write_file(P("r1"), "one", 3, 0644);
    EXPECT_OK("rename", rename(P("r1"), P("r2")));
    CHECK("rename moved it", stat(P("r1"), &st) == -1 && read_file(P("r2"), buf, 32) == 3,
          "not moved");
    write_file(P("r3"), "three", 5, 0644);
    EXPECT_OK("rename over a file", rename(P("r2"), P("r3")));
    memset(buf, 0, sizeof buf);
    CHECK("rename replaced the file", read_file(P("r3"), buf, 32) == 3 && memcmp(buf, "one", 3) == 0,
          "got %s", buf);
    EXPECT_OK("rename to itself", rename(P("r3"), P("r3")));
    write_file(P("r4"), "four", 4, 0644);
    EXPECT_ERR("RENAME_NOREPLACE onto a file is EEXIST", renameat2_(P("r4"), P("r3"), RENAME_NOREPLACE),
               EEXIST);
    EXPECT_OK("RENAME_NOREPLACE to a free name", renameat2_(P("r4"), P("r5"), RENAME_NOREPLACE));
    EXPECT_OK("RENAME_EXCHANGE", renameat2_(P("r3"), P("r5"), RENAME_EXCHANGE));
    memset(buf, 0, sizeof buf);
    read_file(P("r3"), buf, 32);
    char buf2[32] = {0};
    read_file(P("r5"), buf2, 32);
    CHECK("RENAME_EXCHANGE swapped the files", strcmp(buf, "four") == 0 && strcmp(buf2, "one") == 0,
          "r3=%s r5=%s", buf, buf2);
    EXPECT_ERR("RENAME_EXCHANGE with a missing name is ENOENT",
               renameat2_(P("r3"), P("nothere"), RENAME_EXCHANGE), ENOENT);
    mkdir(P("rd1"), 0755);
    mkdir(P("rd2"), 0755);
    mkdir(P("rd3"), 0755);
    write_file(P("rd3/x"), "x", 1, 0644);
    EXPECT_ERR("rename of a file over a directory is EISDIR", rename(P("r3"), P("rd1")), EISDIR);
    EXPECT_ERR("rename of a directory over a file is ENOTDIR", rename(P("rd1"), P("r3")), ENOTDIR);
    int r = rename(P("rd1"), P("rd3"));
    CHECK("rename over a non-empty directory is ENOTEMPTY or EEXIST",
          r == -1 && (errno == ENOTEMPTY || errno == EEXIST), "r=%d errno %s", r, strerror(errno));
    EXPECT_OK("rename of a directory over an empty one", rename(P("rd1"), P("rd2")));
    EXPECT_ERR("rename of a directory into itself is EINVAL", rename(P("rd2"), P("rd2/sub")),
               EINVAL);
    mkdir(P("rd2/sub"), 0755);
    EXPECT_ERR("rename of a directory into its subtree is EINVAL",
               rename(P("rd2"), P("rd2/sub/deeper")), EINVAL);
    EXPECT_OK("rename across directories (never EXDEV)", rename(P("r5"), P("rd3/moved")));
    EXPECT_OK("rename of a directory across directories", rename(P("rd2"), P("rd3/rd2")));
    CHECK("moved directory keeps its contents", stat(P("rd3/rd2/sub"), &st) == 0 && S_ISDIR(st.st_mode),
          "%s", strerror(errno));
}

/* ----- hard links ---------------------------------------------------------------- */

static void hard_links(const char *fixtures) {
    struct stat st, st2;
    char buf[32] = {0};
    write_file(P("h1"), "hard", 4, 0644);
    mkdir(P("hd"), 0755);
    EXPECT_OK("link", link(P("h1"), P("h2")));
    EXPECT_OK("link into another directory", link(P("h1"), P("hd/h3")));
    CHECK("three names of one file, nlink 3",
          stat(P("h1"), &st) == 0 && stat(P("hd/h3"), &st2) == 0 && st.st_ino == st2.st_ino &&
              st.st_nlink == 3 && st2.st_nlink == 3,
          "ino %llu/%llu nlink %lu/%lu", (unsigned long long)st.st_ino,
          (unsigned long long)st2.st_ino, (unsigned long)st.st_nlink, (unsigned long)st2.st_nlink);
    EXPECT_ERR("link onto an existing name is EEXIST", link(P("h1"), P("h2")), EEXIST);
    EXPECT_ERR("link of a directory is EPERM", link(P("hd"), P("hd2")), EPERM);
    EXPECT_ERR("link of a missing name is ENOENT", link(P("nothere"), P("x")), ENOENT);
    int fd = open(P("h2"), O_WRONLY | O_APPEND);
    CHECK("append through the second name", fd >= 0 && write(fd, "!", 1) == 1, "%s",
          strerror(errno));
    if (fd >= 0)
        close(fd);
    CHECK("the data through the third name", read_file(P("hd/h3"), buf, sizeof buf) == 5 &&
                                                 memcmp(buf, "hard!", 5) == 0,
          "got %s", buf);
    /* Names go one by one; an open descriptor stays valid throughout. */
    fd = open(P("h1"), O_RDWR);
    EXPECT_OK("unlink of one name", unlink(P("h1")));
    CHECK("the other names keep the file, nlink 2",
          stat(P("h2"), &st) == 0 && st.st_nlink == 2 && st.st_size == 5, "nlink %lu size %lld",
          (unsigned long)st.st_nlink, (long long)st.st_size);
    EXPECT_OK("rename of a link onto another link of the same file (a no-op)",
              rename(P("h2"), P("hd/h3")));
    CHECK("both names are still there",
          stat(P("h2"), &st) == 0 && stat(P("hd/h3"), &st2) == 0 && st2.st_nlink == 2,
          "nlink %lu", (unsigned long)st2.st_nlink);
    write_file(P("other"), "other", 5, 0644);
    EXPECT_OK("rename of another file over a link", rename(P("other"), P("h2")));
    CHECK("replacing a name takes one link", stat(P("hd/h3"), &st) == 0 && st.st_nlink == 1,
          "nlink %lu", (unsigned long)st.st_nlink);
    EXPECT_OK("unlink of the last name", unlink(P("hd/h3")));
    memset(buf, 0, sizeof buf);
    CHECK("the open descriptor still reads", fd >= 0 && pread(fd, buf, 32, 0) == 5 &&
                                                 memcmp(buf, "hard!", 5) == 0,
          "got %s", buf);
    if (fd >= 0)
        close(fd);
    /* A symlink is linked itself; linkat with AT_SYMLINK_FOLLOW links its target. */
    symlink("h2", P("sl"));
    EXPECT_OK("link of a symlink", link(P("sl"), P("sl2")));
    CHECK("the link is the symlink", lstat(P("sl2"), &st) == 0 && S_ISLNK(st.st_mode) &&
                                         st.st_nlink == 2,
          "mode %o nlink %lu", st.st_mode, (unsigned long)st.st_nlink);
    EXPECT_OK("linkat AT_SYMLINK_FOLLOW",
              linkat(AT_FDCWD, P("sl"), AT_FDCWD, P("followed"), AT_SYMLINK_FOLLOW));
    CHECK("linkat followed the symlink", stat(P("followed"), &st) == 0 && stat(P("h2"), &st2) == 0 &&
                                             st.st_ino == st2.st_ino && st.st_nlink == 2,
          "ino %llu/%llu", (unsigned long long)st.st_ino, (unsigned long long)st2.st_ino);
    if (!is_root) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/rootfile_ro", fixtures);
        EXPECT_ERR("link of someone else's file one may not write is EPERM",
                   link(path, P("stolen")), EPERM);
    }
}

/* ----- a directory's times and link count ------------------------------------------ */

static void dir_times(void) {
    struct stat a, b;
    mkdir(P("dt"), 0755);
    CHECK("a new directory has 2 links", stat(P("dt"), &a) == 0 && a.st_nlink == 2, "nlink %lu",
          (unsigned long)a.st_nlink);
    usleep(2000);
    write_file(P("dt/f"), "f", 1, 0644);
    CHECK("a create moves the directory's mtime and ctime",
          stat(P("dt"), &b) == 0 && ts_ns(b.st_mtim) > ts_ns(a.st_mtim) &&
              ts_ns(b.st_ctim) > ts_ns(a.st_ctim),
          "mtime %lld -> %lld", ts_ns(a.st_mtim), ts_ns(b.st_mtim));
    /* Enough subdirectories to land in every shard. */
    char name[64];
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof name, "dt/sub%d", i);
        mkdir(P(name), 0755);
    }
    CHECK("nlink is 2 + subdirectories", stat(P("dt"), &a) == 0 && a.st_nlink == 14, "nlink %lu",
          (unsigned long)a.st_nlink);
    usleep(2000);
    unlink(P("dt/f"));
    CHECK("an unlink moves the mtime", stat(P("dt"), &b) == 0 && ts_ns(b.st_mtim) > ts_ns(a.st_mtim),
          "mtime %lld -> %lld", ts_ns(a.st_mtim), ts_ns(b.st_mtim));
    usleep(2000);
    rename(P("dt/sub0"), P("dt/sub0b"));
    CHECK("a rename inside moves the mtime", stat(P("dt"), &a) == 0 && ts_ns(a.st_mtim) > ts_ns(b.st_mtim),
          "mtime %lld -> %lld", ts_ns(b.st_mtim), ts_ns(a.st_mtim));
    struct stat top;
    stat(P("."), &top);
    rename(P("dt/sub1"), P("sub1moved"));
    rmdir(P("dt/sub2"));
    CHECK("rename out and rmdir take links", stat(P("dt"), &a) == 0 && a.st_nlink == 12,
          "nlink %lu", (unsigned long)a.st_nlink);
    CHECK("the new parent gains a link", stat(P("."), &b) == 0 && b.st_nlink == top.st_nlink + 1,
          "nlink %lu, was %lu", (unsigned long)b.st_nlink, (unsigned long)top.st_nlink);
    /* An explicit time stays as set (tar x, rsync -a), until the next change. */
    struct timespec ts[2] = {{1000000000, 0}, {1000000000, 0}};
    EXPECT_OK("utimensat on a directory", utimensat(AT_FDCWD, P("dt"), ts, 0));
    CHECK("the directory's explicit mtime stays",
          stat(P("dt"), &a) == 0 && a.st_mtim.tv_sec == 1000000000 && a.st_nlink == 12,
          "mtime %lld nlink %lu", (long long)a.st_mtim.tv_sec, (unsigned long)a.st_nlink);
    write_file(P("dt/g"), "g", 1, 0644);
    CHECK("a create after it moves the mtime again",
          stat(P("dt"), &b) == 0 && b.st_mtim.tv_sec > 1000000000, "mtime %lld",
          (long long)b.st_mtim.tv_sec);
    usleep(2000);
    link(P("dt/g"), P("dt/g2"));
    CHECK("a hard link moves the mtime", stat(P("dt"), &a) == 0 && ts_ns(a.st_mtim) > ts_ns(b.st_mtim),
          "mtime %lld -> %lld", ts_ns(b.st_mtim), ts_ns(a.st_mtim));
}

/* ----- a file unlinked or replaced while open -------------------------------------- */

static void open_unlinked(void) {
    write_file(P("u"), "before", 6, 0644);
    int fd = open(P("u"), O_RDWR);
    CHECK("open for the unlink test", fd >= 0, "%s", strerror(errno));
    EXPECT_OK("unlink while open", unlink(P("u")));
    struct stat st;
    CHECK("the name is gone", stat(P("u"), &st) == -1 && errno == ENOENT, "still there");
    CHECK("fstat of the unlinked file: nlink 0", fstat(fd, &st) == 0 && st.st_nlink == 0,
          "nlink %lu", (unsigned long)st.st_nlink);
    char buf[32] = {0};
    CHECK("read through the descriptor", pread(fd, buf, 32, 0) == 6 && memcmp(buf, "before", 6) == 0,
          "got %s", buf);
    CHECK("write through the descriptor", pwrite(fd, "after!", 6, 6) == 6, "%s", strerror(errno));
    memset(buf, 0, sizeof buf);
    CHECK("read back what was written", pread(fd, buf, 32, 0) == 12 &&
                                            memcmp(buf, "beforeafter!", 12) == 0,
          "got %s", buf);
    int fd2 = open(P("u"), O_RDWR | O_CREAT, 0644);
    CHECK("a new file under the old name", fd2 >= 0 && fstat(fd2, &st) == 0 && st.st_size == 0,
          "size %lld", (long long)st.st_size);
    close(fd2);
    close(fd);

    /* rename over a file that is open: the old data stays readable. */
    write_file(P("old"), "old data", 8, 0644);
    write_file(P("new"), "new data", 8, 0644);
    fd = open(P("old"), O_RDONLY);
    EXPECT_OK("rename over an open file", rename(P("new"), P("old")));
    memset(buf, 0, sizeof buf);
    CHECK("the replaced file stays readable", pread(fd, buf, 32, 0) == 8 &&
                                                  memcmp(buf, "old data", 8) == 0,
          "got %s", buf);
    close(fd);
    memset(buf, 0, sizeof buf);
    CHECK("the name holds the new file", read_file(P("old"), buf, 32) == 8 &&
                                             memcmp(buf, "new data", 8) == 0,
          "got %s", buf);
}

/* ----- mmap -------------------------------------------------------------------------- */

static void mmaps(void) {
    size_t len = 256 * 1024;
    char *data = malloc(len);
    for (size_t i = 0; i < len; i++)
        data[i] = (char)(i % 251);
    write_file(P("m"), data, len, 0644);
    int fd = open(P("m"), O_RDWR);
    char *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    CHECK("mmap read", p != MAP_FAILED && memcmp(p, data, len) == 0, "%s",
          p == MAP_FAILED ? strerror(errno) : "content differs");
    if (p != MAP_FAILED)
        munmap(p, len);
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK("mmap shared write", p != MAP_FAILED, "%s", strerror(errno));
    if (p != MAP_FAILED) {
        memcpy(p + 1000, "MAPPED", 6);
        CHECK("msync", msync(p, len, MS_SYNC) == 0, "%s", strerror(errno));
        munmap(p, len);
        char buf[8] = {0};
        int fd2 = open(P("m"), O_RDONLY);
        CHECK("shared write reaches the file", pread(fd2, buf, 6, 1000) == 6 &&
                                                   memcmp(buf, "MAPPED", 6) == 0,
              "got %s", buf);
        close(fd2);
    }
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK("mmap private", p != MAP_FAILED && p[1] == 1, "%s", strerror(errno));
    if (p != MAP_FAILED)
        munmap(p, len);
    close(fd);
    free(data);
}

/* ----- streams: large files, read without the page cache and with the mount's own
 * read-ahead (docs/fuse.md). What was fetched ahead must never hide a write or a
 * truncation made through the mount. */

/* The byte of generation `g` at offset `i`. */
static char pattern(size_t i, int g) {
    return (char)(i * 13 + i / 65536 + g * 101);
}

/* Reads `len` bytes at `off` with read() in pieces of `piece`; checks them against
 * generation `g` of the pattern, except [new_from, new_to), which must be generation
 * `g2`. Returns 1 if they all match. */
static int read_check(int fd, size_t off, size_t len, size_t piece, int g, size_t new_from,
                      size_t new_to, int g2) {
    char *buf = malloc(piece);
    int ok = lseek(fd, off, SEEK_SET) == (off_t)off;
    for (size_t done = 0; ok && done < len;) {
        size_t want = len - done < piece ? len - done : piece;
        ssize_t n = read(fd, buf, want);
        if (n <= 0) {
            ok = 0;
            break;
        }
        for (ssize_t k = 0; k < n; k++) {
            size_t at = off + done + k;
            int gen = at >= new_from && at < new_to ? g2 : g;
            if (buf[k] != pattern(at, gen)) {
                ok = 0;
                break;
            }
        }
        done += n;
    }
    free(buf);
    return ok;
}

static void streams(void) {
    size_t mib = 1 << 20, size = 24 * mib;
    char *data = malloc(size);
    for (size_t i = 0; i < size; i++)
        data[i] = pattern(i, 0);
    CHECK("24 MiB file written", write_file(P("stream"), data, size, 0644) == 0, "%s",
          strerror(errno));
    struct stat st;
    stat(P("stream"), &st);
    int r = open(P("stream"), O_RDONLY);
    CHECK("sequential 1 MiB reads", read_check(r, 0, size, mib, 0, 0, 0, 0), "content differs");
    CHECK("sequential 100000-byte reads", read_check(r, 0, size, 100000, 0, 0, 0, 0),
          "content differs");
    CHECK("sequential 4 KiB reads", read_check(r, 0, 6 * mib, 4096, 0, 0, 0, 0),
          "content differs");
    CHECK("reads of 3 MiB across read-ahead chunks", read_check(r, mib / 2, 20 * mib, 3 * mib, 0, 0, 0, 0),
          "content differs");

    /* A reader well into a stream; a write far ahead of it through another
     * descriptor must show in what it reads next. */
    CHECK("a stream is under way", read_check(r, 0, 3 * mib, mib, 0, 0, 0, 0), "content differs");
    for (size_t i = 8 * mib; i < 9 * mib; i++)
        data[i] = pattern(i, 1);
    int w = open(P("stream"), O_WRONLY);
    CHECK("write ahead of the reader", pwrite(w, data + 8 * mib, mib, 8 * mib) == (ssize_t)mib,
          "%s", strerror(errno));
    CHECK("the reader sees the write", read_check(r, 3 * mib, 9 * mib, mib, 0, 8 * mib, 9 * mib, 1),
          "stale data");
    /* The same through the reader's own descriptor (read-write). */
    int rw = open(P("stream"), O_RDWR);
    CHECK("a read-write stream is under way", read_check(rw, 0, 3 * mib, mib, 0, 8 * mib, 9 * mib, 1),
          "content differs");
    for (size_t i = 4 * mib; i < 5 * mib; i++)
        data[i] = pattern(i, 2);
    CHECK("write ahead through the same descriptor",
          pwrite(rw, data + 4 * mib, mib, 4 * mib) == (ssize_t)mib, "%s", strerror(errno));
    CHECK("its reads see the write", read_check(rw, 3 * mib, 3 * mib, mib, 0, 4 * mib, 5 * mib, 2),
          "stale data");
    close(rw);
    /* A truncation through another descriptor: the reader finds the new end. */
    CHECK("read on to 10 MiB", read_check(r, 9 * mib, mib, mib, 0, 0, 0, 0), "content differs");
    CHECK("truncate to 10.5 MiB", ftruncate(w, 10 * mib + mib / 2) == 0, "%s", strerror(errno));
    char *buf = malloc(mib);
    ssize_t n = read(r, buf, mib);
    CHECK("a read across the new end is short", n == (ssize_t)(mib / 2), "read %zd", n);
    n = read(r, buf, mib);
    CHECK("then the end", n == 0, "read %zd", n);
    close(w);
    /* Mapping a large file opened read-only. */
    lseek(r, 0, SEEK_SET);
    char *p = mmap(NULL, 2 * mib, PROT_READ, MAP_SHARED, r, 0);
    CHECK("mmap of a large read-only file", p != MAP_FAILED && p[5] == pattern(5, 0) &&
                                                p[mib + 7] == pattern(mib + 7, 0),
          "%s", p == MAP_FAILED ? strerror(errno) : "content differs");
    if (p != MAP_FAILED)
        munmap(p, 2 * mib);
    close(r);
    free(buf);
    free(data);
    unlink(P("stream"));
}

/* ----- directories -------------------------------------------------------------------- */

static void listing(void) {
    mkdir(P("many"), 0755);
    int n = 1500;
    char path[PATH_MAX];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/many/f%05d", dir, i);
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        if (fd < 0) {
            fail("create 1500 files", "%s: %s", path, strerror(errno));
            return;
        }
        close(fd);
    }
    pass("create 1500 files");
    DIR *d = opendir(P("many"));
    int count = 0, dots = 0, bad = 0;
    char *seen = calloc(n, 1);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            dots++;
            continue;
        }
        int i;
        if (sscanf(e->d_name, "f%d", &i) != 1 || i < 0 || i >= n || seen[i] ||
            e->d_type != DT_REG)
            bad++;
        else
            seen[i] = 1;
        count++;
    }
    closedir(d);
    free(seen);
    CHECK("readdir lists every entry once, with . and ..", count == n && dots == 2 && bad == 0,
          "count %d dots %d bad %d", count, dots, bad);
    struct stat st;
    CHECK("directory mode", stat(P("many"), &st) == 0 && S_ISDIR(st.st_mode) &&
                                (st.st_mode & 07777) == 0755,
          "mode %o", st.st_mode);
}

static void statfs_(void) {
    struct statvfs s;
    CHECK("statvfs", statvfs(dir, &s) == 0 && s.f_blocks > 0 && s.f_bsize > 0 && s.f_namemax == 255 &&
                         s.f_bavail <= s.f_blocks,
          "blocks %lu bsize %lu namemax %lu", (unsigned long)s.f_blocks, (unsigned long)s.f_bsize,
          (unsigned long)s.f_namemax);
}

/* ----- extended attributes ------------------------------------------------------------- */

static void xattrs(void) {
    const char *f = P("x");
    write_file(f, "x", 1, 0644);
    EXPECT_OK("setxattr user.*", setxattr(f, "user.colour", "blue", 4, 0));
    char buf[512] = {0};
    CHECK("getxattr", getxattr(f, "user.colour", buf, sizeof buf) == 4 && memcmp(buf, "blue", 4) == 0,
          "got %s", buf);
    CHECK("getxattr size query", getxattr(f, "user.colour", NULL, 0) == 4, "wrong size");
    EXPECT_ERR("getxattr into a small buffer is ERANGE", getxattr(f, "user.colour", buf, 2), ERANGE);
    EXPECT_ERR("XATTR_CREATE on an existing attribute is EEXIST",
               setxattr(f, "user.colour", "red", 3, XATTR_CREATE), EEXIST);
    EXPECT_ERR("XATTR_REPLACE of a missing attribute is ENODATA",
               setxattr(f, "user.size", "big", 3, XATTR_REPLACE), ENODATA);
    EXPECT_OK("setxattr with XATTR_REPLACE", setxattr(f, "user.colour", "red", 3, XATTR_REPLACE));
    EXPECT_OK("second attribute", setxattr(f, "user.shape", "round", 5, 0));
    ssize_t n = listxattr(f, buf, sizeof buf);
    int found = 0;
    for (ssize_t i = 0; i < n; i += strlen(buf + i) + 1)
        found += strcmp(buf + i, "user.colour") == 0 || strcmp(buf + i, "user.shape") == 0;
    CHECK("listxattr", found == 2, "listed %zd bytes, found %d", n, found);
    EXPECT_OK("removexattr", removexattr(f, "user.shape"));
    EXPECT_ERR("a removed attribute is ENODATA", getxattr(f, "user.shape", buf, sizeof buf), ENODATA);
    EXPECT_ERR("removexattr of a missing attribute is ENODATA", removexattr(f, "user.shape"), ENODATA);
    errno = 0;
    int r = setxattr(f, "trusted.x", "1", 1, 0);
    CHECK("other namespaces are not supported", r == -1 && (errno == EOPNOTSUPP || errno == EPERM),
          "r=%d %s", r, strerror(errno));
    EXPECT_ERR("security.* get is EOPNOTSUPP", getxattr(f, "security.selinux", buf, sizeof buf),
               EOPNOTSUPP);
    struct stat st;
    CHECK("xattrs leave the size alone", stat(f, &st) == 0 && st.st_size == 1, "size %lld",
          (long long)st.st_size);

    /* The layout: readable on files, settable on directories. */
    memset(buf, 0, sizeof buf);
    n = getxattr(f, "user.pvfs.layout", buf, sizeof buf - 1);
    CHECK("user.pvfs.layout of a file", n > 0 && strstr(buf, "stripe_size=") && strstr(buf, "datafiles="),
          "got %s (%s)", buf, strerror(errno));
    mkdir(P("striped"), 0755);
    const char *spec = "stripe_size=1M stripe_count=1";
    EXPECT_OK("set user.pvfs.layout on a directory", setxattr(P("striped"), "user.pvfs.layout", spec,
                                                              strlen(spec), 0));
    memset(buf, 0, sizeof buf);
    n = getxattr(P("striped"), "user.pvfs.layout", buf, sizeof buf - 1);
    CHECK("directory layout reads back", n > 0 && strstr(buf, "stripe_size=1048576") &&
                                             strstr(buf, "stripe_count=1"),
          "got %s", buf);
    write_file(P("striped/f"), "z", 1, 0644);
    memset(buf, 0, sizeof buf);
    getxattr(P("striped/f"), "user.pvfs.layout", buf, sizeof buf - 1);
    CHECK("new files take the directory's layout", strstr(buf, "stripe_size=1048576 stripe_count=1"),
          "got %s", buf);
    EXPECT_ERR("a bad layout is EINVAL", setxattr(P("striped"), "user.pvfs.layout", "colour=red", 10, 0),
               EINVAL);
    EXPECT_ERR("a file's layout cannot change (EPERM)",
               setxattr(P("striped/f"), "user.pvfs.layout", "stripe_count=4", 14, 0), EPERM);
    EXPECT_OK("remove the directory layout", removexattr(P("striped"), "user.pvfs.layout"));
    EXPECT_ERR("directory without a layout: ENODATA",
               getxattr(P("striped"), "user.pvfs.layout", buf, sizeof buf), ENODATA);
}

/* ----- ownership and permissions ---------------------------------------------------------- */

static void ownership(const char *fixtures) {
    struct stat st;
    char path[PATH_MAX];
    const char *f = P("own");
    write_file(f, "own", 3, 0644);
    if (is_root) {
        EXPECT_OK("root chown to another user", chown(f, 65534, 65534));
        CHECK("chown took", stat(f, &st) == 0 && st.st_uid == 65534 && st.st_gid == 65534,
              "uid %d gid %d", st.st_uid, st.st_gid);
        EXPECT_OK("root chmod of a file it does not own", chmod(f, 06755));
        CHECK("root sets setuid and setgid", stat(f, &st) == 0 && (st.st_mode & 07777) == 06755,
              "mode %o", st.st_mode & 07777);
        int fd = open(f, O_WRONLY);
        write(fd, "x", 1);
        close(fd);
        CHECK("a write by root keeps setuid (CAP_FSETID)", stat(f, &st) == 0 &&
                                                               (st.st_mode & 07777) == 06755,
              "mode %o", st.st_mode & 07777);
        /* A set-group-ID directory gives its group to new files and its bit to
         * new directories. */
        mkdir(P("sgid"), 0755);
        chown(P("sgid"), 0, 65534);
        chmod(P("sgid"), 02775);
        write_file(P("sgid/f"), "f", 1, 0644);
        mkdir(P("sgid/d"), 0755);
        CHECK("setgid directory: group of new file", stat(P("sgid/f"), &st) == 0 && st.st_gid == 65534,
              "gid %d", st.st_gid);
        CHECK("setgid directory: new directory inherits group and bit",
              stat(P("sgid/d"), &st) == 0 && st.st_gid == 65534 && (st.st_mode & 02000),
              "gid %d mode %o", st.st_gid, st.st_mode);
        return;
    }
    uid_t me = geteuid();
    gid_t mygid = getegid();
    EXPECT_OK("owner chmod", chmod(f, 0600));
    EXPECT_ERR("chown to another user is EPERM", chown(f, 0, -1), EPERM);
    EXPECT_OK("chown to oneself", chown(f, me, mygid));
    EXPECT_OK("owner sets setuid", chmod(f, 04755));
    int fd = open(f, O_WRONLY);
    write(fd, "x", 1);
    close(fd);
    CHECK("a write clears setuid", stat(f, &st) == 0 && (st.st_mode & 06000) == 0, "mode %o",
          st.st_mode & 07777);
    EXPECT_OK("owner sets setuid again", chmod(f, 04755));
    EXPECT_OK("chown by the owner (group unchanged)", chown(f, -1, mygid));
    CHECK("chown by non-root clears setuid", stat(f, &st) == 0 && (st.st_mode & 06000) == 0,
          "mode %o", st.st_mode & 07777);
    EXPECT_OK("mode 0400", chmod(f, 0400));
    EXPECT_ERR("write to a read-only file is EACCES", open(f, O_WRONLY), EACCES);
    EXPECT_OK("mode 0000", chmod(f, 0000));
    EXPECT_ERR("read of a 0000 file is EACCES", open(f, O_RDONLY), EACCES);
    chmod(f, 0644);

    snprintf(path, sizeof path, "%s/rootfile", fixtures);
    EXPECT_ERR("chmod of someone else's file is EPERM", chmod(path, 0777), EPERM);
    EXPECT_ERR("chown of someone else's file is EPERM", chown(path, me, -1), EPERM);
    struct timespec ts[2] = {{1000, 0}, {1000, 0}};
    EXPECT_ERR("explicit utimes on someone else's file is EPERM", utimensat(AT_FDCWD, path, ts, 0),
               EPERM);
    EXPECT_OK("utimes(NULL) with write permission", utimensat(AT_FDCWD, path, NULL, 0));
    EXPECT_OK("write to a 0666 file of someone else", (fd = open(path, O_WRONLY)));
    if (fd >= 0) {
        CHECK("write works", pwrite(fd, "user", 4, 0) == 4, "%s", strerror(errno));
        EXPECT_OK("ftruncate of someone else's 0666 file", ftruncate(fd, 4));
        close(fd);
    }
    snprintf(path, sizeof path, "%s/suidfile", fixtures);
    fd = open(path, O_WRONLY);
    CHECK("write to someone else's setuid 06777 file", fd >= 0 && pwrite(fd, "u", 1, 0) == 1,
          "%s", strerror(errno));
    if (fd >= 0)
        close(fd);
    CHECK("that write cleared setuid and setgid", stat(path, &st) == 0 &&
                                                      (st.st_mode & 07777) == 0777,
          "mode %o", st.st_mode & 07777);
    snprintf(path, sizeof path, "%s/rootfile_ro", fixtures);
    EXPECT_ERR("write to someone else's 0644 file is EACCES", open(path, O_WRONLY), EACCES);
    EXPECT_ERR("truncate of someone else's 0644 file is EACCES", truncate(path, 0), EACCES);
    snprintf(path, sizeof path, "%s/ro_dir/new", fixtures);
    EXPECT_ERR("create in a read-only directory is EACCES", open(path, O_CREAT | O_WRONLY, 0644),
               EACCES);
    EXPECT_ERR("mkdir in a read-only directory is EACCES", mkdir(path, 0755), EACCES);
    snprintf(path, sizeof path, "%s/sticky/victim", fixtures);
    EXPECT_ERR("unlink of someone else's file in a sticky directory is EPERM", unlink(path), EPERM);
    char to[PATH_MAX];
    snprintf(to, sizeof to, "%s/sticky/renamed", fixtures);
    EXPECT_ERR("rename of someone else's file in a sticky directory is EPERM", rename(path, to),
               EPERM);
    snprintf(path, sizeof path, "%s/sticky/mine", fixtures);
    write_file(path, "m", 1, 0644);
    EXPECT_OK("unlink of one's own file in a sticky directory", unlink(path));
    EXPECT_OK("mode 0700 on a directory", chmod(P("."), 0700));
    EXPECT_OK("mode 0755 again", chmod(P("."), 0755));
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DIR FIXTURES\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    is_root = geteuid() == 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    umask(022);
    printf("# semantics as uid %d in %s\n", (int)geteuid(), dir);
    files();
    names();
    symlinks();
    renames();
    hard_links(argv[2]);
    dir_times();
    open_unlinked();
    mmaps();
    streams();
    listing();
    statfs_();
    xattrs();
    ownership(argv[2]);
    printf("# %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
