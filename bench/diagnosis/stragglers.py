#!/usr/bin/env python3
"""Straggler detection on this machine: how often a clean job is flagged, and how fast a slow rank is.

A TP2 x DP2 job (ranks as threads, one BLAS thread each) of a small Llama on the State of the Union
shards, run repeatedly:
  1. clean, --steps steps (default 200): every straggler check (the `stragglers` list of the metrics
     records) that flags any rank is a false positive;
  2. with rank --slow-rank slowed --slow-factor x (fault.slow_rank: it computes the extra time) from step
     --slow-from: the steps from the slowdown to the first check that flags it (as slow), and whether any
     other rank was ever flagged;
  3. with the same rank stalled --stall-factor x (fault.slow_mode=stall: it sleeps the extra time, as a
     stopped rank would): the same, flagged as stalled.
The machine is whatever it is (shared, noisy): the load average before and after is recorded. One JSON
document (figure, machine, commit) and a summary line per part.

  python3 bench/diagnosis/stragglers.py [--herd build/herd] [--clean-runs 10] [--slow-runs 5]
                                        [--stall-runs 5] [--out bench/diagnosis/results.json]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../common"))
from benchlib import commit, load_average, machine, make_data  # noqa: E402

# A model whose step is tens of milliseconds here: compute, not scheduling noise, dominates it.
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 8,
         "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "vocab_size": 8192,
         "tie_word_embeddings": False}


def checks(metrics, kind=None):
    """(step, flagged ranks) of every straggler check; with `kind`, only the ranks flagged as that kind."""
    out = []
    with open(metrics) as f:
        for line in f:
            r = json.loads(line)
            if "stragglers" in r:
                out.append((r["step"], [s["rank"] for s in r["stragglers"] if kind is None or s.get("kind") == kind]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--herd", default="build/herd")
    ap.add_argument("--data", default="runs/reliability-data", help="token shards (made from the corpus if absent)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--clean-runs", type=int, default=10)
    ap.add_argument("--slow-runs", type=int, default=5)
    ap.add_argument("--slow-rank", type=int, default=2)
    ap.add_argument("--slow-factor", type=float, default=1.5)
    ap.add_argument("--slow-from", type=int, default=10)
    ap.add_argument("--stall-runs", type=int, default=5)
    ap.add_argument("--stall-factor", type=float, default=3.0)
    ap.add_argument("--out", default="bench/diagnosis/results.json")
    a = ap.parse_args()
    make_data(a.herd, a.data)
    root = tempfile.mkdtemp(prefix="herd-stragglers-")
    model = os.path.join(root, "config.json")
    with open(model, "w") as f:
        json.dump(MODEL, f)
    base = [a.herd, "train", f"--data.dir={a.data}", f"--model.name={model}", "--data.seq_len=64",
            "--train.global_batch=8", "--parallel.microbatch_size=2", "--tp", "2", "--dp", "2", "--train.threads=1",
            "--eval.every=0", "--generate.samples=0", "--train.log_every=1000"]
    before = load_average()
    clean = []
    for i in range(a.clean_runs):
        metrics = os.path.join(root, f"clean{i}.jsonl")
        t0 = time.time()
        p = subprocess.run(base + [f"--train.steps={a.steps}", f"--train.metrics_file={metrics}"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr[-2000:], file=sys.stderr)
            return 1
        c = checks(metrics)
        clean.append({"checks": len(c), "flagged_checks": sum(1 for _, r in c if r),
                      "flagged": sorted({x for _, r in c for x in r}), "wall_s": time.time() - t0})
        print(f"clean run {i}: {clean[-1]['flagged_checks']} of {len(c)} checks flagged a rank", flush=True)
    steps = a.slow_from + 40

    def flagged_runs(n, label, mode, factor, kind):
        runs = []
        for i in range(n):
            metrics = os.path.join(root, f"{label}{i}.jsonl")
            p = subprocess.run(base + [f"--train.steps={steps}", f"--train.metrics_file={metrics}",
                                       f"--fault.slow_rank={a.slow_rank}", f"--fault.slow_factor={factor}",
                                       f"--fault.slow_mode={mode}", f"--fault.slow_from_step={a.slow_from}"],
                               capture_output=True, text=True)
            if p.returncode != 0:
                print(p.stderr[-2000:], file=sys.stderr)
                raise SystemExit(1)
            c = checks(metrics)
            first = next((s for s, r in checks(metrics, kind) if a.slow_rank in r), None)
            others = sorted({x for _, r in c for x in r if x != a.slow_rank})
            runs.append({"first_flag_step": first, "steps_to_flag": None if first is None else first - a.slow_from,
                         "other_ranks_flagged": others})
            print(f"{label} run {i}: rank {a.slow_rank} flagged {kind} {runs[-1]['steps_to_flag']} steps after its "
                  f"slowdown; others flagged: {others}", flush=True)
        return runs

    slow = flagged_runs(a.slow_runs, "slow", "compute", a.slow_factor, "slow")
    stall = flagged_runs(a.stall_runs, "stall", "stall", a.stall_factor, "stalled")
    after = load_average()
    total_checks = sum(r["checks"] for r in clean)
    fp_checks = sum(r["flagged_checks"] for r in clean)
    delays = [r["steps_to_flag"] for r in slow if r["steps_to_flag"] is not None]
    stall_delays = [r["steps_to_flag"] for r in stall if r["steps_to_flag"] is not None]
    summary = {
        "clean_runs": len(clean), "clean_checks": total_checks, "false_positive_checks": fp_checks,
        "false_positive_rate_per_check": fp_checks / total_checks if total_checks else None,
        "clean_runs_with_any_flag": sum(1 for r in clean if r["flagged_checks"]),
        "slow_runs": len(slow), "slow_runs_flagged": len(delays),
        "steps_to_flag_median": statistics.median(delays) if delays else None,
        "steps_to_flag_max": max(delays) if delays else None,
        "slow_runs_with_another_rank_flagged": sum(1 for r in slow if r["other_ranks_flagged"]),
        "stall_runs": len(stall), "stall_runs_flagged_stalled": len(stall_delays),
        "stall_steps_to_flag_median": statistics.median(stall_delays) if stall_delays else None,
        "stall_steps_to_flag_max": max(stall_delays) if stall_delays else None,
        "stall_runs_with_another_rank_flagged": sum(1 for r in stall if r["other_ranks_flagged"]),
    }
    doc = {"figure": "straggler detection: false positives on clean runs, steps to flag a slowed rank "
                     "(bench/diagnosis)", "machine": machine(), "commit": commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "config": {"layout": "tp2 x dp2, ranks as threads", "steps": a.steps, "slow_rank": a.slow_rank,
                      "slow_factor": a.slow_factor, "stall_factor": a.stall_factor, "slow_from_step": a.slow_from,
                      "straggler_every": 3, "straggler_window": 10, "straggler_threshold": 1.3,
                      "straggler_stall_threshold": 2.0},
           "load_average": [before, after], "summary": summary, "clean": clean, "slow": slow, "stall": stall}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(summary))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
