"""Fixtures of the pvfs Python tests: a file system named by $PVFS_CONFIG (the Rust
test `crates/cli/tests/python.rs` starts a real cluster and sets it), and a
directory of its own for each test under /pytest."""

import os
import uuid

import pytest

import pvfs


@pytest.fixture(scope="session")
def client():
    assert os.environ.get("PVFS_CONFIG"), "PVFS_CONFIG names no cluster"
    return pvfs.Client()


@pytest.fixture
def tmp_pvfs(client):
    """A fresh directory on pvfs, removed with what it holds afterwards."""
    path = f"/pytest/{uuid.uuid4().hex}"
    client.makedirs(path, exist_ok=True)
    yield path
    import fsspec

    fs = fsspec.filesystem("pvfs")
    if fs.exists(path):
        fs.rm(path, recursive=True)
