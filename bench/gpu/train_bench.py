#!/usr/bin/env python3
"""herd train on a GPU, measured: the runs of scripts/device_check.sh's "train" list.

Every number comes from `herd train` itself (its metrics file and its planned-vs-measured projection
file), so what is measured is the trainer's own step: the same nn/ blocks, DistributedStage and
pipeline executor as on the CPU, on the device's op interface. Two subcommands:

  perf    one run per --seq: the model (a preset or a Hugging Face config.json) in bf16 on one GPU,
          steps of --tokens-per-step tokens (micro-batches of one sequence), --warmup steps then --steps
          timed ones. Reports the median timed step, tokens/s, MFU (the exact model FLOPs per token of
          `herd model --json`, causal attention, against --peak-tflops), the GPU allocator's peak and the
          planner's prediction of the same step and memory (herd train's projection; with
          --cluster FILE, e.g. `herd calibrate --device cuda`'s, the plan on that calibration).
  parity  the tiny model for --steps steps: the one-rank GPU run against the one-rank CPU run in fp32
          (losses within 1e-5) and in bf16 (within 1e-3, the CPU's own bound of a layout against one rank,
          docs/precision.md), then every layout of --ranks ranks (threads sharing the GPU) that the model
          and batch admit against the one-rank GPU run (fp32, within 1e-5).

Each run is one object of the list, with the names a check outside the repository reads:
{"mfu", "tokens_per_s", "step_s", "model", "seq_len", "peak_memory_gib", "planned": {"step_s",
"memory_gib"}, "parity": {"ok", "max_rel_diff", "layouts"}}. The output file is
{"figure", "machine", "commit", "date", "gpu", "train": [...]}.
"""
import argparse
import datetime
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

GIB = 2.0**30


def run_train(herd, overrides, workdir, timeout):
    """Runs herd train with `overrides` (--section.field=value strings); returns (records, projection,
    the tail of its output, exit code)."""
    metrics = os.path.join(workdir, "metrics.jsonl")
    projection = os.path.join(workdir, "projection.json")
    for f in (metrics, projection):
        if os.path.exists(f):
            os.remove(f)
    cmd = [herd, "train", f"--train.metrics_file={metrics}", f"--train.projection_file={projection}",
           "--eval.every=0", "--generate.samples=0", "--checkpoint.dir=", *overrides]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"timeout after {timeout} s: {e}"
    records = []
    if os.path.exists(metrics):
        with open(metrics) as f:
            records = [json.loads(line) for line in f if line.strip()]
    proj = None
    if os.path.exists(projection):
        with open(projection) as f:
            proj = json.load(f)
    return records, proj, "\n".join(text.strip().splitlines()[-12:]), rc


def losses(records):
    out = {}
    for r in records:
        if "step" in r and r.get("loss") is not None:
            out[r["step"]] = r["loss"]  # the last record of a step counts
    return out


def max_rel_diff(a, b):
    steps = sorted(set(a) & set(b))
    if not steps or len(steps) != len(a) or len(steps) != len(b):
        return None
    return max(abs(a[s] - b[s]) / abs(b[s]) for s in steps)


def entry(model, seq_len, records, proj, timed_from, peak_tflops, flops_per_token, ranks=1):
    timed = [r for r in records if r.get("step", 0) > timed_from and r.get("step_s") is not None]
    step_s = statistics.median(r["step_s"] for r in timed) if timed else None
    tokens = statistics.median(r["tokens"] for r in timed) if timed else None
    tps = tokens / step_s if step_s else None
    mfu = tps * flops_per_token / (peak_tflops * 1e12 * ranks) if tps and flops_per_token and peak_tflops else None
    planned = {"step_s": None, "memory_gib": None}
    peak = None
    if proj:
        planned = {"step_s": proj["planned"]["step_s"], "memory_gib": proj["planned"]["memory_bytes"] / GIB}
        dev = proj["measured"].get("device_peak_bytes", -1)
        peak = dev / GIB if dev is not None and dev >= 0 else None
    return {"model": model, "seq_len": seq_len, "step_s": step_s, "tokens_per_s": tps, "mfu": mfu,
            "peak_memory_gib": peak, "planned": planned, "steps_timed": len(timed),
            "parity": {"ok": None, "max_rel_diff": None, "layouts": []}}


def model_flops(herd, model, seq):
    p = subprocess.run([herd, "model", model, "--seq-len", str(seq), "--json"], capture_output=True, text=True)
    return json.loads(p.stdout)["flops_per_token_train_exact"] if p.returncode == 0 else None


def perf(a):
    out = []
    for seq in a.seq:
        batch = max(1, a.tokens_per_step // seq)
        with tempfile.TemporaryDirectory() as work:
            ov = [f"--model.name={a.model}", f"--data.dir={a.data}", f"--data.seq_len={seq}", f"--train.device={a.device}",
                  f"--train.precision={a.precision}", f"--train.global_batch={batch}", "--parallel.microbatch_size=1",
                  f"--train.steps={a.warmup + a.steps}", "--train.log_every=1", f"--schedule.warmup_steps={a.warmup + a.steps}"]
            if a.cluster:
                ov.append(f"--projection.cluster_file={a.cluster}")
            records, proj, tail, rc = run_train(a.herd, ov + a.set, work, a.timeout)
        e = entry(os.path.basename(a.model), seq, records, proj, a.warmup, a.peak_tflops, model_flops(a.herd, a.model, seq))
        e["exit"] = rc
        if rc != 0:
            e["output_tail"] = tail
        out.append(e)
        print(f"{a.model} seq {seq}: exit {rc}, step {e['step_s']} s, {e['tokens_per_s']} tokens/s, MFU {e['mfu']}, "
              f"GPU peak {e['peak_memory_gib']} GiB, planned {e['planned']}", flush=True)
        if rc != 0:
            print(tail, flush=True)
    return out


def layouts(ranks):
    """Every (tp, cp, pp, dp) of powers of two whose product is `ranks`."""
    powers = [2**k for k in range(ranks.bit_length()) if 2**k <= ranks]
    return [l for l in itertools.product(powers, repeat=4) if l[0] * l[1] * l[2] * l[3] == ranks]


def parity(a):
    base = [f"--model.name={a.model}", f"--data.dir={a.data}", f"--data.seq_len={a.seq_len}",
            f"--train.steps={a.steps}", f"--train.global_batch={a.global_batch}", "--train.log_every=1"]
    out = []
    with tempfile.TemporaryDirectory() as work:
        def one(device, precision, extra=()):
            return run_train(a.herd, base + [f"--train.device={device}", f"--train.precision={precision}", *extra], work,
                             a.timeout)

        gpu_ref = {}
        for precision, tol in (("fp32", 1e-5), ("bf16", 1e-3)):
            cpu, _, cpu_tail, cpu_rc = one("cpu", precision)
            gpu, proj, tail, rc = one(a.device, precision)
            gpu_ref[precision] = losses(gpu)
            d = max_rel_diff(losses(gpu), losses(cpu)) if rc == 0 and cpu_rc == 0 else None
            e = entry(a.model, a.seq_len, gpu, proj, 1, None, None)
            e["precision"] = precision
            e["parity"] = {"ok": d is not None and d <= tol, "max_rel_diff": d, "tolerance": tol,
                           "against": f"herd train --train.device=cpu --train.precision={precision}, one rank",
                           "layouts": ["1x1x1x1"]}
            e["exit"] = rc
            if rc != 0 or cpu_rc != 0:
                e["output_tail"] = tail if rc != 0 else cpu_tail
            out.append(e)
            print(f"parity {precision}: {a.device} vs cpu, one rank, max relative loss difference {d} (tolerance {tol})", flush=True)
        results = []
        for tp, cp, pp, dp in layouts(a.ranks):
            name = f"tp{tp}xcp{cp}xpp{pp}xdp{dp}"
            extra = [f"--parallel.tp={tp}", f"--parallel.cp={cp}", f"--parallel.pp={pp}", f"--parallel.dp={dp}"]
            recs, _, tail, rc = one(a.device, "fp32", extra)
            d = max_rel_diff(losses(recs), gpu_ref["fp32"]) if rc == 0 else None
            # A layout the model or batch cannot take is refused before the first step in one line that
            # names the field ("num_key_value_heads (4) is not divisible by tp (8)", "parallel.pp ...").
            error = next((l for l in tail.splitlines() if "herd train: error:" in l), "")
            refused = rc != 0 and not recs and any(w in error for w in ("divisible", "parallel.", "at most", "must be"))
            results.append({"layout": name, "exit": rc, "max_rel_diff": d, "refused": refused,
                            **({"output_tail": tail} if rc != 0 else {})})
            print(f"parity {name}: exit {rc}, max relative loss difference {d}" + (" (layout refused)" if refused else ""),
                  flush=True)
        ran = [r for r in results if not r["refused"]]
        worst = max((r["max_rel_diff"] for r in ran if r["max_rel_diff"] is not None), default=None)
        e = entry(a.model, a.seq_len, [], None, 0, None, None)
        e["precision"] = "fp32"
        e["parity"] = {"ok": bool(ran) and all(r["max_rel_diff"] is not None and r["max_rel_diff"] <= 1e-5 for r in ran),
                       "max_rel_diff": worst, "tolerance": 1e-5,
                       "against": "the one-rank GPU run, fp32", "layouts": [r["layout"] for r in ran],
                       "refused": [r["layout"] for r in results if r["refused"]], "runs": results}
        out.append(e)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("perf", "parity"):
        p = sub.add_parser(name)
        p.add_argument("--herd", default="build/herd")
        p.add_argument("--data", required=True, help="token shards of herd data")
        p.add_argument("--device", default="cuda")
        p.add_argument("--out", required=True)
        p.add_argument("--timeout", type=float, default=300, help="seconds per herd train run")
        p.add_argument("--set", action="append", default=[], help="another herd train override, --section.field=value")
    p = sub.choices["perf"]
    p.add_argument("--model", default="bench/gpu/llama3-1b.json")
    p.add_argument("--seq", type=int, action="append", required=True)
    p.add_argument("--tokens-per-step", type=int, default=16384)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--peak-tflops", type=float, default=989.4, help="dense bf16 peak of the GPU (H100 and H200 SXM)")
    p.add_argument("--cluster", default="", help="projection.cluster_file: the cluster the plan is made on")
    p = sub.choices["parity"]
    p.add_argument("--model", default="tiny")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ranks", type=int, default=8)
    a = ap.parse_args()
    runs = perf(a) if a.what == "perf" else parity(a)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    gpu = ""
    if a.device == "cuda":
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True).stdout.strip()
        except OSError as e:
            gpu = f"nvidia-smi: {e}"
    doc = {"figure": f"herd train --train.device={a.device} ({a.what})", "machine": os.uname().nodename,
           "commit": commit or os.environ.get("HERD_COMMIT", "unknown"),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "gpu": gpu, "train": runs}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=2)
    ok = all(r.get("exit", 0) == 0 for r in runs) and all(r["parity"]["ok"] is not False for r in runs)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
