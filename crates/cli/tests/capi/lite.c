/* Lazy attributes: pvfs_statlite/lstatlite/fstatlite fetch the size (and so contact
 * data servers) only when the mask asks for it; the mask out says what is valid; the
 * lazy mtime is brought up to date at close.
 *
 * Usage: lite BASE */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

#define LAZY (PVFS_SLITE_ATIME | PVFS_SLITE_MTIME | PVFS_SLITE_CTIME)

static unsigned long long data_requests(void) { return pvfs_requests_for("data"); }

int main(int argc, char **argv) {
    REQUIRE(argc >= 2);
    const char *base = argv[1];
    REQUIRE(pvfs_init(NULL) == 0);
    char dir[512], file[512], link[512];
    CHECK_OK(pvfs_mkdir(base, 0755));
    CHECK_OK(pvfs_mkdir(join(dir, sizeof dir, base, "d"), 0755));
    join(file, sizeof file, dir, "f");
    join(link, sizeof link, dir, "l");

    /* A file striped over all 4 servers with 1 MiB of data. */
    struct pvfs_layout_hint h = {.stripe_size = 65536, .stripe_count = 4, .first_server = -1};
    int fd = pvfs_open_layout(file, O_CREAT | O_RDWR, 0644, &h);
    REQUIRE(fd >= 0);
    enum { N = 1 << 20 };
    char *w = malloc(N);
    REQUIRE(w);
    for (int i = 0; i < N; i++) w[i] = (char)pat(i, 2);
    CHECK(pvfs_write(fd, w, N) == N);
    CHECK_OK(pvfs_close(fd)); /* records the mtime on the metadata server */
    CHECK_OK(pvfs_symlink("f", link));

    /* statlite without the size: only the path's lookups (3 components), no data
     * server. */
    struct pvfs_stat_lite sl;
    memset(&sl, 0xff, sizeof sl);
    sl.st_litemask = LAZY;
    CHECK_OK(pvfs_stats_reset());
    CHECK_OK(pvfs_statlite(file, &sl));
    CHECK(data_requests() == 0);
    CHECK(pvfs_requests_for("GetSizes") == 0 && pvfs_requests_for("Read") == 0);
    CHECK(pvfs_requests_sent() <= 3);
    CHECK(sl.st_litemask == LAZY);
    CHECK(S_ISREG(sl.st_mode) && (sl.st_mode & 0777) == 0644);
    CHECK(sl.st_nlink == 1 && sl.st_uid == geteuid() && sl.st_blksize == 65536);
    CHECK(sl.st_size == 0 && sl.st_blocks == 0); /* not fetched: zero */
    CHECK(sl.st_mtim.tv_sec > 0 && sl.st_ctim.tv_sec > 0);

    /* The lazy mtime equals the exact one after close. */
    struct stat st;
    CHECK_OK(pvfs_stat(file, &st));
    CHECK(st.st_size == N);
    CHECK(st.st_mtim.tv_sec == sl.st_mtim.tv_sec && st.st_mtim.tv_nsec == sl.st_mtim.tv_nsec);
    CHECK(st.st_ino == sl.st_ino && st.st_mode == sl.st_mode && st.st_dev == sl.st_dev);

    /* With the size: one GetSizes per data server of the file. */
    sl.st_litemask = PVFS_SLITE_SIZE | PVFS_SLITE_MTIME;
    CHECK_OK(pvfs_stats_reset());
    CHECK_OK(pvfs_statlite(file, &sl));
    CHECK(sl.st_litemask == (PVFS_SLITE_SIZE | PVFS_SLITE_MTIME));
    CHECK(sl.st_size == N && sl.st_blocks == 0);
    CHECK(pvfs_requests_for("GetSizes") >= 1 && pvfs_requests_for("GetSizes") <= 4);
    CHECK(data_requests() == pvfs_requests_for("GetSizes"));

    sl.st_litemask = PVFS_SLITE_BLOCKS;
    CHECK_OK(pvfs_statlite(file, &sl));
    CHECK(sl.st_litemask == PVFS_SLITE_BLOCKS && sl.st_blocks == N / 512);
    sl.st_litemask = PVFS_SLITE_ALL | 0x1000; /* unknown bits are dropped */
    CHECK_OK(pvfs_statlite(file, &sl));
    CHECK(sl.st_litemask == PVFS_SLITE_ALL);
    sl.st_litemask = 0;
    CHECK_OK(pvfs_statlite(file, &sl));
    CHECK(sl.st_litemask == 0 && S_ISREG(sl.st_mode));

    /* lstatlite describes the link itself; statlite follows it. A link's and a
     * directory's size need no data server. */
    sl.st_litemask = PVFS_SLITE_ALL;
    CHECK_OK(pvfs_stats_reset());
    CHECK_OK(pvfs_lstatlite(link, &sl));
    CHECK(S_ISLNK(sl.st_mode) && sl.st_size == 1 && sl.st_litemask == PVFS_SLITE_ALL);
    CHECK_OK(pvfs_statlite(dir, &sl));
    CHECK(S_ISDIR(sl.st_mode) && sl.st_litemask == PVFS_SLITE_ALL);
    CHECK(data_requests() == 0);
    sl.st_litemask = LAZY;
    CHECK_OK(pvfs_statlite(link, &sl));
    CHECK(S_ISREG(sl.st_mode) && sl.st_ino == st.st_ino);
    CHECK(data_requests() == 0);

    /* fstatlite: one GetAttr, plus the data servers only for the size. */
    fd = pvfs_open(file, O_RDONLY, 0);
    REQUIRE(fd >= 0);
    sl.st_litemask = LAZY;
    CHECK_OK(pvfs_stats_reset());
    CHECK_OK(pvfs_fstatlite(fd, &sl));
    CHECK(pvfs_requests_sent() == 1 && pvfs_requests_for("GetAttr") == 1);
    CHECK(sl.st_litemask == LAZY && sl.st_ino == st.st_ino);
    sl.st_litemask = PVFS_SLITE_SIZE;
    CHECK_OK(pvfs_fstatlite(fd, &sl));
    CHECK(sl.st_size == N && sl.st_litemask == PVFS_SLITE_SIZE);
    CHECK(data_requests() >= 1 && data_requests() <= 4);
    CHECK_OK(pvfs_close(fd));

    /* Errors. */
    CHECK_ERR(pvfs_statlite(file, NULL), EFAULT);
    CHECK_ERR(pvfs_statlite(NULL, &sl), EFAULT);
    CHECK_ERR(pvfs_statlite(join(link, sizeof link, dir, "none"), &sl), ENOENT);
    CHECK_ERR(pvfs_lstatlite(join(link, sizeof link, file, "x"), &sl), ENOTDIR);
    CHECK_ERR(pvfs_fstatlite(-1, &sl), EBADF);
    CHECK_ERR(pvfs_fstatlite(0, &sl), EBADF);

    /* The per-server and per-role counts add up. */
    struct pvfs_stats s;
    CHECK_OK(pvfs_stats(&s));
    CHECK(s.nservers == 4);
    unsigned long long sum = 0;
    for (unsigned i = 0; i < s.nservers; i++) sum += s.per_server[i];
    CHECK(sum == s.total && s.meta_requests + s.data_requests == s.total);
    CHECK(s.total == pvfs_requests_sent());
    CHECK(pvfs_requests_for("NoSuchOp") == 0 && pvfs_requests_for(NULL) == 0);
    CHECK_ERR(pvfs_stats(NULL), EFAULT);

    free(w);
    CHECK_OK(pvfs_finalize());
    return report("lite");
}
