/* A lock client driven line by line over stdin, for the lock tests: the test
 * starts one per "process" (on a mount, with the preload library, or built with
 * -DPVFS_CAPI against libpvfs), sends commands and reads one answer line per
 * command, so it can hold a lock in one process while another tries, waits or is
 * killed. Commands (N: a descriptor slot 0..15):
 *
 *   open N PATH r|w|rw|a        -> ok   (a: O_WRONLY|O_APPEND)
 *   close N                     -> ok
 *   lk N CMD TYPE START LEN     CMD: setlk setlkw getlk ofd-setlk ofd-setlkw ofd-getlk,
 *                               TYPE: r w u      -> ok | err ENAME | lock T START LEN PID | unlocked
 *   flock N sh|ex|un [nb]       -> ok | err ENAME
 *   lockf N lock|tlock|ulock|test LEN  (from the current offset)   -> ok | err ENAME
 *   seek N OFF                  -> ok
 *   pwrite N OFF TEXT           -> ok
 *   pread N OFF LEN             -> data TEXT (bytes as read; NUL shown as '.')
 *   hammer ROUNDS fcntl|flock HOLD_US N...  ROUNDS times: an exclusive whole-file
 *                               lock (F_SETLKW or LOCK_EX) on each slot in order, held
 *                               HOLD_US microseconds, then released in reverse order;
 *                               a lock refused with EDEADLK is counted and asked again
 *                               -> ok DEADLOCKS | err ENAME
 *   appends N COUNT TAG fcntl|flock|none  COUNT records "TAG NNNNNN\n" written one
 *                               by one, each under an exclusive whole-file lock
 *                               (none: without)     -> ok | err ENAME
 *   pid                         -> pid N
 *   exit                        -> (exits 0)
 *
 * SIGUSR1 has a handler without SA_RESTART (a waiting lock call then fails with
 * EINTR); SIGUSR2 one with SA_RESTART (the call goes on waiting).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#ifdef PVFS_CAPI
#include <pvfs.h>
#define OPEN(p, f) pvfs_open((p), (f), 0644)
#define CLOSE(fd) pvfs_close(fd)
#define LOCKCTL(fd, cmd, lk) pvfs_fcntl_lock((fd), (cmd), (lk))
#define FLOCK(fd, op) pvfs_flock((fd), (op))
#define PWRITE(fd, b, n, o) pvfs_pwrite((fd), (b), (n), (o))
#define PREAD(fd, b, n, o) pvfs_pread((fd), (b), (n), (o))
#define WRITE(fd, b, n) pvfs_write((fd), (b), (n))
#define LSEEK(fd, o) pvfs_lseek((fd), (o), SEEK_SET)
#else
#define OPEN(p, f) open((p), (f), 0644)
#define CLOSE(fd) close(fd)
#define LOCKCTL(fd, cmd, lk) fcntl((fd), (cmd), (lk))
#define FLOCK(fd, op) flock((fd), (op))
#define PWRITE(fd, b, n, o) pwrite((fd), (b), (n), (o))
#define PREAD(fd, b, n, o) pread((fd), (b), (n), (o))
#define WRITE(fd, b, n) write((fd), (b), (n))
#define LSEEK(fd, o) lseek((fd), (o), SEEK_SET)
#endif

static int fds[16];

static void answer_errno(int e) {
    const char *n = strerrorname_np(e);
    printf("err %s\n", n ? n : "E?");
}

static void on_signal(int sig) { (void)sig; }

static int slot(const char *s) {
    int n = atoi(s);
    return (n >= 0 && n < 16) ? n : 0;
}

static short lock_type(const char *t) {
    return t[0] == 'r' ? F_RDLCK : t[0] == 'w' ? F_WRLCK : F_UNLCK;
}

static char type_char(short t) { return t == F_RDLCK ? 'r' : t == F_WRLCK ? 'w' : 'u'; }

/* Takes (LOCK_EX / F_WRLCK) or releases a whole-file lock on fd, by flock or fcntl. */
static int whole_file(int fd, int use_flock, int take) {
    if (use_flock) return FLOCK(fd, take ? LOCK_EX : LOCK_UN);
    struct flock lk;
    memset(&lk, 0, sizeof lk);
    lk.l_type = take ? F_WRLCK : F_UNLCK;
    lk.l_whence = SEEK_SET;
    return LOCKCTL(fd, take ? F_SETLKW : F_SETLK, &lk);
}

/* The appends command (above): 0, or -errno of the first failure. */
static int appends(int fd, long count, const char *tag, const char *how) {
    int locked = strcmp(how, "none") != 0, use_flock = !strcmp(how, "flock");
    char rec[64];
    for (long i = 0; i < count; i++) {
        int n = snprintf(rec, sizeof rec, "%s %06ld\n", tag, i);
        if (locked && whole_file(fd, use_flock, 1) != 0) return -errno;
        if (WRITE(fd, rec, (size_t)n) != n) return -errno;
        if (locked && whole_file(fd, use_flock, 0) != 0) return -errno;
    }
    return 0;
}

/* The hammer command (above): the EDEADLKs counted, or -errno of another failure. */
static long hammer(long rounds, int use_flock, long hold_us, const int *slots, int n) {
    long deadlocks = 0;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < n; i++) {
            while (whole_file(fds[slots[i]], use_flock, 1) != 0) {
                if (errno != EDEADLK) return -errno;
                deadlocks++;
            }
        }
        if (hold_us > 0) usleep((useconds_t)hold_us);
        for (int i = n - 1; i >= 0; i--)
            if (whole_file(fds[slots[i]], use_flock, 0) != 0) return -errno;
    }
    return deadlocks;
}

int main(void) {
    char line[4096];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    setvbuf(stdout, NULL, _IOLBF, 0);
#ifdef PVFS_CAPI
    if (pvfs_init(NULL) != 0) {
        printf("init failed: %s\n", pvfs_last_error());
        return 1;
    }
#endif
    for (int i = 0; i < 16; i++) fds[i] = -1;
    while (fgets(line, sizeof line, stdin)) {
        char *argv[8] = {0};
        int argc = 0;
        line[strcspn(line, "\n")] = 0;
        for (char *tok = strtok(line, " "); tok && argc < 8; tok = strtok(NULL, " "))
            argv[argc++] = tok;
        if (argc == 0) continue;
        const char *c = argv[0];
        if (!strcmp(c, "exit")) {
            break;
        } else if (!strcmp(c, "pid") ) {
            printf("pid %d\n", (int)getpid());
        } else if (!strcmp(c, "open") && argc == 4) {
            int flags = !strcmp(argv[3], "r") ? O_RDONLY : !strcmp(argv[3], "w") ? O_WRONLY
                      : !strcmp(argv[3], "a") ? O_WRONLY | O_APPEND : O_RDWR;
            if (flags != O_RDONLY) flags |= O_CREAT;
            int fd = OPEN(argv[2], flags);
            if (fd < 0) answer_errno(errno);
            else { fds[slot(argv[1])] = fd; printf("ok\n"); }
        } else if (!strcmp(c, "close") && argc == 2) {
            if (CLOSE(fds[slot(argv[1])]) != 0) answer_errno(errno);
            else { fds[slot(argv[1])] = -1; printf("ok\n"); }
        } else if (!strcmp(c, "lk") && argc == 6) {
            const char *k = argv[2];
            int cmd = !strcmp(k, "setlk") ? F_SETLK : !strcmp(k, "setlkw") ? F_SETLKW
                    : !strcmp(k, "getlk") ? F_GETLK : !strcmp(k, "ofd-setlk") ? F_OFD_SETLK
                    : !strcmp(k, "ofd-setlkw") ? F_OFD_SETLKW : F_OFD_GETLK;
            struct flock lk;
            memset(&lk, 0, sizeof lk);
            lk.l_type = lock_type(argv[3]);
            lk.l_whence = SEEK_SET;
            lk.l_start = atoll(argv[4]);
            lk.l_len = atoll(argv[5]);
            if (LOCKCTL(fds[slot(argv[1])], cmd, &lk) != 0) answer_errno(errno);
            else if (cmd == F_GETLK || cmd == F_OFD_GETLK) {
                if (lk.l_type == F_UNLCK) printf("unlocked\n");
                else printf("lock %c %lld %lld %d\n", type_char(lk.l_type), (long long)lk.l_start,
                            (long long)lk.l_len, (int)lk.l_pid);
            } else printf("ok\n");
        } else if (!strcmp(c, "hammer") && argc >= 5) {
            int slots[4];
            int n = 0;
            for (int i = 4; i < argc && n < 4; i++) slots[n++] = slot(argv[i]);
            long got = hammer(atol(argv[1]), !strcmp(argv[2], "flock"), atol(argv[3]), slots, n);
            if (got < 0) answer_errno((int)-got);
            else printf("ok %ld\n", got);
        } else if (!strcmp(c, "appends") && argc == 5) {
            int got = appends(fds[slot(argv[1])], atol(argv[2]), argv[3], argv[4]);
            if (got < 0) answer_errno(-got);
            else printf("ok\n");
        } else if (!strcmp(c, "flock") && argc >= 3) {
            int op = !strcmp(argv[2], "sh") ? LOCK_SH : !strcmp(argv[2], "ex") ? LOCK_EX : LOCK_UN;
            if (argc == 4 && !strcmp(argv[3], "nb")) op |= LOCK_NB;
            if (FLOCK(fds[slot(argv[1])], op) != 0) answer_errno(errno);
            else printf("ok\n");
#ifndef PVFS_CAPI
        } else if (!strcmp(c, "lockf") && argc == 4) {
            const char *k = argv[2];
            int cmd = !strcmp(k, "lock") ? F_LOCK : !strcmp(k, "tlock") ? F_TLOCK
                    : !strcmp(k, "ulock") ? F_ULOCK : F_TEST;
            if (lockf(fds[slot(argv[1])], cmd, atoll(argv[3])) != 0) answer_errno(errno);
            else printf("ok\n");
#endif
        } else if (!strcmp(c, "seek") && argc == 3) {
            if (LSEEK(fds[slot(argv[1])], atoll(argv[2])) < 0) answer_errno(errno);
            else printf("ok\n");
        } else if (!strcmp(c, "pwrite") && argc == 4) {
            size_t n = strlen(argv[3]);
            if (PWRITE(fds[slot(argv[1])], argv[3], n, atoll(argv[2])) != (ssize_t)n) answer_errno(errno);
            else printf("ok\n");
        } else if (!strcmp(c, "pread") && argc == 4) {
            char buf[4096];
            size_t n = (size_t)atoll(argv[3]);
            if (n >= sizeof buf) n = sizeof buf - 1;
            ssize_t got = PREAD(fds[slot(argv[1])], buf, n, atoll(argv[2]));
            if (got < 0) { answer_errno(errno); continue; }
            for (ssize_t i = 0; i < got; i++) if (!buf[i]) buf[i] = '.';
            buf[got] = 0;
            printf("data %s\n", buf);
        } else {
            printf("bad command\n");
        }
    }
#ifdef PVFS_CAPI
    pvfs_finalize();
#endif
    return 0;
}
