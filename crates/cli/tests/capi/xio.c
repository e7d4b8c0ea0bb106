/* Noncontiguous I/O (POSIX extensions paper, Vilayannur et al., 2008):
 * pvfs_writex/pvfs_readx move any memory vector to any list of file regions with one
 * request per data server involved, whatever the number of regions; data lands where
 * the regions say.
 *
 * Usage: xio BASE */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"

enum { STRIPE = 16384, SERVERS = 4, FILE_SIZE = 4 << 20 };

static unsigned char *expect; /* what the file should hold */

static int verify(int fd) {
    unsigned char *got = malloc(FILE_SIZE);
    REQUIRE(got);
    int ok = pvfs_pread(fd, got, FILE_SIZE, 0) == FILE_SIZE && memcmp(got, expect, FILE_SIZE) == 0;
    free(got);
    return ok;
}

int main(int argc, char **argv) {
    REQUIRE(argc >= 2);
    const char *base = argv[1];
    REQUIRE(pvfs_init(NULL) == 0);
    CHECK_OK(pvfs_mkdir(base, 0755));
    char path[512];
    join(path, sizeof path, base, "x");
    struct pvfs_layout_hint h = {.stripe_size = STRIPE, .stripe_count = SERVERS, .first_server = 0};
    int fd = pvfs_open_layout(path, O_CREAT | O_RDWR, 0644, &h);
    REQUIRE(fd >= 0);
    expect = malloc(FILE_SIZE);
    REQUIRE(expect);
    for (int i = 0; i < FILE_SIZE; i++) expect[i] = pat(i, 3);
    CHECK(pvfs_write(fd, expect, FILE_SIZE) == FILE_SIZE);

    /* 16 file regions of 10000 bytes, 200000 apart (each spans stripe units on
     * several servers), written from 25 memory regions of unequal sizes. */
    enum { REGIONS = 16, RLEN = 10000, GAP = 200000, MEMS = 25 };
    struct pvfs_xtvec xtv[REGIONS];
    for (int i = 0; i < REGIONS; i++) {
        xtv[i].xtv_off = 12345 + (off_t)i * GAP;
        xtv[i].xtv_len = RLEN;
    }
    /* Listed out of file order: the order of the list is the order of the data. */
    struct pvfs_xtvec t = xtv[3];
    xtv[3] = xtv[11];
    xtv[11] = t;
    size_t total = REGIONS * RLEN;
    unsigned char *src = malloc(total), *dst = malloc(total);
    REQUIRE(src && dst);
    for (size_t i = 0; i < total; i++) src[i] = (unsigned char)(i * 7 + 1);
    struct iovec iov[MEMS];
    size_t at = 0;
    for (int i = 0; i < MEMS; i++) {
        size_t n = i == MEMS - 1 ? total - at : (size_t)(i % 3 + 1) * 2000;
        iov[i].iov_base = src + at;
        iov[i].iov_len = n;
        at += n;
    }
    REQUIRE(at == total);
    CHECK_OK(pvfs_stats_reset());
    CHECK(pvfs_writex(fd, iov, MEMS, xtv, REGIONS) == (ssize_t)total);
    CHECK(pvfs_requests_for("Write") <= SERVERS);
    CHECK(pvfs_requests_sent() == pvfs_requests_for("Write"));
    at = 0;
    for (int i = 0; i < REGIONS; i++) {
        memcpy(expect + xtv[i].xtv_off, src + at, RLEN);
        at += RLEN;
    }
    CHECK(verify(fd));

    /* Read them back into 3 memory regions. */
    memset(dst, 0, total);
    struct iovec rv[3] = {{dst, 1}, {dst + 1, total / 2}, {dst + 1 + total / 2, total - 1 - total / 2}};
    CHECK_OK(pvfs_stats_reset());
    CHECK(pvfs_readx(fd, rv, 3, xtv, REGIONS) == (ssize_t)total);
    CHECK(pvfs_requests_for("Read") <= SERVERS);
    CHECK(pvfs_requests_sent() == pvfs_requests_for("Read"));
    CHECK(memcmp(dst, src, total) == 0);

    /* 16 regions all inside stripe units of server 0: exactly one request. */
    struct pvfs_xtvec one[16];
    for (int i = 0; i < 16; i++) {
        one[i].xtv_off = (off_t)i * STRIPE * SERVERS + 100;
        one[i].xtv_len = 1000;
    }
    struct iovec big = {src, 16 * 1000};
    CHECK_OK(pvfs_stats_reset());
    CHECK(pvfs_writex(fd, &big, 1, one, 16) == 16000);
    CHECK(pvfs_requests_sent() == 1);
    for (int i = 0; i < 16; i++) memcpy(expect + one[i].xtv_off, src + i * 1000, 1000);
    struct iovec back = {dst, 16 * 1000};
    CHECK_OK(pvfs_stats_reset());
    CHECK(pvfs_readx(fd, &back, 1, one, 16) == 16000);
    CHECK(pvfs_requests_sent() == 1);
    CHECK(memcmp(dst, src, 16000) == 0);
    CHECK(verify(fd));

    /* readx past the end: only the bytes before the end count. */
    struct pvfs_xtvec tail[2] = {{FILE_SIZE - 100, 50}, {FILE_SIZE - 10, 60}};
    struct iovec tv = {dst, 110};
    CHECK(pvfs_readx(fd, &tv, 1, tail, 2) == 60);
    CHECK(memcmp(dst, expect + FILE_SIZE - 100, 50) == 0);
    CHECK(memcmp(dst + 50, expect + FILE_SIZE - 10, 10) == 0);
    /* The same through two memory regions: bytes past the end arrive as zeros. */
    memset(dst, 0xAA, 110);
    struct iovec two[2] = {{dst, 30}, {dst + 30, 80}};
    CHECK(pvfs_readx(fd, two, 2, tail, 2) == 60);
    CHECK(memcmp(dst, expect + FILE_SIZE - 100, 50) == 0);
    CHECK(memcmp(dst + 50, expect + FILE_SIZE - 10, 10) == 0);
    CHECK(dst[60] == 0 && dst[109] == 0);

    /* Zero-length regions and empty calls. */
    struct pvfs_xtvec z[2] = {{0, 0}, {5, 0}};
    CHECK(pvfs_writex(fd, &tv, 0, z, 2) == 0);
    CHECK(pvfs_readx(fd, NULL, 0, NULL, 0) == 0);

    /* Errors. */
    struct iovec small = {dst, 10};
    CHECK_ERR(pvfs_writex(fd, &small, 1, xtv, REGIONS), EINVAL); /* totals differ */
    struct pvfs_xtvec neg = {-1, 10};
    CHECK_ERR(pvfs_writex(fd, &small, 1, &neg, 1), EINVAL);
    CHECK_ERR(pvfs_readx(fd, NULL, 1, xtv, 1), EFAULT);
    CHECK_ERR(pvfs_readx(fd, &small, 1, NULL, 1), EFAULT);
    struct iovec nullbase = {NULL, 10};
    struct pvfs_xtvec ten = {0, 10};
    CHECK_ERR(pvfs_readx(fd, &nullbase, 1, &ten, 1), EFAULT);
    CHECK_ERR(pvfs_readx(12345, &small, 1, &ten, 1), EBADF);
    int ro = pvfs_open(path, O_RDONLY, 0);
    REQUIRE(ro >= 0);
    CHECK_ERR(pvfs_writex(ro, &small, 1, &ten, 1), EBADF);
    CHECK(pvfs_readx(ro, &small, 1, &ten, 1) == 10);
    CHECK_OK(pvfs_close(ro));
    int wo = pvfs_open(path, O_WRONLY, 0);
    REQUIRE(wo >= 0);
    CHECK_ERR(pvfs_readx(wo, &small, 1, &ten, 1), EBADF);
    CHECK_OK(pvfs_close(wo));
    CHECK_ERR(pvfs_readx(pvfs_open(base, O_RDONLY, 0), &small, 1, &ten, 1), EISDIR);

    CHECK_OK(pvfs_close(fd));
    free(src);
    free(dst);
    free(expect);
    CHECK_OK(pvfs_finalize());
    return report("xio");
}
