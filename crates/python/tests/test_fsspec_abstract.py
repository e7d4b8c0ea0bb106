"""fsspec's own abstract test suite (copy, get, put, open, pipe) against pvfs."""

import posixpath
import uuid

import fsspec
import fsspec.tests.abstract as abstract
import pytest

from pvfs.fsspec import PvfsFileSystem


class PvfsFixtures(abstract.AbstractFixtures):
    @pytest.fixture
    def fs(self):
        fs = fsspec.filesystem("pvfs")
        assert isinstance(fs, PvfsFileSystem), "the entry point names pvfs.fsspec"
        return fs

    @pytest.fixture
    def fs_join(self):
        return posixpath.join

    @pytest.fixture
    def fs_path(self, fs):
        path = f"/fsspec-abstract/{uuid.uuid4().hex}"
        fs.makedirs(path, exist_ok=True)
        yield path
        if fs.exists(path):
            fs.rm(path, recursive=True)


class TestPvfsCopy(abstract.AbstractCopyTests, PvfsFixtures):
    pass


class TestPvfsGet(abstract.AbstractGetTests, PvfsFixtures):
    pass


class TestPvfsPut(abstract.AbstractPutTests, PvfsFixtures):
    pass


class TestPvfsOpen(abstract.AbstractOpenTests, PvfsFixtures):
    pass


class TestPvfsPipe(abstract.AbstractPipeTests, PvfsFixtures):
    pass
