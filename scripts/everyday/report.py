#!/usr/bin/env python3
"""The report of scripts/bench-everyday: markdown tables (or JSON with --json) from the
sitting's files in DIR:

  meta.tsv      key, value: the machine, the build, the inputs (printed as a list)
  rows.tsv      row, title: the rows in table order
  results.tsv   round, row, metric, unit, side (pvfs or local), value, label
  skipped.tsv   row, why it did not run
  failures.tsv  round, row, side, what failed

For every metric: the median and range over the rounds of each side, and the median
and range of the per-round ratios pvfs / local (both sides of one round ran back to
back). "pvfs takes" turns that ratio into how many times as long pvfs took for the
same work (the ratio itself for times, its inverse for rates).
"""
import json
import statistics
import sys
from collections import OrderedDict

TIME_UNITS = ("s", "us")


def read_tsv(path, fields):
    try:
        with open(path) as f:
            return [dict(zip(fields, line.rstrip("\n").split("\t"))) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def fmt(x):
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def summary(values):
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "samples": values}


def shown(s):
    if s is None:
        return "-"
    if len(s["samples"]) == 1:
        return fmt(s["median"])
    return f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])})"


def table(caption, columns, metrics, cells, title):
    """A markdown table of METRICS: the row's title (on its first metric only), what,
    unit, then CELLS(metric) under COLUMNS."""
    if not metrics:
        return
    head = ("row", "what", "unit") + tuple(columns)
    print(caption)
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    last = None
    for m in metrics:
        row = title[m["row"]] if m["row"] != last else ""
        last = m["row"]
        print("| " + " | ".join((row, m["label"], m["unit"]) + tuple(cells(m))) + " |")
    print()


def main():
    d = sys.argv[1]
    as_json = "--json" in sys.argv[2:]
    meta = read_tsv(f"{d}/meta.tsv", ("key", "value"))
    rows = read_tsv(f"{d}/rows.tsv", ("row", "title"))
    results = read_tsv(f"{d}/results.tsv",
                       ("round", "row", "metric", "unit", "side", "value", "label"))
    skipped = read_tsv(f"{d}/skipped.tsv", ("row", "why"))
    failures = read_tsv(f"{d}/failures.tsv", ("round", "row", "side", "what"))

    metrics = OrderedDict()
    for r in rows:
        for x in results:
            if x["row"] != r["row"]:
                continue
            m = metrics.setdefault((x["row"], x["metric"]), {
                "row": x["row"], "metric": x["metric"], "label": x["label"],
                "unit": x["unit"], "rounds": {}})
            m["rounds"].setdefault(int(x["round"]), {})[x["side"]] = float(x["value"])
    # Metrics in the order of their first result within a row, whatever the round.
    out = []
    for m in metrics.values():
        rounds = m.pop("rounds")
        order = sorted(rounds)
        pv = [rounds[i]["pvfs"] for i in order if "pvfs" in rounds[i]]
        lo = [rounds[i]["local"] for i in order if "local" in rounds[i]]
        ratios = [rounds[i]["pvfs"] / rounds[i]["local"] for i in order
                  if rounds[i].get("local") and "pvfs" in rounds[i]]
        slow = [r if m["unit"] in TIME_UNITS else 1 / r for r in ratios if r > 0]
        m.update(pvfs=summary(pv), local=summary(lo), ratio=summary(ratios),
                 pvfs_takes=summary(slow))
        out.append(m)

    if as_json:
        json.dump({"meta": {x["key"]: x["value"] for x in meta}, "rows": rows,
                   "metrics": out, "skipped": skipped, "failures": failures},
                  sys.stdout, indent=1)
        print()
        return

    title = {r["row"]: r["title"] for r in rows}
    for x in meta:
        print(f"- {x['key']}: {x['value']}")
    print()
    def takes(m):
        return "-" if m["pvfs_takes"] is None else f"{fmt(m['pvfs_takes']['median'])}x"

    table("Medians over the rounds (range in parentheses); the ratio is taken per round.",
          ("pvfs", "local", "pvfs / local", "pvfs takes"),
          [m for m in out if m["local"] is not None],
          lambda m: (shown(m["pvfs"]), shown(m["local"]), shown(m["ratio"]), takes(m)),
          title)
    table("pvfs only (no local counterpart):", ("pvfs",),
          [m for m in out if m["local"] is None], lambda m: (shown(m["pvfs"]),), title)
    for s in skipped:
        print(f"Skipped {s['row']}: {s['why']}")
    for f in failures:
        print(f"FAILED in round {f['round']}, {f['row']} on {f['side']}: {f['what']}")


if __name__ == "__main__":
    main()
