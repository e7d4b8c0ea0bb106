/*
 * fallocate(2), posix_fallocate(3) and st_blocks, checked one by one.
 *
 *   alloc DIR [pvfs]
 *
 * DIR is an empty directory: on a local file system (the reference: every check
 * must hold there too), on a pvfs FUSE mount, or under libpvfs_preload.so. With
 * "pvfs", the checks of what pvfs does where file systems differ are added:
 * collapsing and inserting ranges are EOPNOTSUPP, a directory counts 8 blocks.
 * ZERO_RANGE is checked where the file system has it (EOPNOTSUPP is accepted:
 * tmpfs lacks it). Prints one line per check ("ok NAME" or "FAIL NAME: why"), then
 * "# N checks, M failed", and exits 1 if any check failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;
static int checks;
static const char *dir;

static void result(int ok, const char *name, const char *fmt, ...) {
    checks++;
    if (ok) {
        printf("ok   %s\n", name);
        return;
    }
    failures++;
    va_list ap;
    printf("FAIL %s: ", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf(" (errno %d %s)\n", errno, strerror(errno));
}

#define CHECK(name, cond, ...) result((cond), (name), __VA_ARGS__)

static const char *P(const char *rel) {
    static char bufs[4][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", dir, rel);
    return b;
}

static struct stat st_of(int fd) {
    struct stat st;
    memset(&st, 0, sizeof st);
    if (fstat(fd, &st) != 0)
        result(0, "fstat", "fstat failed");
    return st;
}

/* Whether bytes [off, off + len) of fd all equal c. */
static int all_are(int fd, off_t off, size_t len, unsigned char c) {
    static unsigned char buf[1 << 16];
    while (len > 0) {
        size_t n = len < sizeof buf ? len : sizeof buf;
        ssize_t got = pread(fd, buf, n, off);
        if (got != (ssize_t)n)
            return 0;
        for (size_t i = 0; i < n; i++)
            if (buf[i] != c)
                return 0;
        off += n;
        len -= n;
    }
    return 1;
}

static void fill(int fd, off_t off, size_t len, unsigned char c) {
    static unsigned char buf[1 << 16];
    memset(buf, c, sizeof buf);
    while (len > 0) {
        size_t n = len < sizeof buf ? len : sizeof buf;
        if (pwrite(fd, buf, n, off) != (ssize_t)n) {
            result(0, "fill", "pwrite at %lld failed", (long long)off);
            return;
        }
        off += n;
        len -= n;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: alloc DIR [pvfs]\n");
        return 2;
    }
    dir = argv[1];
    int pvfs = argc > 2 && strcmp(argv[2], "pvfs") == 0;

    int fd = open(P("f"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK("open", fd >= 0, "open %s", P("f"));
    if (fd < 0)
        return 1;

    /* Mode 0 on an empty file: it grows, the space is there, zeros read back. */
    CHECK("allocate", fallocate(fd, 0, 0, 300000) == 0, "fallocate 0..300000");
    struct stat st = st_of(fd);
    CHECK("allocate grows", st.st_size == 300000, "size %lld", (long long)st.st_size);
    CHECK("allocate takes space", st.st_blocks * 512 >= 300000, "%lld blocks",
          (long long)st.st_blocks);
    CHECK("allocated reads zeros", all_are(fd, 0, 300000, 0), "non-zero bytes");

    /* Past the end: the file grows to exactly offset + len. */
    CHECK("allocate past the end", fallocate(fd, 0, 1000000, 100) == 0, "fallocate");
    st = st_of(fd);
    CHECK("grows to its end", st.st_size == 1000100, "size %lld", (long long)st.st_size);
    char c = 1;
    CHECK("nothing past the end", pread(fd, &c, 1, 1000100) == 0, "a byte past the end");

    /* KEEP_SIZE: space, no growth. */
    blkcnt_t before = st.st_blocks;
    CHECK("keep size", fallocate(fd, FALLOC_FL_KEEP_SIZE, 2 << 20, 1 << 20) == 0,
          "fallocate KEEP_SIZE");
    st = st_of(fd);
    CHECK("keep size keeps it", st.st_size == 1000100, "size %lld", (long long)st.st_size);
    CHECK("keep size takes space", st.st_blocks >= before + (1 << 20) / 512,
          "%lld -> %lld blocks", (long long)before, (long long)st.st_blocks);

    /* A punched hole reads as zeros, the rest as written, and frees its space. */
    fill(fd, 0, 1000100, 0xab);
    before = st_of(fd).st_blocks;
    CHECK("punch", fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100000, 200000) == 0,
          "fallocate PUNCH_HOLE");
    st = st_of(fd);
    CHECK("punch keeps the size", st.st_size == 1000100, "size %lld", (long long)st.st_size);
    CHECK("punched reads zeros", all_are(fd, 100000, 200000, 0), "non-zero in the hole");
    CHECK("around the hole intact",
          all_are(fd, 0, 100000, 0xab) && all_are(fd, 300000, 700100, 0xab),
          "bytes around the hole changed");
    CHECK("punch frees space", (before - st.st_blocks) * 512 >= 200000 - 8 * 4096,
          "%lld -> %lld blocks", (long long)before, (long long)st.st_blocks);

    /* ZERO_RANGE, where the file system has it. */
    errno = 0;
    int z = fallocate(fd, FALLOC_FL_ZERO_RANGE, 50000, 10000);
    if (z == 0) {
        CHECK("zero range zeroes", all_are(fd, 50000, 10000, 0) && all_are(fd, 40000, 10000, 0xab) &&
                                       all_are(fd, 60000, 40000, 0xab),
              "zeroed range");
        CHECK("zero range past the end", fallocate(fd, FALLOC_FL_ZERO_RANGE, 3000000, 1000) == 0,
              "fallocate ZERO_RANGE past the end");
        st = st_of(fd);
        CHECK("zero range grows", st.st_size == 3001000, "size %lld", (long long)st.st_size);
        CHECK("zero range keep size",
              fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 3000500, 10000) == 0 &&
                  st_of(fd).st_size == 3001000,
              "ZERO_RANGE | KEEP_SIZE");
    } else {
        CHECK("zero range unsupported", errno == EOPNOTSUPP, "ZERO_RANGE failed otherwise");
    }

    /* Bad arguments, in the kernel's order. */
    errno = 0;
    CHECK("empty range", fallocate(fd, 0, 0, 0) == -1 && errno == EINVAL, "len 0");
    errno = 0;
    CHECK("negative offset", fallocate(fd, 0, -1, 10) == -1 && errno == EINVAL, "offset -1");
    errno = 0;
    CHECK("punch without keep size", fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 4096) == -1 && errno == EOPNOTSUPP,
          "PUNCH_HOLE alone");
    errno = 0;
    CHECK("punch and zero", fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, 4096) == -1 &&
                                errno == EOPNOTSUPP,
          "PUNCH_HOLE | ZERO_RANGE");
    errno = 0;
    CHECK("unknown mode", fallocate(fd, 0x4000, 0, 4096) == -1 && errno == EOPNOTSUPP, "mode 0x4000");
    if (pvfs) {
        /* They would move bytes between data servers. */
        errno = 0;
        CHECK("collapse", fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 0, 65536) == -1 && errno == EOPNOTSUPP,
              "COLLAPSE_RANGE");
        errno = 0;
        CHECK("insert", fallocate(fd, FALLOC_FL_INSERT_RANGE, 0, 65536) == -1 && errno == EOPNOTSUPP,
              "INSERT_RANGE");
    }
    int ro = open(P("f"), O_RDONLY);
    errno = 0;
    CHECK("read-only descriptor", fallocate(ro, 0, 0, 4096) == -1 && errno == EBADF, "O_RDONLY");
    errno = 0;
    CHECK("posix_fallocate read-only", posix_fallocate(ro, 0, 4096) == EBADF, "O_RDONLY");
    close(ro);

    /* posix_fallocate: mode 0, the error as its return value. */
    CHECK("posix_fallocate", posix_fallocate(fd, 6000000, 10) == 0, "posix_fallocate");
    st = st_of(fd);
    CHECK("posix_fallocate grows", st.st_size == 6000010, "size %lld", (long long)st.st_size);
    CHECK("posix_fallocate bad", posix_fallocate(fd, -1, 10) == EINVAL, "offset -1");
    CHECK("posix_fallocate within", posix_fallocate(fd, 0, 10) == 0 && st_of(fd).st_size == 6000010,
          "an allocation inside the file");
    close(fd);

    /* A sparse file takes the space of what was written. */
    fd = open(P("sparse"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    char hundred[100];
    memset(hundred, 7, sizeof hundred);
    CHECK("sparse write", pwrite(fd, hundred, 100, 300000) == 100, "pwrite");
    st = st_of(fd);
    CHECK("sparse size", st.st_size == 300100, "size %lld", (long long)st.st_size);
    CHECK("sparse blocks", st.st_blocks > 0 && st.st_blocks * 512 <= 16384, "%lld blocks",
          (long long)st.st_blocks);
    CHECK("sparse hole zeros", all_are(fd, 0, 300000, 0) && all_are(fd, 300000, 100, 7), "bytes");
    CHECK("truncated up takes nothing", ftruncate(fd, 64 << 20) == 0 &&
                                            st_of(fd).st_blocks == st.st_blocks,
          "ftruncate up");
    close(fd);
    struct stat lst;
    CHECK("stat blocks", stat(P("sparse"), &lst) == 0 && lst.st_blocks == st.st_blocks, "stat");

    /* Directories and symlinks. */
    CHECK("mkdir", mkdir(P("d"), 0755) == 0, "mkdir");
    fd = open(P("d"), O_RDONLY | O_DIRECTORY);
    errno = 0;
    CHECK("directory", fallocate(fd, 0, 0, 4096) == -1 && errno == EBADF, "a directory");
    close(fd);
    CHECK("symlink", symlink("sparse", P("l")) == 0 && lstat(P("l"), &lst) == 0 && lst.st_blocks == 0,
          "a short symlink takes no blocks");
    if (pvfs)
        CHECK("directory blocks", stat(P("d"), &lst) == 0 && lst.st_blocks == 8, "%lld blocks",
              (long long)lst.st_blocks);

    printf("# %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
