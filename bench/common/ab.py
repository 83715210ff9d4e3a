#!/usr/bin/env python3
"""Two builds of herd side by side: the same cases run by an old and a new binary, interleaved
(old, new, old, new, ...) so that the host's drift over minutes falls on both alike, and the medians
compared. How a runtime change's speed-up is measured (docs/projection.md, docs/training.md).

  python3 bench/common/ab.py train --old OLD/herd --new build/herd [--reps 3] [--out F.json]
      herd train on tiny, 8 steps per run, the measured median step time (train.projection_file) of the
      layouts below (the FSDP, CP and TP ones the buffer change touched, and dp2 as a control).
  python3 bench/common/ab.py bench_train --old OLD/herd_bench_train --new build/bench/train/herd_bench_train
      herd_bench_train, tiny, bf16, 8 x 512 tokens, 1 and 2 threads, tokens/s (results[0].tokens_per_s).

An old binary is a build of the commit before the change (git worktree add /tmp/old COMMIT; build it
there with scripts/setup.sh, or cmake). Writes JSON (figure, machine, commit, every run, medians, ratio).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import commit, machine, make_data  # noqa: E402

TRAIN_CASES = [
    ("cp2 x dp2", "--cp 2 --dp 2 --global-batch 4 --microbatch-size 2"),
    ("dp4", "--dp 4 --global-batch 8 --microbatch-size 2"),
    ("dp2", "--dp 2 --global-batch 8 --microbatch-size 4"),
    ("tp2 x dp2", "--tp 2 --dp 2 --global-batch 8 --microbatch-size 4"),
]
BENCH_TRAIN_CASES = [("tiny bf16, 1 thread", "1"), ("tiny bf16, 2 threads", "2")]


def run_train(binary, args, data):
    """The measured median step (s) of one 8-step herd train run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "p.json")
        cmd = [binary, "train", f"--data.dir={data}", "--model.name=tiny", "--train.steps=8", "--eval.every=0",
               "--eval.batches=1", "--schedule.warmup_steps=1", "--generate.samples=0", "--train.log_every=1000",
               "--projection.cluster_file=bench/projection/local-cpu.json", f"--train.projection_file={out}"]
        subprocess.run(cmd + args.split(), check=True, capture_output=True)
        with open(out) as f:
            return json.load(f)["measured"]["step_s"]


def run_bench_train(binary, threads):
    """tokens/s of one herd_bench_train run (the environment of bench/train/run.sh)."""
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    env.pop("OPENBLAS_CORETYPE", None)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        subprocess.run([binary, "--model", "tiny", "--threads", threads, "--micro-batch", "8", "--seq-len", "512",
                        "--steps", "5", "--precision", "bf16", "--out", out], check=True, capture_output=True, env=env)
        with open(out) as f:
            return json.load(f)["results"][0]["tokens_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["train", "bench_train"])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default="runs/projection-data")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.kind == "train":
        make_data(a.new, a.data)
        cases, run, unit = TRAIN_CASES, (lambda b, x: run_train(b, x, a.data)), "step_s"
    else:
        cases, run, unit = BENCH_TRAIN_CASES, run_bench_train, "tokens_per_s"
    runs = {name: {"old": [], "new": []} for name, _ in cases}
    for _ in range(a.reps):
        for name, x in cases:
            for which in ("old", "new"):
                runs[name][which].append(run(getattr(a, which), x))
    results = []
    for name, x in cases:
        o, n = statistics.median(runs[name]["old"]), statistics.median(runs[name]["new"])
        # > 1: the new build is faster (shorter steps, or more tokens per second).
        speedup = o / n if unit == "step_s" else n / o
        results.append({"case": name, "args": x, "unit": unit, "old": runs[name]["old"], "new": runs[name]["new"],
                        "old_median": o, "new_median": n, "speedup": speedup})
        print(f"{name:24s} {unit} median old {o:.4g} new {n:.4g}  speed-up {speedup:.3f}x "
              f"(old {runs[name]['old']}, new {runs[name]['new']})")
    doc = {"figure": f"two herd builds interleaved ({a.kind}), medians of {a.reps}", "machine": machine(),
           "commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "old": os.path.abspath(a.old), "new": os.path.abspath(a.new), "results": results}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
