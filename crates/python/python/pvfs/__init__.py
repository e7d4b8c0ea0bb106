"""pvfs: the Python client of the pvfs parallel file system.

    import pvfs
    c = pvfs.Client()                      # the file named by $PVFS_CONFIG
    c.makedirs("/data", exist_ok=True)
    with c.open("/data/x.bin", "wb", stripe_count=4, stripe_size=1 << 20) as f:
        f.write(payload)                   # one call: all 4 data servers at once
    with c.open("/data/x.bin", "rb") as f:
        data = f.read()

Every call goes to the Rust client library (``pvfs._pvfs``) with the GIL released;
a read or write of any size is one client call, which the client splits over the
file's data servers and runs in parallel. Errors are ``OSError`` subclasses with
the errno (``FileNotFoundError`` ...). ``pvfs.fsspec.PvfsFileSystem`` serves
``pvfs://`` URLs to fsspec (pandas, pyarrow, xarray, dask).
"""

import io
import os

from . import _pvfs
from ._pvfs import File, Stat

__all__ = ["Client", "RawFile", "File", "Stat", "__version__"]
__version__ = _pvfs.__version__

# Buffers of buffered files: at least this, at most MAX_BUFFER, else the stripe size.
MIN_BUFFER = 256 * 1024
MAX_BUFFER = 8 * 1024 * 1024


def _parse_mode(mode):
    """Python's open() modes: (read, write, create, exclusive, truncate, append, text)."""
    chars = set(mode)
    if len(chars) != len(mode) or not chars <= set("rwaxbt+") or (
        "b" in chars and "t" in chars
    ):
        raise ValueError(f"invalid mode: {mode!r}")
    kinds = chars & set("rwax")
    if len(kinds) != 1:
        raise ValueError(f"must have exactly one of read/write/create/append mode: {mode!r}")
    kind = kinds.pop()
    plus = "+" in chars
    return (
        kind == "r" or plus,
        kind != "r" or plus,
        kind in "wxa",
        kind == "x",
        kind == "w",
        kind == "a",
        "b" not in chars,
    )


class RawFile(io.RawIOBase):
    """An open pvfs file as Python's unbuffered binary file (``io.RawIOBase``):
    ``io.BufferedReader``/``BufferedWriter``/``TextIOWrapper`` stack on it. Every
    ``readinto``/``write`` is one client call on the whole buffer, without a copy."""

    def __init__(self, native, mode, readable, writable, append):
        super().__init__()
        self._f = native
        self.name = native.path
        self.mode = mode
        self._readable = readable
        self._writable = writable
        self._append = append
        self._pos = 0

    @property
    def native(self):
        """The ``pvfs._pvfs.File`` underneath (positional I/O, layout)."""
        return self._f

    def readable(self):
        return self._readable

    def writable(self):
        return self._writable

    def seekable(self):
        return True

    def _check(self, what):
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if what == "r" and not self._readable:
            raise io.UnsupportedOperation("not readable")
        if what == "w" and not self._writable:
            raise io.UnsupportedOperation("not writable")

    def readinto(self, b):
        self._check("r")
        view = memoryview(b).cast("B")
        n = self._f.readinto_at(view, self._pos)
        self._pos += n
        return n

    def read(self, size=-1):
        self._check("r")
        if size is None or size < 0:
            return self.readall()
        data = self._f.read_at(self._pos, size)
        self._pos += len(data)
        return data

    def readall(self):
        """The rest of the file in one client call."""
        self._check("r")
        left = self._f.size() - self._pos
        if left <= 0:
            return b""
        data = self._f.read_at(self._pos, left)
        self._pos += len(data)
        return data

    def write(self, b):
        self._check("w")
        view = memoryview(b).cast("B")
        if self._append:
            at = self._f.append(view)
            self._pos = at + view.nbytes
            return view.nbytes
        n = self._f.write_at(view, self._pos)
        self._pos += n
        return n

    def seek(self, offset, whence=io.SEEK_SET):
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._f.size() + offset
        else:
            raise ValueError(f"invalid whence ({whence})")
        if pos < 0:
            raise OSError(22, "negative seek position")
        self._pos = pos
        return pos

    def tell(self):
        if self.closed:
            raise ValueError("I/O operation on closed file")
        return self._pos

    def truncate(self, size=None):
        self._check("w")
        size = self._pos if size is None else size
        self._f.truncate(size)
        return size

    def fsync(self):
        """Makes what was written durable on the data servers."""
        self._check(None)
        self._f.fsync()

    def layout(self):
        """The file's layout: stripe size, stripe count, replicas, datafiles."""
        return self._f.layout()

    def stat(self):
        """The file's attributes now."""
        return self._f.stat()

    def __repr__(self):
        return f"<pvfs.RawFile name={self.name!r} mode={self.mode!r}>"


class Client:
    """A connection to one pvfs file system.

    ``config``: the configuration file; None: ``$PVFS_CONFIG`` (as the C library).
    No server is contacted until the first call. A forked child makes a new
    connection on its first call (the parent's runtime does not survive ``fork``).
    """

    def __init__(self, config=None):
        self._config = config
        self._pid = os.getpid()
        self._native = _pvfs.Client(config)

    @property
    def native(self):
        """The ``pvfs._pvfs.Client`` of this process."""
        if os.getpid() != self._pid:
            self._native = _pvfs.Client(self._config)
            self._pid = os.getpid()
        return self._native

    @property
    def config_path(self):
        return self.native.config_path

    @property
    def servers(self):
        return self.native.servers

    def stat(self, path):
        return self.native.stat(path)

    def lstat(self, path):
        return self.native.lstat(path)

    def exists(self, path):
        try:
            self.native.lstat(path)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def listdir(self, path="/"):
        return self.native.listdir(path)

    def scandir(self, path="/"):
        """[(name, Stat)] of directory ``path``, one batched request per server."""
        return self.native.scandir(path)

    def mkdir(self, path, mode=0o777):
        self.native.mkdir(path, mode)

    def makedirs(self, path, mode=0o777, exist_ok=False):
        self.native.makedirs(path, mode, exist_ok)

    def rmdir(self, path):
        self.native.rmdir(path)

    def unlink(self, path):
        self.native.unlink(path)

    remove = unlink

    def rename(self, src, dst):
        self.native.rename(src, dst)

    def truncate(self, path, size):
        self.native.truncate(path, size)

    def symlink(self, target, path):
        self.native.symlink(target, path)

    def readlink(self, path):
        return self.native.readlink(path)

    def layout(self, path):
        """Where file ``path``'s stripes live: stripe_size, stripe_count, replicas,
        width, size and datafiles (server, handle, size)."""
        return self.native.layout(path)

    def set_dir_layout(self, path, *, stripe_size=None, stripe_count=None,
                       replicas=None, clear=False):
        """The default layout of files and directories created in ``path`` from now on."""
        self.native.set_dir_layout(path, stripe_size=stripe_size,
                                   stripe_count=stripe_count, replicas=replicas,
                                   clear=clear)

    def dir_layout(self, path):
        """Directory ``path``'s default layout (dict, unset fields None) or None."""
        return self.native.dir_layout(path)

    def statfs(self):
        return self.native.statfs()

    def sync(self):
        self.native.sync()

    def open_native(self, path, mode="rb", *, perms=0o666, stripe_size=None,
                    stripe_count=None, replicas=None):
        """``pvfs._pvfs.File`` for ``path`` opened as ``mode`` would (positional I/O)."""
        _, _, create, exclusive, truncate, _, _ = _parse_mode(mode)
        return self.native.open_file(
            path, create=create, exclusive=exclusive, truncate=truncate, mode=perms,
            stripe_size=stripe_size, stripe_count=stripe_count, replicas=replicas)

    def open(self, path, mode="r", buffering=-1, encoding=None, errors=None,
             newline=None, *, perms=0o666, stripe_size=None, stripe_count=None,
             replicas=None):
        """Opens ``path`` as Python's ``open`` does (modes r, w, x, a, +, b, t).

        Layout of a file it creates: ``stripe_size`` (bytes per stripe unit),
        ``stripe_count`` (data servers), ``replicas`` (copies); unset ones come
        from the directory's default layout, then the file system's.
        ``buffering=0`` (binary only) gives the ``RawFile`` itself."""
        readable, writable, _, _, _, append, text = _parse_mode(mode)
        native = self.open_native(path, mode, perms=perms, stripe_size=stripe_size,
                                  stripe_count=stripe_count, replicas=replicas)
        raw = RawFile(native, mode, readable, writable, append)
        if append:
            raw.seek(0, io.SEEK_END)
        if buffering == 0:
            if text:
                raise ValueError("can't have unbuffered text I/O")
            return raw
        if buffering < 0 or buffering == 1:
            size = native.layout()["stripe_size"]
            buffering = min(max(size, MIN_BUFFER), MAX_BUFFER)
        if readable and writable:
            buf = io.BufferedRandom(raw, buffering)
        elif writable:
            buf = io.BufferedWriter(raw, buffering)
        else:
            buf = io.BufferedReader(raw, buffering)
        if text:
            return io.TextIOWrapper(buf, encoding=encoding or "utf-8", errors=errors,
                                    newline=newline)
        return buf

    def __repr__(self):
        return f"pvfs.Client({self._config!r})"
