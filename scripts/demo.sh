#!/usr/bin/env bash
# herd's main job on its bundled defaults. Today: the model math of the Llama 3 herd.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/herd ] || { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build; }
for m in llama3-8b llama3-70b llama3-405b; do
  build/herd model "$m" --seq-len 8192
  echo
done
