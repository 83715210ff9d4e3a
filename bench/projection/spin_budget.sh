#!/usr/bin/env bash
# The OpenMP spin budget (docs/kernels.md) before and after, quiet and beside a busy loop: the median
# step of the tiny model on 1 rank x 2 threads and on 2 MPI ranks x 2 and x 1 threads, with libgomp's
# default (GOMP_SPINCOUNT=300000, "before") and with herd's own choice ("after"). One line per run:
# load, layout, policy, median step (s), background jobs the run measured. bench/projection/measurements.md has its runs.
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
data=runs/projection-data
bench=build/bench/train/herd_bench_train
tmp=$(mktemp -d)
busy=""
trap 'rm -rf "$tmp"; [ -n "$busy" ] && kill -9 -"$busy" 2>/dev/null; true' EXIT

start_busy() {  # one busy loop in its own process group, settled for a second
  setsid sh -c 'while :; do :; done' &
  busy=$!
  disown "$busy"
  sleep 1
}
stop_busy() {
  [ -n "$busy" ] && kill -9 -"$busy" 2>/dev/null || true
  busy=""
}
json() {  # FILE EXPR: a value of the JSON file, rounded
  python3 -c "import json; d = json.load(open('$1')); print(round($2, 4))"
}
# COMMAND...: the tiny model, 8 steps of the projection data, under COMMAND (herd train, or mpirun ...
# herd train); its projection report in $tmp/p.json. Extra flags of herd train go at the end of COMMAND.
tiny_train() {
  [ -f $data/meta.json ] || python3 -c "import sys; sys.path.insert(0, 'bench/common'); \
from benchlib import make_data; make_data('build/herd', '$data')"
  rm -rf "$tmp/p.json" "$tmp/ck"
  "$@" --data.dir=$data --model.name=tiny --train.steps=8 --eval.every=0 --eval.batches=1 --schedule.warmup_steps=1 \
    --generate.samples=0 --train.log_every=1000 --global-batch 8 --checkpoint.dir="$tmp/ck" \
    --train.projection_file="$tmp/p.json" >"$tmp/log" 2>&1 || { tail -3 "$tmp/log" >&2; return 1; }
}
# SPIN WORKLOAD: one line "SPIN median-step-seconds". SPIN: a GOMP_SPINCOUNT, or `herd` (neither it nor
# OMP_WAIT_POLICY set: herd chooses its budget and re-executes itself with it).
timed() {
  local spin=$1 workload=$2
  local e=(env -u HERD_OPENMP_WAIT -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY)
  [ "$spin" = herd ] || e+=(GOMP_SPINCOUNT="$spin")
  local args
  case $workload in
    tiny)
      tiny_train "${e[@]}" build/herd train --microbatch-size 8
      echo "$spin $(json "$tmp/p.json" "d['measured']['step_s']")"
      return
      ;;
    small-bf16) args=(--model small --precision bf16 --threads 2 --steps 5) ;;
    tiny-2-threads) args=(--model tiny --threads 2 --steps 6) ;;
    tiny-1-thread) args=(--model tiny --threads 1 --steps 6) ;;
    *) echo "spin_budget.sh: unknown workload '$workload' (tiny, small-bf16)" >&2 && exit 2 ;;
  esac
  "${e[@]}" $bench "${args[@]}" --out "$tmp/b.json" >/dev/null 2>&1
  echo "$spin $(json "$tmp/b.json" "d['results'][0]['step_s_median']")"
}
# Lines "KEY seconds" on stdin, interleaved sets led by the key that comes first: each key's median,
# its ratio to the first key's, and the median of the ratios paired by set.
summarize() {
  python3 -c "
import statistics, sys
d = {}
for line in sys.stdin:
    k, v = line.split()
    d.setdefault(k, []).append(float(v))
base = next(iter(d.values()))
for k, v in d.items():
    print('%s: median %.4f s, %.3fx the first, paired %.3fx' % (k, statistics.median(v),
          statistics.median(v) / statistics.median(base), statistics.median(y / x for x, y in zip(base, v))))"
}

if [ "${1:-}" = "--budgets" ]; then
  workload=small-bf16
  if [ "${4:-}" = busy ]; then
    workload=tiny-2-threads
    echo "quiet one-thread step: $(timed herd tiny-1-thread | cut -d' ' -f2) s"
    start_busy
  fi
  for _ in $(seq "${2:-4}"); do
    for spin in 300000 $3; do timed "$spin" $workload; done
  done | tee /dev/stderr | summarize
  exit 0
fi
if [ "${1:-}" = "--quiet-ab" ]; then
  for _ in $(seq "${2:-10}"); do
    for spin in 300000 herd; do timed $spin "${3:-tiny}"; done
  done | tee /dev/stderr | summarize
  exit 0
fi

run() {  # load layout policy command...
  local load=$1 layout=$2 policy=$3
  shift 3
  tiny_train "$@" || return 0
  echo "$load $layout $policy $(json "$tmp/p.json" "d['measured']['step_s']") $(json "$tmp/p.json" "d['background_jobs']")"
}
mpi=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2)
for _ in $(seq "${1:-2}"); do
  for load in quiet busy; do
    [ $load = busy ] && start_busy
    for policy in before after; do
      e=(env -u HERD_OPENMP_WAIT -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY) x=()
      [ $policy = before ] && e+=(GOMP_SPINCOUNT=300000) x=(-x GOMP_SPINCOUNT=300000)
      run $load "1rank-2threads-mb8" $policy "${e[@]}" build/herd train --microbatch-size 8
      run $load "mpi-dp2-2threads" $policy "${e[@]}" "${mpi[@]}" "${x[@]}" build/herd train --dp 2 \
        --microbatch-size 4 --train.threads=2
      run $load "mpi-dp2-1thread" $policy "${e[@]}" "${mpi[@]}" "${x[@]}" build/herd train --dp 2 --microbatch-size 4
    done
    stop_busy
  done
done
