/* Thread safety: many threads open, write, read, stat and close at once through one
 * library state; threads sharing one descriptor see atomic position updates.
 *
 * Usage: threads BASE */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

enum { THREADS = 8, CHUNK = 65536, ROUNDS = 8 };

static const char *base;
static int shared_fd;
static int failures;

static void *worker(void *arg) {
    int id = (int)(long)arg;
    char path[512];
    snprintf(path, sizeof path, "%s/t%d", base, id);
    unsigned char *w = malloc(CHUNK), *r = malloc(CHUNK);
    int bad = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < CHUNK; i++) w[i] = pat(i, id * 100 + round);
        int fd = pvfs_open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
        if (fd < 0) { bad++; continue; }
        if (pvfs_write(fd, w, CHUNK) != CHUNK) bad++;
        if (pvfs_pread(fd, r, CHUNK, 0) != CHUNK || memcmp(r, w, CHUNK) != 0) bad++;
        struct pvfs_stat_lite sl;
        sl.st_litemask = PVFS_SLITE_SIZE;
        if (pvfs_fstatlite(fd, &sl) != 0 || sl.st_size != CHUNK) bad++;
        if (pvfs_close(fd) != 0) bad++;
        /* Each thread appends its own records to the shared descriptor: the
         * position lock keeps them whole and disjoint. */
        unsigned char rec[100];
        memset(rec, 'a' + id, sizeof rec);
        if (pvfs_write(shared_fd, rec, sizeof rec) != (ssize_t)sizeof rec) bad++;
    }
    free(w);
    free(r);
    if (bad) __sync_fetch_and_add(&failures, bad);
    return NULL;
}

int main(int argc, char **argv) {
    REQUIRE(argc >= 2);
    base = argv[1];
    REQUIRE(pvfs_init(NULL) == 0);
    CHECK_OK(pvfs_mkdir(base, 0755));
    char path[512];
    shared_fd = pvfs_open(join(path, sizeof path, base, "shared"), O_CREAT | O_RDWR, 0644);
    REQUIRE(shared_fd >= 0);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) REQUIRE(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK(failures == 0);
    CHECK(pvfs_lseek(shared_fd, 0, SEEK_CUR) == THREADS * ROUNDS * 100);
    unsigned char *all = malloc(THREADS * ROUNDS * 100);
    CHECK(pvfs_pread(shared_fd, all, THREADS * ROUNDS * 100, 0) == THREADS * ROUNDS * 100);
    int counts[THREADS] = {0};
    for (int rec = 0; rec < THREADS * ROUNDS; rec++) {
        unsigned char c = all[rec * 100];
        int whole = 1;
        for (int k = 1; k < 100; k++) whole &= all[rec * 100 + k] == c;
        CHECK(whole && c >= 'a' && c < 'a' + THREADS);
        if (c >= 'a' && c < 'a' + THREADS) counts[c - 'a']++;
    }
    for (int i = 0; i < THREADS; i++) CHECK(counts[i] == ROUNDS);
    CHECK_OK(pvfs_close(shared_fd));
    free(all);
    CHECK_OK(pvfs_finalize());
    return report("threads");
}
