/* pvfs_fallocate in every mode, its errors and message counts, and st_blocks from
 * pvfs_stat/pvfs_fstat/pvfs_statlite as the data servers allocate.
 *
 * Usage: alloc BASE   (BASE: a pvfs directory to create; PVFS_CONFIG names the fs) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char p1[512], p2[512];

/* Whether bytes [off, off + len) of fd all equal c. */
static int all_are(int fd, off_t off, size_t len, unsigned char c) {
    static unsigned char buf[1 << 16];
    while (len > 0) {
        size_t n = len < sizeof buf ? len : sizeof buf;
        if (pvfs_pread(fd, buf, n, off) != (ssize_t)n)
            return 0;
        for (size_t i = 0; i < n; i++)
            if (buf[i] != c)
                return 0;
        off += n;
        len -= n;
    }
    return 1;
}

int main(int argc, char **argv) {
    REQUIRE(argc == 2);
    const char *base = argv[1];
    REQUIRE(pvfs_init(NULL) == 0);
    CHECK_OK(pvfs_mkdir(base, 0755));

    /* 64 KiB stripes over the 4 data servers. */
    struct pvfs_layout_hint h = {.stripe_size = 65536, .stripe_count = 4, .first_server = -1};
    int fd = pvfs_open_layout(join(p1, sizeof p1, base, "f"), O_CREAT | O_RDWR, 0644, &h);
    REQUIRE(fd >= 0);
    struct stat st;

    /* A range within one stripe unit: one request; over all four: four. */
    CHECK_OK(pvfs_stats_reset());
    CHECK_OK(pvfs_fallocate(fd, 0, 1000, 2000));
    CHECK(pvfs_requests_for("Fallocate") == 1);
    CHECK_OK(pvfs_stats_reset());
    CHECK_OK(pvfs_fallocate(fd, 0, 0, 300000));
    CHECK(pvfs_requests_for("Fallocate") == 4);
    CHECK_OK(pvfs_fstat(fd, &st));
    CHECK(st.st_size == 300000);
    CHECK(st.st_blocks * 512 >= 300000);
    CHECK(all_are(fd, 0, 300000, 0));

    /* KEEP_SIZE: space past the end, the size stays. */
    blkcnt_t before = st.st_blocks;
    CHECK_OK(pvfs_fallocate(fd, FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20));
    CHECK_OK(pvfs_fstat(fd, &st));
    CHECK(st.st_size == 300000);
    CHECK(st.st_blocks >= before + (1 << 20) / 512);

    /* A punched hole reads as zeros and gives its space back. */
    static unsigned char data[300000];
    memset(data, 0x5a, sizeof data);
    CHECK(pvfs_pwrite(fd, data, sizeof data, 0) == (ssize_t)sizeof data);
    CHECK_OK(pvfs_fstat(fd, &st));
    before = st.st_blocks;
    CHECK_OK(pvfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 10000, 200000));
    CHECK_OK(pvfs_fstat(fd, &st));
    CHECK(st.st_size == 300000);
    CHECK((before - st.st_blocks) * 512 >= 200000 - 8 * 4096);
    CHECK(all_are(fd, 0, 10000, 0x5a) && all_are(fd, 10000, 200000, 0) &&
          all_are(fd, 210000, 90000, 0x5a));

    /* ZERO_RANGE where the servers' file system has it. */
    errno = 0;
    if (pvfs_fallocate(fd, FALLOC_FL_ZERO_RANGE, 250000, 100000) == 0) {
        CHECK_OK(pvfs_fstat(fd, &st));
        CHECK(st.st_size == 350000);
        CHECK(all_are(fd, 210000, 40000, 0x5a) && all_are(fd, 250000, 100000, 0));
    } else {
        CHECK(errno == EOPNOTSUPP);
    }

    /* Errors. */
    CHECK_ERR(pvfs_fallocate(fd, 0, 0, 0), EINVAL);
    CHECK_ERR(pvfs_fallocate(fd, 0, -5, 10), EINVAL);
    CHECK_ERR(pvfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 10), EOPNOTSUPP);
    CHECK_ERR(pvfs_fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 0, 65536), EOPNOTSUPP);
    CHECK_ERR(pvfs_fallocate(fd, -1, 0, 10), EOPNOTSUPP);
    CHECK_ERR(pvfs_fallocate(fd, 0, INT64_MAX, 10), EFBIG);
    CHECK_ERR(pvfs_fallocate(12345, 0, 0, 10), EBADF);
    CHECK_OK(pvfs_close(fd));
    CHECK_ERR(pvfs_fallocate(fd, 0, 0, 10), EBADF);
    fd = pvfs_open(p1, O_RDONLY, 0);
    CHECK(fd >= 0);
    CHECK_ERR(pvfs_fallocate(fd, 0, 0, 10), EBADF);
    CHECK_OK(pvfs_close(fd));
    fd = pvfs_open(base, O_RDONLY, 0);
    CHECK(fd >= 0);
    CHECK_ERR(pvfs_fallocate(fd, 0, 0, 10), EBADF);
    CHECK_OK(pvfs_close(fd));

    /* Growth past the end through mode 0, seen by path. */
    fd = pvfs_open(p1, O_RDWR, 0);
    CHECK(fd >= 0);
    CHECK_OK(pvfs_fallocate(fd, 0, 5000000, 100));
    CHECK_OK(pvfs_close(fd));
    CHECK_OK(pvfs_stat(p1, &st));
    CHECK(st.st_size == 5000100);

    /* A sparse file: its blocks, not its size, through stat and statlite. */
    fd = pvfs_open(join(p2, sizeof p2, base, "sparse"), O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0);
    CHECK(pvfs_pwrite(fd, data, 100, 300000) == 100);
    CHECK_OK(pvfs_close(fd));
    CHECK_OK(pvfs_stat(p2, &st));
    CHECK(st.st_size == 300100);
    CHECK(st.st_blocks > 0 && st.st_blocks * 512 <= 16384);
    struct pvfs_stat_lite sl;
    memset(&sl, 0, sizeof sl);
    sl.st_litemask = PVFS_SLITE_BLOCKS;
    CHECK_OK(pvfs_statlite(p2, &sl));
    CHECK(sl.st_litemask & PVFS_SLITE_BLOCKS);
    CHECK(sl.st_blocks == st.st_blocks);
    CHECK_OK(pvfs_stat(base, &st));
    CHECK(st.st_blocks == 8);

    CHECK_OK(pvfs_finalize());
    return report("alloc");
}
