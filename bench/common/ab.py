#!/usr/bin/env python3
"""Two builds of herd side by side: the same cases run by an old and a new binary, interleaved
(old, new, old, new, ...) so that the host's drift over minutes falls on both alike, and the medians
compared. How a runtime change's speed-up is measured (docs/projection.md, docs/training.md).

  python3 bench/common/ab.py train --old OLD/herd --new build/herd [--reps 3] [--out F.json]
      herd train on tiny, 8 steps per run, the measured median step time (train.projection_file) of the
      layouts below (the FSDP, CP and TP ones the buffer change touched, and dp2 as a control).
  python3 bench/common/ab.py bench_train --old OLD/herd_bench_train --new build/bench/train/herd_bench_train
          [--models tiny] [--precisions bf16] [--threads 1 2]
      herd_bench_train, 8 x 512 tokens, tokens/s (results[0].tokens_per_s) and the process's peak
      resident memory, per model, precision and thread count.
  python3 bench/common/ab.py bf16_ratio --bin build/bench/train/herd_bench_train [--models tiny small]
      one build, fp32 and bf16 interleaved instead of two builds (the "old" column is fp32, "new" bf16):
      the bf16 / fp32 throughput ratio of bench/train's target with the host's drift on both alike,
      as the ratio of the medians and the median of the ratios of each back-to-back pair.

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


def run_bench_train(binary, threads, model="tiny", precision="bf16", rss=None):
    """tokens/s of one herd_bench_train run (the environment of bench/train/run.sh); its peak resident
    memory (KiB, from wait4) is appended to `rss` when given."""
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    env.pop("OPENBLAS_CORETYPE", None)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        p = subprocess.Popen([binary, "--model", model, "--threads", threads, "--micro-batch", "8", "--seq-len",
                              "512", "--steps", "5", "--precision", precision, "--out", out], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise subprocess.CalledProcessError(p.returncode, p.args)
        if rss is not None:
            rss.append(usage.ru_maxrss)
        with open(out) as f:
            return json.load(f)["results"][0]["tokens_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["train", "bench_train", "bf16_ratio"])
    ap.add_argument("--old", help="the build before the change (train, bench_train)")
    ap.add_argument("--new", help="the build with the change (train, bench_train)")
    ap.add_argument("--bin", help="the herd_bench_train whose fp32 and bf16 are compared (bf16_ratio)")
    ap.add_argument("--models", nargs="+", default=["tiny"], help="bench_train, bf16_ratio: presets (tiny, small)")
    ap.add_argument("--precisions", nargs="+", default=["bf16"], help="bench_train: fp32, bf16")
    ap.add_argument("--threads", nargs="+", default=["1", "2"], help="bench_train: thread counts")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default="runs/projection-data")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.kind == "bf16_ratio":
        if not a.bin:
            ap.error("bf16_ratio needs --bin (a built herd_bench_train)")
        a.old = a.new = a.bin
    elif not (a.old and a.new):
        ap.error(f"{a.kind} needs --old and --new (two builds)")
    if a.kind == "train":
        make_data(a.new, a.data)
        cases, run, unit = TRAIN_CASES, (lambda b, x: run_train(b, x, a.data)), "step_s"
    elif a.kind == "bench_train":
        cases = [(f"{m} {p}, {t} thread{'s' if t != '1' else ''}", (m, p, t)) for m in a.models
                 for p in a.precisions for t in a.threads]
        run, unit = None, "tokens_per_s"
    else:
        cases = [(f"{m}, {t} thread{'s' if t != '1' else ''}", (m, t)) for m in a.models for t in ("1", "2")]
        run, unit = None, "tokens_per_s"
    precision = {"old": "fp32", "new": "bf16"}
    runs = {name: {"old": [], "new": []} for name, _ in cases}
    rss = {name: {"old": [], "new": []} for name, _ in cases}
    for _ in range(a.reps):
        for name, x in cases:
            for which in ("old", "new"):
                if a.kind == "bf16_ratio":
                    value = run_bench_train(a.bin, x[1], x[0], precision[which])
                elif a.kind == "bench_train":
                    value = run_bench_train(getattr(a, which), x[2], x[0], x[1], rss[name][which])
                else:
                    value = run(getattr(a, which), x)
                runs[name][which].append(value)
    results = []
    for name, x in cases:
        o, n = statistics.median(runs[name]["old"]), statistics.median(runs[name]["new"])
        # > 1: the new build is faster (shorter steps, or more tokens per second).
        speedup = o / n if unit == "step_s" else n / o
        r = {"case": name, "args": x, "unit": unit, "old": runs[name]["old"], "new": runs[name]["new"],
             "old_median": o, "new_median": n, "speedup": speedup}
        if a.kind == "bench_train":
            r.update({"old_peak_rss_kib": rss[name]["old"], "new_peak_rss_kib": rss[name]["new"],
                      "peak_rss_ratio": max(rss[name]["new"]) / max(rss[name]["old"])})
        if a.kind == "bf16_ratio":
            pairs = [b / f for f, b in zip(runs[name]["old"], runs[name]["new"])]
            r.update({"old_is": "fp32", "new_is": "bf16", "bf16_over_fp32": speedup, "pair_ratios": pairs,
                      "bf16_over_fp32_pair_median": statistics.median(pairs)})
            print(f"{name:24s} tokens/s median fp32 {o:.4g} bf16 {n:.4g}  bf16/fp32 {speedup:.3f}x, pairs "
                  + ", ".join(f"{p:.2f}" for p in pairs) + f" (median {statistics.median(pairs):.3f})")
        else:
            print(f"{name:24s} {unit} median old {o:.4g} new {n:.4g}  speed-up {speedup:.3f}x "
                  f"(old {runs[name]['old']}, new {runs[name]['new']})"
                  + (f"; peak RSS old {max(rss[name]['old'])} KiB new {max(rss[name]['new'])} KiB"
                     if a.kind == "bench_train" else ""))
        results.append(r)
    what = "fp32 and bf16 of one herd build" if a.kind == "bf16_ratio" else "two herd builds"
    doc = {"figure": f"{what} interleaved ({a.kind}), medians of {a.reps}", "machine": machine(),
           "commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "old": os.path.abspath(a.old), "new": os.path.abspath(a.new), "results": results}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
