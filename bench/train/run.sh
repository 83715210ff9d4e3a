#!/usr/bin/env bash
# herd vs PyTorch training-step throughput, side by side in one run: tiny and small presets, 1 and 2
# threads, the same batch (8 x 512 by default), fp32, the same AdamW step. For each (model, threads)
# the implementations run one after the other: herd (herd_bench_train, which also measures the BLAS's
# SGEMM peak in the same process), Debian's PyTorch 1.13 (/usr/bin/python3), and the PyPI PyTorch in
# build/torch-venv when bench/train/setup_torch_venv.sh has installed it. Writes one JSON document
# (figure, machine, commit, load averages, every result, herd's speed-up over each peer).
#   bench/train/run.sh [OUT.json] [STEPS]        STEPS timed steps after one warm-up (median reported)
# Threads: OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and MKL_NUM_THREADS are all set to the count (Debian's
# torch ignores set_num_threads for its OpenBLAS; ENVIRONMENT.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/train/results.json}
steps=${2:-5}
mb=${MICRO_BATCH:-8}
seq=${SEQ_LEN:-512}
models=${MODELS:-tiny small}
bin=build/bench/train/herd_bench_train
cmake --build build --target herd_bench_train >/dev/null
peers=("debian:/usr/bin/python3")
[ -x build/torch-venv/bin/python ] && peers+=("pypi:build/torch-venv/bin/python")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo "-dirty")
for model in $models; do
  for threads in 1 2; do
    export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
    cut -d' ' -f1-3 /proc/loadavg >"$tmp/load-herd-$model-$threads"
    "$bin" --model "$model" --threads "$threads" --micro-batch "$mb" --seq-len "$seq" --steps "$steps" \
      --out "$tmp/herd-$model-$threads.json"
    for peer in "${peers[@]}"; do
      name=${peer%%:*} py=${peer#*:}
      cut -d' ' -f1-3 /proc/loadavg >"$tmp/load-$name-$model-$threads"
      "$py" bench/train/torch_peer.py --model "$model" --threads "$threads" --micro-batch "$mb" --seq-len "$seq" \
        --steps "$steps" >"$tmp/$name-$model-$threads.json"
    done
  done
done
/usr/bin/python3 - "$tmp" "$out" "$commit" "$models" "${peers[@]}" <<'PY'
import json, sys
tmp, out, commit, models = sys.argv[1:5]
peers = [p.split(":")[0] for p in sys.argv[5:]]
load = lambda name: [float(x) for x in open(f"{tmp}/load-{name}").read().split()]
doc, rows = None, []
for model in models.split():
    for threads in (1, 2):
        h = json.load(open(f"{tmp}/herd-{model}-{threads}.json"))
        if doc is None:
            doc = {k: v for k, v in h.items() if k != "results"}
        hr = h["results"][0]
        hr["load_average_before"] = load(f"herd-{model}-{threads}")
        row = {"model": model, "threads": threads, "herd": hr}
        line = (f"{model:5s} {threads} thr: herd {hr['tokens_per_s']:6.0f} tok/s {hr['achieved_gflops']:5.1f} GFLOP/s "
                f"({100 * hr['fraction_of_sgemm_peak']:3.0f}% of {hr['sgemm_peak_library']} {hr['sgemm_peak_gflops']:.0f}; "
                f"cpu-time {100 * hr['fraction_of_sgemm_peak_cpu_time']:3.0f}%)")
        for p in peers:
            t = json.load(open(f"{tmp}/{p}-{model}-{threads}.json"))
            t["load_average_before"] = load(f"{p}-{model}-{threads}")
            row[f"pytorch_{p}"] = t
            row[f"speedup_wall_vs_{p}"] = hr["tokens_per_s"] / t["tokens_per_s"]
            row[f"speedup_cpu_time_vs_{p}"] = hr["tokens_per_cpu_s"] / t["tokens_per_cpu_s"]
            # The least-disturbed step of each (on a shared machine the fastest step is the one
            # closest to having the cores alone).
            row[f"speedup_best_step_vs_{p}"] = min(t["step_s"]) / min(hr["step_s"])
            line += (f" | torch {t['torch_version'].split('+')[0]} {t['tokens_per_s']:6.0f} tok/s "
                     f"x{row[f'speedup_wall_vs_{p}']:.2f} (best step x{row[f'speedup_best_step_vs_{p}']:.2f}, "
                     f"cpu-time x{row[f'speedup_cpu_time_vs_{p}']:.2f})")
        rows.append(row)
        print(line, file=sys.stderr)
doc["figure"] = "herd vs PyTorch training throughput (fp32, one CPU rank, same model, batch and AdamW step)"
doc["commit"] = commit
doc["load_average_at_end"] = [float(x) for x in open("/proc/loadavg").read().split()[:3]]
doc["results"] = rows
json.dump(doc, open(out, "w"), indent=2)
# The same as a Markdown table (docs/training.md).
hdr = "| model | threads | herd tokens/s | herd GFLOP/s | % of SGEMM peak |"
sep = "| --- | --- | --- | --- | --- |"
for p in peers:
    hdr += f" PyTorch ({p}) tokens/s | herd / PyTorch ({p}) |"
    sep += " --- | --- |"
print(hdr + "\n" + sep, file=sys.stderr)
for r in rows:
    h = r["herd"]
    line = (f"| {r['model']} | {r['threads']} | {h['tokens_per_s']:.0f} | {h['achieved_gflops']:.0f} | "
            f"{100 * h['fraction_of_sgemm_peak']:.0f}% of {h['sgemm_peak_gflops']:.0f} ({h['sgemm_peak_library']}) |")
    for p in peers:
        t = r[f"pytorch_{p}"]
        line += f" {t['tokens_per_s']:.0f} | {r[f'speedup_wall_vs_{p}']:.2f}x |"
    print(line, file=sys.stderr)
print(f"wrote {out}", file=sys.stderr)
PY
