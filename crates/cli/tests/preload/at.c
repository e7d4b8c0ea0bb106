/*
 * Run under libpvfs_preload.so by crates/cli/tests/preload.rs: every *at call on a
 * pvfs directory, relative to a directory descriptor as coreutils 9, tar and rsync
 * use them.
 *
 *   at MODE DIR   DIR is an empty pvfs directory (its local spelling, under the
 *                 prefix). MODE says what the calls are relative to:
 *                   opath   a descriptor from open(DIR, O_PATH|O_DIRECTORY), as cp,
 *                           mv, ln and install open their target directory;
 *                   rdonly  a descriptor from open(DIR, O_RDONLY|O_DIRECTORY);
 *                   cwd     AT_FDCWD after chdir(DIR);
 *                   walk    a descriptor reached from open("/", O_PATH) by openat of
 *                           one component at a time with O_NOFOLLOW, as rsync does.
 *
 * It makes, changes, renames and removes files, directories, symlinks and FIFOs with
 * openat, mkdirat, fstatat, statx, faccessat, fchmodat, fchownat, utimensat, futimesat,
 * symlinkat, readlinkat, renameat, renameat2 (RENAME_NOREPLACE, RENAME_EXCHANGE),
 * linkat (hard links, AT_EMPTY_PATH), mknodat, mkfifoat, unlinkat, mkstemp and mkdtemp,
 * checks the errno of every refusal, checks what an O_PATH descriptor may and may not
 * do, and leaves in DIR what the test then checks through the client library:
 *   kept         "kept MODE\n", mode 0640, mtime 1234567890.5
 *   link         a symlink to "kept"
 *   dir/inner    "inner\n"
 * Prints "at ok MODE"; any failure prints "FAIL <line>: <what>" and exits 1.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/time.h>
#include <unistd.h>

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			printf("FAIL %d: %s (errno %d %s)\n", __LINE__, #cond, errno, \
			       strerror(errno));                                      \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

/* The call fails with errno e. */
#define FAILS(call, e) CHECK((call) == -1 && errno == (e))

/* PVFS2's statfs magic, which the library reports. */
#define PVFS_MAGIC 0x20030528

static void write_file(int d, const char *name, const char *text, mode_t mode)
{
	int fd = openat(d, name, O_WRONLY | O_CREAT | O_EXCL, mode);
	CHECK(fd >= 0);
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	CHECK(close(fd) == 0);
}

static void expect_content(int d, const char *name, const char *text)
{
	char buf[256];
	int fd = openat(d, name, O_RDONLY);
	CHECK(fd >= 0);
	ssize_t n = read(fd, buf, sizeof buf);
	CHECK(n == (ssize_t)strlen(text) && memcmp(buf, text, n) == 0);
	CHECK(close(fd) == 0);
}

/* What an O_PATH descriptor may do (fstat, fstatfs, fcntl, *at, fchdir) and what it
 * may not (EBADF for I/O, listings and f* changes), as the kernel answers. */
static void opath_semantics(int d)
{
	struct stat st;
	CHECK(fstat(d, &st) == 0 && S_ISDIR(st.st_mode));
	struct statfs sf;
	CHECK(fstatfs(d, &sf) == 0 && sf.f_type == PVFS_MAGIC);
	CHECK((fcntl(d, F_GETFL) & O_PATH) == O_PATH);
	char c;
	FAILS(read(d, &c, 1), EBADF);
	FAILS(write(d, "x", 1), EBADF);
	FAILS(fchmod(d, 0755), EBADF);
	FAILS(fchown(d, getuid(), getgid()), EBADF);
	char dents[1024];
	FAILS(getdents64(d, dents, sizeof dents), EBADF);
	struct flock lk = {.l_type = F_RDLCK, .l_whence = SEEK_SET};
	FAILS(fcntl(d, F_SETLK, &lk), EBADF);
	FAILS(flock(d, LOCK_SH), EBADF);
	int dup_d = dup(d);
	CHECK(dup_d >= 0);
	CHECK(fstatat(dup_d, "", &st, AT_EMPTY_PATH) == 0 && S_ISDIR(st.st_mode));
	CHECK(close(dup_d) == 0);

	int f = openat(d, "kept", O_PATH);
	CHECK(f >= 0);
	CHECK(fstat(f, &st) == 0 && S_ISREG(st.st_mode));
	FAILS(read(f, &c, 1), EBADF);
	FAILS(lseek(f, 0, SEEK_SET), EBADF);
	FAILS(fsync(f), EBADF);
	FAILS(ftruncate(f, 0), EBADF);
	/* A descriptor that is not a directory is no base for relative names. */
	FAILS(openat(f, "x", O_RDONLY), ENOTDIR);
	FAILS(fstatat(f, "x", &st, 0), ENOTDIR);
	CHECK(close(f) == 0);
}

/* Everything relative to d (a directory descriptor or AT_FDCWD). */
static void battery(int d, const char *mode, const char *dir)
{
	struct stat st;
	umask(022);

	/* Directories. */
	CHECK(mkdirat(d, "dir", 0750) == 0);
	FAILS(mkdirat(d, "dir", 0750), EEXIST);
	CHECK(fstatat(d, "dir", &st, 0) == 0 && S_ISDIR(st.st_mode));
	CHECK((st.st_mode & 07777) == 0750);
	FAILS(mkdirat(d, "missing/dir", 0755), ENOENT);

	/* Files: create, exclusive create, content, attributes. */
	char kept[64];
	snprintf(kept, sizeof kept, "kept %s\n", mode);
	write_file(d, "kept", kept, 0666);
	FAILS(openat(d, "kept", O_WRONLY | O_CREAT | O_EXCL, 0600), EEXIST);
	expect_content(d, "kept", kept);
	CHECK(fstatat(d, "kept", &st, 0) == 0 && S_ISREG(st.st_mode));
	CHECK(st.st_size == (off_t)strlen(kept));
	CHECK((st.st_mode & 07777) == 0644);
	struct statx stx;
	CHECK(statx(d, "kept", 0, STATX_BASIC_STATS, &stx) == 0);
	CHECK(stx.stx_size == strlen(kept) && S_ISREG(stx.stx_mode));
	FAILS(fstatat(d, "nothing", &st, 0), ENOENT);
	FAILS(fstatat(d, "kept/below", &st, 0), ENOTDIR);
	FAILS(fstatat(d, "", &st, 0), ENOENT);
	if (d != AT_FDCWD) {
		CHECK(fstatat(d, "", &st, AT_EMPTY_PATH) == 0 && S_ISDIR(st.st_mode));
		CHECK(statx(d, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &stx) == 0);
		CHECK(S_ISDIR(stx.stx_mode));
	}
	CHECK(fstatat(d, ".", &st, 0) == 0 && S_ISDIR(st.st_mode));
	CHECK(fstatat(d, "dir/..", &st, 0) == 0 && S_ISDIR(st.st_mode));

	/* Access by the caller's ids. */
	CHECK(faccessat(d, "kept", R_OK | W_OK, 0) == 0);
	CHECK(faccessat(d, "kept", R_OK, AT_EACCESS) == 0);
	CHECK(faccessat(d, "dir", X_OK, 0) == 0);
	FAILS(faccessat(d, "nothing", F_OK, 0), ENOENT);

	/* Modes, owners, times. */
	CHECK(fchmodat(d, "kept", 0600, 0) == 0);
	CHECK(fstatat(d, "kept", &st, 0) == 0 && (st.st_mode & 07777) == 0600);
	CHECK(fchmodat(d, "kept", 0640, AT_SYMLINK_NOFOLLOW) == 0);
	CHECK(fstatat(d, "kept", &st, 0) == 0 && (st.st_mode & 07777) == 0640);
	CHECK(fchownat(d, "kept", getuid(), getgid(), 0) == 0);
	CHECK(fchownat(d, "kept", (uid_t)-1, getgid(), AT_SYMLINK_NOFOLLOW) == 0);
	struct timeval tv[2] = {{1100000000, 0}, {1200000000, 250000}};
	CHECK(futimesat(d, "kept", tv) == 0);
	CHECK(fstatat(d, "kept", &st, 0) == 0);
	CHECK(st.st_mtim.tv_sec == 1200000000 && st.st_mtim.tv_nsec == 250000000);
	struct timespec ts[2] = {{1000000000, 0}, {1234567890, 500000000}};
	CHECK(utimensat(d, "kept", ts, 0) == 0);
	CHECK(fstatat(d, "kept", &st, 0) == 0);
	CHECK(st.st_mtim.tv_sec == 1234567890 && st.st_mtim.tv_nsec == 500000000);
	CHECK(st.st_atim.tv_sec == 1000000000);
	struct timespec omit[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
	CHECK(utimensat(d, "kept", omit, AT_SYMLINK_NOFOLLOW) == 0);
	CHECK(fstatat(d, "kept", &st, 0) == 0 && st.st_mtim.tv_sec == 1234567890);
	CHECK(st.st_atim.tv_sec > 1000000000);
	if (d != AT_FDCWD) {
		CHECK(fchownat(d, "", getuid(), getgid(), AT_EMPTY_PATH) == 0);
		struct timespec dts[2] = {{0, UTIME_OMIT}, {1500000000, 0}};
		CHECK(utimensat(d, "", dts, AT_EMPTY_PATH) == 0);
		CHECK(fstat(d, &st) == 0 && st.st_mtim.tv_sec == 1500000000);
	}

	/* Symlinks. */
	CHECK(symlinkat("kept", d, "link") == 0);
	FAILS(symlinkat("kept", d, "link"), EEXIST);
	char buf[256];
	ssize_t n = readlinkat(d, "link", buf, sizeof buf);
	CHECK(n == 4 && memcmp(buf, "kept", 4) == 0);
	FAILS(readlinkat(d, "kept", buf, sizeof buf), EINVAL);
	CHECK(fstatat(d, "link", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode));
	CHECK(fstatat(d, "link", &st, 0) == 0 && S_ISREG(st.st_mode));
	CHECK(st.st_size == (off_t)strlen(kept));
	CHECK(statx(d, "link", AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx) == 0);
	CHECK(S_ISLNK(stx.stx_mode));
	expect_content(d, "link", kept);
	FAILS(openat(d, "link", O_RDONLY | O_NOFOLLOW), ELOOP);
	FAILS(fchmodat(d, "link", 0600, AT_SYMLINK_NOFOLLOW), EOPNOTSUPP);
	struct timespec lts[2] = {{0, UTIME_OMIT}, {1300000000, 0}};
	CHECK(utimensat(d, "link", lts, AT_SYMLINK_NOFOLLOW) == 0);
	CHECK(fstatat(d, "link", &st, AT_SYMLINK_NOFOLLOW) == 0);
	CHECK(st.st_mtim.tv_sec == 1300000000);
	CHECK(fstatat(d, "kept", &st, 0) == 0 && st.st_mtim.tv_sec == 1234567890);
	CHECK(fchownat(d, "link", getuid(), getgid(), AT_SYMLINK_NOFOLLOW) == 0);
	/* A symlink itself, opened with O_PATH|O_NOFOLLOW: readlinkat and fstatat of "". */
	int s = openat(d, "link", O_PATH | O_NOFOLLOW);
	CHECK(s >= 0);
	n = readlinkat(s, "", buf, sizeof buf);
	CHECK(n == 4 && memcmp(buf, "kept", 4) == 0);
	CHECK(fstatat(s, "", &st, AT_EMPTY_PATH) == 0 && S_ISLNK(st.st_mode));
	CHECK(fstat(s, &st) == 0 && S_ISLNK(st.st_mode));
	CHECK(close(s) == 0);

	/* Renames: plain, without replacing, exchanging; across directories. */
	write_file(d, "a", "a\n", 0644);
	write_file(d, "b", "b\n", 0644);
	CHECK(renameat(d, "a", d, "a2") == 0);
	FAILS(fstatat(d, "a", &st, 0), ENOENT);
	expect_content(d, "a2", "a\n");
	FAILS(renameat2(d, "a2", d, "b", RENAME_NOREPLACE), EEXIST);
	CHECK(renameat2(d, "a2", d, "b", RENAME_EXCHANGE) == 0);
	expect_content(d, "b", "a\n");
	expect_content(d, "a2", "b\n");
	CHECK(renameat2(d, "a2", d, "dir/moved", RENAME_NOREPLACE) == 0);
	expect_content(d, "dir/moved", "b\n");
	CHECK(renameat(d, "b", d, "dir/moved") == 0);
	expect_content(d, "dir/moved", "a\n");
	FAILS(renameat(d, "nothing", d, "x"), ENOENT);

	/* Hard links: by name, and of an open descriptor's file (AT_EMPTY_PATH). */
	CHECK(linkat(d, "kept", d, "hard", 0) == 0);
	struct stat st2;
	CHECK(fstatat(d, "hard", &st, 0) == 0 && fstatat(d, "kept", &st2, 0) == 0);
	CHECK(st.st_ino == st2.st_ino && st.st_nlink == 2);
	FAILS(linkat(d, "kept", d, "hard", 0), EEXIST);
	FAILS(linkat(d, "dir", d, "dirlink", 0), EPERM);
	FAILS(linkat(d, "kept", d, "hard2", 0x8000), EINVAL);
	int k = openat(d, "kept", O_RDONLY);
	CHECK(k >= 0 && linkat(k, "", d, "hard2", AT_EMPTY_PATH) == 0);
	CHECK(close(k) == 0);
	CHECK(fstatat(d, "kept", &st, 0) == 0 && st.st_nlink == 3);
	CHECK(unlinkat(d, "hard", 0) == 0 && unlinkat(d, "hard2", 0) == 0);
	CHECK(fstatat(d, "kept", &st, 0) == 0 && st.st_nlink == 1);
	expect_content(d, "kept", kept);

	/* FIFOs and nodes are metadata. */
	CHECK(mkfifoat(d, "fifo", 0600) == 0);
	CHECK(fstatat(d, "fifo", &st, 0) == 0 && S_ISFIFO(st.st_mode));
	CHECK(mknodat(d, "plain", S_IFREG | 0600, 0) == 0);
	CHECK(fstatat(d, "plain", &st, 0) == 0 && S_ISREG(st.st_mode));

	/* A directory descriptor of a subdirectory opened relative to d. */
	int sub = openat(d, "dir", O_PATH | O_DIRECTORY);
	CHECK(sub >= 0);
	write_file(sub, "inner", "inner\n", 0644);
	expect_content(d, "dir/inner", "inner\n");
	int subr = openat(d, "dir", O_RDONLY | O_DIRECTORY);
	CHECK(subr >= 0);
	DIR *ls = fdopendir(subr);
	CHECK(ls != NULL);
	int seen = 0;
	struct dirent *e;
	while ((e = readdir(ls)) != NULL)
		seen += strcmp(e->d_name, "inner") == 0 || strcmp(e->d_name, "moved") == 0;
	CHECK(seen == 2);
	CHECK(closedir(ls) == 0);
	FAILS(openat(d, "kept", O_RDONLY | O_DIRECTORY), ENOTDIR);

	/* Temporary files beside the target (sed -i, rsync). */
	/* Relative to the working directory in cwd mode, else absolute. */
	const char *tdir = d == AT_FDCWD ? "." : dir;
	char tmpl[4096];
	snprintf(tmpl, sizeof tmpl, "%s/dir/.tmpXXXXXX", tdir);
	int t = mkstemp(tmpl);
	CHECK(t >= 0);
	CHECK(strstr(tmpl, "XXXXXX") == NULL);
	CHECK(write(t, "t", 1) == 1);
	CHECK(fstat(t, &st) == 0 && (st.st_mode & 07777) == 0600 && st.st_size == 1);
	CHECK(close(t) == 0);
	CHECK(renameat(AT_FDCWD, tmpl, d, "dir/renamed") == 0);
	expect_content(d, "dir/renamed", "t");
	snprintf(tmpl, sizeof tmpl, "%s/dir/tdXXXXXX", tdir);
	CHECK(mkdtemp(tmpl) == tmpl);
	CHECK(stat(tmpl, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700);
	CHECK(rmdir(tmpl) == 0);
	char bad[64] = "XXXXXY";
	snprintf(tmpl, sizeof tmpl, "%s/dir/%s", tdir, bad);
	FAILS(mkstemp(tmpl), EINVAL);

	/* Removing. */
	FAILS(unlinkat(d, "dir", AT_REMOVEDIR), ENOTEMPTY);
	FAILS(unlinkat(d, "nothing", 0), ENOENT);
	CHECK(unlinkat(d, "dir/moved", 0) == 0);
	CHECK(unlinkat(d, "dir/renamed", 0) == 0);
	CHECK(unlinkat(d, "fifo", 0) == 0);
	CHECK(unlinkat(d, "plain", 0) == 0);
	CHECK(mkdirat(d, "gone", 0755) == 0);
	CHECK(unlinkat(d, "gone", AT_REMOVEDIR) == 0);
	FAILS(fstatat(d, "gone", &st, 0), ENOENT);

	/* The subdirectory's O_PATH descriptor as the working directory. */
	CHECK(fchdir(sub) == 0);
	char cwd[4096], want[4096];
	CHECK(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(want, sizeof want, "%s/dir", dir);
	CHECK(strcmp(cwd, want) == 0);
	expect_content(AT_FDCWD, "inner", "inner\n");
	CHECK(close(sub) == 0);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: at opath|rdonly|cwd|walk DIR\n");
		return 2;
	}
	const char *mode = argv[1], *dir = argv[2];
	int d;
	if (strcmp(mode, "opath") == 0) {
		d = open(dir, O_PATH | O_DIRECTORY);
		CHECK(d >= 0);
	} else if (strcmp(mode, "rdonly") == 0) {
		d = open(dir, O_RDONLY | O_DIRECTORY);
		CHECK(d >= 0);
	} else if (strcmp(mode, "cwd") == 0) {
		CHECK(chdir(dir) == 0);
		char cwd[4096];
		CHECK(getcwd(cwd, sizeof cwd) != NULL && strcmp(cwd, dir) == 0);
		d = AT_FDCWD;
	} else if (strcmp(mode, "walk") == 0) {
		d = open("/", O_PATH | O_DIRECTORY);
		CHECK(d >= 0);
		char copy[4096];
		snprintf(copy, sizeof copy, "%s", dir);
		for (char *c = strtok(copy, "/"); c != NULL; c = strtok(NULL, "/")) {
			int next = openat(d, c, O_PATH | O_DIRECTORY | O_NOFOLLOW);
			CHECK(next >= 0);
			CHECK(close(d) == 0);
			d = next;
		}
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	if (d != AT_FDCWD && (fcntl(d, F_GETFL) & O_PATH) == O_PATH) {
		/* opath_semantics needs "kept"; make it first, the battery remakes it. */
		write_file(d, "kept", "x", 0600);
		opath_semantics(d);
		CHECK(unlinkat(d, "kept", 0) == 0);
	}
	if (strcmp(mode, "rdonly") == 0) {
		/* A directory opened for reading lists with getdents64 ("." and ".."). */
		char dents[4096];
		CHECK(getdents64(d, dents, sizeof dents) >= 2 * 24);
		CHECK(lseek(d, 0, SEEK_SET) == 0);
	}
	battery(d, mode, dir);
	printf("at ok %s\n", mode);
	return 0;
}
