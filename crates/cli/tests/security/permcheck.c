/*
 * permcheck: runs file system operations read from standard input, one per line
 * ("OP PATH [ARG]"), and prints one result line for each: "OK" or the errno's name.
 *
 * Built twice by crates/cli/tests/security.rs: with the C library's calls
 * (-DUSE_PVFS, linked with libpvfs; argv[1] is the configuration file) and with the
 * plain POSIX calls (for a pvfs mount, and for the preload library, which hooks
 * them). The same operations on the same tree, run as the same user, must give the
 * same answers through every interface.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef USE_PVFS
#include "pvfs.h"
#define P_OPEN pvfs_open
#define P_CLOSE pvfs_close
#define P_READ pvfs_read
#define P_WRITE pvfs_write
#define P_STAT pvfs_stat
#define P_MKDIR pvfs_mkdir
#define P_RMDIR pvfs_rmdir
#define P_UNLINK pvfs_unlink
#define P_RENAME pvfs_rename
#define P_SYMLINK pvfs_symlink
#define P_TRUNCATE pvfs_truncate
#define P_CHMOD pvfs_chmod
#else
#define P_OPEN open
#define P_CLOSE close
#define P_READ read
#define P_WRITE write
#define P_STAT stat
#define P_MKDIR mkdir
#define P_RMDIR rmdir
#define P_UNLINK unlink
#define P_RENAME rename
#define P_SYMLINK symlink
#define P_TRUNCATE truncate
#define P_CHMOD chmod
#endif

static const char *name_of(int e)
{
    switch (e) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EIO: return "EIO";
    case EACCES: return "EACCES";
    case EEXIST: return "EEXIST";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EINVAL: return "EINVAL";
    case ENOTEMPTY: return "ENOTEMPTY";
    case EXDEV: return "EXDEV";
    case EROFS: return "EROFS";
    case ENOSYS: return "ENOSYS";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ENOKEY: return "ENOKEY";
    case EKEYREJECTED: return "EKEYREJECTED";
    default: return "EOTHER";
    }
}

/* Opens with `flags`, reads or writes one byte, closes: 0 or -1 with errno. */
static int open_io(const char *path, int flags, int do_write)
{
    int fd = P_OPEN(path, flags, 0644);
    if (fd < 0)
        return -1;
    char c = 'x';
    ssize_t n = do_write ? P_WRITE(fd, &c, 1) : P_READ(fd, &c, 1);
    int saved = errno;
    P_CLOSE(fd);
    if (n < 0) {
        errno = saved;
        return -1;
    }
    return 0;
}

static int list(const char *path)
{
#ifdef USE_PVFS
    struct pvfs_dir *d = pvfs_opendir(path);
    if (!d)
        return -1;
    errno = 0;
    while (pvfs_readdir(d))
        ;
    int saved = errno;
    pvfs_closedir(d);
#else
    DIR *d = opendir(path);
    if (!d)
        return -1;
    errno = 0;
    while (readdir(d))
        ;
    int saved = errno;
    closedir(d);
#endif
    errno = saved;
    return saved ? -1 : 0;
}

static int run(const char *op, const char *path, const char *arg)
{
    struct stat st;
    if (!strcmp(op, "read"))
        return open_io(path, O_RDONLY, 0);
    if (!strcmp(op, "write"))
        return open_io(path, O_WRONLY, 1);
    if (!strcmp(op, "append"))
        return open_io(path, O_WRONLY | O_APPEND, 1);
    if (!strcmp(op, "otrunc"))
        return open_io(path, O_WRONLY | O_TRUNC, 1);
    if (!strcmp(op, "create"))
        return open_io(path, O_WRONLY | O_CREAT | O_EXCL, 1);
    if (!strcmp(op, "truncate"))
        return P_TRUNCATE(path, 0);
    if (!strcmp(op, "stat"))
        return P_STAT(path, &st);
    if (!strcmp(op, "list"))
        return list(path);
    if (!strcmp(op, "mkdir"))
        return P_MKDIR(path, 0755);
    if (!strcmp(op, "rmdir"))
        return P_RMDIR(path);
    if (!strcmp(op, "unlink"))
        return P_UNLINK(path);
    if (!strcmp(op, "rename"))
        return P_RENAME(path, arg);
    if (!strcmp(op, "symlink"))
        return P_SYMLINK(arg, path);
    if (!strcmp(op, "chmod"))
        return P_CHMOD(path, (mode_t)strtol(arg, NULL, 8));
    if (!strcmp(op, "mode")) {
        /* Prints the permission bits (for checks of what a write left). */
        if (P_STAT(path, &st) < 0)
            return -1;
        printf("%04o ", (unsigned)(st.st_mode & 07777));
        return 0;
    }
    errno = ENOSYS;
    return -1;
}

int main(int argc, char **argv)
{
#ifdef USE_PVFS
    if (argc < 2 || pvfs_init(argv[1]) < 0) {
        printf("INIT %s\n", name_of(errno));
        return 2;
    }
#else
    (void)argc;
    (void)argv;
#endif
    char line[8192];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        char *op = strtok(line, " ");
        char *path = strtok(NULL, " ");
        char *arg = strtok(NULL, " ");
        if (!op || !path)
            continue;
        errno = 0;
        int r = run(op, path, arg ? arg : "");
        printf("%s\n", r == 0 ? "OK" : name_of(errno));
        fflush(stdout);
    }
#ifdef USE_PVFS
    pvfs_finalize();
#endif
    return 0;
}
