"""Run by python3 under libpvfs_preload.so from crates/cli/tests/preload.rs.

Usage: check.py PVFS_DIR LOCAL_SRC

Copies LOCAL_SRC into PVFS_DIR with open()/write(), reads it back, lists with
os.listdir/os.scandir, checks os.stat (with directory times and link counts), appends, shares an offset through os.dup, forks
(the child reads an inherited descriptor and writes a new file: a fresh client in the
child), runs a subprocess, runs threads, changes into the directory and uses relative paths, then removes
a subtree with shutil.rmtree. Prints "python ok" at the end; any failure raises.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time

d, src = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()

with open(d + "/copy.bin", "wb") as f:
    f.write(data)
with open(d + "/copy.bin", "rb") as f:
    back = f.read()
assert hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest(), "read back"
assert os.stat(d + "/copy.bin").st_size == len(data)
assert os.path.isdir(d) and os.path.isfile(d + "/copy.bin")

os.mkdir(d + "/sub")
with open(d + "/sub/t.txt", "w") as f:
    f.write("hello\n")
with open(d + "/sub/t.txt", "a") as f:
    f.write("world\n")
assert open(d + "/sub/t.txt").read() == "hello\nworld\n"
# A directory's link count is 2 + its subdirectories; its mtime and ctime move with
# each entry added or removed.
assert os.stat(d).st_nlink == 3, os.stat(d).st_nlink
was = os.stat(d + "/sub")
time.sleep(0.02)
open(d + "/sub/new.txt", "w").close()
now = os.stat(d + "/sub")
assert now.st_mtime_ns > was.st_mtime_ns and now.st_ctime_ns > was.st_ctime_ns, (was, now)
time.sleep(0.02)
os.unlink(d + "/sub/new.txt")
assert os.stat(d + "/sub").st_mtime_ns > now.st_mtime_ns
assert sorted(os.listdir(d)) == ["copy.bin", "sub"], os.listdir(d)
kinds = {e.name: e.is_dir() for e in os.scandir(d)}
assert kinds == {"copy.bin": False, "sub": True}, kinds

fd = os.open(d + "/copy.bin", os.O_RDONLY)
fd2 = os.dup(fd)
assert os.read(fd, 100) == data[:100]
assert os.lseek(fd2, 0, os.SEEK_CUR) == 100
assert os.read(fd2, 10) == data[100:110]

pid = os.fork()
if pid == 0:
    ok = os.pread(fd, 10, 0) == data[:10]
    with open(d + "/sub/child.txt", "w") as f:
        f.write("from child")
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
assert status == 0, status
assert open(d + "/sub/child.txt").read() == "from child"
# subprocess (vfork, and the child closes every descriptor before exec): the parent's
# pvfs descriptors must survive it.
subprocess.run(["true"], check=True)
assert os.pread(fd, 10, 0) == data[:10]
os.close(fd)
os.close(fd2)


def work(i, errors):
    try:
        p = f"{d}/sub/th{i}"
        with open(p, "wb") as f:
            f.write(bytes([i]) * 100000)
        with open(p, "rb") as f:
            assert f.read() == bytes([i]) * 100000
        os.remove(p)
    except Exception as e:  # reported by the main thread
        errors.append(e)


errors = []
threads = [threading.Thread(target=work, args=(i, errors)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors

os.chdir(d + "/sub")
assert os.getcwd() == d + "/sub", os.getcwd()
with open("rel.txt", "w") as f:
    f.write("relative")
assert open(d + "/sub/rel.txt").read() == "relative"
assert sorted(os.listdir(".")) == ["child.txt", "rel.txt", "t.txt"], os.listdir(".")
os.chdir("/")
shutil.rmtree(d + "/sub")
assert not os.path.exists(d + "/sub")
print("python ok")
