#!/usr/bin/env python3
"""Gathers bench/train/run.sh's per-run JSON files into one document and a Markdown table.

  report.py TMPDIR OUT.json COMMIT "MODELS" "THREADS" HERD_BIN [PEER:PYTHON ...]
  report.py --retarget RESULTS.json     the targets (and the Markdown) again, from the rows as measured

TMPDIR holds herd_{fp32,bf16}-MODEL-THREADS.json (herd_bench_train) and
PEER_{eager,compile}_{fp32,bf16}-MODEL-THREADS.json (torch_peer.py), each with a load-NAME file of the
load averages before it ran. Every result gets `fraction_of_peak` against its precision's GEMM peak as
herd_bench_train measured it for the same (model, threads): fp32 rows against the SGEMM peak, bf16
rows against the bf16 matmul peak. Each (model, threads) gets the target ratios (set_targets).
"""
import json
import os
import sys

VARIANTS = (("eager", "fp32", ""), ("compile", "fp32", "_compile"), ("eager", "bf16", "_bf16"))
LABEL = {("eager", "fp32"): "eager fp32", ("compile", "fp32"): "torch.compile fp32",
         ("eager", "bf16"): "bf16 autocast"}


def ratio(a, b, key="tokens_per_s"):
    if a is None or b is None or a.get("skipped") or b.get("skipped"):
        return None
    return a[key] / b[key]


def set_targets(row, peer_names):
    """The targets of one (model, threads) row: row["ratios"] and row["targets"], from its results."""
    model = row["model"]
    # The targets: (name, numerator, denominator, goal); wall-clock and CPU-time ratios.
    pairs = [("herd bf16 / herd fp32", row["herd_bf16"], row["herd"], 1.6)]
    for name in peer_names:
        pairs += [(f"herd fp32 / PyTorch {name} eager fp32", row["herd"], row[f"pytorch_{name}"], 1.3),
                  (f"herd fp32 / PyTorch {name} torch.compile fp32", row["herd"],
                   row[f"pytorch_{name}_compile"], 1.0),
                  (f"herd bf16 / PyTorch {name} bf16 autocast", row["herd_bf16"], row[f"pytorch_{name}_bf16"],
                   1.3)]
    row["ratios"], row["targets"] = {}, []
    # Without bf16 instructions herd's bf16 GEMMs run converted to fp32: bf16 cannot be faster than
    # fp32 there, and the bf16 / fp32 goal does not apply (the ratio is still recorded).
    converted = row["herd_bf16"].get("bf16_gemm", "").startswith("converted")
    for label, a, b, goal in pairs:
        w, c = ratio(a, b), ratio(a, b, "tokens_per_cpu_s")
        row["ratios"][label] = {"wall": w, "cpu_time": c}
        t = {"target": f"{label} >= {goal}", "value": w, "value_cpu_time": c, "goal": goal,
             "met": None if w is None else w >= goal}
        if converted and label == "herd bf16 / herd fp32":
            t["met"], t["not_applicable"] = None, "no bf16 instructions on this CPU: herd's bf16 GEMMs run in fp32"
        row["targets"].append(t)
    if model == "small":
        # fp32: 85% of the SGEMM peak on every CPU; bf16: 70% of the bf16 matmul peak.
        for p, key, goal in (("fp32", "herd", 0.85), ("bf16", "herd_bf16", 0.7)):
            f = row[key]
            row["targets"].append({"target": f"herd {p} > {goal:.0%} of its GEMM peak ({f['peak_library']})",
                                   "value": f["fraction_of_peak"],
                                   "value_cpu_time": f["fraction_of_peak_cpu_time"], "goal": goal,
                                   "met": f["fraction_of_peak"] > goal})


def retarget(path):
    """Recomputes the targets of a results file this script wrote (the rows stay as measured)."""
    doc = json.load(open(path))
    peers = list(doc.get("pytorch_peers", {}).items())
    for row in doc["results"]:
        set_targets(row, [name for name, _ in peers])
    write(doc, path, peers)


def main():
    if sys.argv[1:2] == ["--retarget"]:
        retarget(sys.argv[2])
        return
    tmp, out, commit, models, thread_counts, herd_bin = sys.argv[1:7]
    peers = [p.split(":", 1) for p in sys.argv[7:]]
    load = lambda name: [float(x) for x in open(f"{tmp}/load-{name}").read().split()]  # noqa: E731
    doc, rows = None, []
    for model in models.split():
        for threads in (int(t) for t in thread_counts.split()):
            row = {"model": model, "threads": threads}
            herd = {}
            for p in ("fp32", "bf16"):
                h = json.load(open(f"{tmp}/herd_{p}-{model}-{threads}.json"))
                if doc is None:
                    doc = {k: v for k, v in h.items() if k != "results"}
                r = h["results"][0]
                r["load_average_before"] = load(f"herd_{p}-{model}-{threads}")
                herd[p] = r
            # The GEMM peak of each precision, measured in herd_bench_train's process (same model, threads).
            peak = {p: {"peak_gflops": herd[p]["gemm_peak_gflops"],
                        "peak_gflops_cpu_time": herd[p]["gemm_peak_gflops_cpu_time"],
                        "peak_library": herd[p]["gemm_peak_library"]} for p in ("fp32", "bf16")}
            for p in ("fp32", "bf16"):
                herd[p].update(peak[p])
                herd[p]["fraction_of_peak"] = herd[p]["fraction_of_gemm_peak"]
                herd[p]["fraction_of_peak_cpu_time"] = herd[p]["fraction_of_gemm_peak_cpu_time"]
            row["herd"], row["herd_bf16"] = herd["fp32"], herd["bf16"]
            for name, _ in peers:
                for mode, prec, suffix in VARIANTS:
                    t = json.load(open(f"{tmp}/{name}_{mode}_{prec}-{model}-{threads}.json"))
                    t["load_average_before"] = load(f"{name}_{mode}_{prec}-{model}-{threads}")
                    t.update(peak[prec])
                    if not t.get("skipped"):
                        t["fraction_of_peak"] = t["achieved_gflops"] / peak[prec]["peak_gflops"]
                        t["fraction_of_peak_cpu_time"] = t["achieved_gflops_cpu_time"] / peak[prec]["peak_gflops_cpu_time"]
                        t["fraction_of_own_matmul_peak"] = t["achieved_gflops"] / t["torch_matmul_peak_gflops"]
                    row[f"pytorch_{name}{suffix}"] = t
                # herd fp32 over PyTorch eager fp32, as before this file had the other rows.
                hr, t = row["herd"], row[f"pytorch_{name}"]
                row[f"speedup_wall_vs_{name}"] = hr["tokens_per_s"] / t["tokens_per_s"]
                row[f"speedup_cpu_time_vs_{name}"] = hr["tokens_per_cpu_s"] / t["tokens_per_cpu_s"]
                # The least-disturbed step of each (on a shared machine the fastest step is the one
                # closest to having the cores alone).
                row[f"speedup_best_step_vs_{name}"] = min(t["step_s"]) / min(hr["step_s"])
            set_targets(row, [name for name, _ in peers])
            rows.append(row)
    doc["figure"] = ("herd vs PyTorch training throughput (one CPU rank, same model, batch and AdamW step): "
                     "herd fp32 and bf16; PyTorch eager fp32, torch.compile fp32, bf16 autocast")
    doc["commit"] = commit
    doc["herd_bench_bin"] = herd_bin
    doc["pytorch_peers"] = {name: py for name, py in peers}
    doc["load_average_at_end"] = [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    doc["results"] = rows
    write(doc, out, peers)


def write(doc, out, peers):
    """The targets summary, then the document as OUT and its Markdown table beside it (OUT with .md)."""
    flat = [t for r in doc["results"] for t in r["targets"]]
    doc["targets_summary"] = {"met": sum(t["met"] is True for t in flat), "not_met": sum(t["met"] is False for t in flat),
                              "not_measured": sum(t["met"] is None and not t.get("not_applicable") for t in flat),
                              "not_applicable": sum(bool(t.get("not_applicable")) for t in flat)}
    json.dump(doc, open(out, "w"), indent=1)
    md = markdown(doc, peers)
    md_path = os.path.splitext(out)[0] + ".md"
    open(md_path, "w").write(md)
    print(md, file=sys.stderr)
    print(f"wrote {out} and {md_path}", file=sys.stderr)


def markdown(doc, peers):
    rows = doc["results"]
    m = doc.get("machine", {})
    r0 = rows[0]["herd"]
    lines = [f"# bench/train: herd vs PyTorch training throughput",
             "",
             f"Commit {doc['commit']}, {doc.get('date', '?')}, {m.get('cpu', '?')} ({m.get('cores', '?')} cores), "
             f"batch {r0['micro_batch']} x {r0['seq_len']}, median of {r0['steps_timed']} timed steps. "
             "Tokens/s by wall clock; GFLOP/s = model FLOPs per token x tokens/s; each row's fraction is of its "
             "precision's GEMM peak as herd_bench_train measured it in the same (model, threads) run (fp32: the "
             "better SGEMM of OpenBLAS and oneDNN; bf16: oneDNN's bf16 matmul). PyTorch's own 2048-square "
             "matmul rate in the row's dtype is beside it. Load average before each row in the JSON.",
             "",
             "| model | threads | implementation | tokens/s | GFLOP/s | % of its GEMM peak | GEMM peak GFLOP/s "
             "| torch matmul GFLOP/s | compile s | load before |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        entries = [("herd fp32", r["herd"]), ("herd bf16", r["herd_bf16"])]
        for name, _ in peers:
            for mode, prec, suffix in VARIANTS:
                t = r[f"pytorch_{name}{suffix}"]
                entries.append((f"PyTorch {t['torch_version'].split('+')[0]} ({name}) {LABEL[(mode, prec)]}", t))
        for label, e in entries:
            head = f"| {r['model']} | {r['threads']} | {label} |"
            peak = f"{e['peak_gflops']:.0f} ({e['peak_library']})"
            load = f"{e['load_average_before'][0]:.2f}"
            if e.get("skipped"):
                lines.append(f"{head} skipped: {e['skipped']} | | | {peak} | | | {load} |")
                continue
            mm = f"{e['torch_matmul_peak_gflops']:.0f}" if "torch_matmul_peak_gflops" in e else ""
            cs = f"{e['compile_s']:.1f}" if e.get("mode") == "compile" else ""
            lines.append(f"{head} {e['tokens_per_s']:,.0f} | {e['achieved_gflops']:.1f} | "
                         f"{100 * e['fraction_of_peak']:.0f}% | {peak} | {mm} | {cs} | {load} |")
    lines += ["", "Targets (ratios of tokens/s by wall clock; by process CPU time in brackets):", "",
              "| model | threads | target | value | met |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        for t in r["targets"]:
            if t["value"] is None:
                val, met = "not measured", "n/a"
            elif "GEMM peak" in t["target"]:
                val = f"{100 * t['value']:.0f}% ({100 * t['value_cpu_time']:.0f}%)"
                met = "yes" if t["met"] else "**no**"
            else:
                val = f"{t['value']:.2f}x ({t['value_cpu_time']:.2f}x)"
                met = f"n/a: {t['not_applicable']}" if t.get("not_applicable") else ("yes" if t["met"] else "**no**")
            lines.append(f"| {r['model']} | {r['threads']} | {t['target']} | {val} | {met} |")
    s = doc["targets_summary"]
    lines += ["", f"{s['met']} met, {s['not_met']} not met, {s['not_measured']} not measured, "
              f"{s.get('not_applicable', 0)} not applicable on this CPU.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
