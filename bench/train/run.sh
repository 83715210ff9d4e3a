#!/usr/bin/env bash
# herd vs PyTorch training-step throughput, side by side in one run: tiny and small presets, 1 and 2
# threads, the same batch (8 x 512 by default) and fp32. Writes one JSON document (figure, machine,
# commit, results with both implementations and their ratio).
#   bench/train/run.sh [OUT.json] [STEPS]
# PyTorch is Debian's python3-torch (/usr/bin/python3); OPENBLAS_NUM_THREADS pins its BLAS threads.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/train/results.json}
steps=${2:-3}
mb=${MICRO_BATCH:-8}
seq=${SEQ_LEN:-512}
bin=build/bench/train/herd_bench_train
[ -x "$bin" ] || cmake --build build --target herd_bench_train
tmp=$(mktemp -d)
for model in tiny small; do
  for threads in 1 2; do
    OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$bin" --model $model --threads $threads \
      --micro-batch $mb --seq-len $seq --steps "$steps" --out "$tmp/herd-$model-$threads.json"
    OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads /usr/bin/python3 bench/train/torch_peer.py \
      --model $model --threads $threads --micro-batch $mb --seq-len $seq --steps "$steps" > "$tmp/torch-$model-$threads.json"
  done
done
/usr/bin/python3 - "$tmp" "$out" <<'PY'
import glob, json, os, sys
tmp, out = sys.argv[1], sys.argv[2]
doc = None
rows = []
for model in ("tiny", "small"):
    for threads in (1, 2):
        h = json.load(open(f"{tmp}/herd-{model}-{threads}.json"))
        t = json.load(open(f"{tmp}/torch-{model}-{threads}.json"))
        if doc is None:
            doc = {k: v for k, v in h.items() if k != "results"}
        hr = h["results"][0]
        rows.append({"model": model, "threads": threads, "herd": hr, "pytorch": t,
                     "speedup_wall": hr["tokens_per_s"] / t["tokens_per_s"],
                     "speedup_cpu_time": hr["tokens_per_cpu_s"] / t["tokens_per_cpu_s"]})
        print(f"{model:5s} {threads} thr: herd {hr['tokens_per_s']:7.0f} tok/s ({hr['achieved_gflops']:5.1f} GFLOP/s, "
              f"{100*hr['fraction_of_sgemm_peak']:4.1f}% of SGEMM {hr['sgemm_peak_gflops']:.0f}) | "
              f"pytorch {t['tokens_per_s']:7.0f} tok/s ({t['achieved_gflops']:5.1f} GFLOP/s) | "
              f"x{rows[-1]['speedup_wall']:.2f} wall, x{rows[-1]['speedup_cpu_time']:.2f} cpu-time", file=sys.stderr)
doc["figure"] = "herd vs PyTorch training throughput (fp32, one CPU rank)"
doc["load_average"] = os.getloadavg()
doc["results"] = rows
json.dump(doc, open(out, "w"), indent=2)
print(f"wrote {out}", file=sys.stderr)
PY
rm -rf "$tmp"
