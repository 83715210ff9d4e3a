#!/usr/bin/env bash
# herd fp32 against herd bf16 (train.precision), side by side in one run: tiny and small presets, 1 and 2
# threads, the same batch (8 x 512 by default), each pair run back to back (fp32 then bf16) so both see
# the same load. Each result carries its precision's GEMM peak measured in the same process (the SGEMM
# peak for fp32, oneDNN's bf16 matmul for bf16) and the fraction of it the step reaches, by wall clock
# and by process CPU time (the less load-sensitive one). Writes one JSON document with every result and
# the bf16 / fp32 ratios. PyTorch peers: bench/train/run.sh.
#   bench/train/precision.sh [OUT.json] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/train/precision_results.json}
steps=${2:-3}
mb=${MICRO_BATCH:-8}
seq=${SEQ_LEN:-512}
models=${MODELS:-tiny small}
bin=build/bench/train/herd_bench_train
cmake -S . -B build -DHERD_BUILD_BENCH=ON >/dev/null && cmake --build build --target herd_bench_train >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for model in $models; do
  for threads in 1 2; do
    export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
    for p in fp32 bf16; do
      cut -d' ' -f1-3 /proc/loadavg >"$tmp/load-$model-$threads-$p"
      "$bin" --model "$model" --threads "$threads" --micro-batch "$mb" --seq-len "$seq" --steps "$steps" \
        --precision "$p" --out "$tmp/$model-$threads-$p.json"
    done
  done
done
/usr/bin/python3 - "$tmp" "$out" "$models" <<'PY'
import json, sys
tmp, out, models = sys.argv[1:4]
doc, rows = None, []
for model in models.split():
    for threads in (1, 2):
        row = {"model": model, "threads": threads}
        for p in ("fp32", "bf16"):
            h = json.load(open(f"{tmp}/{model}-{threads}-{p}.json"))
            if doc is None:
                doc = {k: v for k, v in h.items() if k != "results"}
            r = h["results"][0]
            r["load_average_before"] = [float(x) for x in open(f"{tmp}/load-{model}-{threads}-{p}").read().split()]
            row[p] = r
        a, b = row["fp32"], row["bf16"]
        row["bf16_over_fp32_wall"] = b["tokens_per_s"] / a["tokens_per_s"]
        row["bf16_over_fp32_cpu_time"] = b["tokens_per_cpu_s"] / a["tokens_per_cpu_s"]
        rows.append(row)
        print(f"{model:5s} {threads} thr: fp32 {a['tokens_per_s']:6.0f} tok/s ({a['tokens_per_cpu_s']:6.0f} per cpu-s), "
              f"{100 * a['fraction_of_gemm_peak']:3.0f}% of {a['gemm_peak_library']} ({100 * a['fraction_of_gemm_peak_cpu_time']:3.0f}% cpu-time) | "
              f"bf16 {b['tokens_per_s']:6.0f} tok/s ({b['tokens_per_cpu_s']:6.0f}), {100 * b['fraction_of_gemm_peak']:3.0f}% of "
              f"{b['gemm_peak_library']} ({100 * b['fraction_of_gemm_peak_cpu_time']:3.0f}%) | bf16/fp32 "
              f"{row['bf16_over_fp32_wall']:.2f}x wall, {row['bf16_over_fp32_cpu_time']:.2f}x cpu-time")
doc["figure"] = "train_step_throughput_by_precision"
doc["results"] = rows
json.dump(doc, open(out, "w"), indent=1)
print("wrote", out)
PY
