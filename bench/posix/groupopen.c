/* Figure 3 (and the breakdown of Figure 4) of the POSIX I/O extensions paper
 * (Vilayannur et al., 2008): P processes obtain a descriptor for one file, either each
 * with pvfs_open, or rank 0 with pvfs_openg, a broadcast of the group handle over pipes
 * (rank 0 writes it to each other rank), and pvfs_openfh everywhere. Path depth 0 (/F)
 * and 8 (BASE/d2/.../d8/F); a new file (O_CREAT) or an existing one. Time = from the
 * common start to the last process holding its descriptor; median of --iters. Also the
 * requests all processes sent.
 *
 *   groupopen [--procs 1,2,4,8,16] [--iters 20] [--base /posixext-open] */
#include "common.h"

enum { MAXP = 256 };

struct cmd {
    int quit, group, create, depth, iter, procs;
};

struct result {
    double start, got_handle, after_openg, after_bcast, end;
    unsigned long long requests;
};

static const char *base = "/posixext-open";
static int bc[MAXP][2]; /* broadcast pipes: rank 0 -> rank r */

static void path_of(char *out, size_t n, const struct cmd *c) {
    /* Depth 8: BASE/d2/.../d8/F (BASE is the first of the 8 directories). */
    int at = snprintf(out, n, "%s", c->depth ? base : "");
    for (int d = 2; d <= c->depth; d++) at += snprintf(out + at, n - (size_t)at, "/d%d", d);
    if (c->create)
        snprintf(out + at, n - (size_t)at, "/%snew-p%d-%d", c->depth ? "" : "posixext-", c->procs, c->iter);
    else
        snprintf(out + at, n - (size_t)at, "/%sexisting", c->depth ? "" : "posixext-");
}

static void worker(int rank, int cmdfd, int resfd) {
    warm_up();
    static unsigned char handle[PVFS_GROUP_HANDLE_MAX];
    for (;;) {
        struct cmd c;
        get_all(cmdfd, &c, sizeof c);
        if (c.quit) break;
        char path[1024];
        path_of(path, sizeof path, &c);
        int flags = c.create ? (O_CREAT | O_RDWR) : O_RDWR;
        char go;
        put_all(resfd, "r", 1);
        get_all(cmdfd, &go, 1);
        MUST(pvfs_stats_reset());
        struct result r = {0};
        r.start = now();
        int fd;
        if (!c.group) {
            fd = pvfs_open(path, flags, 0644);
            r.got_handle = r.start;
        } else if (rank == 0) {
            size_t len = sizeof handle;
            MUST(pvfs_openg(path, handle, &len, flags, 0644));
            r.after_openg = now();
            for (int p = 1; p < c.procs; p++) {
                put_all(bc[p][1], &len, sizeof len);
                put_all(bc[p][1], handle, len);
            }
            r.after_bcast = now();
            r.got_handle = r.after_bcast;
            fd = pvfs_openfh(handle, len);
        } else {
            size_t len;
            get_all(bc[rank][0], &len, sizeof len);
            if (len > sizeof handle) die("handle length");
            get_all(bc[rank][0], handle, len);
            r.got_handle = now();
            fd = pvfs_openfh(handle, len);
        }
        r.end = now();
        MUST(fd);
        r.requests = pvfs_requests_sent();
        MUST(pvfs_close(fd));
        put_all(resfd, &r, sizeof r);
    }
}

int main(int argc, char **argv) {
    const char *plist = "1,2,4,8,16";
    int iters = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--procs")) plist = argv[i + 1];
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--base")) base = argv[i + 1];
        else { fprintf(stderr, "groupopen: unknown option %s\n", argv[i]); return 2; }
    }
    if (iters < 1 || iters > 1000) iters = 20;
    /* The directory chain and the existing files, made by a short-lived client. */
    MUST(pvfs_init(NULL));
    char path[1024];
    MUST(pvfs_mkdir(base, 0755));
    snprintf(path, sizeof path, "%s", base);
    for (int d = 2; d <= 8; d++) {
        size_t at = strlen(path);
        snprintf(path + at, sizeof path - at, "/d%d", d);
        MUST(pvfs_mkdir(path, 0755));
    }
    for (int depth = 0; depth <= 8; depth += 8) {
        struct cmd c = {.depth = depth};
        path_of(path, sizeof path, &c);
        int fd = pvfs_open(path, O_CREAT | O_RDWR, 0644);
        MUST(fd);
        MUST(pvfs_close(fd));
    }
    MUST(pvfs_finalize());

    printf("| processes | depth | file | open ms | openg+bcast+openfh ms | openg / bcast / max openfh ms | requests: open / group |\n");
    printf("|---|---|---|---|---|---|---|\n");
    char pl[256];
    snprintf(pl, sizeof pl, "%s", plist);
    for (char *sp = pl, *tp; (tp = strtok_r(sp, ",", &sp)) != NULL;) {
        int P = atoi(tp);
        if (P < 1 || P > MAXP) continue;
        for (int p = 0; p < P; p++)
            if (pipe(bc[p])) die("pipe");
        struct crew cr;
        crew_start(&cr, P, worker);
        for (int create = 1; create >= 0; create--)
            for (int depth = 0; depth <= 8; depth += 8) {
                double t[2][1000], og[1000], bcst[1000], fh[1000];
                unsigned long long reqs[2] = {0, 0};
                for (int group = 0; group <= 1; group++)
                    for (int it = 0; it < iters; it++) {
                        struct cmd c = {.group = group, .create = create, .depth = depth,
                                        .iter = it * 2 + group, .procs = P};
                        for (int p = 0; p < P; p++) put_all(cr.cmd[p], &c, sizeof c);
                        char ready;
                        for (int p = 0; p < P; p++) get_all(cr.res[p], &ready, 1);
                        for (int p = 0; p < P; p++) put_all(cr.cmd[p], "g", 1);
                        double start = 1e300, end = 0, maxfh = 0, bend = 0;
                        struct result r0 = {0};
                        unsigned long long q = 0;
                        for (int p = 0; p < P; p++) {
                            struct result r;
                            get_all(cr.res[p], &r, sizeof r);
                            if (p == 0) r0 = r;
                            if (r.start < start) start = r.start;
                            if (r.end > end) end = r.end;
                            if (r.end - r.got_handle > maxfh) maxfh = r.end - r.got_handle;
                            if (p > 0 && r.got_handle > bend) bend = r.got_handle;
                            q += r.requests;
                        }
                        t[group][it] = (end - start) * 1e3;
                        if (group) {
                            og[it] = (r0.after_openg - r0.start) * 1e3;
                            bcst[it] = P > 1 ? (bend - r0.after_openg) * 1e3 : 0;
                            fh[it] = maxfh * 1e3;
                        }
                        reqs[group] = q;
                    }
                printf("| %d | %d | %s | %.2f | %.2f | %.2f / %.3f / %.3f | %llu / %llu |\n", P, depth,
                       create ? "new" : "existing", median(t[0], iters), median(t[1], iters),
                       median(og, iters), median(bcst, iters), median(fh, iters), reqs[0], reqs[1]);
                fflush(stdout);
            }
        struct cmd quit = {.quit = 1};
        for (int p = 0; p < P; p++) put_all(cr.cmd[p], &quit, sizeof quit);
        crew_stop(&cr);
        for (int p = 0; p < P; p++) {
            close(bc[p][0]);
            close(bc[p][1]);
        }
    }
    return 0;
}
