/*
 * The file-system workloads of scripts/bench-everyday, in C so that the rates measure
 * the file system rather than an interpreter. One binary, six modes; each prints
 * "name value" lines on stdout and exits non-zero with a message on any error (every
 * read is checked against what was written).
 *
 *   workload mdtest DIR RANKS FILES SETTLE_MS
 *       mdtest-style metadata phases with RANKS processes, FILES files each: in a
 *       directory of its own per rank, creates of empty files, stats, removes; then
 *       creates of 3901-byte files, reads of them (whole), removes; then creates of
 *       3901-byte files in one shared directory, removes. Every phase starts in all
 *       ranks at once (a barrier over pipes) after SETTLE_MS of quiet (longer than the
 *       mount's attribute and entry cache times, so stats and reads ask the servers),
 *       and is timed from the start to the last rank's end.
 *   workload shared-write FILE RANKS BLOCK BLOCKS
 *       RANKS processes write one shared file in interleaved blocks of BLOCK bytes
 *       (rank r writes blocks r, r + RANKS, ...; BLOCKS each), each opening, writing,
 *       fsyncing (as IOR's -e) and closing, timed from their common start to the last
 *       one's end; the file is then read back and checked (not timed).
 *   workload randio FILE SIZE OPS
 *       One process: writes FILE (SIZE bytes, not timed), then OPS pwrite calls of
 *       4 KiB at random 4 KiB-aligned offsets, then OPS pread calls, on one O_RDWR
 *       descriptor; prints the median and 99th percentile of each call's time in us.
 *       The offsets come from a fixed seed, the same on every run.
 *   workload tree DIR PROCS TOP SUB FILES
 *       Creates DIR/dNNN/eNN/fNNNN: TOP x SUB directories of FILES files each, with
 *       0 to 4095 bytes each, by PROCS processes (the untimed set-up of the find, du,
 *       ls -lR and rm -rf steps).
 *   workload open-close FILE OPS
 *       One process opens FILE read-only and closes it OPS times; prints the mean
 *       time of one open and close in us (on the mount: three kernel round trips,
 *       no server).
 *   workload ping-pong OPS
 *       Two processes exchange 64-byte messages over a loopback TCP connection
 *       (TCP_NODELAY, blocking reads and writes), OPS round trips; prints the mean
 *       round trip in us: what waking a process on the other end costs here.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SMALL 3901

static void die(const char *what, const char *path) {
    fprintf(stderr, "workload: %s %s: %s\n", what, path ? path : "", strerror(errno));
    exit(1);
}

static void fail(const char *msg, const char *path) {
    fprintf(stderr, "workload: %s %s\n", msg, path ? path : "");
    exit(1);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long num(const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0) fail("not a number:", s);
    return v;
}

static void write_all(int fd, const char *buf, size_t n, const char *path) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("write", path);
        }
        buf += w;
        n -= (size_t)w;
    }
}

static void pwrite_all(int fd, const char *buf, size_t n, off_t off, const char *path) {
    while (n > 0) {
        ssize_t w = pwrite(fd, buf, n, off);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("pwrite", path);
        }
        buf += w;
        off += w;
        n -= (size_t)w;
    }
}

static void pread_all(int fd, char *buf, size_t n, off_t off, const char *path) {
    while (n > 0) {
        ssize_t r = pread(fd, buf, n, off);
        if (r < 0) {
            if (errno == EINTR) continue;
            die("pread", path);
        }
        if (r == 0) fail("short read of", path);
        buf += r;
        off += r;
        n -= (size_t)r;
    }
}

/* Every 3901-byte file holds the same bytes; a read checks them. */
static char small_data[SMALL];

static void create_file(const char *path, size_t bytes) {
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) die("create", path);
    if (bytes) write_all(fd, small_data, bytes, path);
    if (close(fd)) die("close", path);
}

/* --- mdtest ------------------------------------------------------------------- */

enum { CREATE_EMPTY, STAT_EMPTY, REMOVE_EMPTY, CREATE_SMALL, READ_SMALL, REMOVE_SMALL,
       SHARED_CREATE_SMALL, SHARED_REMOVE_SMALL, PHASES };
static const char *phase_names[PHASES] = {
    "create_empty", "stat_empty", "remove_empty", "create_3901", "read_3901",
    "remove_3901", "shared_create_3901", "shared_remove_3901",
};

static void mdtest_phase(int phase, const char *dir, int rank, long files) {
    char path[4096], buf[8192];
    for (long i = 0; i < files; i++) {
        if (phase >= SHARED_CREATE_SMALL)
            snprintf(path, sizeof path, "%s/shared/r%d.%ld", dir, rank, i);
        else
            snprintf(path, sizeof path, "%s/r%d/%c%ld", dir, rank,
                     phase >= CREATE_SMALL ? 'g' : 'f', i);
        switch (phase) {
        case CREATE_EMPTY: create_file(path, 0); break;
        case CREATE_SMALL:
        case SHARED_CREATE_SMALL: create_file(path, SMALL); break;
        case STAT_EMPTY: {
            struct stat st;
            if (stat(path, &st)) die("stat", path);
            if (!S_ISREG(st.st_mode) || st.st_size != 0) fail("not an empty file:", path);
            break;
        }
        case READ_SMALL: {
            int fd = open(path, O_RDONLY);
            if (fd < 0) die("open", path);
            size_t got = 0;
            for (;;) {
                ssize_t r = read(fd, buf + got, sizeof buf - got);
                if (r < 0) {
                    if (errno == EINTR) continue;
                    die("read", path);
                }
                if (r == 0) break;
                got += (size_t)r;
                if (got == sizeof buf) break;
            }
            if (close(fd)) die("close", path);
            if (got != SMALL || memcmp(buf, small_data, SMALL)) fail("wrong contents:", path);
            break;
        }
        default:
            if (unlink(path)) die("unlink", path);
        }
    }
}

static int mdtest(int argc, char **argv) {
    if (argc != 6) fail("usage: workload mdtest DIR RANKS FILES SETTLE_MS", NULL);
    const char *dir = argv[2];
    int ranks = (int)num(argv[3]);
    long files = num(argv[4]);
    long settle_ms = num(argv[5]);
    if (ranks < 1 || files < 1) fail("need at least one rank and one file", NULL);
    char path[4096];
    if (mkdir(dir, 0755)) die("mkdir", dir);
    snprintf(path, sizeof path, "%s/shared", dir);
    if (mkdir(path, 0755)) die("mkdir", path);
    int go[ranks], done[ranks];
    pid_t pids[ranks];
    for (int r = 0; r < ranks; r++) {
        snprintf(path, sizeof path, "%s/r%d", dir, r);
        if (mkdir(path, 0755)) die("mkdir", path);
        int g[2], d[2];
        if (pipe(g) || pipe(d)) die("pipe", NULL);
        pid_t pid = fork();
        if (pid < 0) die("fork", NULL);
        if (pid == 0) {
            close(g[1]);
            close(d[0]);
            for (int q = 0; q < r; q++) {
                close(go[q]);
                close(done[q]);
            }
            unsigned char p;
            while (read(g[0], &p, 1) == 1) {
                mdtest_phase(p, dir, r, files);
                if (write(d[1], &p, 1) != 1) _exit(1);
            }
            _exit(0);
        }
        close(g[0]);
        close(d[1]);
        go[r] = g[1];
        done[r] = d[0];
        pids[r] = pid;
    }
    int failed = 0;
    for (unsigned char p = 0; p < PHASES && !failed; p++) {
        struct timespec settle = {settle_ms / 1000, (settle_ms % 1000) * 1000000L};
        nanosleep(&settle, NULL);
        double t0 = now();
        for (int r = 0; r < ranks; r++)
            if (write(go[r], &p, 1) != 1) failed = 1;
        for (int r = 0; r < ranks; r++) {
            unsigned char q;
            if (read(done[r], &q, 1) != 1) failed = 1;
        }
        double t = now() - t0;
        if (!failed) printf("%s %.1f\n", phase_names[p], ranks * files / t);
        fflush(stdout);
    }
    for (int r = 0; r < ranks; r++) close(go[r]);
    for (int r = 0; r < ranks; r++) {
        int st;
        if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) failed = 1;
        snprintf(path, sizeof path, "%s/r%d", dir, r);
        if (!failed && rmdir(path)) die("rmdir", path);
    }
    if (failed) fail("a rank failed in", dir);
    snprintf(path, sizeof path, "%s/shared", dir);
    if (rmdir(path)) die("rmdir", path);
    if (rmdir(dir)) die("rmdir", dir);
    return 0;
}

/* --- shared-write ------------------------------------------------------------- */

/* Block b holds its number in every 8 bytes: a misplaced block shows on read-back. */
static void fill_block(char *buf, long block, long size) {
    uint64_t v = (uint64_t)block;
    for (long i = 0; i + 8 <= size; i += 8) memcpy(buf + i, &v, 8);
    memset(buf + size - size % 8, (int)(block & 0xff), (size_t)(size % 8));
}

static int shared_write(int argc, char **argv) {
    if (argc != 6) fail("usage: workload shared-write FILE RANKS BLOCK BLOCKS", NULL);
    const char *file = argv[2];
    int ranks = (int)num(argv[3]);
    long block = num(argv[4]), blocks = num(argv[5]);
    if (ranks < 1 || block < 8 || blocks < 1) fail("bad sizes", NULL);
    int fd = open(file, O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) die("create", file);
    if (close(fd)) die("close", file);
    int go[2];
    if (pipe(go)) die("pipe", NULL);
    pid_t pids[ranks];
    for (int r = 0; r < ranks; r++) {
        pid_t pid = fork();
        if (pid < 0) die("fork", NULL);
        if (pid == 0) {
            close(go[1]);
            char *buf = malloc((size_t)block);
            if (!buf) fail("out of memory", NULL);
            char c;
            if (read(go[0], &c, 1) != 0) _exit(1); /* EOF: everyone starts */
            int f = open(file, O_WRONLY);
            if (f < 0) die("open", file);
            for (long k = 0; k < blocks; k++) {
                long b = r + k * ranks;
                fill_block(buf, b, block);
                pwrite_all(f, buf, (size_t)block, (off_t)b * block, file);
            }
            if (fsync(f)) die("fsync", file);
            if (close(f)) die("close", file);
            _exit(0);
        }
        pids[r] = pid;
    }
    close(go[0]);
    double t0 = now();
    close(go[1]);
    int failed = 0;
    for (int r = 0; r < ranks; r++) {
        int st;
        if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) failed = 1;
    }
    double t = now() - t0;
    if (failed) fail("a rank failed writing", file);
    long total = ranks * blocks;
    fd = open(file, O_RDONLY);
    if (fd < 0) die("open", file);
    struct stat st;
    if (fstat(fd, &st)) die("fstat", file);
    if (st.st_size != (off_t)total * block) fail("wrong size:", file);
    char *got = malloc((size_t)block), *want = malloc((size_t)block);
    if (!got || !want) fail("out of memory", NULL);
    for (long b = 0; b < total; b++) {
        pread_all(fd, got, (size_t)block, (off_t)b * block, file);
        fill_block(want, b, block);
        if (memcmp(got, want, (size_t)block)) fail("wrong contents read back:", file);
    }
    close(fd);
    printf("write_mib_s %.1f\n", (double)total * block / t / 1048576.0);
    return 0;
}

/* --- randio ------------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next_rand(void) { /* xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void percentiles(const char *name, double *us, long n) {
    qsort(us, (size_t)n, sizeof *us, cmp_double);
    double median = n % 2 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2;
    printf("%s_median_us %.1f\n%s_p99_us %.1f\n", name, median, name, us[(n * 99) / 100]);
}

static int randio(int argc, char **argv) {
    if (argc != 5) fail("usage: workload randio FILE SIZE OPS", NULL);
    const char *file = argv[2];
    long size = num(argv[3]), ops = num(argv[4]);
    long pages = size / 4096;
    if (pages < 1 || ops < 1) fail("bad sizes", NULL);
    int fd = open(file, O_CREAT | O_EXCL | O_RDWR, 0644);
    if (fd < 0) die("create", file);
    char *chunk = malloc(1 << 20);
    if (!chunk) fail("out of memory", NULL);
    for (long off = 0; off < pages * 4096; off += 1 << 20) {
        long n = pages * 4096 - off < (1 << 20) ? pages * 4096 - off : (1 << 20);
        for (long i = 0; i < n; i += 4096) fill_block(chunk + i, (off + i) / 4096, 4096);
        pwrite_all(fd, chunk, (size_t)n, off, file);
    }
    if (fsync(fd)) die("fsync", file);
    if (close(fd)) die("close", file);
    fd = open(file, O_RDWR);
    if (fd < 0) die("open", file);
    double *us = malloc(sizeof(double) * (size_t)ops);
    char page[4096], want[4096];
    if (!us) fail("out of memory", NULL);
    /* pwrite writes each page with its own contents again, so pread can check it. */
    for (long i = 0; i < ops; i++) {
        long p = (long)(next_rand() % (uint64_t)pages);
        fill_block(page, p, 4096);
        double t0 = now();
        pwrite_all(fd, page, 4096, (off_t)p * 4096, file);
        us[i] = (now() - t0) * 1e6;
    }
    percentiles("pwrite", us, ops);
    for (long i = 0; i < ops; i++) {
        long p = (long)(next_rand() % (uint64_t)pages);
        double t0 = now();
        pread_all(fd, page, 4096, (off_t)p * 4096, file);
        us[i] = (now() - t0) * 1e6;
        fill_block(want, p, 4096);
        if (memcmp(page, want, 4096)) fail("wrong contents read back:", file);
    }
    percentiles("pread", us, ops);
    if (close(fd)) die("close", file);
    if (unlink(file)) die("unlink", file);
    return 0;
}

/* --- tree --------------------------------------------------------------------- */

static int tree(int argc, char **argv) {
    if (argc != 7) fail("usage: workload tree DIR PROCS TOP SUB FILES", NULL);
    const char *dir = argv[2];
    int procs = (int)num(argv[3]);
    long top = num(argv[4]), sub = num(argv[5]), files = num(argv[6]);
    if (procs < 1) fail("need at least one process", NULL);
    static char data[4096];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (char)('a' + i % 26);
    if (mkdir(dir, 0755)) die("mkdir", dir);
    pid_t pids[procs];
    for (int p = 0; p < procs; p++) {
        pid_t pid = fork();
        if (pid < 0) die("fork", NULL);
        if (pid == 0) {
            char path[4096];
            for (long t = p; t < top; t += procs) {
                snprintf(path, sizeof path, "%s/d%03ld", dir, t);
                if (mkdir(path, 0755)) die("mkdir", path);
                for (long s = 0; s < sub; s++) {
                    snprintf(path, sizeof path, "%s/d%03ld/e%02ld", dir, t, s);
                    if (mkdir(path, 0755)) die("mkdir", path);
                    for (long f = 0; f < files; f++) {
                        snprintf(path, sizeof path, "%s/d%03ld/e%02ld/f%04ld", dir, t, s, f);
                        int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
                        if (fd < 0) die("create", path);
                        size_t n = (size_t)(((t * sub + s) * files + f) * 7919 % 4096);
                        if (n) write_all(fd, data, n, path);
                        if (close(fd)) die("close", path);
                    }
                }
            }
            _exit(0);
        }
        pids[p] = pid;
    }
    int failed = 0;
    for (int p = 0; p < procs; p++) {
        int st;
        if (waitpid(pids[p], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) failed = 1;
    }
    if (failed) fail("a process failed creating", dir);
    printf("files %ld\n", top * sub * files);
    return 0;
}

/* --- open-close, ping-pong ------------------------------------------------------ */

static int open_close(int argc, char **argv) {
    if (argc != 4) fail("usage: workload open-close FILE OPS", NULL);
    const char *file = argv[2];
    long ops = num(argv[3]);
    if (ops < 1) fail("need at least one open", NULL);
    double t0 = now();
    for (long i = 0; i < ops; i++) {
        int fd = open(file, O_RDONLY);
        if (fd < 0) die("open", file);
        if (close(fd)) die("close", file);
    }
    printf("open_close_us %.2f\n", (now() - t0) * 1e6 / (double)ops);
    return 0;
}

/* Writes or reads exactly n bytes of a socket. */
static void exchange(int fd, char *buf, size_t n, int out) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = out ? write(fd, buf + done, n - done) : read(fd, buf + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die(out ? "send" : "receive", "loopback");
        done += (size_t)r;
    }
}

static int ping_pong(int argc, char **argv) {
    if (argc != 3) fail("usage: workload ping-pong OPS", NULL);
    long ops = num(argv[2]);
    if (ops < 1) fail("need at least one round trip", NULL);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &alen))
        die("listen", "loopback");
    int one = 1;
    char buf[64] = {0};
    pid_t pid = fork();
    if (pid < 0) die("fork", NULL);
    if (pid == 0) {
        int c = accept(l, NULL, NULL);
        if (c < 0) _exit(1);
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        for (long i = 0; i < ops; i++) {
            exchange(c, buf, sizeof buf, 0);
            exchange(c, buf, sizeof buf, 1);
        }
        _exit(0);
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) die("connect", "loopback");
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    double t0 = now();
    for (long i = 0; i < ops; i++) {
        exchange(s, buf, sizeof buf, 1);
        exchange(s, buf, sizeof buf, 0);
    }
    double t = now() - t0;
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) fail("the echo process failed", NULL);
    printf("ping_pong_us %.2f\n", t * 1e6 / (double)ops);
    return 0;
}

int main(int argc, char **argv) {
    for (size_t i = 0; i < SMALL; i++) small_data[i] = (char)(i * 31 + 7);
    signal(SIGPIPE, SIG_IGN); /* a rank that died shows as a failed phase */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "mdtest")) return mdtest(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "shared-write")) return shared_write(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "randio")) return randio(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "tree")) return tree(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "open-close")) return open_close(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "ping-pong")) return ping_pong(argc, argv);
    fail("usage: workload mdtest|shared-write|randio|tree|open-close|ping-pong ...", NULL);
    return 2;
}
