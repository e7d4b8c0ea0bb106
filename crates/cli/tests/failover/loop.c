/* Creates, writes, fsyncs and closes files DIR/f0, DIR/f1, ... through the pvfs C
 * library until the local file STOP exists (and at least 5). Any error ends it with
 * status 1. Prints "files N longest SECONDS" (the longest file, create to close).
 * File i holds the bytes (i * 7 + k) & 0xff, k = 0 .. 255, 256 times (64 KiB), as
 * loop.py writes them.
 *
 *     loop DIR STOP      (PVFS_CONFIG names the file system)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pvfs.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fail(const char *what, const char *path) {
    fprintf(stderr, "%s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: loop DIR STOP\n");
        return 2;
    }
    const char *dir = argv[1], *stop = argv[2];
    if (pvfs_init(NULL) != 0)
        fail("pvfs_init", "");
    if (pvfs_mkdir(dir, 0755) != 0)
        fail("mkdir", dir);
    static unsigned char data[65536];
    double longest = 0;
    long i = 0;
    while (i < 5 || access(stop, F_OK) != 0) {
        double t = now();
        for (size_t k = 0; k < sizeof data; k++)
            data[k] = (unsigned char)((i * 7 + (long)(k % 256)) & 0xff);
        char path[4096];
        snprintf(path, sizeof path, "%s/f%ld", dir, i);
        int fd = pvfs_open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0)
            fail("open", path);
        size_t done = 0;
        while (done < sizeof data) {
            ssize_t n = pvfs_write(fd, data + done, sizeof data - done);
            if (n < 0)
                fail("write", path);
            done += (size_t)n;
        }
        if (pvfs_fsync(fd) != 0)
            fail("fsync", path);
        if (pvfs_close(fd) != 0)
            fail("close", path);
        double took = now() - t;
        if (took > longest)
            longest = took;
        i++;
    }
    printf("files %ld longest %.3f\n", i, longest);
    pvfs_finalize();
    return 0;
}
