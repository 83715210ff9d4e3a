#!/usr/bin/env python3
"""Effective training time under injected failures: herd's supervisor against the uninterrupted run.

For each job (TP2 x DP2 on 4 ranks, and TP2 x CP2 x PP2 on 8 ranks, of the tiny model, ranks as threads)
it runs the job twice from scratch on the same data:
  1. uninterrupted, with checkpoints, to measure the step time and the checkpoint's cost on the step;
  2. under `--max-restarts` with a rank killed every --kill-every steps (the rank drawn from fault.seed)
     and one rank hung once (caught by the watchdog after parallel.comm_timeout_s),
at the checkpoint interval Young's rule recommends for that failure rate (the planner's rule,
docs/reliability.md: sqrt(2 x checkpoint cost x mean time between failures), in steps). It reports the
supervisor's accounting (the last record of the metrics file: ETT, restarts, lost, restart and checkpoint
time) and whether the final checkpoint of the interrupted run is bit-identical to the uninterrupted
one (every shard's checksum in the manifest). One JSON document (figure, machine, commit) and a table.

  python3 bench/reliability/run.py [--herd build/herd] [--steps 300] [--kill-every 40] [--only NAME]
                                   [--out bench/reliability/results.json]
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../common"))
from benchlib import commit, load_average, machine, make_data  # noqa: E402

JOBS = [
    ("tp2 x dp2", "--tp 2 --dp 2 --global-batch 8 --microbatch-size 2", 4),
    ("tp2 x cp2 x pp2 (v2)", "--tp 2 --cp 2 --pp 2 --v 2 --global-batch 8 --microbatch-size 2", 8),
]


def read_metrics(path):
    steps, summary = [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "step" in r:
                steps.append(r)
            elif "ett" in r:
                summary = r
    return steps, summary


def final_checksums(ckpt_dir):
    steps = sorted(d for d in os.listdir(ckpt_dir) if d.startswith("step_"))
    if not steps:
        return None, None
    with open(os.path.join(ckpt_dir, steps[-1], "manifest.json")) as f:
        m = json.load(f)
    return int(steps[-1][5:]), sorted((e["file"], e["checksum"]) for e in m["files"])


def run(cmd, log):
    t0 = time.time()
    with open(log, "w") as out:
        p = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    return p.returncode, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--herd", default="build/herd")
    ap.add_argument("--data", default="runs/reliability-data", help="token shards (made from the corpus if absent)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--kill-every", type=int, default=40, help="steps between injected kills (fault.kill_every)")
    ap.add_argument("--hang-step", type=int, default=0, help="step at which a rank hangs once (0: steps / 2 + 3)")
    ap.add_argument("--timeout", type=float, default=0, help="parallel.comm_timeout_s (0: herd's default)")
    ap.add_argument("--seed", type=int, default=7, help="fault.seed (which rank each kill takes)")
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="bench/reliability/results.json")
    ap.add_argument("--keep", default="", help="keep the runs' directories here (default: a temporary one)")
    a = ap.parse_args()
    make_data(a.herd, a.data)
    hang_step = a.hang_step or a.steps // 2 + 3
    results = []
    for name, flags, world in JOBS:
        if a.only and a.only not in name:
            continue
        root = a.keep or tempfile.mkdtemp(prefix="herd-reliability-")
        os.makedirs(root, exist_ok=True)
        tag = name.split(" (")[0].replace(" x ", "x").replace(" ", "")
        base = [a.herd, "train", f"--data.dir={a.data}", "--model.name=tiny", "--data.seq_len=128",
                f"--train.steps={a.steps}", "--eval.every=0", "--generate.samples=0", "--train.log_every=50",
                "--schedule.warmup_steps=10"] + flags.split()
        if a.timeout > 0:
            base.append(f"--parallel.comm_timeout_s={a.timeout}")
        # 1. Uninterrupted, checkpointing every 25 steps, to measure the step and the checkpoint's cost.
        ref_dir, ref_metrics = os.path.join(root, tag + "-ref"), os.path.join(root, tag + "-ref.jsonl")
        rc, ref_wall = run(base + [f"--checkpoint.dir={ref_dir}", "--checkpoint.every=25", "--checkpoint.keep=1",
                                   f"--train.metrics_file={ref_metrics}"], os.path.join(root, tag + "-ref.log"))
        if rc != 0:
            print(f"FAIL {name}: the uninterrupted run exited {rc} (log in {root})", file=sys.stderr)
            continue
        ref_steps, _ = read_metrics(ref_metrics)
        step_times = sorted(r["step_s"] for r in ref_steps if r.get("step_s"))
        step_s = step_times[len(step_times) // 2]
        ckpt_costs = sorted(r["checkpoint_s"] for r in ref_steps if "checkpoint_s" in r)
        ckpt_s = ckpt_costs[len(ckpt_costs) // 2] if ckpt_costs else 0.0
        # Young's interval for a failure every kill_every steps.
        mtbf_s = a.kill_every * step_s
        every = max(1, round(math.sqrt(2 * max(ckpt_s, 1e-6) * mtbf_s) / step_s))
        # 2. The same job with a rank killed every kill_every steps and one hang.
        run_dir, metrics = os.path.join(root, tag + "-faults"), os.path.join(root, tag + "-faults.jsonl")
        before = load_average()
        rc, wall = run(base + [f"--checkpoint.dir={run_dir}", f"--checkpoint.every={every}", "--checkpoint.keep=2",
                               f"--train.metrics_file={metrics}", "--max-restarts", "50",
                               f"--fault.kill_every={a.kill_every}", f"--fault.seed={a.seed}",
                               f"--fault.hang_rank={world - 1}", f"--fault.hang_step={hang_step}"],
                       os.path.join(root, tag + "-faults.log"))
        after = load_average()
        steps, summary = read_metrics(metrics)
        ref_step, ref_sums = final_checksums(ref_dir)
        got_step, got_sums = final_checksums(run_dir)
        r = {"name": name, "flags": flags, "ranks": world, "steps": a.steps, "kill_every": a.kill_every,
             "hang_step": hang_step, "exit_code": rc, "step_s_median": step_s, "checkpoint_s_median": ckpt_s,
             "checkpoint_every": every, "uninterrupted_wall_s": ref_wall, "wall_s": wall, "summary": summary,
             "final_step": got_step, "bit_identical": ref_step == got_step and ref_sums == got_sums,
             "redone_steps": sum(1 for s in steps if s.get("redone")), "load_average": [before, after],
             "logs": root if a.keep else ""}
        results.append(r)
        s = summary or {}
        print(f"{name}: exit {rc}, {s.get('restarts', '?')} restarts, ETT {s.get('ett', float('nan')):.3f}, "
              f"lost {s.get('lost_s', float('nan')):.1f} s, restart {s.get('restart_s', float('nan')):.1f} s, "
              f"checkpoint every {every} steps, bit-identical {r['bit_identical']}", flush=True)
    doc = {"figure": "effective training time under injected failures (bench/reliability)", "machine": machine(),
           "commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "results": results}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {a.out}")
    return 0 if results and all(r["exit_code"] == 0 and r["bit_identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
