"""The pvfs package itself: large striped I/O, layouts, Python's file objects,
errors as the OSError of their errno."""

import errno
import io
import os

import fsspec
import pytest

import pvfs

MiB = 1 << 20


def test_large_write_and_read_are_one_call_each_and_byte_exact(client, tmp_pvfs):
    data = os.urandom(64 * MiB)
    path = f"{tmp_pvfs}/big.bin"
    with client.open(path, "wb", stripe_size=MiB, stripe_count=4) as f:
        assert f.write(data) == len(data)
    assert client.stat(path).size == len(data)
    with client.open(path, "rb") as f:
        back = f.read()
    assert back == data
    # Every data server holds its share: 16 stripe units of 1 MiB each.
    layout = client.layout(path)
    assert layout["stripe_count"] == 4
    assert [d["size"] for d in layout["datafiles"]] == [16 * MiB] * 4
    assert len({d["server"] for d in layout["datafiles"]}) == 4
    # readinto a preallocated buffer, from an offset inside a stripe.
    raw = client.open(path, "rb", buffering=0)
    buf = bytearray(5 * MiB)
    raw.seek(MiB // 2 + 3)
    assert raw.readinto(buf) == len(buf)
    assert buf == data[MiB // 2 + 3 : MiB // 2 + 3 + len(buf)]
    raw.close()


def test_layout_asked_is_the_layout_made(client, tmp_pvfs):
    for count in (1, 2, 3):
        path = f"{tmp_pvfs}/n{count}"
        with client.open(path, "wb", stripe_count=count, stripe_size=128 * 1024) as f:
            f.write(b"x" * (count * 128 * 1024))
            assert f.raw.layout()["stripe_count"] == count
        layout = client.layout(path)
        assert layout["stripe_count"] == count
        assert len(layout["datafiles"]) == count
        assert layout["stripe_size"] == 128 * 1024
        assert layout["replicas"] == 1
        assert sum(d["size"] for d in layout["datafiles"]) == count * 128 * 1024
    # Through fsspec, and a directory's default layout.
    fs = fsspec.filesystem("pvfs")
    with fs.open(f"pvfs://{tmp_pvfs}/via-fsspec", "wb", stripe_count=2, stripe_size=65536) as f:
        f.write(b"y" * 200_000)
    assert fs.layout(f"{tmp_pvfs}/via-fsspec")["stripe_count"] == 2
    fs.makedirs(f"{tmp_pvfs}/narrow")
    fs.set_layout(f"{tmp_pvfs}/narrow", stripe_count=1, stripe_size=256 * 1024)
    assert client.dir_layout(f"{tmp_pvfs}/narrow") == {
        "stripe_size": 256 * 1024,
        "stripe_count": 1,
        "replicas": None,
    }
    fs.pipe_file(f"{tmp_pvfs}/narrow/f", b"z" * 1000)
    layout = client.layout(f"{tmp_pvfs}/narrow/f")
    assert (layout["stripe_count"], layout["stripe_size"]) == (1, 256 * 1024)


def test_python_file_objects(client, tmp_pvfs):
    path = f"{tmp_pvfs}/t.txt"
    with client.open(path, "w") as f:
        assert isinstance(f, io.TextIOWrapper)
        f.write("one\ntwo\n")
    with client.open(path, "a") as f:
        f.write("three\n")
    with client.open(path) as f:
        assert f.readlines() == ["one\n", "two\n", "three\n"]
    with client.open(path, "r+b") as f:
        f.seek(4)
        f.write(b"TWO")
        f.seek(0)
        assert f.read() == b"one\nTWO\nthree\n"
        f.truncate(3)
    assert client.stat(path).size == 3
    with client.open(path, "rb", buffering=0) as raw:
        assert isinstance(raw, io.RawIOBase)
        assert raw.read() == b"one"
    client.rename(path, f"{tmp_pvfs}/u.txt")
    assert client.listdir(tmp_pvfs) == ["u.txt"]
    client.unlink(f"{tmp_pvfs}/u.txt")
    assert client.listdir(tmp_pvfs) == []


def test_errors_are_the_oserror_of_their_errno(client, tmp_pvfs):
    with pytest.raises(FileNotFoundError) as e:
        client.open(f"{tmp_pvfs}/missing", "rb")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(FileNotFoundError):
        client.stat(f"{tmp_pvfs}/missing")
    with pytest.raises(FileNotFoundError):
        fsspec.filesystem("pvfs").open(f"pvfs://{tmp_pvfs}/missing", "rb")
    with pytest.raises(FileNotFoundError):
        fsspec.filesystem("pvfs").info(f"pvfs://{tmp_pvfs}/missing")
    client.mkdir(f"{tmp_pvfs}/d")
    with pytest.raises(FileExistsError):
        client.mkdir(f"{tmp_pvfs}/d")
    with pytest.raises(FileExistsError):
        client.makedirs(f"{tmp_pvfs}/d")
    client.makedirs(f"{tmp_pvfs}/d", exist_ok=True)
    with pytest.raises(IsADirectoryError):
        client.open(f"{tmp_pvfs}/d", "rb")
    client.open(f"{tmp_pvfs}/d/f", "wb").close()
    with pytest.raises(OSError) as e:
        client.rmdir(f"{tmp_pvfs}/d")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(NotADirectoryError):
        client.listdir(f"{tmp_pvfs}/d/f")
    with pytest.raises(FileExistsError):
        client.open(f"{tmp_pvfs}/d/f", "xb")
    with pytest.raises(OSError) as e:
        pvfs.Client("/nonexistent/pvfs.toml")
    assert e.value.errno == errno.ENOENT
