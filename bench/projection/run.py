#!/usr/bin/env python3
"""The planner held against herd's own runs: `herd train` on many layouts, planned vs measured.

Every layout runs a few steps of the tiny (or small) model with --train.projection_file, which holds
the planner's prediction for the run on the local-cpu cluster and the measured median step time and
rank memory. The cluster is calibrated first (`herd calibrate`, about 10 s, written next to the
results), because this shared virtual machine's speed moves by up to 1.8x between hours; with
--no-calibrate the committed preset (or the file --cluster-file names) is used instead. This script collects
them, writes one JSON document (figure, machine, commit, load averages, per-layout results, MAPE)
and a markdown table. The machine is shared: each step time is a median over steps, and the load
average before and after every run is recorded next to it. The first layout runs again at the end as a
control: how far its two step times differ is how far this guest's speed moved during the run (other
tenants of the hypervisor, invisible in /proc), printed beside the MAPE and kept in the JSON
(`host_drift_percent`); a run whose control moved more than 10% is marked as measuring the host as much
as the plan.

  python3 bench/projection/run.py [--herd build/herd] [--data DIR] [--steps 6] [--out-dir bench/projection]
                                  [--no-calibrate [--cluster-file F]] [--only NAME] [--speed-probe]

Method and results: docs/projection.md.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../common"))
from benchlib import commit, load_average, machine, make_data  # noqa: E402

# name, model, args. --global-batch is the sequences per step, --microbatch-size per data-parallel rank
# (so M = global batch / (dp x micro-batch size)), the flags herd plan prints.
LAYOUTS = [
    ("1 rank mb8", "tiny", "--global-batch 8 --microbatch-size 8"),
    ("1 rank mb4 M2", "tiny", "--global-batch 8 --microbatch-size 4"),
    ("1 rank mb2 M4", "tiny", "--global-batch 8 --microbatch-size 2"),
    ("1 rank mb8 full recompute", "tiny", "--recompute full --global-batch 8 --microbatch-size 8"),
    ("tp2 sp mb8", "tiny", "--tp 2 --global-batch 8 --microbatch-size 8"),
    ("tp2 no-sp mb8", "tiny", "--tp 2 --sequence-parallel false --global-batch 8 --microbatch-size 8"),
    ("tp4 sp mb8", "tiny", "--tp 4 --global-batch 8 --microbatch-size 8"),
    ("dp2 mb8", "tiny", "--dp 2 --global-batch 8 --microbatch-size 4"),
    ("dp2 mb4 M2", "tiny", "--dp 2 --global-batch 8 --microbatch-size 2"),
    ("dp4 mb8", "tiny", "--dp 4 --global-batch 8 --microbatch-size 2"),
    ("tp2 dp2 sp mb8", "tiny", "--tp 2 --dp 2 --global-batch 8 --microbatch-size 4"),
    ("tp2 dp2 no-sp mb4 M2", "tiny", "--tp 2 --dp 2 --sequence-parallel false --global-batch 8 --microbatch-size 2"),
    ("small 1 rank mb4", "small", "--global-batch 4 --microbatch-size 4"),
    ("small tp2 sp mb4", "small", "--tp 2 --global-batch 4 --microbatch-size 4"),
    ("cp2 mb4", "tiny", "--cp 2 --global-batch 4 --microbatch-size 4"),
    ("cp2 dp2 mb4", "tiny", "--cp 2 --dp 2 --global-batch 4 --microbatch-size 2"),
    ("pp2 M4", "tiny", "--pp 2 --global-batch 8 --microbatch-size 2"),
    ("pp2 v2 M4", "tiny", "--pp 2 --v 2 --global-batch 8 --microbatch-size 2"),
    ("tp2 pp2 M4", "tiny", "--tp 2 --pp 2 --global-batch 16 --microbatch-size 4"),
    ("tp2 cp2 pp2 v2 M4", "tiny", "--tp 2 --cp 2 --pp 2 --v 2 --global-batch 8 --microbatch-size 2"),
]


def speed_text(r):
    """The host's speed against its calibration at the run's start and end, or '-' when not probed."""
    hs = r.get("host_speed") or {}
    if not hs.get("probed"):
        return "-"
    return f"{hs['at_start']:.2f}/{hs['at_end']:.2f}"


def control_text(first, control, drift):
    """The control row's step against the first row's, or why there is none."""
    if control is None:
        return "did not run"
    return (f"{first['measured']['step_s']:.3f} s then {control['measured']['step_s']:.3f} s, "
            f"{drift:+.1f}% (the host's speed moved by that much during the run)")


def part_errors(rows):
    """Per part (compute, tp, cp, dp, pp + bubble, optimizer): its error over the rows that planned and
    measured it, as a MAPE and a mean signed error, with the medians of both sides."""
    by = {}
    for r in rows:
        for p in r.get("parts", []):
            if p.get("planned_s") is None or p.get("measured_s") is None or p["measured_s"] <= 0:
                continue
            by.setdefault(p["part"], []).append((p["planned_s"], p["measured_s"]))
    out = {}
    for name, pairs in by.items():
        errs = [(pl - me) / me for pl, me in pairs]
        out[name] = {"layouts": len(pairs), "mape_percent": 100 * sum(abs(e) for e in errs) / len(errs),
                     "mean_error_percent": 100 * sum(errs) / len(errs),
                     "planned_median_s": statistics.median(pl for pl, _ in pairs),
                     "measured_median_s": statistics.median(me for _, me in pairs)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--herd", default="build/herd")
    ap.add_argument("--data", default="runs/projection-data", help="token shards (made from the corpus if absent)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out-dir", default="bench/projection")
    ap.add_argument("--only", default="", help="run only layouts whose name contains this")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="plan with the preset or --cluster-file instead of a fresh `herd calibrate`")
    ap.add_argument("--cluster-file", default="",
                    help="with --no-calibrate: a `herd calibrate` output (herd train --projection.cluster_file)")
    ap.add_argument("--speed-probe", action="store_true",
                    help="plan each run at its probed host speed (herd train --projection.speed_probe=true)")
    a = ap.parse_args()

    make_data(a.herd, a.data)
    os.makedirs(a.out_dir, exist_ok=True)
    calibration = None
    cluster_file = os.path.abspath(a.cluster_file) if a.cluster_file else ""
    if not a.no_calibrate:
        cal = os.path.join(a.out_dir, "local-cpu.json")
        subprocess.run([a.herd, "calibrate", "--out", cal], check=True, stdout=subprocess.DEVNULL)
        cluster_file = os.path.abspath(cal)
        with open(cal) as f:
            calibration = json.load(f)

    def run_layout(name, model, args):
        """One layout's planned and measured step (None when herd train failed)."""
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "projection.json")
            cmd = ([a.herd, "train", f"--data.dir={a.data}", f"--model.name={model}", f"--train.steps={a.steps}",
                    "--eval.every=0", "--eval.batches=1", "--schedule.warmup_steps=1", "--generate.samples=0",
                    f"--train.projection_file={summary}", "--train.log_every=1000",
                    f"--projection.cluster_file={cluster_file}"] + args.split() +
                   (["--projection.speed_probe=true"] if a.speed_probe else []))
            before = load_average()
            p = subprocess.run(cmd, capture_output=True, text=True)
            after = load_average()
            if p.returncode != 0 or not os.path.exists(summary):
                print(f"FAIL {name}: {p.stdout[-400:]}{p.stderr[-400:]}", file=sys.stderr)
                return None
            with open(summary) as f:
                s = json.load(f)
        pl, me = s["planned"], s["measured"]
        r = {"name": name, "model": model, "args": args, "layout": s["layout"], "planned": pl, "measured": me,
             "background_jobs": s["background_jobs"],
             "step_error": (pl["step_s"] - me["step_s"]) / me["step_s"],
             "step_error_idle": (pl["step_s_idle"] - me["step_s"]) / me["step_s"],
             "host_speed": s.get("host_speed", {}),
             "step_error_calibrated_speed":
                 (pl.get("step_s_calibrated_speed", pl["step_s"]) - me["step_s"]) / me["step_s"],
             "memory_error": (pl["memory_bytes"] - me["memory_bytes"]) / me["memory_bytes"],
             "parts": s.get("parts", []),
             "load_average": [before, after]}
        print(f"{name:28s} step {pl['step_s']:.3f} vs {me['step_s']:.3f} s ({100 * r['step_error']:+.1f}%)  "
              f"memory {pl['memory_bytes'] / 2**20:.1f} vs {me['memory_bytes'] / 2**20:.1f} MiB "
              f"({100 * r['memory_error']:+.1f}%)  background jobs {r['background_jobs']:.1f} "
              f"host speed {speed_text(r)}  load {before:.2f}/{after:.2f}", file=sys.stderr)
        return r

    results = []
    for name, model, args in LAYOUTS:
        if a.only and a.only not in name:
            continue
        r = run_layout(name, model, args)
        if r is not None:
            results.append(r)
    if not results:
        sys.exit("no layout ran")
    # The control: the first layout again, after all the others.
    first = results[0]
    control = run_layout(first["name"] + " (control, again at the end)", first["model"], first["args"])
    drift = (100 * (control["measured"]["step_s"] - first["measured"]["step_s"]) / first["measured"]["step_s"]
             if control is not None else None)
    drifted = drift is not None and abs(drift) > 10
    cluster_label = cluster_file or "(preset local-cpu)"
    if calibration is not None:
        cluster_label = os.path.relpath(cluster_label) + " (herd calibrate just before)"
    mape = 100 * sum(abs(r["step_error"]) for r in results) / len(results)
    multi = [r for r in results if r["layout"]["ranks"] > 1]
    multi_mape = 100 * sum(abs(r["step_error"]) for r in multi) / len(multi) if multi else 0.0
    multi_bias = 100 * sum(r["step_error"] for r in multi) / len(multi) if multi else 0.0
    mem_mape = 100 * sum(abs(r["memory_error"]) for r in results) / len(results)
    idle_mape = 100 * sum(abs(r["step_error_idle"]) for r in results) / len(results)
    cal_mape = 100 * sum(abs(r["step_error_calibrated_speed"]) for r in results) / len(results)
    cal_multi_mape = (100 * sum(abs(r["step_error_calibrated_speed"]) for r in multi) / len(multi)) if multi else 0.0
    parts = part_errors(multi)
    doc = {"figure": "planner projection vs herd train on this machine (local-cpu)", "machine": machine(),
           "commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "cluster_file": cluster_label, "calibration": calibration,
           "steps": a.steps,
           "step_time_mape_percent": mape, "step_time_mape_percent_multi_rank": multi_mape,
           "step_time_mean_error_percent_multi_rank": multi_bias, "step_time_mape_percent_idle_host": idle_mape,
           "step_time_mape_percent_calibrated_speed": cal_mape,
           "step_time_mape_percent_multi_rank_calibrated_speed": cal_multi_mape,
           "memory_mape_percent": mem_mape, "part_errors_multi_rank": parts,
           "control": control, "host_drift_percent": drift, "host_drifted": drifted, "results": results}
    with open(os.path.join(a.out_dir, "results.json"), "w") as f:
        json.dump(doc, f, indent=2)
    lines = ["| layout | ranks | background jobs | host speed (start/end) | planned step (s) | measured step (s) | "
             "error | at calibrated speed | idle-host plan (s) | planned comm (s) | measured comm (s) | "
             "planned MiB/rank | measured MiB/rank | error | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        pl, me = r["planned"], r["measured"]
        comm = f"{me['comm_s']:.3f}" if me.get("comm_s", -1) >= 0 else "-"
        lines.append(f"| {r['name']} | {r['layout']['ranks']} | {r['background_jobs']:.2f} | {speed_text(r)} | "
                     f"{pl['step_s']:.3f} | {me['step_s']:.3f} | {100 * r['step_error']:+.1f}% | "
                     f"{100 * r['step_error_calibrated_speed']:+.1f}% | "
                     f"{pl['step_s_idle']:.3f} | {pl['comm_s']:.3f} | {comm} | {pl['memory_bytes'] / 2**20:.1f} | "
                     f"{me['memory_bytes'] / 2**20:.1f} | {100 * r['memory_error']:+.1f}% | "
                     f"{r['load_average'][0]:.2f}/{r['load_average'][1]:.2f} |")
    if a.speed_probe:
        planned_for = (f"the measured background load and host speed; {cal_mape:.1f}% at the calibrated speed, "
                       f"{idle_mape:.1f}% with neither")
        multi_note = f"; {cal_multi_mape:.1f}% at the calibrated speed"
    else:
        planned_for = f"the measured background load, host speed not probed; {idle_mape:.1f}% for an idle host"
        multi_note = ""
    lines.append(f"\nStep-time MAPE {mape:.1f}% over {len(results)} layouts (planned for {planned_for}); over "
                 f"the {len(multi)} multi-rank layouts {multi_mape:.1f}% (mean error {multi_bias:+.1f}%{multi_note}); "
                 f"memory MAPE {mem_mape:.1f}%. "
                 f"Control ({first['name']} again at the end): {control_text(first, control, drift)}"
                 f"{'; more than 10%: this run measures the host as much as the plan' if drifted else ''}. "
                 f"Commit {doc['commit']}, {doc['date']}, {doc['cluster_file']}.")
    lines += ["", "Each part of the step on rank 0 (`herd train`'s \"by part\" line), planned vs measured per step, "
              f"over the {len(multi)} multi-rank layouts (error = (planned - measured) / measured):", "",
              "| part | layouts | MAPE | mean error | planned (median, s) | measured (median, s) |",
              "|---|---|---|---|---|---|"]
    for name, e in parts.items():
        lines.append(f"| {name} | {e['layouts']} | {e['mape_percent']:.1f}% | {e['mean_error_percent']:+.1f}% | "
                     f"{e['planned_median_s']:.4f} | {e['measured_median_s']:.4f} |")
    with open(os.path.join(a.out_dir, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
