"""Creates, writes, fsyncs and closes files DIR/f0, DIR/f1, ... until the file STOP
exists (and at least 5), through whatever path DIR is on: a pvfs mount, or a pvfs
prefix under the preload library. Any error ends it with status 1. Prints
"files N longest SECONDS" (the longest file, create to close).

    python3 loop.py DIR STOP
"""
import os
import sys
import time


def content(i):
    """File i's 64 KiB (the test checks them through the client library)."""
    return bytes((i * 7 + k) & 0xFF for k in range(256)) * 256


def main():
    d, stop = sys.argv[1], sys.argv[2]
    os.mkdir(d)
    longest = 0.0
    i = 0
    while i < 5 or not os.path.exists(stop):
        t = time.monotonic()
        data = content(i)
        fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        done = 0
        while done < len(data):
            done += os.write(fd, data[done:])
        os.fsync(fd)
        os.close(fd)
        longest = max(longest, time.monotonic() - t)
        i += 1
    print(f"files {i} longest {longest:.3f}", flush=True)


main()
