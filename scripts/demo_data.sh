#!/usr/bin/env bash
# The demo's data, made once and shared by every demo run (scripts/train_demo.sh, scripts/train_small.sh,
# configs/*.json): an 8,192-id BPE trained on the bundled State of the Union corpus and its token shards
# (train / held-out val, document boundaries kept). Builds herd first when build/herd is missing.
#   runs/demo/tokenizer.model   runs/demo/data/
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/herd ] || scripts/setup.sh
mkdir -p runs/demo
[ -f runs/demo/tokenizer.model ] ||
  build/herd data train-tokenizer --input corpus/sotu.jsonl.xz --output runs/demo/tokenizer.model --vocab-size 8192
[ -f runs/demo/data/meta.json ] ||
  build/herd data --input corpus/sotu.jsonl.xz --tokenizer runs/demo/tokenizer.model --output runs/demo/data
