/* Bulk metadata (POSIX extensions paper, Vilayannur et al., 2008): pvfs_getdents_plus
 * over a directory of NFILES files on 4 servers costs at most one ReadDir per shard
 * (pages of 4096) + one ListAttr per metadata server + one GetSizes per data server —
 * never one request per entry — and pvfs_getdents_plus_lite without the size contacts
 * no data server.
 *
 * Usage: dirplus BASE SHARDS [NFILES] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static int nfiles = 5000;
static int shards;

/* Every tenth file holds data (1..97 bytes), the others are empty (keeps the setup
 * short: a write and the mtime update at close cost two more requests per file). */
static long long size_of(int i) { return i % 10 == 0 ? i % 97 + 1 : 0; }

/* Reads the whole directory with `count` entries per call; checks every entry. */
static void read_all(const char *dir, int lite, unsigned long mask, unsigned count) {
    int fd = pvfs_open(dir, O_RDONLY | O_DIRECTORY, 0);
    REQUIRE(fd >= 0);
    struct pvfs_dirent_plus *buf = calloc(count, sizeof *buf);
    char *seen = calloc(nfiles, 1);
    REQUIRE(buf && seen);
    CHECK_OK(pvfs_stats_reset());
    int total = 0, calls = 0, n;
    unsigned long long after_first = 0;
    while ((n = lite ? pvfs_getdents_plus_lite(fd, mask, buf, count)
                     : pvfs_getdents_plus(fd, buf, count)) > 0) {
        if (calls++ == 0) after_first = pvfs_requests_sent();
        CHECK((unsigned)n <= count);
        for (int k = 0; k < n; k++) {
            struct pvfs_dirent_plus *e = &buf[k];
            int i = atoi(e->d_name + 1);
            if (e->d_name[0] != 'f' || i < 0 || i >= nfiles) {
                CHECK(!"unexpected name");
                continue;
            }
            seen[i]++;
            CHECK(e->d_type == DT_REG && e->d_errno == 0);
            CHECK(S_ISREG(e->d_stat.st_mode) && e->d_stat.st_ino == e->d_ino);
            unsigned long want = (lite ? mask : PVFS_SLITE_ALL);
            if (e->d_stat.st_litemask != want) {
                CHECK(e->d_stat.st_litemask == want);
            }
            if (want & PVFS_SLITE_SIZE && e->d_stat.st_size != size_of(i)) {
                CHECK(e->d_stat.st_size == size_of(i));
            }
        }
        total += n;
    }
    CHECK(n == 0);
    CHECK(total == nfiles);
    for (int i = 0; i < nfiles; i++)
        if (seen[i] != 1) {
            CHECK(seen[i] == 1);
            break;
        }
    /* Everything was fetched by the first call. */
    CHECK(pvfs_requests_sent() == after_first);
    unsigned long long readdir = pvfs_requests_for("ReadDir");
    unsigned long long listattr = pvfs_requests_for("ListAttr");
    unsigned long long getsizes = pvfs_requests_for("GetSizes");
    printf("%s count=%u: %llu requests (ReadDir %llu, ListAttr %llu, GetSizes %llu, data %llu)\n",
           lite ? "getdents_plus_lite" : "getdents_plus", count,
           (unsigned long long)pvfs_requests_sent(), readdir, listattr, getsizes,
           (unsigned long long)pvfs_requests_for("data"));
    CHECK(readdir <= (unsigned long long)shards + (unsigned long long)nfiles / 4096);
    CHECK(listattr <= 4);
    if (lite && !(mask & (PVFS_SLITE_SIZE | PVFS_SLITE_BLOCKS))) {
        CHECK(pvfs_requests_for("data") == 0);
        CHECK(pvfs_requests_sent() <= (unsigned long long)shards + 4);
    } else {
        CHECK(getsizes <= 4);
        CHECK(pvfs_requests_sent() <= (unsigned long long)shards + 2 * 4);
    }
    /* Rewinding fetches again. */
    CHECK(pvfs_lseek(fd, 0, SEEK_SET) == 0);
    CHECK(pvfs_getdents_plus_lite(fd, 0, buf, 1) == 1);
    CHECK_OK(pvfs_close(fd));
    free(buf);
    free(seen);
}

int main(int argc, char **argv) {
    REQUIRE(argc >= 3);
    const char *base = argv[1];
    shards = atoi(argv[2]);
    if (argc >= 4) nfiles = atoi(argv[3]);
    REQUIRE(shards >= 1 && nfiles >= 1);
    REQUIRE(pvfs_init(NULL) == 0);
    CHECK_OK(pvfs_mkdir(base, 0755));
    char dir[512], path[600];
    join(dir, sizeof dir, base, "big");
    CHECK_OK(pvfs_mkdir(dir, 0755));
    char data[97];
    memset(data, 'd', sizeof data);
    for (int i = 0; i < nfiles; i++) {
        snprintf(path, sizeof path, "%s/f%d", dir, i);
        int fd = pvfs_open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
        REQUIRE(fd >= 0);
        if (size_of(i) > 0) REQUIRE(pvfs_write(fd, data, size_of(i)) == size_of(i));
        REQUIRE(pvfs_close(fd) == 0);
    }

    read_all(dir, 0, 0, nfiles + 10);                              /* one call */
    read_all(dir, 0, 0, 777);                                      /* continued */
    read_all(dir, 1, PVFS_SLITE_MTIME | PVFS_SLITE_CTIME, 1000);   /* no sizes */
    read_all(dir, 1, PVFS_SLITE_SIZE, 4096);                       /* sizes */

    /* Mixing: readdir-level reads then a call that needs attributes refetches and
     * keeps the position. */
    int fd = pvfs_open(dir, O_RDONLY, 0);
    REQUIRE(fd >= 0);
    struct pvfs_dirent_plus e[3];
    CHECK(pvfs_getdents_plus_lite(fd, PVFS_SLITE_CTIME, e, 2) == 2);
    CHECK(pvfs_lseek(fd, 0, SEEK_CUR) == 2);
    CHECK(pvfs_getdents_plus(fd, e, 3) == 3);
    CHECK(e[0].d_stat.st_litemask == PVFS_SLITE_ALL);
    CHECK(pvfs_lseek(fd, 0, SEEK_CUR) == 5);
    CHECK_ERR(pvfs_lseek(fd, 0, SEEK_END), EINVAL);
    CHECK_ERR(pvfs_getdents_plus(fd, e, 0), EINVAL);
    CHECK_ERR(pvfs_getdents_plus(fd, NULL, 3), EFAULT);
    CHECK_OK(pvfs_close(fd));
    CHECK_ERR(pvfs_getdents_plus(fd, e, 3), EBADF);
    snprintf(path, sizeof path, "%s/f1", dir);
    fd = pvfs_open(path, O_RDONLY, 0);
    CHECK_ERR(pvfs_getdents_plus(fd, e, 3), ENOTDIR);
    CHECK_OK(pvfs_close(fd));

    /* An empty directory: 0 at once. */
    join(path, sizeof path, base, "empty");
    CHECK_OK(pvfs_mkdir(path, 0755));
    fd = pvfs_open(path, O_RDONLY, 0);
    CHECK(pvfs_getdents_plus(fd, e, 3) == 0);
    CHECK_OK(pvfs_close(fd));

    CHECK_OK(pvfs_finalize());
    return report("dirplus");
}
