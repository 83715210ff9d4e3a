#!/usr/bin/env bash
# The OpenMP spin budget (docs/kernels.md) before and after, quiet and beside a busy loop: the median
# step of the tiny model on 1 rank x 2 threads and on 2 MPI ranks x 2 and x 1 threads, with libgomp's
# default (GOMP_SPINCOUNT=300000, "before") and with herd's own choice ("after"). One line per run:
# load, layout, policy, median step (s), background jobs the run measured. docs/projection.md has a run.
#   bench/projection/spin_budget.sh [REPETITIONS]
# With --quiet-ab N [WORKLOAD] it measures only the quiet host's cost of the budget, the issue's 3%: N
# interleaved pairs of the single rank (libgomp's default, then herd's budget), one line each, and the
# medians. WORKLOAD: tiny (herd train, the tiny model, the default) or small-bf16 (herd_bench_train: the
# small model's bf16 step on 2 threads, whose regions are many and short: where the budget costs most).
# With --budgets N "B1 B2 ..." [busy] it times herd_bench_train at explicit GOMP_SPINCOUNT values, N
# interleaved sets each led by libgomp's default (300000): the small model's bf16 step on 2 threads on a
# quiet host, or with `busy` the tiny model's fp32 step on 2 threads beside a busy loop, against its
# quiet one-thread step (what losing one core of two leaves). The figures of kernels/cpu/openmp_wait.cpp.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = "--budgets" ]; then
  bench=build/bench/train/herd_bench_train
  args=(--model small --precision bf16 --threads 2 --steps 5)
  step() { python3 -c "import json, sys; print(round(json.load(sys.stdin)['results'][0]['step_s_median'], 4))"; }
  busy=""
  trap '[ -n "$busy" ] && kill -9 -"$busy" 2>/dev/null; true' EXIT
  if [ "${4:-}" = busy ]; then
    args=(--model tiny --threads 2 --steps 6)
    echo "quiet one-thread $(env -u HERD_OPENMP_WAIT $bench --model tiny --threads 1 --steps 6 | step)"
    setsid sh -c 'while :; do :; done' &
    busy=$!
    sleep 1
  fi
  for _ in $(seq "${2:-4}"); do
    for spin in 300000 $3; do
      echo "$spin $(env -u HERD_OPENMP_WAIT GOMP_SPINCOUNT=$spin $bench "${args[@]}" | step)"
    done
  done | tee /dev/stderr | python3 -c "
import statistics, sys
d = {}
for line in sys.stdin:
    k, v = line.split()
    d.setdefault(k, []).append(float(v))
base = d['300000']
for k, v in d.items():
    print('GOMP_SPINCOUNT=%s median %.4f s, %.3fx libgomp default, paired %.3fx' % (k, statistics.median(v),
          statistics.median(v) / statistics.median(base), statistics.median(y / x for x, y in zip(base, v))))"
  exit 0
fi
data=runs/projection-data
[ -f $data/meta.json ] || python3 -c "import sys; sys.path.insert(0, 'bench/common'); from benchlib import make_data; make_data('build/herd', '$data')"
if [ "${1:-}" = "--quiet-ab" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  workload=${3:-tiny}
  for _ in $(seq "${2:-10}"); do
    for spin in 300000 herd; do
      # herd's budget: no GOMP_SPINCOUNT, so herd chooses and re-executes itself with it.
      e=(env -u HERD_OPENMP_WAIT -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY)
      [ $spin = herd ] || e+=(GOMP_SPINCOUNT=$spin)
      if [ "$workload" = small-bf16 ]; then
        "${e[@]}" build/bench/train/herd_bench_train --model small --precision bf16 --threads 2 --steps 5 \
          --out "$tmp/b.json" >/dev/null 2>&1
        python3 -c "import json; print('$spin', round(json.load(open('$tmp/b.json'))['results'][0]['step_s_median'], 4))"
        continue
      fi
      rm -rf "$tmp/ck"
      "${e[@]}" build/herd train --data.dir=$data --model.name=tiny --train.steps=8 --eval.every=0 \
        --eval.batches=1 --schedule.warmup_steps=1 --generate.samples=0 --train.log_every=1000 --global-batch 8 \
        --microbatch-size 8 --checkpoint.dir="$tmp/ck" --train.projection_file="$tmp/p.json" >/dev/null 2>&1
      python3 -c "import json; print('$spin', round(json.load(open('$tmp/p.json'))['measured']['step_s'], 4))"
    done
  done | tee "$tmp/ab"
  python3 - "$tmp/ab" <<'PY'
import statistics, sys
d = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    d.setdefault(k, []).append(float(v))
a, b = d["300000"], d["herd"]
print("median step: libgomp default %.4f s, herd's budget %.4f s (%.3fx); median of the paired ratios %.3fx" %
      (statistics.median(a), statistics.median(b), statistics.median(b) / statistics.median(a),
       statistics.median(y / x for x, y in zip(a, b))))
PY
  exit 0
fi
reps=${1:-2}
tmp=$(mktemp -d)
busy=""
trap 'rm -rf "$tmp"; [ -n "$busy" ] && kill -9 -"$busy" 2>/dev/null; true' EXIT
run() {  # load layout policy command...
  local load=$1 layout=$2 policy=$3
  shift 3
  rm -f "$tmp/p.json"
  env -u HERD_OPENMP_WAIT "$@" --data.dir=$data --model.name=tiny --train.steps=8 --eval.every=0 --eval.batches=1 \
    --schedule.warmup_steps=1 --generate.samples=0 --train.log_every=1000 --train.projection_file="$tmp/p.json" \
    --global-batch 8 >"$tmp/log" 2>&1 || { tail -3 "$tmp/log"; return; }
  python3 -c "import json; d = json.load(open('$tmp/p.json')); print('$load', '$layout', '$policy', \
round(d['measured']['step_s'], 3), round(d['background_jobs'], 2))"
}
mpi=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2)
for _ in $(seq "$reps"); do
  for load in quiet busy; do
    if [ $load = busy ]; then
      setsid sh -c 'while :; do :; done' &
      busy=$!
      sleep 1
    fi
    for policy in before after; do
      e=() x=()
      [ $policy = before ] && e=(GOMP_SPINCOUNT=300000) x=(-x GOMP_SPINCOUNT=300000)
      run $load "1rank-2threads-mb8" $policy "${e[@]}" build/herd train --microbatch-size 8
      run $load "mpi-dp2-2threads" $policy "${mpi[@]}" "${x[@]}" build/herd train --dp 2 --microbatch-size 4 \
        --train.threads=2
      run $load "mpi-dp2-1thread" $policy "${mpi[@]}" "${x[@]}" build/herd train --dp 2 --microbatch-size 4
    done
    if [ -n "$busy" ]; then
      kill -9 -"$busy" 2>/dev/null || true
      busy=""
    fi
  done
done
