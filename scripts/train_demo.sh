#!/usr/bin/env bash
# Trains the demo model (the `tiny` preset, 10.5M parameters) on the bundled State of the Union corpus,
# prints samples and leaves the loss curve: a few minutes on 2 cores.
#   runs/demo/tokenizer.model   8,192-id BPE trained on the corpus
#   runs/demo/data/             token shards (train / held-out val)
#   runs/demo/metrics.jsonl     one JSON object per step
#   runs/demo/loss.svg          the loss curve (training, held-out, unigram entropy)
#   runs/demo/checkpoints/      the newest two checkpoints (herd generate --checkpoint runs/demo/checkpoints)
# Extra arguments are passed to herd train as overrides, e.g. --train.steps=100.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/demo_data.sh
build/herd train configs/demo.json "$@"
build/herd plot runs/demo/metrics.jsonl --svg runs/demo/loss.svg --title "herd: tiny (10.5M) on State of the Union"
echo "loss curve: runs/demo/loss.svg; more text: build/herd generate --checkpoint runs/demo/checkpoints --prompt 'My fellow citizens'"
