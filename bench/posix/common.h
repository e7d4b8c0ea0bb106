/* Shared helpers of the POSIX I/O extensions paper's experiments (Vilayannur et al.,
 * 2008) (bench/posix/ programs): timing, a pipe-based
 * barrier for forked worker processes, medians, and argument parsing. */
#ifndef PVFS_BENCH_COMMON_H
#define PVFS_BENCH_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pvfs.h"

/* Seconds on the monotonic clock (comparable across processes of one machine). */
static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline void die(const char *what) {
    fprintf(stderr, "bench: %s: %s (%s)\n", what, strerror(errno), pvfs_last_error());
    exit(1);
}

#define MUST(x)                    \
    do {                           \
        if ((x) < 0) die(#x);      \
    } while (0)

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Full read/write of a pipe. */
static inline void put_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) die("pipe write");
        c += k;
        n -= (size_t)k;
    }
}

static inline void get_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) die("pipe read");
        c += k;
        n -= (size_t)k;
    }
}

/* P forked workers, each with a command pipe (parent -> worker) and a result pipe
 * (worker -> parent). */
struct crew {
    int n;
    pid_t pid[256];
    int cmd[256];
    int res[256];
};

/* Forks `n` workers running `body(rank, cmd_fd, res_fd)`; each initializes libpvfs
 * itself (a client per process, as independent application processes). */
static inline void crew_start(struct crew *c, int n, void (*body)(int, int, int)) {
    c->n = n;
    for (int r = 0; r < n; r++) {
        int a[2], b[2];
        if (pipe(a) || pipe(b)) die("pipe");
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            close(a[1]);
            close(b[0]);
            for (int k = 0; k < r; k++) {
                close(c->cmd[k]);
                close(c->res[k]);
            }
            if (pvfs_init(NULL) != 0) die("pvfs_init");
            body(r, a[0], b[1]);
            pvfs_finalize();
            _exit(0);
        }
        close(a[0]);
        close(b[1]);
        c->pid[r] = pid;
        c->cmd[r] = a[1];
        c->res[r] = b[0];
    }
}

static inline void crew_stop(struct crew *c) {
    for (int r = 0; r < c->n; r++) {
        close(c->cmd[r]);
        close(c->res[r]);
    }
    for (int r = 0; r < c->n; r++) {
        int st;
        waitpid(c->pid[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "bench: worker %d failed\n", r);
            exit(1);
        }
    }
}

/* Connects a worker to every server and caches the root, outside any timing. */
static inline void warm_up(void) {
    struct pvfs_statfs fs;
    struct stat st;
    MUST(pvfs_statfs(&fs));
    MUST(pvfs_stat("/", &st));
}

#endif
