"""fsspec file system for ``pvfs://`` URLs (registered as the ``pvfs`` protocol by
the package's ``fsspec.specs`` entry point).

    import pandas as pd
    df = pd.read_parquet("pvfs:///data/x.parquet")
    fs = fsspec.filesystem("pvfs")                  # $PVFS_CONFIG
    fs = fsspec.filesystem("pvfs", config="/etc/pvfs.toml")

URLs: ``pvfs:///data/x`` and ``pvfs:/data/x`` name ``/data/x``. Reads fetch whole
ranges with one client call each (the client reads every data server of the range
at once); writes are buffered to ``block_size`` (8 MiB by default) and each full
buffer goes out as one call. ``open(..., stripe_size=, stripe_count=, replicas=)``
chooses the layout of a file it creates; ``set_layout`` a directory's default.
"""

import datetime
import posixpath

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from . import Client

# Bytes per client call when copying, getting and putting whole files.
COPY_CHUNK = 64 * 1024 * 1024


def _info(path, st):
    kind = st.kind if st.kind in ("file", "directory") else "other"
    return {
        "name": path,
        "size": st.size,
        "type": kind,
        "mode": st.mode,
        "uid": st.uid,
        "gid": st.gid,
        "nlink": st.nlink,
        "mtime": st.mtime,
        "ctime": st.ctime,
        "atime": st.atime,
        "ino": st.handle,
        "islink": st.kind == "symlink",
    }


class PvfsFileSystem(AbstractFileSystem):
    """A pvfs file system through fsspec. ``config``: the configuration file (None:
    ``$PVFS_CONFIG``). ``auto_mkdir``: writing a file makes its missing parent
    directories (as object stores behave; True by default)."""

    protocol = "pvfs"
    root_marker = "/"
    # get_file/put_file move this much per call.
    blocksize = COPY_CHUNK

    def __init__(self, config=None, auto_mkdir=True, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.auto_mkdir = auto_mkdir
        self.client = Client(config)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for prefix in ("pvfs://", "pvfs:"):
            if path.startswith(prefix):
                path = path[len(prefix):]
                break
        if not path.startswith("/"):
            path = "/" + path
        while "//" in path:
            path = path.replace("//", "/")
        return path.rstrip("/") or "/"

    @staticmethod
    def _get_kwargs_from_urls(path):
        return {}

    def unstrip_protocol(self, name):
        return "pvfs://" + self._strip_protocol(name)

    # ----- metadata ---------------------------------------------------------------

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        st = self.client.lstat(path)
        if st.kind == "symlink":
            try:
                target = self.client.stat(path)
            except FileNotFoundError:
                return _info(path, st)
            out = _info(path, target)
            out["islink"] = True
            out["destination"] = self.client.readlink(path)
            return out
        return _info(path, st)

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        st = self.client.lstat(path)
        if st.kind != "directory":
            entries = [self.info(path)]
        else:
            entries = []
            for name, est in self.client.scandir(path):
                full = posixpath.join(path, name)
                if est.kind == "symlink":
                    try:
                        entries.append(self.info(full))
                        continue
                    except FileNotFoundError:
                        pass
                entries.append(_info(full, est))
            entries.sort(key=lambda e: e["name"])
        return entries if detail else [e["name"] for e in entries]

    def exists(self, path, **kwargs):
        try:
            self.client.lstat(self._strip_protocol(path))
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def lexists(self, path, **kwargs):
        return self.exists(path)

    def isdir(self, path):
        try:
            return self.client.stat(self._strip_protocol(path)).kind == "directory"
        except OSError:
            return False

    def isfile(self, path):
        try:
            return self.client.stat(self._strip_protocol(path)).kind == "file"
        except OSError:
            return False

    def islink(self, path):
        try:
            return self.client.lstat(self._strip_protocol(path)).kind == "symlink"
        except OSError:
            return False

    def size(self, path):
        return self.client.stat(self._strip_protocol(path)).size

    def modified(self, path):
        st = self.client.stat(self._strip_protocol(path))
        return datetime.datetime.fromtimestamp(st.mtime, tz=datetime.timezone.utc)

    def created(self, path):
        # pvfs keeps no birth time: the last attribute change is the nearest.
        st = self.client.stat(self._strip_protocol(path))
        return datetime.datetime.fromtimestamp(st.ctime, tz=datetime.timezone.utc)

    def mkdir(self, path, create_parents=True, **kwargs):
        path = self._strip_protocol(path)
        if self.exists(path):
            raise FileExistsError(path)
        if create_parents:
            self.client.makedirs(path, exist_ok=True)
        else:
            self.client.mkdir(path)

    def makedirs(self, path, exist_ok=False):
        self.client.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def rmdir(self, path):
        self.client.rmdir(self._strip_protocol(path))

    def rm_file(self, path):
        self._rm(path)

    def _rm(self, path):
        """Removes a file, or an empty directory (fsspec's rm removes trees from
        their leaves up through this)."""
        path = self._strip_protocol(path)
        if self.client.lstat(path).kind == "directory":
            self.client.rmdir(path)
        else:
            self.client.unlink(path)

    def symlink(self, target, path, **kwargs):
        self.client.symlink(target, self._strip_protocol(path))

    def _parent_dirs(self, path):
        if self.auto_mkdir:
            parent = self._parent(path)
            if parent and parent != "/":
                self.client.makedirs(parent, exist_ok=True)

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        """Renames (one server-side rename, directories whole); with lists or glob
        patterns, fsspec's copy and delete."""
        if not isinstance(path1, str) or not isinstance(path2, str) or self._has_magic(path1):
            return super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)
        src = self._strip_protocol(path1)
        dst = self._strip_protocol(path2)
        if src == dst:
            return
        if self.isdir(dst):
            dst = posixpath.join(dst, posixpath.basename(src))
        self._parent_dirs(dst)
        self.client.rename(src, dst)

    @staticmethod
    def _has_magic(path):
        return any(c in path for c in "*?[")

    def cp_file(self, path1, path2, **kwargs):
        src = self._strip_protocol(path1)
        dst = self._strip_protocol(path2)
        st = self.client.stat(src)
        if st.kind == "directory":
            self.client.makedirs(dst, exist_ok=True)
            return
        self._parent_dirs(dst)
        fin = self.client.open_native(src, "rb")
        fout = self.client.open_native(dst, "wb")
        offset = 0
        while True:
            data = fin.read_at(offset, COPY_CHUNK)
            if not data:
                break
            fout.write_at(data, offset)
            offset += len(data)

    # ----- layouts ----------------------------------------------------------------

    def layout(self, path):
        """Where file ``path``'s stripes live (``Client.layout``)."""
        return self.client.layout(self._strip_protocol(path))

    def set_layout(self, path, stripe_size=None, stripe_count=None, replicas=None,
                   clear=False):
        """The default layout of what is created in directory ``path`` from now on."""
        self.client.set_dir_layout(self._strip_protocol(path), stripe_size=stripe_size,
                                   stripe_count=stripe_count, replicas=replicas,
                                   clear=clear)

    # ----- files ------------------------------------------------------------------

    def _open(self, path, mode="rb", block_size=None, autocommit=True,
              cache_options=None, **kwargs):
        path = self._strip_protocol(path)
        if "r" not in mode:
            self._parent_dirs(path)
        return PvfsFile(self, path, mode=mode, block_size=block_size,
                        autocommit=autocommit, cache_options=cache_options, **kwargs)

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        f = self.client.open_native(path, "rb")
        size = None
        if start is None:
            start = 0
        if start < 0 or (end is not None and end < 0):
            size = f.size()
            start = max(size + start, 0) if start < 0 else start
            if end is not None and end < 0:
                end = size + end
        if end is None:
            end = f.size() if size is None else size
        if end <= start:
            return b""
        return f.read_at(start, end - start)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        path = self._strip_protocol(path)
        self._parent_dirs(path)
        f = self.client.open_native(path, "xb" if mode == "create" else "wb", **kwargs)
        f.write_at(value, 0)


class PvfsFile(AbstractBufferedFile):
    """A pvfs file opened through fsspec: ranges are read with one client call each
    (through fsspec's read-ahead cache); what is written is buffered to
    ``block_size`` and written with one call per full buffer. Modes rb, wb, xb, ab.
    Layout keywords for a file it creates: ``stripe_size``, ``stripe_count``,
    ``replicas``."""

    DEFAULT_BLOCK_SIZE = 8 * 1024 * 1024

    def __init__(self, fs, path, mode="rb", block_size=None, autocommit=True,
                 cache_options=None, stripe_size=None, stripe_count=None,
                 replicas=None, **kwargs):
        if not autocommit:
            raise NotImplementedError("pvfs files are written in place (autocommit only)")
        if mode not in ("rb", "wb", "xb", "ab"):
            raise NotImplementedError(f"file mode not supported: {mode!r}")
        # Opened (and for wb/xb/ab created) now: a missing file or an existing one
        # under xb fails at open, not at the first flush.
        self._native = fs.client.open_native(
            path, mode, stripe_size=stripe_size, stripe_count=stripe_count,
            replicas=replicas)
        size = self._native.size() if mode == "rb" else None
        super().__init__(fs, path, mode=mode, block_size=block_size,
                         autocommit=autocommit, cache_options=cache_options,
                         size=size, **kwargs)
        if mode == "rb":
            self.details = {"name": path, "size": size, "type": "file"}
        if mode == "ab":
            self.loc = self._native.size()

    @property
    def native(self):
        """The ``pvfs._pvfs.File`` underneath."""
        return self._native

    def _fetch_range(self, start, end):
        if end <= start:
            return b""
        return self._native.read_at(start, end - start)

    def _initiate_upload(self):
        pass

    def _upload_chunk(self, final=False):
        data = self.buffer.getbuffer()
        if len(data):
            if self.mode == "ab":
                self._native.append(data)
            else:
                self._native.write_at(data, self.offset)
        del data
        return True

    def fsync(self):
        """Flushes what is buffered and makes it durable on the data servers."""
        self.flush()
        self._native.fsync()

    def layout(self):
        """The file's layout (stripe size, stripe count, replicas, datafiles)."""
        return self._native.layout()
