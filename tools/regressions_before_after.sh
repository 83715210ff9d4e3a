#!/usr/bin/env bash
# The faults a new user reported in issue #14 ("Tried as a new user would"), run against two herd
# binaries: one built before the fixes and one after. For each it prints the exit status and the first
# line of stderr (or what was wrong with stdout) of both, so the table in docs/errors.md can be checked.
#   tools/regressions_before_after.sh OLD_HERD NEW_HERD [DATA_DIR]
# Build the old one from the commit before the fixes (8cf5d64^):
#   git worktree add --detach /tmp/herd-old 8cf5d64^ && cmake -S /tmp/herd-old -B /tmp/herd-old/build -G Ninja \
#     -DCMAKE_BUILD_TYPE=Release -DHERD_BUILD_TESTS=OFF -DHERD_BUILD_BENCH=OFF && cmake --build /tmp/herd-old/build --target herd
# DATA_DIR: token shards from `herd data` (default runs/reliability-data, made by bench/reliability).
set -uo pipefail
old=$1 new=$2 data=${3:-runs/reliability-data}
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
printf '{"train": {"steps": 3}, "optim": {"lr": 1e400}}\n' >"$w/overflow.json"
printf '{"name": "x", "gpus_per_node": 8, "peak_flops": 1e400}\n' >"$w/cluster.json"
printf '{"hidden_size": 2147483648, "intermediate_size": 8192, "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 1000}\n' >"$w/huge.json"
mkdir -p "$w/corpus_dir" && echo "some text" >"$w/corpus_dir/a.txt"
: >"$w/empty.txt"
printf 'caf\xe9 au lait\n' >"$w/latin1.txt"
printf '{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.0}\n' >"$w/metrics.jsonl"
cp -r "$data" "$w/data_no_val" && rm -f "$w/data_no_val"/val-*.bin
cp -r "$data" "$w/data_no_meta" && rm -f "$w/data_no_meta/meta.json"

cases=(
  "1e400 in a config|train $w/overflow.json --data.dir=$data --print-config"
  "1e400 in a cluster file|estimate --model tiny --cluster $w/cluster.json --tp 1 --pp 1 --dp 1 --seq-len 128 --global-batch 8"
  "one rank out of memory|train --data.dir=$data --model.name=tiny --data.seq_len=128 --parallel.microbatch_size=100000 --train.global_batch=100000 --train.steps=1 --generate.samples=0"
  "herd model tiny --seq-len 3|model tiny --seq-len 3"
  "hidden_size 2^31: parameter count|model $w/huge.json --json"
  "activation bytes overflow|estimate --model tiny --cluster h200 --tp 1 --pp 1 --dp 1 --microbatch-size 2147483647 --seq-len 2147483646 --global-batch 2147483647 --json"
  "NaN --backward-factor|schedule --pp 2 --microbatches 4 --cost llama --backward-factor nan"
  "NaN --val-fraction|data --input corpus/sotu.jsonl.xz --tokenizer $data.model --output $w/d --val-fraction nan"
  "data --input DIR|data --input $w/corpus_dir --tokenizer $data.model --output $w/d2"
  "empty .txt corpus|data --input $w/empty.txt --tokenizer $data.model --output $w/d3"
  "non-UTF-8 .txt names the file|data --input $w/latin1.txt --tokenizer $data.model --output $w/d4"
  "data verify: held-out shard deleted|data verify $w/data_no_val"
  "data verify: meta.json missing|data verify $w/data_no_meta"
  "plot --title 'R&D' well-formed|plot $w/metrics.jsonl --title R&D --output $w/p.svg"
  "CLI range error bound|data --input corpus/sotu.jsonl.xz --tokenizer $data.model --output $w/d5 --val-fraction 0.9"
)
run() {  # binary, args -> "exit N: first stderr line"
  local out err
  err=$("$1" $2 2>&1 >/dev/null | grep -v '^\[herd' | grep -v '^ ' | grep -v '^$' | head -1)
  "$1" $2 >/dev/null 2>&1
  echo "exit $?: ${err:0:150}"
}
for c in "${cases[@]}"; do
  name=${c%%|*} args=${c#*|}
  echo "== $name"
  echo "   before: $(run "$old" "$args")"
  echo "   after:  $(run "$new" "$args")"
  if [[ $name == plot* ]]; then
    xmllint --noout "$w/p.svg" >/dev/null 2>&1 && echo "   (after: well-formed)" || echo "   (svg not well-formed)"
  fi
done
