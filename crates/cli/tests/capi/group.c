/* Group open (POSIX extensions paper, Vilayannur et al., 2008): pvfs_openg once, the
 * handle shipped to other processes, pvfs_openfh there with no request to any server;
 * tampered handles refused; the access mode travels with the handle.
 *
 * Usage: group BASE            all checks, including a forked child using the handle
 *        group make PATH OUT   openg PATH (O_CREAT|O_RDWR) and write the handle to OUT
 *        group use OUT PATH    openfh the handle in OUT; check it reads what PATH holds */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static unsigned char handle[PVFS_GROUP_HANDLE_MAX];

static int make(const char *path, const char *out) {
    REQUIRE(pvfs_init(NULL) == 0);
    size_t len = sizeof handle;
    CHECK_OK(pvfs_openg(path, handle, &len, O_CREAT | O_RDWR, 0644));
    int fd = pvfs_openfh(handle, len);
    REQUIRE(fd >= 0);
    CHECK(pvfs_write(fd, "from the maker", 14) == 14);
    CHECK_OK(pvfs_close(fd));
    FILE *f = fopen(out, "wb");
    REQUIRE(f != NULL);
    REQUIRE(fwrite(handle, 1, len, f) == len);
    fclose(f);
    CHECK_OK(pvfs_finalize());
    return report("group make");
}

static int use(const char *in, const char *path) {
    FILE *f = fopen(in, "rb");
    REQUIRE(f != NULL);
    size_t len = fread(handle, 1, sizeof handle, f);
    fclose(f);
    REQUIRE(pvfs_init(NULL) == 0);
    int fd = pvfs_openfh(handle, len);
    CHECK(fd >= 0);
    CHECK(pvfs_requests_sent() == 0); /* a fresh process: openfh sent nothing */
    char buf[32] = {0};
    CHECK(pvfs_read(fd, buf, sizeof buf) == 14);
    CHECK(memcmp(buf, "from the maker", 14) == 0);
    struct stat a, b;
    CHECK_OK(pvfs_fstat(fd, &a));
    CHECK_OK(pvfs_stat(path, &b));
    CHECK(a.st_ino == b.st_ino && a.st_size == 14);
    CHECK_OK(pvfs_close(fd));
    CHECK_OK(pvfs_finalize());
    return report("group use");
}

static void all(const char *base) {
    char path[512], dirp[512];
    REQUIRE(pvfs_init(NULL) == 0);
    CHECK_OK(pvfs_mkdir(base, 0755));
    join(path, sizeof path, base, "shared");

    /* Size negotiation: NULL buffer or a short one give ERANGE and the size. */
    size_t len = 0;
    CHECK_ERR(pvfs_openg(path, NULL, &len, O_CREAT | O_RDWR, 0644), ERANGE);
    /* 4 datafiles: 32 + the layout (21 + 12 each) + 4 + the capabilities (4 + 44 for the
       file's and for each datafile's) + the CRC. */
    CHECK(len == 109 + 56 * 4);
    size_t need = len;
    len = 10;
    CHECK_ERR(pvfs_openg(path, handle, &len, O_RDWR, 0), ERANGE);
    CHECK(len == need);
    CHECK_ERR(pvfs_openg(path, handle, NULL, O_RDWR, 0), EFAULT);
    len = sizeof handle;
    CHECK_OK(pvfs_openg(path, handle, &len, O_RDWR, 0));
    CHECK(len == need);
    CHECK_ERR(pvfs_openg(join(dirp, sizeof dirp, base, "none"), handle, &len, O_RDWR, 0), ENOENT);
    len = sizeof handle;
    CHECK_ERR(pvfs_openg(base, handle, &len, O_RDONLY, 0), EISDIR);
    len = sizeof handle;
    CHECK_ERR(pvfs_openg(path, handle, &len, O_CREAT | O_EXCL | O_RDWR, 0644), EEXIST);
    len = sizeof handle;
    CHECK_OK(pvfs_openg(path, handle, &len, O_RDWR, 0));

    /* openfh sends nothing, however often it is done. */
    CHECK_OK(pvfs_stats_reset());
    int fds[16];
    for (int i = 0; i < 16; i++) {
        fds[i] = pvfs_openfh(handle, len);
        CHECK(fds[i] >= 0);
    }
    CHECK(pvfs_requests_sent() == 0);
    CHECK(pvfs_pwrite(fds[3], "group", 5, 0) == 5);
    char buf[16] = {0};
    CHECK(pvfs_pread(fds[9], buf, 5, 0) == 5 && memcmp(buf, "group", 5) == 0);
    for (int i = 0; i < 16; i++) CHECK_OK(pvfs_close(fds[i]));

    /* Damaged handles are refused, also without any request. */
    CHECK_OK(pvfs_stats_reset());
    size_t spots[] = {0, 5, 9, 13, 21, 33, len - 37, len - 33, len - 1};
    for (size_t i = 0; i < sizeof spots / sizeof spots[0]; i++) {
        handle[spots[i]] ^= 0x40;
        CHECK_ERR(pvfs_openfh(handle, len), EBADMSG);
        handle[spots[i]] ^= 0x40;
    }
    CHECK_ERR(pvfs_openfh(handle, len - 1), EBADMSG);
    CHECK_ERR(pvfs_openfh(handle, 0), EBADMSG);
    CHECK_ERR(pvfs_openfh(handle, PVFS_GROUP_HANDLE_MAX + 1), EBADMSG);
    CHECK_ERR(pvfs_openfh(NULL, 10), EFAULT);
    CHECK(pvfs_requests_sent() == 0);
    int ok = pvfs_openfh(handle, len); /* the restored handle still works */
    CHECK(ok >= 0);
    CHECK_OK(pvfs_close(ok));

    /* The access mode travels: a read-only handle cannot write, a write-only one
     * cannot read. */
    unsigned char ro[PVFS_GROUP_HANDLE_MAX];
    size_t rlen = sizeof ro;
    CHECK_OK(pvfs_openg(path, ro, &rlen, O_RDONLY, 0));
    int r = pvfs_openfh(ro, rlen);
    REQUIRE(r >= 0);
    CHECK_ERR(pvfs_write(r, "x", 1), EBADF);
    CHECK_ERR(pvfs_pwrite(r, "x", 1, 0), EBADF);
    CHECK_ERR(pvfs_ftruncate(r, 0), EINVAL);
    CHECK(pvfs_read(r, buf, 5) == 5);
    CHECK_OK(pvfs_close(r));
    rlen = sizeof ro;
    CHECK_OK(pvfs_openg(join(dirp, sizeof dirp, base, "new"), ro, &rlen,
                        O_CREAT | O_EXCL | O_WRONLY | O_APPEND, 0600));
    r = pvfs_openfh(ro, rlen);
    REQUIRE(r >= 0);
    CHECK_ERR(pvfs_read(r, buf, 1), EBADF);
    CHECK(pvfs_write(r, "ab", 2) == 2);
    CHECK(pvfs_write(r, "cd", 2) == 2); /* O_APPEND travelled too */
    CHECK(pvfs_lseek(r, 0, SEEK_END) == 4);
    CHECK_OK(pvfs_close(r));
    struct stat st;
    CHECK_OK(pvfs_stat(dirp, &st));
    CHECK(st.st_size == 4 && (st.st_mode & 0777) == 0600);

    /* A forked child re-initializes and opens the handle received over a pipe: it
     * sends no request to open, and sees the parent's data. */
    int p[2];
    REQUIRE(pipe(p) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(p[1]);
        unsigned char h[PVFS_GROUP_HANDLE_MAX];
        ssize_t n = read(p[0], h, sizeof h);
        int bad = 0;
        if (pvfs_openfh(h, (size_t)n) != -1 || errno != ENXIO) bad |= 1; /* parent's client */
        if (pvfs_init(NULL) != 0) _exit(10);
        int fd = pvfs_openfh(h, (size_t)n);
        if (fd < 0) bad |= 2;
        if (pvfs_requests_sent() != 0) bad |= 4;
        char b[8] = {0};
        if (pvfs_pread(fd, b, 5, 0) != 5 || memcmp(b, "group", 5) != 0) bad |= 8;
        if (pvfs_close(fd) != 0) bad |= 16;
        pvfs_finalize();
        _exit(bad);
    }
    close(p[0]);
    REQUIRE(write(p[1], handle, len) == (ssize_t)len);
    close(p[1]);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        fprintf(stderr, "child failed with bits %d\n", WEXITSTATUS(status));
    CHECK_OK(pvfs_finalize());
}

int main(int argc, char **argv) {
    REQUIRE(argc >= 2);
    if (strcmp(argv[1], "make") == 0 && argc == 4) return make(argv[2], argv[3]);
    if (strcmp(argv[1], "use") == 0 && argc == 4) return use(argv[2], argv[3]);
    all(argv[1]);
    return report("group");
}
