#!/usr/bin/env bash
# herd's main job on its bundled defaults:
#   1. the model math of Llama 3 405B (parameters, FLOPs per token, activations);
#   2. the planner's best layouts for Llama 3 405B on the Llama 3 cluster (16,384 H100s, 16M-token
#      batches of 8K sequences), with the reasons the rejected families fail;
#   3. real training on the bundled State of the Union corpus: the single-rank demo (tokenizer,
#      shards, 250 steps of the tiny preset, held-out loss, samples, runs/demo/loss.svg), then the same
#      run as a 4D job, TP2 x CP2 x PP2 on 8 local ranks (Llama 3's flexible interleaved schedule, V=2,
#      4 micro-batches), which prints the planner's predicted step time and memory for its own layout
#      on this machine (this machine's stored calibration: `herd calibrate` measures it once, on the
#      first run of this script, and both runs print its age and load) at the start and the measured values
#      beside them at the end. Midway one of its ranks is killed (fault.kill_rank): the supervisor
#      (--max-restarts) names the rank, restarts the job from its newest checkpoint and accounts the
#      effective training time; the loss is printed beside the single-rank one.
# About 10 minutes on 2 idle cores. Extra arguments go to the single-rank `herd train` as overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/herd ] || scripts/setup.sh

echo "== 1. herd model llama3-405b =="
build/herd model llama3-405b --seq-len 8192
echo
echo "== 2. herd plan: Llama 3 405B on 16,384 H100s of the Llama 3 cluster =="
build/herd plan --model llama3-405b --cluster llama3-h100 --gpus 16384 --seq-len 8192 --global-batch 2048 --top 5 \
  --max-rejected 8
echo
echo "== 3. herd calibrate: this machine, once (kept for later runs; its age and load are printed) =="
# Both training runs plan with this machine's stored calibration (docs/projection.md). The first run of
# this script measures it (about 20 s on a quiet host; a take disturbed by another job is redone and
# said); later runs reuse it. `build/herd calibrate` alone measures again.
build/herd calibrate --if-missing | tail -3
echo
echo "== 3a. herd train: the tiny preset on one rank =="
scripts/train_demo.sh "$@"
echo
echo "== 3b. herd train: the same run as TP2 x CP2 x PP2 (8 ranks as threads), first 50 steps, rank 5 killed at step 27 =="
# Same global batch (8 sequences, here 4 micro-batches of 2) and the same learning-rate curve as the
# 250-step single-rank run (25 warm-up + 225 cosine steps). A fresh run: no resume from an earlier demo.
rm -rf runs/demo/checkpoints_4d runs/demo/metrics_4d.jsonl
# Rank 5 dies at the start of step 27; the supervisor restarts the job from the step-20 checkpoint, the
# steps after it are redone (marked "redone" in the metrics file), and the run ends where an
# uninterrupted one would, bit for bit (docs/reliability.md).
build/herd train configs/demo_4d.json --train.steps=50 --schedule.decay_steps=225 \
  --checkpoint.every=10 \
  --max-restarts 2 --fault.kill_rank=5 --fault.kill_step=27
echo
echo "step  loss (1 rank)  loss (TP2 x CP2 x PP2)"
loss_column() {
  awk 'match($0, /"step":[0-9]+/) { s = substr($0, RSTART + 7, RLENGTH - 7)
       if (match($0, /"loss":[-0-9.e+]+/)) print s, substr($0, RSTART + 7, RLENGTH - 7) }' "$1"
}
join <(loss_column runs/demo/metrics.jsonl | sort -k1,1) <(loss_column runs/demo/metrics_4d.jsonl | sort -k1,1) |
  sort -n | awk '$1 % 10 == 0 { printf "%4d  %13.6f  %22.6f\n", $1, $2, $3 }'
