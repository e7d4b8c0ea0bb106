#!/usr/bin/env python3
"""The SQLite step of scripts/bench-everyday: python3's sqlite3 module with SQLite's
defaults (rollback journal, synchronous=FULL, POSIX locks), so every commit creates,
writes, fsyncs and deletes a journal file next to the database.

  sqlite_work.py DB ROWS BATCH

ROWS inserts in transactions of BATCH, then ROWS updates by key in transactions of
BATCH, then a delete of every other row and VACUUM. Prints each phase's wall-clock
seconds ("insert_s 1.23", ...), after checking the table holds what it should.
"""
import random
import sqlite3
import sys
import time


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, rows, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(1)
    text = [bytes(rng.randrange(97, 123) for _ in range(100)).decode() for _ in range(64)]
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, body TEXT)")
    times = {}

    t = time.perf_counter()
    for start in range(0, rows, batch):
        db.execute("BEGIN")
        for i in range(start, min(start + batch, rows)):
            db.execute("INSERT INTO t VALUES (?, ?, ?)", (i, i * 7, text[i % 64]))
        db.execute("COMMIT")
    times["insert_s"] = time.perf_counter() - t

    t = time.perf_counter()
    for start in range(0, rows, batch):
        db.execute("BEGIN")
        for i in range(start, min(start + batch, rows)):
            db.execute("UPDATE t SET n = n + 1, body = ? WHERE id = ?", (text[(i + 1) % 64], i))
        db.execute("COMMIT")
    times["update_s"] = time.perf_counter() - t

    t = time.perf_counter()
    db.execute("DELETE FROM t WHERE id % 2 = 0")
    db.execute("VACUUM")
    times["delete_vacuum_s"] = time.perf_counter() - t

    count, total = db.execute("SELECT count(*), sum(n) FROM t").fetchone()
    db.close()
    odd = range(1, rows, 2)
    if count != len(odd) or total != sum(i * 7 + 1 for i in odd):
        sys.exit(f"sqlite_work: the table holds {count} rows summing to {total}")
    for k, v in times.items():
        print(f"{k} {v:.3f}")


if __name__ == "__main__":
    main()
