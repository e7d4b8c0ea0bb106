/*
 * The C part of libpvfs_preload.so: the hooks C expresses better than Rust.
 *
 * - `open`, `openat`, `fcntl` and `ioctl` are variadic; stable Rust cannot define
 *   variadic functions, so these fetch the optional argument with va_arg and hand
 *   everything to the Rust side (pvfs_preload_* in src/io.rs), which routes the call.
 * - glibc's `fopen` opens files with internal calls that no hook sees, and its FILE
 *   reads and writes with internal syscalls. A FILE on a pvfs file is therefore a
 *   `fopencookie` stream whose read/write/seek/close go to the Rust descriptor layer.
 *   Its `_fileno` is set to the placeholder descriptor so `fileno(fp)` answers the
 *   descriptor that `fstat` and friends know (glibc only uses `_fileno` of a cookie
 *   stream to tell whether it is open), and it gets a 1 MiB buffer so stdio moves
 *   data in large requests.
 *
 * Nothing here calls a hooked libc function by name except through the Rust side.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/types.h>

/* ---- the Rust side ---------------------------------------------------------- */

/* Routes an open: pvfs or the real openat. */
extern int pvfs_preload_openat(int dirfd, const char *path, int flags, unsigned int mode);
/* Routes fcntl / ioctl with their one optional argument. */
extern int pvfs_preload_fcntl(int fd, int cmd, uintptr_t arg);
extern int pvfs_preload_ioctl(int fd, unsigned long request, uintptr_t arg);
/* For fopen: 0 = not a pvfs path (use the real fopen), 1 = opened *fd, -1 = error. */
extern int pvfs_preload_fopen(const char *path, const char *mode, int *fd);
/* Whether fd is a pvfs descriptor. */
extern int pvfs_preload_is_pvfs(int fd);
/* Descriptor operations for cookie streams (errno set on failure). */
extern ssize_t pvfs_preload_fd_read(int fd, char *buf, size_t len);
extern ssize_t pvfs_preload_fd_write(int fd, const char *buf, size_t len);
extern int64_t pvfs_preload_fd_seek(int fd, int64_t off, int whence);
extern int pvfs_preload_fd_close(int fd);
/* Whether path is under the prefix (for freopen, which cannot be served). */
extern int pvfs_preload_is_pvfs_path(const char *path);

/* ---- variadic hooks --------------------------------------------------------- */

/* Whether open's flags carry a mode argument (as glibc's __OPEN_NEEDS_MODE). */
static int needs_mode(int flags)
{
	return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
}

#define MODE_ARG(flags, mode)                   \
	do {                                    \
		if (needs_mode(flags)) {        \
			va_list ap;             \
			va_start(ap, flags);    \
			mode = va_arg(ap, int); \
			va_end(ap);             \
		}                               \
	} while (0)

int open(const char *path, int flags, ...)
{
	int mode = 0;
	MODE_ARG(flags, mode);
	return pvfs_preload_openat(AT_FDCWD, path, flags, (unsigned int)mode);
}

int open64(const char *path, int flags, ...)
{
	int mode = 0;
	MODE_ARG(flags, mode);
	return pvfs_preload_openat(AT_FDCWD, path, flags, (unsigned int)mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	int mode = 0;
	MODE_ARG(flags, mode);
	return pvfs_preload_openat(dirfd, path, flags, (unsigned int)mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	int mode = 0;
	MODE_ARG(flags, mode);
	return pvfs_preload_openat(dirfd, path, flags, (unsigned int)mode);
}

/* _FORTIFY_SOURCE variants: called without a mode. */
int __open_2(const char *path, int flags)
{
	return pvfs_preload_openat(AT_FDCWD, path, flags, 0);
}

int __open64_2(const char *path, int flags)
{
	return pvfs_preload_openat(AT_FDCWD, path, flags, 0);
}

int __openat_2(int dirfd, const char *path, int flags)
{
	return pvfs_preload_openat(dirfd, path, flags, 0);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	return pvfs_preload_openat(dirfd, path, flags, 0);
}

/* fcntl's third argument is an int or a pointer; both travel in one register. */
int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	uintptr_t arg = (uintptr_t)va_arg(ap, void *);
	va_end(ap);
	return pvfs_preload_fcntl(fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	uintptr_t arg = (uintptr_t)va_arg(ap, void *);
	va_end(ap);
	return pvfs_preload_fcntl(fd, cmd, arg);
}

int ioctl(int fd, unsigned long request, ...)
{
	va_list ap;
	va_start(ap, request);
	uintptr_t arg = (uintptr_t)va_arg(ap, void *);
	va_end(ap);
	return pvfs_preload_ioctl(fd, request, arg);
}

/* ---- stdio ------------------------------------------------------------------ */

/* Bytes of stdio buffer per pvfs stream: large requests, few round trips. */
#define STREAM_BUF (1 << 20)

/* What a cookie stream carries: its descriptor and the buffer to free at close. */
struct cookie {
	int fd;
	char *buf;
};

static ssize_t cookie_read(void *c, char *buf, size_t len)
{
	return pvfs_preload_fd_read(((struct cookie *)c)->fd, buf, len);
}

static ssize_t cookie_write(void *c, const char *buf, size_t len)
{
	/* stdio treats a short write as an error; the Rust side writes everything. */
	ssize_t n = pvfs_preload_fd_write(((struct cookie *)c)->fd, buf, len);
	return n < 0 ? 0 : n;
}

static int cookie_seek(void *c, off64_t *off, int whence)
{
	int64_t r = pvfs_preload_fd_seek(((struct cookie *)c)->fd, *off, whence);
	if (r < 0)
		return -1;
	*off = r;
	return 0;
}

/* Called by fclose after the last flush; glibc does not touch a user buffer after
 * this (it only resets its pointers), so the buffer is freed here. */
static int cookie_close(void *c)
{
	struct cookie *k = c;
	int r = pvfs_preload_fd_close(k->fd);
	int e = errno;
	free(k->buf);
	free(k);
	errno = e;
	return r;
}

/* Wraps pvfs descriptor fd in a stdio stream; on failure fd is closed. */
static FILE *pvfs_stream(int fd, const char *mode)
{
	struct cookie *k = malloc(sizeof *k);
	if (k == NULL) {
		pvfs_preload_fd_close(fd);
		errno = ENOMEM;
		return NULL;
	}
	k->fd = fd;
	k->buf = NULL;
	cookie_io_functions_t io = {
		.read = cookie_read,
		.write = cookie_write,
		.seek = cookie_seek,
		.close = cookie_close,
	};
	FILE *f = fopencookie(k, mode, io);
	if (f == NULL) {
		int e = errno;
		pvfs_preload_fd_close(fd);
		free(k);
		errno = e;
		return NULL;
	}
	f->_fileno = fd;
	k->buf = malloc(STREAM_BUF);
	if (k->buf != NULL && setvbuf(f, k->buf, _IOFBF, STREAM_BUF) != 0) {
		free(k->buf);
		k->buf = NULL;
	}
	return f;
}

typedef FILE *(*fopen_fn)(const char *, const char *);
typedef FILE *(*fdopen_fn)(int, const char *);
typedef FILE *(*freopen_fn)(const char *, const char *, FILE *);

/* The next definition of `name` (libc's), looked up once. */
static void *next_fn(void **slot, const char *name)
{
	void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (p == NULL) {
		p = dlsym(RTLD_NEXT, name);
		__atomic_store_n(slot, p, __ATOMIC_RELEASE);
	}
	if (p == NULL)
		errno = ENOSYS;
	return p;
}

static FILE *do_fopen(const char *path, const char *mode, const char *real_name, void **slot)
{
	int fd = -1;
	int r = pvfs_preload_fopen(path, mode, &fd);
	if (r < 0)
		return NULL;
	if (r > 0)
		return pvfs_stream(fd, mode);
	fopen_fn real = (fopen_fn)next_fn(slot, real_name);
	return real ? real(path, mode) : NULL;
}

FILE *fopen(const char *path, const char *mode)
{
	static void *slot;
	return do_fopen(path, mode, "fopen", &slot);
}

FILE *fopen64(const char *path, const char *mode)
{
	static void *slot;
	return do_fopen(path, mode, "fopen64", &slot);
}

FILE *fdopen(int fd, const char *mode)
{
	static void *slot;
	if (pvfs_preload_is_pvfs(fd))
		return pvfs_stream(fd, mode);
	fdopen_fn real = (fdopen_fn)next_fn(&slot, "fdopen");
	return real ? real(fd, mode) : NULL;
}

/* A FILE cannot be turned into a cookie stream in place: freopen onto a pvfs path is
 * refused (documented in docs/preload.md). */
static FILE *do_freopen(const char *path, const char *mode, FILE *stream, const char *real_name,
			void **slot)
{
	if (path != NULL && pvfs_preload_is_pvfs_path(path)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	freopen_fn real = (freopen_fn)next_fn(slot, real_name);
	return real ? real(path, mode, stream) : NULL;
}

FILE *freopen(const char *path, const char *mode, FILE *stream)
{
	static void *slot;
	return do_freopen(path, mode, stream, "freopen", &slot);
}

FILE *freopen64(const char *path, const char *mode, FILE *stream)
{
	static void *slot;
	return do_freopen(path, mode, stream, "freopen64", &slot);
}

/* ---- exec with argument lists ----------------------------------------------- */

/*
 * glibc's execl, execlp and execle call its internal execve, which no hook sees, so
 * they are defined here over execv, execvp and execve, which are the library's
 * (src/handoff.rs: the pvfs state handed to the new program).
 */
extern int execve(const char *path, char *const argv[], char *const envp[]);
extern int execv(const char *path, char *const argv[]);
extern int execvp(const char *file, char *const argv[]);

/* Arguments of an argument list ending in NULL, counting arg0; -1 if too many. */
#define MAX_LIST_ARGS 65536

#define COLLECT_ARGS(arg0, last, argv, n)                            \
	va_list ap;                                                  \
	va_start(ap, last);                                          \
	size_t n = 1;                                                \
	{                                                            \
		va_list cp;                                          \
		va_copy(cp, ap);                                     \
		while (va_arg(cp, const char *) != NULL && n < MAX_LIST_ARGS) \
			n++;                                         \
		va_end(cp);                                          \
	}                                                            \
	if (n >= MAX_LIST_ARGS) {                                    \
		va_end(ap);                                          \
		errno = E2BIG;                                       \
		return -1;                                           \
	}                                                            \
	const char *argv[n + 1];                                     \
	argv[0] = arg0;                                              \
	for (size_t i = 1; i <= n; i++)                              \
		argv[i] = va_arg(ap, const char *);

int execl(const char *path, const char *arg, ...)
{
	COLLECT_ARGS(arg, arg, argv, n);
	va_end(ap);
	return execv(path, (char *const *)argv);
}

int execlp(const char *file, const char *arg, ...)
{
	COLLECT_ARGS(arg, arg, argv, n);
	va_end(ap);
	return execvp(file, (char *const *)argv);
}

int execle(const char *path, const char *arg, ...)
{
	COLLECT_ARGS(arg, arg, argv, n);
	char *const *envp = va_arg(ap, char *const *);
	va_end(ap);
	return execve(path, (char *const *)argv, envp);
}
