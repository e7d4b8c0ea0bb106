/* Tables 1 and 2 of the POSIX I/O extensions paper (Vilayannur et al., 2008): reading a
 * directory of N files with its attributes four ways (getdents + lstat, getdents +
 * lstatlite, getdents_plus, getdents_plus_lite), and stat vs statlite of N files by
 * name. One process; medians of --repeat runs after one unmeasured pass. Prints
 * markdown rows with seconds and request counts.
 *
 *   meta [--counts 10,100,1000,5000] [--repeat 5] [--base /posixext-meta] [--size 1024] */
#include "common.h"

#define LITE (PVFS_SLITE_ATIME | PVFS_SLITE_MTIME | PVFS_SLITE_CTIME)

static long long file_size = 1024;

/* Each method returns the sum of the sizes it saw (-1 where sizes are not asked). */
static long long getdents_lstat(const char *dir, int lite) {
    PVFS_DIR *d = pvfs_opendir(dir);
    if (!d) die("opendir");
    struct pvfs_dirent *e;
    char path[1024];
    long long sum = 0;
    while ((e = pvfs_readdir(d)) != NULL) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lite) {
            struct pvfs_stat_lite sl;
            sl.st_litemask = LITE;
            MUST(pvfs_lstatlite(path, &sl));
            sum = -1;
        } else {
            struct stat st;
            MUST(pvfs_lstat(path, &st));
            sum += st.st_size;
        }
    }
    MUST(pvfs_closedir(d));
    return sum;
}

static long long getdents_plus(const char *dir, int lite) {
    static struct pvfs_dirent_plus buf[512];
    int fd = pvfs_open(dir, O_RDONLY | O_DIRECTORY, 0);
    MUST(fd);
    long long sum = lite ? -1 : 0;
    int n;
    while ((n = lite ? pvfs_getdents_plus_lite(fd, LITE, buf, 512) : pvfs_getdents_plus(fd, buf, 512)) > 0)
        for (int i = 0; i < n; i++) {
            if (buf[i].d_errno) die("entry attributes");
            if (!lite) sum += buf[i].d_stat.st_size;
        }
    MUST(n);
    MUST(pvfs_close(fd));
    return sum;
}

static long long stat_all(const char *dir, int n, int lite) {
    char path[1024];
    long long sum = lite ? -1 : 0;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/f%05d", dir, i);
        if (lite) {
            struct pvfs_stat_lite sl;
            sl.st_litemask = LITE;
            MUST(pvfs_statlite(path, &sl));
        } else {
            struct stat st;
            MUST(pvfs_stat(path, &st));
            sum += st.st_size;
        }
    }
    return sum;
}

enum { METHODS = 6 };
static const char *names[METHODS] = {"getdents+lstat", "getdents+lstatlite", "getdents_plus",
                                     "getdents_plus_lite", "stat", "statlite"};

static long long run(int m, const char *dir, int n) {
    switch (m) {
    case 0: return getdents_lstat(dir, 0);
    case 1: return getdents_lstat(dir, 1);
    case 2: return getdents_plus(dir, 0);
    case 3: return getdents_plus(dir, 1);
    case 4: return stat_all(dir, n, 0);
    default: return stat_all(dir, n, 1);
    }
}

int main(int argc, char **argv) {
    const char *counts = "10,100,1000,5000", *base = "/posixext-meta";
    int repeat = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--counts")) counts = argv[i + 1];
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--base")) base = argv[i + 1];
        else if (!strcmp(argv[i], "--size")) file_size = atoll(argv[i + 1]);
        else { fprintf(stderr, "meta: unknown option %s\n", argv[i]); return 2; }
    }
    if (repeat < 1 || repeat > 100) repeat = 5;
    MUST(pvfs_init(NULL));
    warm_up();
    MUST(pvfs_mkdir(base, 0755));
    char *data = calloc(1, (size_t)file_size + 1);
    double t[METHODS][100];
    unsigned long long reqs[METHODS], data_reqs[METHODS];
    printf("| files | %s | %s | %s | %s | %s | %s |\n", names[0], names[1], names[2], names[3], names[4], names[5]);
    printf("|---|---|---|---|---|---|---|\n");
    char list[256];
    snprintf(list, sizeof list, "%s", counts);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int n = atoi(tok);
        char dir[512], path[1024];
        snprintf(dir, sizeof dir, "%s/n%d", base, n);
        MUST(pvfs_mkdir(dir, 0755));
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/f%05d", dir, i);
            int fd = pvfs_open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
            MUST(fd);
            if (file_size > 0 && pvfs_write(fd, data, (size_t)file_size) != file_size) die("write");
            MUST(pvfs_close(fd));
        }
        for (int m = 0; m < METHODS; m++) run(m, dir, n); /* warm: unmeasured */
        for (int r = 0; r < repeat; r++)
            for (int k = 0; k < METHODS; k++) {
                int m = (k + r) % METHODS; /* rotate the order */
                MUST(pvfs_stats_reset());
                double t0 = now();
                long long sum = run(m, dir, n);
                t[m][r] = now() - t0;
                reqs[m] = pvfs_requests_sent();
                data_reqs[m] = pvfs_requests_for("data");
                if (sum >= 0 && sum != (long long)n * file_size) {
                    fprintf(stderr, "meta: %s saw %lld bytes, want %lld\n", names[m], sum,
                            (long long)n * file_size);
                    return 1;
                }
            }
        printf("| %d |", n);
        for (int m = 0; m < METHODS; m++)
            printf(" %.4f s (%llu req, %llu data) |", median(t[m], repeat), reqs[m], data_reqs[m]);
        printf("\n");
        fflush(stdout);
    }
    free(data);
    MUST(pvfs_finalize());
    return 0;
}
