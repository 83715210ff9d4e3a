#!/usr/bin/env bash
# Trains the `small` preset (32.5M parameters) on the bundled State of the Union corpus for a few
# minutes of 2 cores, evaluating the held-out loss every 50 steps, then plots the curve and samples
# text. The tokenizer and shards are the demo's (scripts/demo_data.sh), so the held-out
# unigram entropy (the reference line) is the same 6.635 nats/token.
#   runs/small/metrics.jsonl     one JSON object per step (val_loss on evaluation steps)
#   runs/small/loss.svg          the loss curve (training, held-out, unigram entropy)
#   runs/small/samples.txt       herd generate from the final checkpoint
#   runs/small/checkpoints/      the final checkpoint
# Extra arguments are passed to herd train as overrides, e.g. --train.steps=600.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/demo_data.sh
mkdir -p runs/small
# A fresh run each time: the curve in docs/ is of one uninterrupted run.
rm -rf runs/small/checkpoints runs/small/metrics.jsonl
start=$(date +%s)
build/herd train configs/small.json "$@" 2>&1 | tee runs/small/train.log
echo "wall time: $(($(date +%s) - start)) s; load average now: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs/small/train.log
build/herd plot runs/small/metrics.jsonl --svg runs/small/loss.svg --title "herd: small (32.5M) on State of the Union"
build/herd generate --checkpoint runs/small/checkpoints --prompt "My fellow citizens" --temperature 0.8 --top-p 0.95 \
  --samples 2 --max-tokens 80 | tee runs/small/samples.txt
echo "loss curve: runs/small/loss.svg; samples: runs/small/samples.txt"
