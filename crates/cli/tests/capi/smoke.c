/* A short program linked statically against libpvfs.a: the static library works.
 *
 * Usage: smoke BASE */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

int main(int argc, char **argv) {
    REQUIRE(argc >= 2);
    REQUIRE(pvfs_init(NULL) == 0);
    char path[512];
    CHECK_OK(pvfs_mkdir(argv[1], 0755));
    int fd = pvfs_open(join(path, sizeof path, argv[1], "s"), O_CREAT | O_RDWR, 0644);
    REQUIRE(fd >= 0);
    CHECK(pvfs_write(fd, "static", 6) == 6);
    char buf[8] = {0};
    CHECK(pvfs_pread(fd, buf, 6, 0) == 6 && strcmp(buf, "static") == 0);
    struct stat st;
    CHECK_OK(pvfs_fstat(fd, &st));
    CHECK(st.st_size == 6);
    CHECK_OK(pvfs_close(fd));
    CHECK_ERR(pvfs_close(fd), EBADF);
    CHECK_OK(pvfs_finalize());
    return report("smoke");
}
