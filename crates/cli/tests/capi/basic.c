/* The native API of libpvfs and its error cases: init/finalize, open flags, read,
 * write, pread, pwrite, readv, writev, lseek, fsync, ftruncate, stat/fstat/lstat,
 * mkdir, rmdir, unlink, rename, symlink, readlink, opendir/readdir/closedir, statfs,
 * truncate, chmod, hard links, directory times and link counts, layout hints and
 * the partitioned-file interface.
 *
 * Usage: basic BASE   (BASE: a pvfs directory to create; PVFS_CONFIG names the fs) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static char p1[512], p2[512], p3[512];

/* Whether time a is later than time b. */
static int later(struct timespec a, struct timespec b) {
    return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
}

static void before_init(const char *base) {
    CHECK_ERR(pvfs_open(base, O_RDONLY, 0), ENXIO);
    CHECK_ERR(pvfs_finalize(), ENXIO);
    CHECK(pvfs_requests_sent() == 0);
    CHECK_ERR(pvfs_init("/nonexistent/pvfs.toml"), ENOENT);
    CHECK(strlen(pvfs_last_error()) > 0);
}

static void init_twice(void) {
    REQUIRE(pvfs_init(NULL) == 0);
    CHECK_OK(pvfs_init(NULL)); /* counted */
    CHECK_ERR(pvfs_init("/etc/hostname"), EBUSY);
    CHECK_OK(pvfs_finalize()); /* still initialized */
    struct pvfs_statfs fs;
    CHECK_OK(pvfs_statfs(&fs));
    CHECK(fs.f_servers == 4);
    CHECK(fs.f_servers_up == 4);
    CHECK(fs.f_total_bytes > 0 && fs.f_free_bytes <= fs.f_total_bytes);
    CHECK(fs.f_namemax == 255);
    CHECK(fs.f_stripe_size > 0 && fs.f_stripe_count == 4);
    CHECK_ERR(pvfs_statfs(NULL), EFAULT);
}

static void namespace_ops(const char *base) {
    CHECK_OK(pvfs_mkdir(base, 0755));
    CHECK_ERR(pvfs_mkdir(base, 0755), EEXIST);
    CHECK_ERR(pvfs_mkdir(join(p1, sizeof p1, base, "no/such"), 0755), ENOENT);
    CHECK_ERR(pvfs_mkdir(NULL, 0755), EFAULT);
    CHECK_ERR(pvfs_open(join(p1, sizeof p1, base, "missing"), O_RDONLY, 0), ENOENT);
    CHECK_ERR(pvfs_open(NULL, O_RDONLY, 0), EFAULT);
    CHECK_ERR(pvfs_open("", O_RDONLY, 0), ENOENT);
    CHECK_ERR(pvfs_open(base, O_RDONLY | O_WRONLY | O_RDWR, 0), EINVAL);

    struct stat st;
    CHECK_OK(pvfs_stat(base, &st));
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == (0755 & ~022) || (st.st_mode & 0777) == 0755);
    CHECK_ERR(pvfs_stat(base, NULL), EFAULT);

    /* A directory opens read-only; data calls on it fail. */
    int d = pvfs_open(base, O_RDONLY, 0);
    CHECK(d >= 0);
    char c;
    CHECK_ERR(pvfs_read(d, &c, 1), EISDIR);
    CHECK_ERR(pvfs_write(d, &c, 1), EBADF);
    CHECK_ERR(pvfs_ftruncate(d, 0), EINVAL);
    CHECK_OK(pvfs_fstat(d, &st));
    CHECK(S_ISDIR(st.st_mode));
    struct pvfs_layout_hint lh;
    CHECK_ERR(pvfs_get_layout(d, &lh), EISDIR);
    CHECK_ERR(pvfs_set_partition(d, 0, 1, 1), EISDIR);
    CHECK_OK(pvfs_fsync(d)); /* a directory: syncs the metadata servers */
    CHECK_OK(pvfs_close(d));
    CHECK_ERR(pvfs_fsync(d), EBADF);
    CHECK_ERR(pvfs_lseek(d, 0, SEEK_SET), EBADF);
    CHECK_ERR(pvfs_fstat(d, &st), EBADF);
    CHECK_ERR(pvfs_stat(NULL, &st), EFAULT);
    CHECK_ERR(pvfs_open(base, O_WRONLY, 0), EISDIR);
    CHECK_ERR(pvfs_open(base, O_RDWR | O_CREAT, 0644), EISDIR);
    d = pvfs_open(base, O_RDONLY | O_DIRECTORY, 0);
    CHECK(d >= 0);
    CHECK_OK(pvfs_close(d));

    /* Files, symlinks, rename, unlink, rmdir. */
    join(p1, sizeof p1, base, "f");
    int fd = pvfs_open(p1, O_CREAT | O_EXCL | O_RDWR, 0640);
    REQUIRE(fd >= 0);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC); /* a real kernel descriptor */
    CHECK_ERR(pvfs_open(p1, O_CREAT | O_EXCL | O_RDWR, 0640), EEXIST);
    CHECK_ERR(pvfs_open(p1, O_RDONLY | O_DIRECTORY, 0), ENOTDIR);
    CHECK_ERR(pvfs_open(join(p2, sizeof p2, p1, "x"), O_RDONLY, 0), ENOTDIR);
    CHECK(pvfs_write(fd, "hello", 5) == 5);
    CHECK_OK(pvfs_close(fd));
    CHECK_ERR(pvfs_close(fd), EBADF);
    CHECK_ERR(pvfs_close(0), EBADF); /* not a pvfs descriptor */

    join(p2, sizeof p2, base, "link");
    CHECK_OK(pvfs_symlink("f", p2));
    CHECK_ERR(pvfs_symlink("f", p2), EEXIST);
    char buf[64];
    CHECK(pvfs_readlink(p2, buf, sizeof buf) == 1 && buf[0] == 'f');
    CHECK(pvfs_readlink(p2, buf, 1) == 1);
    CHECK_ERR(pvfs_readlink(p1, buf, sizeof buf), EINVAL);
    CHECK_ERR(pvfs_readlink(p2, buf, 0), EINVAL);
    struct stat ls;
    CHECK_OK(pvfs_lstat(p2, &ls));
    CHECK(S_ISLNK(ls.st_mode) && ls.st_size == 1);
    CHECK_OK(pvfs_stat(p2, &st)); /* follows the link (relative target) */
    CHECK(S_ISREG(st.st_mode) && st.st_size == 5);
    struct stat fs_;
    CHECK_OK(pvfs_stat(p1, &fs_));
    CHECK(fs_.st_ino == st.st_ino && ls.st_ino != st.st_ino);
    CHECK((fs_.st_mode & 0777) == (0640 & ~022));
    CHECK(fs_.st_nlink == 1 && fs_.st_uid == geteuid());
    /* What the data server's disk allocates for 5 bytes: one of its blocks. */
    CHECK(fs_.st_blocks >= 1 && fs_.st_blocks * 512 <= 65536);

    join(p3, sizeof p3, base, "g");
    CHECK_OK(pvfs_rename(p1, p3));
    CHECK_ERR(pvfs_stat(p1, &st), ENOENT);
    CHECK_OK(pvfs_stat(p3, &st));
    CHECK(st.st_size == 5 && st.st_ino == fs_.st_ino);
    CHECK_ERR(pvfs_stat(p2, &st), ENOENT); /* dangling now */
    CHECK_ERR(pvfs_rename(p1, p3), ENOENT);

    CHECK_OK(pvfs_chmod(p3, 0600));
    CHECK_OK(pvfs_stat(p3, &st));
    CHECK((st.st_mode & 07777) == 0600);
    CHECK_OK(pvfs_truncate(p3, 3));
    CHECK_OK(pvfs_stat(p3, &st));
    CHECK(st.st_size == 3);
    CHECK_ERR(pvfs_truncate(p3, -1), EINVAL);

    join(p1, sizeof p1, base, "sub");
    CHECK_OK(pvfs_mkdir(p1, 0700));
    CHECK_OK(pvfs_rename(p3, join(p2, sizeof p2, p1, "g2")));
    CHECK_ERR(pvfs_rmdir(p1), ENOTEMPTY);
    CHECK_ERR(pvfs_unlink(p1), EISDIR);
    CHECK_OK(pvfs_unlink(p2));
    CHECK_ERR(pvfs_unlink(p2), ENOENT);
    CHECK_OK(pvfs_rmdir(p1));
    CHECK_ERR(pvfs_rmdir(p1), ENOENT);
    CHECK_OK(pvfs_unlink(join(p2, sizeof p2, base, "link")));

    /* Hard links, across directories; a directory's link count. */
    char p4[4096];
    join(p1, sizeof p1, base, "h");
    fd = pvfs_creat(p1, 0644);
    REQUIRE(fd >= 0);
    CHECK(pvfs_write(fd, "link", 4) == 4);
    CHECK_OK(pvfs_close(fd));
    join(p2, sizeof p2, base, "hsub");
    CHECK_OK(pvfs_mkdir(p2, 0755));
    join(p3, sizeof p3, p2, "h2");
    CHECK_OK(pvfs_link(p1, p3));
    CHECK_ERR(pvfs_link(p1, p3), EEXIST);
    CHECK_ERR(pvfs_link(p2, join(p4, sizeof p4, base, "dirlink")), EPERM);
    CHECK_ERR(pvfs_link(join(p4, sizeof p4, base, "missing"), p3), ENOENT);
    CHECK_ERR(pvfs_link(NULL, p3), EFAULT);
    CHECK_OK(pvfs_stat(p1, &st));
    CHECK_OK(pvfs_stat(p3, &fs_));
    CHECK(st.st_ino == fs_.st_ino && st.st_nlink == 2 && fs_.st_nlink == 2);
    CHECK_OK(pvfs_unlink(p1));
    CHECK_OK(pvfs_stat(p3, &st));
    CHECK(st.st_nlink == 1 && st.st_size == 4);
    CHECK_OK(pvfs_mkdir(join(p4, sizeof p4, p2, "d1"), 0755));
    CHECK_OK(pvfs_mkdir(join(p4, sizeof p4, p2, "d2"), 0755));
    CHECK_OK(pvfs_stat(p2, &st));
    CHECK(st.st_nlink == 4);
    /* A directory's mtime and ctime move with each entry removed (or added). */
    struct stat was = st;
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    CHECK_OK(pvfs_rmdir(join(p4, sizeof p4, p2, "d1")));
    CHECK_OK(pvfs_stat(p2, &st));
    CHECK(st.st_nlink == 3);
    CHECK(later(st.st_mtim, was.st_mtim) && later(st.st_ctim, was.st_ctim));
    was = st;
    nanosleep(&pause, NULL);
    CHECK_OK(pvfs_mkdir(join(p4, sizeof p4, p2, "d3"), 0755));
    CHECK_OK(pvfs_stat(p2, &st));
    CHECK(st.st_nlink == 4 && later(st.st_mtim, was.st_mtim));
    CHECK_OK(pvfs_rmdir(p4));
    CHECK_OK(pvfs_rmdir(join(p4, sizeof p4, p2, "d2")));
    CHECK_OK(pvfs_unlink(p3));
    CHECK_OK(pvfs_rmdir(p2));
}

static void io_ops(const char *base) {
    enum { N = 1 << 20 };
    unsigned char *w = malloc(N), *r = malloc(N);
    REQUIRE(w && r);
    for (size_t i = 0; i < N; i++) w[i] = pat(i, 1);

    join(p1, sizeof p1, base, "data");
    int fd = pvfs_creat(p1, 0644);
    REQUIRE(fd >= 0);
    CHECK_ERR(pvfs_read(fd, r, 10), EBADF); /* creat is write-only */
    CHECK(pvfs_write(fd, w, N) == N);
    CHECK(pvfs_lseek(fd, 0, SEEK_CUR) == N);
    CHECK(pvfs_lseek(fd, 0, SEEK_END) == N);
    CHECK(pvfs_lseek(fd, -10, SEEK_END) == N - 10);
    CHECK_ERR(pvfs_lseek(fd, -1, SEEK_SET), EINVAL);
    CHECK_ERR(pvfs_lseek(fd, 0, 42), EINVAL);
    CHECK_ERR(pvfs_write(fd, NULL, 10), EFAULT);
    CHECK(pvfs_write(fd, w, 0) == 0);
    CHECK_OK(pvfs_fsync(fd));
    CHECK_OK(pvfs_close(fd));

    fd = pvfs_open(p1, O_RDONLY, 0);
    REQUIRE(fd >= 0);
    CHECK_ERR(pvfs_write(fd, w, 1), EBADF);
    CHECK_ERR(pvfs_ftruncate(fd, 0), EINVAL);
    memset(r, 0, N);
    CHECK(pvfs_read(fd, r, N) == N);
    CHECK(memcmp(r, w, N) == 0);
    CHECK(pvfs_read(fd, r, N) == 0); /* end of file */
    CHECK(pvfs_pread(fd, r, 100, N - 50) == 50);
    CHECK(memcmp(r, w + N - 50, 50) == 0);
    CHECK(pvfs_lseek(fd, 0, SEEK_CUR) == N); /* pread leaves the position */
    CHECK_ERR(pvfs_pread(fd, r, 1, -1), EINVAL);
    CHECK_ERR(pvfs_read(fd, NULL, 1), EFAULT);
    CHECK_ERR(pvfs_read(9999, r, 1), EBADF);

    struct stat st;
    CHECK_OK(pvfs_fstat(fd, &st));
    CHECK(S_ISREG(st.st_mode) && st.st_size == N);
    CHECK(st.st_blocks == N / 512);
    struct pvfs_statfs sfs;
    CHECK_OK(pvfs_statfs(&sfs));
    CHECK((uint64_t)st.st_blksize == sfs.f_stripe_size);
    CHECK_OK(pvfs_close(fd));

    /* pwrite, O_RDWR, O_APPEND, O_TRUNC, ftruncate. */
    fd = pvfs_open(p1, O_RDWR, 0);
    REQUIRE(fd >= 0);
    CHECK(pvfs_pwrite(fd, "XYZ", 3, 1000) == 3);
    CHECK(pvfs_lseek(fd, 0, SEEK_CUR) == 0);
    CHECK(pvfs_pread(fd, r, 3, 1000) == 3 && memcmp(r, "XYZ", 3) == 0);
    CHECK(pvfs_pwrite(fd, "end", 3, 2 * N) == 3); /* leaves a hole */
    CHECK_OK(pvfs_fstat(fd, &st));
    CHECK(st.st_size == 2 * N + 3);
    CHECK(pvfs_pread(fd, r, 10, N + 5) == 10);
    CHECK(r[0] == 0 && r[9] == 0); /* holes read as zeros */
    CHECK_OK(pvfs_ftruncate(fd, 100));
    CHECK_ERR(pvfs_ftruncate(fd, -1), EINVAL);
    CHECK_OK(pvfs_fstat(fd, &st));
    CHECK(st.st_size == 100);
    CHECK_OK(pvfs_close(fd));

    fd = pvfs_open(p1, O_WRONLY | O_APPEND, 0);
    REQUIRE(fd >= 0);
    CHECK(pvfs_write(fd, "tail", 4) == 4);
    CHECK(pvfs_lseek(fd, 0, SEEK_CUR) == 104);
    CHECK(pvfs_write(fd, "more", 4) == 4);
    CHECK_OK(pvfs_close(fd));
    CHECK_OK(pvfs_stat(p1, &st));
    CHECK(st.st_size == 108);
    fd = pvfs_open(p1, O_RDONLY, 0);
    CHECK(pvfs_pread(fd, r, 8, 100) == 8 && memcmp(r, "tailmore", 8) == 0);
    CHECK_OK(pvfs_close(fd));

    fd = pvfs_open(p1, O_RDWR | O_TRUNC, 0);
    REQUIRE(fd >= 0);
    CHECK_OK(pvfs_fstat(fd, &st));
    CHECK(st.st_size == 0);

    /* writev / readv: memory vectors against contiguous file bytes. */
    struct iovec wv[3] = {{w, 10}, {w + 100, 0}, {w + 200, 5000}};
    CHECK(pvfs_writev(fd, wv, 3) == 5010);
    CHECK(pvfs_lseek(fd, 0, SEEK_SET) == 0);
    unsigned char a[7], b[6000];
    struct iovec rv[2] = {{a, sizeof a}, {b, sizeof b}};
    CHECK(pvfs_readv(fd, rv, 2) == 5010);
    CHECK(memcmp(a, w, 7) == 0 && memcmp(b, w + 7, 3) == 0 && memcmp(b + 3, w + 200, 5000) == 0);
    CHECK(pvfs_pwritev(fd, wv, 3, 10000) == 5010);
    CHECK(pvfs_preadv(fd, rv, 2, 10000) == 5010);
    CHECK(memcmp(a, w, 7) == 0 && memcmp(b + 3, w + 200, 5000) == 0);
    CHECK_ERR(pvfs_writev(fd, NULL, 1), EFAULT);
    CHECK_ERR(pvfs_writev(fd, wv, -1), EINVAL);
    CHECK_ERR(pvfs_readv(fd, rv, 5000), EINVAL);
    CHECK_OK(pvfs_close(fd));
    CHECK_OK(pvfs_unlink(p1));
    free(w);
    free(r);
}

static void layout_and_partition(const char *base) {
    struct pvfs_layout_hint h = {.stripe_size = 4096, .stripe_count = 2, .first_server = 1};
    join(p1, sizeof p1, base, "laid");
    int fd = pvfs_open_layout(p1, O_CREAT | O_RDWR, 0644, &h);
    REQUIRE(fd >= 0);
    struct pvfs_layout_hint got;
    CHECK_OK(pvfs_get_layout(fd, &got));
    CHECK(got.stripe_size == 4096 && got.stripe_count == 2 && got.first_server == 1);
    CHECK_ERR(pvfs_get_layout(fd, NULL), EFAULT);
    struct stat st;
    CHECK_OK(pvfs_fstat(fd, &st));
    CHECK(st.st_blksize == 4096);

    /* 40 bytes "0123456789" x 4; partition: 3 bytes every 10, from byte 2. */
    char text[41];
    for (int i = 0; i < 40; i++) text[i] = (char)('0' + i % 10);
    CHECK(pvfs_write(fd, text, 40) == 40);
    CHECK_ERR(pvfs_set_partition(fd, 2, 5, 3), EINVAL);
    CHECK_ERR(pvfs_set_partition(fd, -1, 3, 10), EINVAL);
    CHECK_OK(pvfs_set_partition(fd, 2, 3, 10));
    CHECK(pvfs_lseek(fd, 0, SEEK_CUR) == 0);
    char r[64] = {0};
    CHECK(pvfs_read(fd, r, sizeof r) == 12);
    CHECK(memcmp(r, "234234234234", 12) == 0);
    CHECK(pvfs_lseek(fd, 0, SEEK_END) == 12);
    CHECK(pvfs_lseek(fd, 4, SEEK_SET) == 4);
    CHECK(pvfs_write(fd, "ab", 2) == 2); /* partition bytes 4, 5 = file bytes 13, 14 */
    CHECK(pvfs_pread(fd, r, 3, 3) == 3 && memcmp(r, "2ab", 3) == 0);
    CHECK(pvfs_pwrite(fd, "Z", 1, 12) == 1); /* partition byte 12 = file byte 42 */
    CHECK_OK(pvfs_set_partition(fd, 0, 0, 0)); /* cleared */
    CHECK(pvfs_lseek(fd, 0, SEEK_END) == 43);
    CHECK(pvfs_pread(fd, r, 16, 0) == 16);
    CHECK(memcmp(r, "0123456789012ab5", 16) == 0);
    CHECK(pvfs_pread(fd, r, 1, 42) == 1 && r[0] == 'Z');
    CHECK_OK(pvfs_close(fd));

    /* Hints are ignored for an existing file; invalid hints are refused. */
    h.stripe_size = 65536;
    fd = pvfs_open_layout(p1, O_CREAT | O_RDWR, 0644, &h);
    CHECK(fd >= 0);
    CHECK_OK(pvfs_get_layout(fd, &got));
    CHECK(got.stripe_size == 4096);
    CHECK_OK(pvfs_close(fd));
    h.stripe_size = 100; /* below the minimum */
    CHECK(pvfs_open_layout(join(p2, sizeof p2, base, "bad"), O_CREAT | O_RDWR, 0644, &h) == -1);
    CHECK(errno == EINVAL);
    CHECK_OK(pvfs_unlink(p1));
}

static void listing(const char *base) {
    char dir[512];
    join(dir, sizeof dir, base, "list");
    CHECK_OK(pvfs_mkdir(dir, 0755));
    for (int i = 0; i < 50; i++) {
        char name[64];
        snprintf(name, sizeof name, "e%02d", i);
        int fd = pvfs_creat(join(p1, sizeof p1, dir, name), 0644);
        CHECK(fd >= 0);
        CHECK_OK(pvfs_close(fd));
    }
    CHECK_OK(pvfs_mkdir(join(p1, sizeof p1, dir, "subdir"), 0755));
    CHECK_OK(pvfs_symlink("e00", join(p1, sizeof p1, dir, "sym")));
    PVFS_DIR *d = pvfs_opendir(dir);
    REQUIRE(d != NULL);
    CHECK(pvfs_dirfd(d) >= 0);
    int seen[50] = {0}, files = 0, dirs = 0, links = 0;
    struct pvfs_dirent *e;
    while ((e = pvfs_readdir(d)) != NULL) {
        if (e->d_type == DT_REG) {
            int i = atoi(e->d_name + 1);
            CHECK(e->d_name[0] == 'e' && i >= 0 && i < 50);
            if (i >= 0 && i < 50) seen[i]++;
            files++;
        } else if (e->d_type == DT_DIR) {
            CHECK(strcmp(e->d_name, "subdir") == 0);
            dirs++;
        } else if (e->d_type == DT_LNK) {
            CHECK(strcmp(e->d_name, "sym") == 0);
            links++;
        }
        CHECK(e->d_ino != 0);
    }
    CHECK(files == 50 && dirs == 1 && links == 1);
    for (int i = 0; i < 50; i++) CHECK(seen[i] == 1);
    pvfs_rewinddir(d);
    int again = 0;
    while (pvfs_readdir(d) != NULL) again++;
    CHECK(again == 52);
    CHECK_OK(pvfs_closedir(d));
    CHECK(pvfs_opendir(join(p1, sizeof p1, dir, "e00")) == NULL && errno == ENOTDIR);
    CHECK(pvfs_opendir(join(p1, sizeof p1, dir, "none")) == NULL && errno == ENOENT);
    CHECK_ERR(pvfs_closedir(NULL), EBADF);
    CHECK(pvfs_readdir(NULL) == NULL && errno == EBADF);
}

int main(int argc, char **argv) {
    REQUIRE(argc >= 2);
    const char *base = argv[1];
    umask(022); /* pvfs_init takes the umask as of its call */
    before_init(base);
    init_twice();
    namespace_ops(base);
    io_ops(base);
    layout_and_partition(base);
    listing(base);
    CHECK_OK(pvfs_finalize());
    CHECK_ERR(pvfs_open(base, O_RDONLY, 0), ENXIO);
    /* Initialize again after the last finalize: a fresh client. */
    CHECK_OK(pvfs_init(NULL));
    struct stat st;
    CHECK_OK(pvfs_stat(base, &st));
    CHECK_OK(pvfs_finalize());
    return report("basic");
}
