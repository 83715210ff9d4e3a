#!/usr/bin/env python3
"""Prints a bench/comm JSON document as a Markdown table: time per op (us) and busbw (GB/s) of each
implementation side by side, one row per (collective, ranks, message size).

    python3 bench/comm/summarize.py bench/comm/results/comm_bench.json [--sizes 4096,1048576,16777216]
"""
import json
import sys


def main() -> None:
    path = sys.argv[1]
    sizes = None
    if "--sizes" in sys.argv:
        sizes = {int(s) for s in sys.argv[sys.argv.index("--sizes") + 1].split(",")}
    doc = json.load(open(path))
    impls = ["local", "mpi", "mpi_native", "mpi_raw"]
    rows = {}
    for r in doc["results"]:
        if sizes and r["bytes"] not in sizes:
            continue
        rows.setdefault((r["op"], r["ranks"], r["bytes"]), {})[r["impl"]] = r
    print(f"machine: {doc['machine'].get('cpu', '?')}, {doc['machine'].get('cores', '?')} cores; commit {doc['commit']}")
    print()
    print("| op | ranks | bytes | " + " | ".join(f"{i} us (busbw GB/s)" for i in impls) + " |")
    print("|---|---|---|" + "---|" * len(impls))
    order = {"all_reduce": 0, "all_gather": 1, "reduce_scatter": 2, "broadcast": 3}
    for key in sorted(rows, key=lambda k: (order.get(k[0], 9), k[1], k[2])):
        cells = []
        for i in impls:
            r = rows[key].get(i)
            cells.append(f"{r['time_us']:.0f} ({r['busbw_gb_per_s']:.2f})" if r else "-")
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
