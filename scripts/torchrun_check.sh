#!/usr/bin/env bash
# herd under PyTorch's torchrun on this machine, as docs/cluster.md describes it:
#   1. finds torchrun ($TORCHRUN, then PATH, then build/torch-venv; else installs PyTorch from PyPI into
#      build/torch-venv with bench/train/setup_torch_venv.sh: minutes, about 5 GiB);
#   2. finds build/herd (or builds it with scripts/setup.sh) and the demo data (scripts/demo_data.sh);
#   3. runs the TP2 x DP2 demo (configs/demo_tp2_dp2.json, shortened to HERD_TORCHRUN_STEPS steps) as
#      `torchrun --no-python --nproc-per-node 4 herd train ...` (4 processes over gloo) and checks every
#      step's loss against the one-rank run of the same config (1e-5 relative, fp32);
#   4. runs it again under `torchrun --max-restarts 1` with rank 2 killed at step 12: torchrun restarts
#      all four processes, herd resumes from its newest checkpoint, and the job finishes with every loss
#      bit-identical to the uninterrupted torchrun run.
# Exit 0 when all of it holds (the temporary directory removed); otherwise one line
# "torchrun_check: FAIL: <reason>" and status 1 (the runs' output stays in the directory the line names).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
start=$SECONDS
steps=${HERD_TORCHRUN_STEPS:-20}
work=""
fail() {
  echo "torchrun_check: FAIL: $*${work:+ (logs: $work)}" >&2
  exit 1
}
trap 'fail "line $LINENO: \"$BASH_COMMAND\" exited with status $?"' ERR
say() { echo "torchrun_check: $* ($((SECONDS - start)) s)"; }

torchrun=${TORCHRUN:-$(command -v torchrun || true)}
[ -n "$torchrun" ] || [ ! -x build/torch-venv/bin/torchrun ] || torchrun=$repo/build/torch-venv/bin/torchrun
if [ -z "$torchrun" ]; then
  bench/train/setup_torch_venv.sh
  torchrun=$repo/build/torch-venv/bin/torchrun
fi
[ -x "$torchrun" ] || fail "no torchrun at $torchrun"
say "torchrun: $torchrun ($("$(dirname "$torchrun")/python" -c 'import torch; print("torch", torch.__version__)' \
  2>/dev/null || echo "torch version unknown"))"
[ -x build/herd ] || scripts/setup.sh
[ -x build/herd ] || fail "no build/herd after scripts/setup.sh"
scripts/demo_data.sh >/dev/null
work=$(mktemp -d /tmp/herd-torchrun-check.XXXXXX)
args=(configs/demo_tp2_dp2.json "--train.steps=$steps" --checkpoint.every=5 --train.log_every=5 --eval.batches=2
  --generate.samples=0)

# compare_losses A B TOLERANCE NAME: the last record of each step 1..$steps in metrics files A and B, every
# loss of A within TOLERANCE (relative) of B's; 0: bit-identical.
compare_losses() {
  python3 scripts/lib/compare_losses.py "$@" "$steps" 2>"$work/compare.err" || fail "$(cat "$work/compare.err")"
}

build/herd train "${args[@]}" --tp 1 --dp 1 --parallel.backend=local "--checkpoint.dir=$work/ck_one" \
  "--train.metrics_file=$work/one.jsonl" >"$work/one.out" 2>&1 || fail "the one-rank run failed: $(tail -1 "$work/one.out")"
say "one-rank run done"

"$torchrun" --no-python --standalone --nproc-per-node 4 build/herd train "${args[@]}" \
  "--checkpoint.dir=$work/ck_torchrun" "--train.metrics_file=$work/torchrun.jsonl" >"$work/torchrun.out" 2>&1 ||
  fail "the torchrun job failed: $(grep -v '^ ' "$work/torchrun.out" | tail -1)"
grep -q "training 4 ranks as processes over gloo; torchrun" "$work/torchrun.out" ||
  fail "the torchrun job did not say it ran 4 gloo ranks started by torchrun (see $work/torchrun.out)"
compare_losses "$work/torchrun.jsonl" "$work/one.jsonl" 1e-5 "torchrun TP2 x DP2 vs one rank"
say "torchrun job done"

"$torchrun" --no-python --standalone --nproc-per-node 4 --max-restarts 1 build/herd train "${args[@]}" \
  --fault.kill_rank=2 --fault.kill_step=12 "--checkpoint.dir=$work/ck_restart" \
  "--train.metrics_file=$work/restart.jsonl" >"$work/restart.out" 2>&1 ||
  fail "the torchrun job with a killed rank failed: $(grep -v '^ ' "$work/restart.out" | tail -1)"
grep -q "resumed from $work/ck_restart/step_00000010" "$work/restart.out" ||
  fail "the restarted torchrun job did not resume from its checkpoint of step 10 (see $work/restart.out)"
compare_losses "$work/restart.jsonl" "$work/torchrun.jsonl" 0 "torchrun, rank 2 killed at step 12, vs uninterrupted"
say "torchrun restarted the job after rank 2 died at step 12; it resumed at step 10 and finished bit-identical"
rm -rf "$work"
echo "torchrun_check: PASS in $((SECONDS - start)) s"
