/*
 * Run under libpvfs_preload.so by crates/cli/tests/preload.rs.
 *
 *   posix stdio SRC DST   copies SRC to DST with fopen/fread/fwrite, appends a line
 *                         with fprintf, reads it back with fseek/fgets, appends with
 *                         mode "a"; prints "copied N".
 *   posix fds DIR         checks descriptor semantics on DIR (a pvfs directory):
 *                         real kernel descriptors, dup/dup2/dup3/F_DUPFD sharing the
 *                         offset, O_APPEND, O_TRUNC, O_EXCL, pread/pwrite, lseek,
 *                         ftruncate, fstat, isatty, errno values, an unlinked file
 *                         readable until close, fork (child I/O on inherited and new
 *                         descriptors), threads; prints "fds ok".
 *
 * Any failure prints "FAIL <line>: <what>" and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			printf("FAIL %d: %s (errno %d %s)\n", __LINE__, #cond, errno, \
			       strerror(errno));                                      \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

static int stdio_copy(const char *src, const char *dst)
{
	FILE *in = fopen(src, "rb");
	CHECK(in != NULL);
	FILE *out = fopen(dst, "wb");
	CHECK(out != NULL);
	char buf[10007];
	size_t n, total = 0;
	while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
		CHECK(fwrite(buf, 1, n, out) == n);
		total += n;
	}
	CHECK(!ferror(in));
	CHECK(fprintf(out, "trailer %zu\n", total) > 0);
	CHECK(fileno(out) >= 0);
	CHECK(fflush(out) == 0);
	struct stat st;
	CHECK(fstat(fileno(out), &st) == 0);
	CHECK(S_ISREG(st.st_mode));
	CHECK(fclose(out) == 0);
	CHECK(fclose(in) == 0);

	FILE *r = fopen(dst, "r");
	CHECK(r != NULL);
	CHECK(fseek(r, -40, SEEK_END) == 0);
	char line[128], last[128] = "";
	while (fgets(line, sizeof line, r))
		strcpy(last, line);
	char want[64];
	snprintf(want, sizeof want, "trailer %zu\n", total);
	/* The trailer follows binary data without a newline: compare the line's end. */
	CHECK(strlen(last) >= strlen(want) && strcmp(last + strlen(last) - strlen(want), want) == 0);
	CHECK(fclose(r) == 0);

	FILE *a = fopen(dst, "a");
	CHECK(a != NULL);
	CHECK(fprintf(a, "appended\n") > 0);
	CHECK(fclose(a) == 0);
	CHECK(fopen("/nonexistent-dir-for-pvfs-test/x", "r") == NULL && errno == ENOENT);
	printf("copied %zu\n", total);
	return 0;
}

static char path_buf[4096];
static const char *at(const char *dir, const char *name)
{
	snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
	return path_buf;
}

static off_t pos(int fd)
{
	return lseek(fd, 0, SEEK_CUR);
}

struct job {
	const char *dir;
	int id;
	int ok;
};

static void *thread_main(void *arg)
{
	struct job *j = arg;
	char name[64], p[4096], buf[4096], back[4096];
	snprintf(name, sizeof name, "thread-%d", j->id);
	snprintf(p, sizeof p, "%s/%s", j->dir, name);
	memset(buf, 'a' + j->id, sizeof buf);
	int fd = open(p, O_CREAT | O_RDWR | O_TRUNC, 0644);
	if (fd < 0)
		return NULL;
	for (int i = 0; i < 16; i++)
		if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
			return NULL;
	for (int i = 0; i < 16; i++)
		if (pread(fd, back, sizeof back, (off_t)i * 4096) != (ssize_t)sizeof back ||
		    memcmp(buf, back, sizeof buf) != 0)
			return NULL;
	if (close(fd) != 0 || unlink(p) != 0)
		return NULL;
	j->ok = 1;
	return NULL;
}

static int fds(const char *dir)
{
	char buf[64];
	/* Real descriptors: the lowest free number, closed for real. */
	int fd = open(at(dir, "f"), O_CREAT | O_EXCL | O_RDWR, 0640);
	CHECK(fd >= 3);
	CHECK(fcntl(fd, F_GETFD) == 0);
	CHECK(open(at(dir, "f"), O_CREAT | O_EXCL | O_RDWR, 0640) == -1 && errno == EEXIST);
	CHECK(open(at(dir, "missing"), O_RDONLY) == -1 && errno == ENOENT);
	CHECK(open(at(dir, "f/x"), O_RDONLY) == -1 && errno == ENOTDIR);
	CHECK(open(dir, O_WRONLY) == -1 && errno == EISDIR);
	CHECK(isatty(fd) == 0);
	CHECK(write(fd, "0123456789", 10) == 10);
	CHECK(pos(fd) == 10);

	/* fsync, fdatasync and syncfs of a file, fsync of its directory and sync reach
	 * the servers (Fsync, Sync) and succeed. */
	CHECK(fsync(fd) == 0 && fdatasync(fd) == 0 && syncfs(fd) == 0);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(dfd >= 0 && fsync(dfd) == 0 && close(dfd) == 0);
	sync();

	/* dup, dup2, dup3, F_DUPFD share the offset. */
	int d1 = dup(fd);
	CHECK(d1 >= 0 && d1 != fd);
	CHECK(lseek(d1, 2, SEEK_SET) == 2);
	CHECK(pos(fd) == 2);
	int d2 = dup2(fd, 40);
	CHECK(d2 == 40);
	CHECK(read(d2, buf, 3) == 3 && memcmp(buf, "234", 3) == 0);
	CHECK(pos(fd) == 5 && pos(d1) == 5);
	int d3 = dup3(fd, 41, O_CLOEXEC);
	CHECK(d3 == 41 && fcntl(d3, F_GETFD) == FD_CLOEXEC);
	int d4 = fcntl(fd, F_DUPFD, 50);
	CHECK(d4 >= 50);
	CHECK(write(d4, "ab", 2) == 2);
	CHECK(pos(d3) == 7);
	CHECK((fcntl(d4, F_GETFL) & O_ACCMODE) == O_RDWR);
	CHECK(close(d1) == 0 && close(d2) == 0 && close(d3) == 0 && close(d4) == 0);
	CHECK(pos(fd) == 7);
	CHECK(read(40, buf, 1) == -1 && errno == EBADF);

	/* dup2 over a pvfs descriptor with a local one, and back. */
	int nul = open("/dev/null", O_RDONLY);
	CHECK(nul >= 0);
	int d5 = dup(fd);
	CHECK(dup2(nul, d5) == d5);
	CHECK(read(d5, buf, 1) == 0); /* now /dev/null */
	CHECK(close(d5) == 0 && close(nul) == 0);

	/* lseek, pread, pwrite, fstat, ftruncate. */
	CHECK(lseek(fd, 0, SEEK_END) == 10);
	CHECK(lseek(fd, 100, SEEK_SET) == 100);
	CHECK(write(fd, "Z", 1) == 1); /* a hole 10..100 */
	struct stat st;
	CHECK(fstat(fd, &st) == 0 && st.st_size == 101 && S_ISREG(st.st_mode));
	CHECK((st.st_mode & 0777) == 0640);
	CHECK(pread(fd, buf, 4, 98) == 3 && buf[0] == 0 && buf[1] == 0 && buf[2] == 'Z');
	CHECK(pwrite(fd, "xy", 2, 3) == 2);
	CHECK(pos(fd) == 101);
	CHECK(pread(fd, buf, 6, 0) == 6 && memcmp(buf, "012xya", 6) == 0);
	CHECK(ftruncate(fd, 4) == 0);
	CHECK(fstat(fd, &st) == 0 && st.st_size == 4);
	CHECK(read(fd, buf, 10) == 0); /* offset 101 is past the end */
	CHECK(lseek(fd, -1, SEEK_SET) == -1 && errno == EINVAL);
	CHECK(stat(at(dir, "f"), &st) == 0 && st.st_size == 4);
	CHECK(access(at(dir, "f"), R_OK | W_OK) == 0);
	CHECK(access(at(dir, "nothing"), F_OK) == -1 && errno == ENOENT);
	CHECK(close(fd) == 0);
	CHECK(close(fd) == -1 && errno == EBADF);

	/* O_APPEND writes at the end; O_TRUNC empties; O_RDONLY refuses writes. */
	fd = open(at(dir, "f"), O_WRONLY | O_APPEND);
	CHECK(fd >= 0);
	CHECK(write(fd, "end", 3) == 3);
	CHECK(pos(fd) == 7);
	CHECK((fcntl(fd, F_GETFL) & O_APPEND) != 0);
	CHECK(close(fd) == 0);
	fd = open(at(dir, "f"), O_RDONLY);
	CHECK(read(fd, buf, 10) == 7 && memcmp(buf, "012xend", 7) == 0);
	CHECK(write(fd, "x", 1) == -1 && errno == EBADF);
	CHECK(close(fd) == 0);
	fd = open(at(dir, "f"), O_RDWR | O_TRUNC);
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && st.st_size == 0);

	/* Unlinked while open: still readable and writable until the last close. */
	CHECK(write(fd, "kept", 4) == 4);
	CHECK(unlink(at(dir, "f")) == 0);
	CHECK(stat(at(dir, "f"), &st) == -1 && errno == ENOENT);
	CHECK(pread(fd, buf, 4, 0) == 4 && memcmp(buf, "kept", 4) == 0);
	CHECK(close(fd) == 0);

	/* mkdir / rename / rmdir errno values. */
	CHECK(mkdir(at(dir, "sub"), 0755) == 0);
	CHECK(mkdir(at(dir, "sub"), 0755) == -1 && errno == EEXIST);
	fd = open(at(dir, "sub/g"), O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0 && write(fd, "g", 1) == 1 && close(fd) == 0);
	CHECK(rmdir(at(dir, "sub")) == -1 && errno == ENOTEMPTY);
	char from[4096], to[4096];
	snprintf(from, sizeof from, "%s/sub/g", dir);
	snprintf(to, sizeof to, "%s/g2", dir);
	CHECK(rename(from, to) == 0);
	CHECK(rename(to, "/tmp/pvfs-preload-test-never") == -1 && errno == EXDEV);
	CHECK(rmdir(at(dir, "sub")) == 0);

	/* fork: the child uses an inherited descriptor and opens new ones. */
	fd = open(at(dir, "forked"), O_CREAT | O_RDWR, 0644);
	CHECK(fd >= 0 && write(fd, "parent", 6) == 6);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		char b[16];
		if (pread(fd, b, 6, 0) != 6 || memcmp(b, "parent", 6) != 0)
			_exit(2);
		if (pwrite(fd, "child", 5, 6) != 5)
			_exit(3);
		int c = open(at(dir, "from-child"), O_CREAT | O_WRONLY, 0644);
		if (c < 0 || write(c, "hi", 2) != 2 || close(c) != 0)
			_exit(4);
		_exit(0);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(pread(fd, buf, 11, 0) == 11 && memcmp(buf, "parentchild", 11) == 0);
	CHECK(stat(at(dir, "from-child"), &st) == 0 && st.st_size == 2);
	CHECK(close(fd) == 0);

	/* Threads: each its own file, concurrently. */
	pthread_t th[8];
	struct job jobs[8];
	for (int i = 0; i < 8; i++) {
		jobs[i] = (struct job){ dir, i, 0 };
		CHECK(pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0);
	}
	for (int i = 0; i < 8; i++) {
		CHECK(pthread_join(th[i], NULL) == 0);
		CHECK(jobs[i].ok);
	}
	printf("fds ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 4 && strcmp(argv[1], "stdio") == 0)
		return stdio_copy(argv[2], argv[3]);
	if (argc == 3 && strcmp(argv[1], "fds") == 0)
		return fds(argv[2]);
	fprintf(stderr, "usage: posix stdio SRC DST | posix fds DIR\n");
	return 2;
}
