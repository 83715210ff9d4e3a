#!/usr/bin/env bash
# herd's main job on its bundled defaults: the model math of the Llama 3 herd, then the planner's best
# layouts for Llama 3 405B on the Llama 3 cluster (16,384 H100s, 16M-token batches of 8K sequences).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/herd ] || { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build; }
for m in llama3-8b llama3-70b llama3-405b; do
  build/herd model "$m" --seq-len 8192
  echo
done
echo "== herd plan: Llama 3 405B on 16,384 H100s of the Llama 3 cluster =="
build/herd plan --model llama3-405b --cluster llama3-h100 --gpus 16384 --seq-len 8192 --global-batch 2048 --top 5 \
  --max-rejected 8
