#!/usr/bin/env python3
"""Is the planner's best layout the measured best? `herd train --layout auto` against every candidate.

For the demo model (the tiny preset, sequence 256, 8 sequences per step) at one rank count, this asks
`herd plan` (fp32, on this machine's calibrated cluster) for its ranking of every family of degrees,
runs `herd train --layout auto --ranks N` to see which layout it picks, then trains every candidate of
the ranking (its best variant per family, the flags `herd plan` prints) for a few steps and records the
median step time. It writes one JSON document (machine, commit, load averages, planned and measured
step per candidate, whether the pick is within 10% of the measured fastest) and a markdown table.

  python3 bench/layout/run.py [--herd build/herd] [--ranks 2] [--steps 6] [--out-dir bench/layout]
                              [--cluster-file F]

Without --cluster-file it runs `herd calibrate --if-missing` first (this machine's stored calibration,
measured once) and plans with it. Results and method: docs/projection.md ("--layout auto").
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../common"))
from benchlib import commit, load_average, machine, make_data  # noqa: E402

COMMON = ["--model.name=tiny", "--data.seq_len=256", "--train.global_batch=8", "--eval.every=0", "--eval.batches=1",
          "--schedule.warmup_steps=1", "--generate.samples=0", "--train.log_every=1000"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--herd", default="build/herd")
    ap.add_argument("--data", default="runs/projection-data", help="token shards (made from the corpus if absent)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out-dir", default="bench/layout")
    ap.add_argument("--cluster-file", default="", help="a `herd calibrate` output; default: this machine's stored one")
    a = ap.parse_args()

    make_data(a.herd, a.data)
    os.makedirs(a.out_dir, exist_ok=True)
    cluster = a.cluster_file
    if not cluster:
        p = subprocess.run([a.herd, "calibrate", "--if-missing"], check=True, capture_output=True, text=True)
        m = re.search(r"(?:wrote |: )(\S+\.json)", p.stdout.strip().splitlines()[-1])
        cluster = m.group(1)
    cluster = os.path.abspath(cluster)
    plan = json.loads(subprocess.run(
        [a.herd, "plan", "--model", "tiny", "--cluster", cluster, "--gpus", str(a.ranks), "--seq-len", "256",
         "--global-batch", "8", "--precision", "fp32", "--top", "100", "--json"],
        check=True, capture_output=True, text=True).stdout)
    # What --layout auto picks (one step is enough to see the pick; it must be the plan's first row).
    p = subprocess.run([a.herd, "train", f"--data.dir={a.data}", "--train.steps=1", "--layout", "auto", "--ranks",
                        str(a.ranks), f"--projection.cluster_file={cluster}"] + COMMON,
                       capture_output=True, text=True)
    chose = re.search(r"layout auto: chose #(\d+), (.*) \(planned", p.stdout)
    if p.returncode != 0 or not chose:
        sys.exit(f"herd train --layout auto failed: {p.stdout[-600:]}{p.stderr[-600:]}")
    picked = int(chose.group(1)) - 1
    results = []
    for i, e in enumerate(plan):
        flags = e["layout"]["flags"].split()
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "projection.json")
            before = load_average()
            r = subprocess.run([a.herd, "train", f"--data.dir={a.data}", f"--train.steps={a.steps}",
                                f"--projection.cluster_file={cluster}", f"--train.projection_file={summary}"]
                               + COMMON + flags, capture_output=True, text=True)
            after = load_average()
            if r.returncode != 0 or not os.path.exists(summary):
                print(f"FAIL {e['layout']['flags']}: {r.stderr[-400:]}", file=sys.stderr)
                continue
            with open(summary) as f:
                s = json.load(f)
        row = {"rank_planned": i + 1, "flags": e["layout"]["flags"], "planned_step_s": e["step_time_s"],
               "measured_step_s": s["measured"]["step_s"], "background_jobs_over_run": s["background_jobs"],
               "load_average": [before, after]}
        results.append(row)
        print(f"#{i + 1} {row['flags']}: planned {row['planned_step_s']:.3f} s, measured "
              f"{row['measured_step_s']:.3f} s, background {row['background_jobs_over_run']:.2f}, "
              f"load {before:.2f}/{after:.2f}", file=sys.stderr)
    if not results:
        sys.exit("no layout ran")
    best = min(results, key=lambda r: r["measured_step_s"])
    pick = next((r for r in results if r["rank_planned"] == picked + 1), None)
    within = pick is not None and pick["measured_step_s"] <= 1.10 * best["measured_step_s"]
    doc = {"figure": "herd train --layout auto: the planner's pick against every candidate, measured",
           "machine": machine(), "commit": commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "cluster_file": cluster, "ranks": a.ranks, "steps": a.steps, "picked": pick, "measured_best": best,
           "pick_within_10_percent_of_measured_best": within, "results": results}
    with open(os.path.join(a.out_dir, "results.json"), "w") as f:
        json.dump(doc, f, indent=2)
    lines = ["| planned rank | layout | planned step (s) | measured step (s) | background jobs | load avg |",
             "|---|---|---|---|---|---|"]
    for r in results:
        mark = " (picked)" if r is pick else ""
        lines.append(f"| {r['rank_planned']}{mark} | `{r['flags']}` | {r['planned_step_s']:.3f} | "
                     f"{r['measured_step_s']:.3f} | {r['background_jobs_over_run']:.2f} | "
                     f"{r['load_average'][0]:.2f}/{r['load_average'][1]:.2f} |")
    ratio = pick["measured_step_s"] / best["measured_step_s"] if pick else float("nan")
    lines.append(f"\nPicked #{picked + 1}; measured fastest: #{best['rank_planned']}; the pick's measured step is "
                 f"{ratio:.3f}x the fastest ({'within' if within else 'NOT within'} 10%). {a.ranks} ranks, "
                 f"{a.steps} steps each, commit {doc['commit']}, {doc['date']}, {cluster}.")
    with open(os.path.join(a.out_dir, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
