/*
 * A file exerciser in the manner of fsx (Avadis Tevanian and Jordan Hubbard's File
 * System eXerciser, as kept in xfstests): a seeded random mix of operations on one
 * file, every read checked against an in-memory copy of what the file must hold.
 *
 *   fsx FILE SEED OPS MAXLEN
 *
 * Operations: write (lseek + write), pwrite anywhere up to MAXLEN (holes in
 * between), read and pread (checked, short at the end of the file), truncate up and
 * down, fallocate (allocate, KEEP_SIZE past the end, PUNCH_HOLE | KEEP_SIZE,
 * ZERO_RANGE with or without KEEP_SIZE where the file system has it), reads and
 * writes through a shared mapping (msync'ed), fsync, and close-and-reopen. Every
 * 64 operations, and at the end, the whole file is read back and its size checked.
 *
 * On a mismatch it prints the seed, the operation number, the first bad offset and
 * the last operations, and exits 1; otherwise "fsx: OPS operations, seed SEED, ok".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *path;
static uint64_t seed, state;
static unsigned char *good; /* what the file must hold */
static unsigned char *buf;  /* scratch */
static off_t size;          /* what its size must be */
static off_t maxlen;
static int fd = -1;
static long opno;
static int zero_range_works = 1;

#define LOG 32
static char log_ring[LOG][128];

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log_ring[opno % LOG], sizeof log_ring[0], fmt, ap);
    va_end(ap);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...) {
    int e = errno;
    va_list ap;
    printf("fsx: %s, seed %" PRIu64 ", operation %ld: ", path, seed, opno);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf(" (errno %d %s)\nlast operations:\n", e, strerror(e));
    long first = opno >= LOG ? opno - LOG + 1 : 0;
    for (long i = first; i <= opno; i++)
        printf("  %6ld %s\n", i, log_ring[i % LOG]);
    exit(1);
}

/* xorshift64*: the same sequence for the same seed everywhere. */
static uint64_t rnd(void) {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545f4914f6cdd1dULL;
}

static off_t below(off_t n) { return n <= 0 ? 0 : (off_t)(rnd() % (uint64_t)n); }

/* A length up to `most`, usually small, sometimes large. */
static off_t length(off_t most) {
    off_t l;
    switch (rnd() % 4) {
    case 0: l = 1 + below(512); break;
    case 1: l = 1 + below(8192); break;
    case 2: l = 1 + below(65536 * 2); break;
    default: l = 1 + below(most); break;
    }
    return l > most ? most : l;
}

static void fill(unsigned char *p, off_t n) {
    for (off_t i = 0; i < n; i++)
        p[i] = (unsigned char)(rnd() >> 56) | 1; /* never 0: holes must show */
}

static void reopen(void) {
    if (fd >= 0 && close(fd) != 0)
        die("close");
    fd = open(path, O_RDWR);
    if (fd < 0)
        die("open");
}

static void check_range(off_t off, off_t len, const unsigned char *got, const char *how) {
    for (off_t i = 0; i < len; i++)
        if (got[i] != good[off + i])
            die("%s: byte %lld is %#x, must be %#x", how, (long long)(off + i), got[i],
                good[off + i]);
}

static void check_all(void) {
    struct stat st;
    if (fstat(fd, &st) != 0)
        die("fstat");
    if (st.st_size != size)
        die("size %lld, must be %lld", (long long)st.st_size, (long long)size);
    off_t done = 0;
    while (done < size) {
        ssize_t n = pread(fd, buf, size - done, done);
        if (n <= 0)
            die("read back at %lld: %zd", (long long)done, n);
        check_range(done, n, buf, "read back");
        done += n;
    }
    if (pread(fd, buf, 1, size) != 0)
        die("a byte past the end");
}

/* good[] gets `n` bytes at `off`, growing the size (and zeroing a gap). */
static void model_write(off_t off, off_t n, const unsigned char *data) {
    if (off > size)
        memset(good + size, 0, off - size);
    memcpy(good + off, data, n);
    if (off + n > size)
        size = off + n;
}

static void model_resize(off_t to) {
    if (to > size)
        memset(good + size, 0, to - size);
    size = to;
}

static void op_write(int positioned) {
    off_t off = below(maxlen - 1);
    off_t n = length(maxlen - off);
    fill(buf, n);
    note("%s %lld +%lld", positioned ? "pwrite" : "write", (long long)off, (long long)n);
    ssize_t w;
    if (positioned) {
        w = pwrite(fd, buf, n, off);
    } else {
        if (lseek(fd, off, SEEK_SET) != off)
            die("lseek");
        w = write(fd, buf, n);
    }
    if (w != n)
        die("write returned %zd of %lld", w, (long long)n);
    model_write(off, n, buf);
}

static void op_read(int positioned) {
    off_t off = below(size + 4096);
    off_t n = length(maxlen);
    note("%s %lld +%lld", positioned ? "pread" : "read", (long long)off, (long long)n);
    ssize_t r;
    if (positioned) {
        r = pread(fd, buf, n, off);
    } else {
        if (lseek(fd, off, SEEK_SET) != off)
            die("lseek");
        r = read(fd, buf, n);
    }
    off_t want = off >= size ? 0 : (off + n > size ? size - off : n);
    if (r != want)
        die("read returned %zd, must be %lld", r, (long long)want);
    check_range(off, r, buf, "read");
}

static void op_truncate(void) {
    off_t to = rnd() % 2 ? below(size + 1) : below(maxlen);
    note("truncate %lld (from %lld)", (long long)to, (long long)size);
    if (ftruncate(fd, to) != 0)
        die("ftruncate");
    model_resize(to);
}

static void op_fallocate(void) {
    off_t off = below(maxlen - 1);
    off_t n = length(maxlen - off);
    int modes[] = {0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                   FALLOC_FL_ZERO_RANGE, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE};
    int mode = modes[rnd() % 5];
    if ((mode & FALLOC_FL_ZERO_RANGE) && !zero_range_works)
        mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    note("fallocate %#x %lld +%lld (size %lld)", mode, (long long)off, (long long)n,
         (long long)size);
    if (fallocate(fd, mode, off, n) != 0) {
        if (errno == EOPNOTSUPP && (mode & FALLOC_FL_ZERO_RANGE)) {
            zero_range_works = 0;
            return;
        }
        die("fallocate");
    }
    off_t end = off + n;
    if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
        /* Zeros within the size; past it, nothing readable changes. */
        off_t zend = end < size ? end : size;
        if (off < zend)
            memset(good + off, 0, zend - off);
    }
    if (!(mode & FALLOC_FL_KEEP_SIZE) && end > size)
        model_resize(end);
}

static void op_mmap(int writing) {
    if (size == 0)
        return;
    off_t off = below(size);
    off_t n = length(size - off);
    note("mmap %s %lld +%lld", writing ? "write" : "read", (long long)off, (long long)n);
    unsigned char *m = mmap(NULL, size, PROT_READ | (writing ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        die("mmap of %lld bytes", (long long)size);
    if (writing) {
        fill(buf, n);
        memcpy(m + off, buf, n);
        if (msync(m, size, MS_SYNC) != 0)
            die("msync");
        memcpy(good + off, buf, n);
    } else {
        check_range(off, n, m + off, "mapped read");
    }
    if (munmap(m, size) != 0)
        die("munmap");
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: fsx FILE SEED OPS MAXLEN\n");
        return 2;
    }
    path = argv[1];
    seed = strtoull(argv[2], NULL, 0);
    long ops = strtol(argv[3], NULL, 0);
    maxlen = strtoll(argv[4], NULL, 0);
    if (ops <= 0 || maxlen < 4096) {
        fprintf(stderr, "fsx: OPS must be positive, MAXLEN at least 4096\n");
        return 2;
    }
    state = seed ? seed : 1;
    good = calloc(maxlen, 1);
    buf = malloc(maxlen + 4096);
    if (!good || !buf)
        return 2;
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        die("create");
    for (opno = 0; opno < ops; opno++) {
        switch (rnd() % 16) {
        case 0: case 1: op_write(0); break;
        case 2: case 3: case 4: op_write(1); break;
        case 5: case 6: op_read(0); break;
        case 7: case 8: op_read(1); break;
        case 9: op_truncate(); break;
        case 10: case 11: op_fallocate(); break;
        case 12: op_mmap(0); break;
        case 13: op_mmap(1); break;
        case 14:
            note("fsync");
            if (fsync(fd) != 0)
                die("fsync");
            break;
        default:
            note("reopen");
            reopen();
            break;
        }
        if (opno % 64 == 63)
            check_all();
    }
    note("final check");
    check_all();
    reopen();
    check_all();
    close(fd);
    printf("fsx: %s: %ld operations, seed %" PRIu64 ", ok%s\n", path, ops, seed,
           zero_range_works ? "" : " (no ZERO_RANGE here)");
    return 0;
}
