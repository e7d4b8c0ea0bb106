/* Figures 5 and 6 of the POSIX I/O extensions paper (Vilayannur et al., 2008):
 * aggregate write and read bandwidth of P processes moving R file regions of B bytes
 * each (strided, interleaved between processes) from/to 25 memory regions, with three
 * strategies:
 *   read/write    one call per (file region x memory region) piece, lseek per region
 *   readv/writev  one call per file region (the memory pieces as an iovec)
 *   readx/writex  one call for all regions
 * Each process moves --volume bytes per phase (at least R*B); medians of --repeat.
 *
 *   noncontig [--procs 4] [--blocks 256K,1M,4M] [--regions 1,4,16] [--mem 25]
 *             [--stripe 16K] [--volume 32M] [--repeat 3] [--path /posixext-noncontig] */
#include <sys/uio.h>

#include "common.h"

enum { MAXMEM = 1024, MAXREG = 1024 };

struct cmd {
    int method; /* 0 plain, 1 vector, 2 x; -1 quit */
    int regions;
    int write;
    int ops;
    long long block;
};

struct result {
    double start, end;
    unsigned long long requests;
};

static int procs = 4, mems = 25;
static long long stripe = 16384;
static const char *path = "/posixext-noncontig";

static long long parse_size(const char *s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10;
    if (*end == 'M' || *end == 'm') v <<= 20;
    if (*end == 'G' || *end == 'g') v <<= 30;
    return v;
}

/* The file offset of region r of operation k of process p. */
static off_t region_off(int k, int r, int R, int p, long long B) {
    return (off_t)(((long long)k * R + r) * procs + p) * B;
}

/* Memory pieces [lo, hi) of the buffer as iovecs (clipped to piece boundaries). */
static int pieces(struct iovec *out, unsigned char *buf, long long lo, long long hi, long long piece) {
    int n = 0;
    while (lo < hi) {
        long long end = (lo / piece + 1) * piece;
        if (end > hi) end = hi;
        out[n].iov_base = buf + lo;
        out[n].iov_len = (size_t)(end - lo);
        n++;
        lo = end;
    }
    return n;
}

static void worker(int rank, int cmdfd, int resfd) {
    warm_up();
    int fd = pvfs_open(path, O_RDWR, 0);
    MUST(fd);
    unsigned char *buf = NULL;
    size_t cap = 0;
    struct iovec iov[MAXMEM + MAXREG];
    struct pvfs_xtvec xtv[MAXREG];
    for (;;) {
        struct cmd c;
        get_all(cmdfd, &c, sizeof c);
        if (c.method < 0) break;
        long long total = (long long)c.regions * c.block;
        if ((size_t)total > cap) {
            free(buf);
            cap = (size_t)total;
            buf = malloc(cap);
            if (!buf) die("malloc");
            memset(buf, rank + 1, cap);
        }
        /* 25 memory regions of (nearly) equal size. */
        long long piece = (total + mems - 1) / mems;
        char go;
        put_all(resfd, "r", 1);
        get_all(cmdfd, &go, 1);
        MUST(pvfs_stats_reset());
        struct result res;
        res.start = now();
        for (int k = 0; k < c.ops; k++) {
            if (c.method == 2) {
                int n = pieces(iov, buf, 0, total, piece);
                for (int r = 0; r < c.regions; r++) {
                    xtv[r].xtv_off = region_off(k, r, c.regions, rank, c.block);
                    xtv[r].xtv_len = (size_t)c.block;
                }
                ssize_t got = c.write ? pvfs_writex(fd, iov, (size_t)n, xtv, (size_t)c.regions)
                                      : pvfs_readx(fd, iov, (size_t)n, xtv, (size_t)c.regions);
                if (got != total) die("readx/writex");
                continue;
            }
            for (int r = 0; r < c.regions; r++) {
                MUST(pvfs_lseek(fd, region_off(k, r, c.regions, rank, c.block), SEEK_SET));
                int n = pieces(iov, buf, r * c.block, (r + 1) * c.block, piece);
                if (c.method == 1) {
                    ssize_t got = c.write ? pvfs_writev(fd, iov, n) : pvfs_readv(fd, iov, n);
                    if (got != c.block) die("readv/writev");
                } else {
                    for (int i = 0; i < n; i++) {
                        ssize_t got = c.write ? pvfs_write(fd, iov[i].iov_base, iov[i].iov_len)
                                              : pvfs_read(fd, iov[i].iov_base, iov[i].iov_len);
                        if (got != (ssize_t)iov[i].iov_len) die("read/write");
                    }
                }
            }
        }
        res.end = now();
        res.requests = pvfs_requests_sent();
        put_all(resfd, &res, sizeof res);
    }
    free(buf);
    MUST(pvfs_close(fd));
}

/* Runs one phase on every worker; returns MiB/s and the requests per operation. */
static double phase(struct crew *cr, struct cmd c, double *req_per_op) {
    for (int p = 0; p < procs; p++) put_all(cr->cmd[p], &c, sizeof c);
    char ready;
    for (int p = 0; p < procs; p++) get_all(cr->res[p], &ready, 1);
    for (int p = 0; p < procs; p++) put_all(cr->cmd[p], "g", 1);
    double start = 1e300, end = 0;
    unsigned long long reqs = 0;
    for (int p = 0; p < procs; p++) {
        struct result r;
        get_all(cr->res[p], &r, sizeof r);
        if (r.start < start) start = r.start;
        if (r.end > end) end = r.end;
        reqs += r.requests;
    }
    *req_per_op = (double)reqs / ((double)procs * c.ops);
    double bytes = (double)procs * c.ops * c.regions * (double)c.block;
    return bytes / (end - start) / (1 << 20);
}

int main(int argc, char **argv) {
    const char *blocks = "256K,1M,4M", *regions = "1,4,16";
    long long volume = 32 << 20;
    int repeat = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--procs")) procs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--blocks")) blocks = argv[i + 1];
        else if (!strcmp(argv[i], "--regions")) regions = argv[i + 1];
        else if (!strcmp(argv[i], "--mem")) mems = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--stripe")) stripe = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--volume")) volume = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--path")) path = argv[i + 1];
        else { fprintf(stderr, "noncontig: unknown option %s\n", argv[i]); return 2; }
    }
    if (procs < 1 || procs > 256 || mems < 1 || mems > MAXMEM / 2 || repeat < 1 || repeat > 50) {
        fprintf(stderr, "noncontig: bad option value\n");
        return 2;
    }
    MUST(pvfs_init(NULL));
    struct pvfs_layout_hint h = {.stripe_size = (uint64_t)stripe, .stripe_count = -1, .first_server = 0};
    int fd = pvfs_open_layout(path, O_CREAT | O_TRUNC | O_RDWR, 0644, &h);
    MUST(fd);
    MUST(pvfs_get_layout(fd, &h));
    MUST(pvfs_close(fd));
    int servers = h.stripe_count;
    MUST(pvfs_finalize());

    struct crew cr;
    crew_start(&cr, procs, worker);
    printf("%d processes, %d memory regions, %lld KiB stripes over %d servers, %lld MiB per process per phase, median of %d\n\n",
           procs, mems, stripe >> 10, servers, volume >> 20, repeat);
    printf("| block | regions | write MiB/s | writev MiB/s | writex MiB/s | read MiB/s | readv MiB/s | readx MiB/s | requests per op (write/writev/writex) |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    char bl[256], rl[256];
    snprintf(bl, sizeof bl, "%s", blocks);
    for (char *sb = bl, *tb; (tb = strtok_r(sb, ",", &sb)) != NULL;) {
        long long B = parse_size(tb);
        snprintf(rl, sizeof rl, "%s", regions);
        for (char *sr = rl, *tr; (tr = strtok_r(sr, ",", &sr)) != NULL;) {
            int R = atoi(tr);
            if (R < 1 || R > MAXREG || B < 1) continue;
            int ops = (int)(volume / (R * B));
            if (ops < 1) ops = 1;
            double bw[2][3], rq[3];
            for (int w = 1; w >= 0; w--)
                for (int m = 0; m < 3; m++) {
                    double v[50];
                    for (int r = 0; r < repeat; r++) {
                        struct cmd c = {.method = m, .regions = R, .write = w, .ops = ops, .block = B};
                        double q;
                        v[r] = phase(&cr, c, &q);
                        if (w) rq[m] = q;
                    }
                    bw[w][m] = median(v, repeat);
                }
            char name[32];
            if (B >= 1 << 20) snprintf(name, sizeof name, "%lld MiB", B >> 20);
            else snprintf(name, sizeof name, "%lld KiB", B >> 10);
            printf("| %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f / %.0f / %.0f |\n", name, R,
                   bw[1][0], bw[1][1], bw[1][2], bw[0][0], bw[0][1], bw[0][2], rq[0], rq[1], rq[2]);
            fflush(stdout);
        }
    }
    struct cmd quit = {.method = -1};
    for (int p = 0; p < procs; p++) put_all(cr.cmd[p], &quit, sizeof quit);
    crew_stop(&cr);
    MUST(pvfs_init(NULL));
    MUST(pvfs_unlink(path));
    MUST(pvfs_finalize());
    return 0;
}
