#!/usr/bin/env bash
# herd vs PyTorch training-step throughput, side by side in one run: tiny and small presets, 1 and 2
# threads, the same batch (8 x 512 by default), the same AdamW step, fp32 and bf16. For each
# (model, threads) these run one after the other:
#   herd fp32 and herd bf16 (herd_bench_train --precision fp32|bf16; each also measures its
#     precision's GEMM peak in the same process: the better SGEMM of OpenBLAS and oneDNN, and oneDNN's
#     bf16 matmul),
#   then for each PyTorch (Debian's 1.13 from /usr/bin/python3 when it has torch; the PyPI one in the
#     venv of bench/train/setup_torch_venv.sh when present): eager fp32, torch.compile (inductor) fp32,
#     and eager bf16 autocast (bench/train/torch_peer.py; a torch without torch.compile gives a
#     "skipped" row; so does bf16 autocast on a CPU without bf16 instructions, where PyTorch emulates
#     them at minutes a step, unless TORCH_PEER_BF16_EMULATED=1).
# Every row gets its fraction of its own precision's GEMM peak (fp32 rows against herd's SGEMM peak of
# the same (model, threads), bf16 rows against the bf16 matmul peak), and each (model, threads) the
# target ratios (report.py's set_targets). Writes one JSON document (figure, machine, commit, load averages,
# every result, ratios, targets) and the same as a Markdown table beside it (OUT with .md).
#   bench/train/run.sh [OUT.json] [STEPS]        STEPS timed steps after the warm-up (median reported)
# Environment: MODELS (tiny small), MICRO_BATCH (8), SEQ_LEN (512), THREADS (1 2),
#   TORCH_VENV (build/torch-venv), HERD_BENCH_BIN (a built herd_bench_train; then no cmake rebuild,
#   default build/bench/train/herd_bench_train rebuilt first).
# Threads: OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and MKL_NUM_THREADS are all set to the count (Debian's
# torch ignores set_num_threads for its OpenBLAS). OPENBLAS_CORETYPE is unset: a value set for the whole
# machine (Haswell's AVX2 kernels on an AVX-512 CPU, docs/kernels.md) would time herd with kernels this CPU
# does not call for; OpenBLAS (and herd, when OpenBLAS falls back) chooses instead.
set -euo pipefail
unset OPENBLAS_CORETYPE
cd "$(dirname "$0")/../.."
out=${1:-bench/train/results.json}
steps=${2:-5}
mb=${MICRO_BATCH:-8}
seq=${SEQ_LEN:-512}
models=${MODELS:-tiny small}
thread_counts=${THREADS:-1 2}
venv=${TORCH_VENV:-build/torch-venv}
if [ -n "${HERD_BENCH_BIN:-}" ]; then
  bin=$HERD_BENCH_BIN
else
  bin=build/bench/train/herd_bench_train
  cmake -S . -B build -DHERD_BUILD_BENCH=ON >/dev/null && cmake --build build --target herd_bench_train >/dev/null
fi
peers=()
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  peers+=("debian:/usr/bin/python3")
else
  echo "run.sh: /usr/bin/python3 has no torch (apt-get install python3-torch): no Debian PyTorch rows" >&2
fi
if [ -x "$venv/bin/python" ]; then
  peers+=("pypi:$venv/bin/python")
else
  echo "run.sh: no $venv (bench/train/setup_torch_venv.sh): no PyPI PyTorch rows" >&2
fi
variants=(eager:fp32 compile:fp32 eager:bf16)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo "-dirty")
for model in $models; do
  for threads in $thread_counts; do
    export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
    for p in fp32 bf16; do
      cut -d' ' -f1-3 /proc/loadavg >"$tmp/load-herd_$p-$model-$threads"
      "$bin" --model "$model" --threads "$threads" --micro-batch "$mb" --seq-len "$seq" --steps "$steps" \
        --precision "$p" --out "$tmp/herd_$p-$model-$threads.json"
    done
    for peer in "${peers[@]}"; do
      name=${peer%%:*} py=${peer#*:}
      for v in "${variants[@]}"; do
        mode=${v%%:*} prec=${v#*:}
        cut -d' ' -f1-3 /proc/loadavg >"$tmp/load-${name}_${mode}_$prec-$model-$threads"
        # A fresh inductor cache per run: compile_s is a cold compile, not a cache hit of an earlier run.
        TORCHINDUCTOR_CACHE_DIR="$tmp/inductor-$name-$model-$threads" "$py" bench/train/torch_peer.py \
          --model "$model" --threads "$threads" --micro-batch "$mb" --seq-len "$seq" --steps "$steps" \
          --mode "$mode" --precision "$prec" >"$tmp/${name}_${mode}_$prec-$model-$threads.json"
      done
    done
  done
done
/usr/bin/python3 bench/train/report.py "$tmp" "$out" "$commit" "$models" "$thread_counts" "$bin" "${peers[@]}"
