/*
 * exec under libpvfs_preload.so: which pvfs descriptors a new program image
 * inherits, at which offsets, and the pvfs working directory.
 *
 *   exec DIR          opens DIR/inherited (written "parent\n"), DIR/cloexec with
 *                     O_CLOEXEC, DIR/setfd marked FD_CLOEXEC with fcntl, DIR/cleared
 *                     opened with O_CLOEXEC and then cleared with fcntl, a dup of the
 *                     first; chdir(DIR); a failed exec changes nothing; then
 *                     execs itself as "child" with the numbers.
 *   child ...         checks what it inherited, writes through it, prints "exec ok".
 *
 * Exits 1 with a message on the first failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void fail(const char *what)
{
	fprintf(stderr, "exec.c: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "exec.c: check failed: %s (errno %s)\n", what, strerror(errno));
		exit(1);
	}
}

static int open_in(const char *dir, const char *name, int flags)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	int fd = open(p, flags, 0644);
	if (fd < 0)
		fail(p);
	return fd;
}

static void put(int fd, const char *s)
{
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		fail("write");
}

static int parent(const char *self, const char *dir)
{
	int inh = open_in(dir, "inherited", O_WRONLY | O_CREAT | O_TRUNC);
	int ce = open_in(dir, "cloexec", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
	int sfd = open_in(dir, "setfd", O_RDWR | O_CREAT | O_TRUNC);
	check(fcntl(sfd, F_SETFD, FD_CLOEXEC) == 0, "F_SETFD FD_CLOEXEC");
	int cl = open_in(dir, "cleared", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC);
	check(fcntl(cl, F_GETFD) == FD_CLOEXEC, "O_CLOEXEC shows in F_GETFD");
	check(fcntl(cl, F_SETFD, 0) == 0, "F_SETFD 0");
	int rd = open_in(dir, "", O_RDONLY | O_DIRECTORY);
	put(inh, "parent\n");
	put(cl, "cleared\n");
	int dup_fd = dup(inh);
	check(dup_fd >= 0, "dup");
	if (chdir(dir) != 0)
		fail("chdir");

	/* A failed exec changes nothing: the descriptors still work, the environment
	 * holds no handoff. */
	char *const none[] = {"nothing", NULL};
	check(execv("/nonexistent/program", none) == -1 && errno == ENOENT,
	      "exec of a missing program fails with ENOENT");
	check(execv("missing-here", none) == -1 && errno == ENOENT,
	      "exec of a missing pvfs program fails with ENOENT");
	check(getenv("PVFS_PRELOAD_STATE") == NULL, "no handoff in the caller's environment");
	put(inh, "still\n");

	char a[6][16];
	snprintf(a[0], 16, "%d", inh);
	snprintf(a[1], 16, "%d", ce);
	snprintf(a[2], 16, "%d", sfd);
	snprintf(a[3], 16, "%d", cl);
	snprintf(a[4], 16, "%d", rd);
	snprintf(a[5], 16, "%d", dup_fd);
	execl(self, self, "child", dir, a[0], a[1], a[2], a[3], a[4], a[5], (char *)NULL);
	fail("execl");
	return 1;
}

static int child(const char *dir, int inh, int ce, int sfd, int cl, int rd, int dup_fd)
{
	check(getenv("PVFS_PRELOAD_STATE") == NULL, "the handoff variable is gone");
	char cwd[4096];
	check(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
	check(strcmp(cwd, dir) == 0, "the pvfs working directory is inherited");
	struct stat st;
	check(stat("inherited", &st) == 0 && st.st_size == 13,
	      "a relative path resolves in the inherited working directory");

	/* Inherited at its offset, shared with its dup. */
	check(lseek(inh, 0, SEEK_CUR) == 13, "inherited offset");
	check(fcntl(inh, F_GETFL) == O_WRONLY, "inherited access mode");
	put(inh, "child\n");
	check(lseek(dup_fd, 0, SEEK_CUR) == 19, "the dup shares the description");
	put(dup_fd, "dup\n");
	check(fstat(inh, &st) == 0 && st.st_size == 23 && S_ISREG(st.st_mode),
	      "fstat of the inherited descriptor");

	/* Close-on-exec descriptors are gone. */
	errno = 0;
	check(fcntl(ce, F_GETFD) == -1 && errno == EBADF, "O_CLOEXEC descriptor closed");
	errno = 0;
	check(fcntl(sfd, F_GETFD) == -1 && errno == EBADF, "FD_CLOEXEC descriptor closed");

	/* A descriptor whose FD_CLOEXEC was cleared is inherited, readable and writable. */
	check(lseek(cl, 0, SEEK_SET) == 0, "lseek of the cleared descriptor");
	char buf[64] = {0};
	check(read(cl, buf, sizeof buf) == 8 && memcmp(buf, "cleared\n", 8) == 0,
	      "read through the cleared descriptor");
	put(cl, "again\n");

	/* A directory descriptor serves *at calls. */
	check(fstatat(rd, "inherited", &st, 0) == 0 && st.st_size == 23,
	      "fstatat relative to an inherited directory descriptor");

	/* Standard output through stdio (no hook sees its writes) reaches pvfs too. */
	int out = openat(rd, "stdio", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	check(out >= 0, "openat stdio");
	check(dup2(out, 1) == 1, "dup2 onto stdout");
	close(out);
	printf("through stdio\n");
	printf("exec ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "exec") == 0)
		return parent(argv[0], argv[2]);
	if (argc == 9 && strcmp(argv[1], "child") == 0)
		return child(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
			     atoi(argv[6]), atoi(argv[7]), atoi(argv[8]));
	fprintf(stderr, "usage: exec exec DIR\n");
	return 2;
}
