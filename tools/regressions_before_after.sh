#!/usr/bin/env bash
# The faults a new user meets on first use (docs/errors.md), run against two herd
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
printf '{"name": "x", "accelerator": {"name": "g", "peak_tflops": {"bf16": 1e400}, "memory_gib": 80, "memory_bw_gb_per_s": 2000}, "tiers": [{"name": "nv", "size": 8, "bw_gb_per_s": 100, "latency_us": 2}]}\n' >"$w/cluster.json"
printf '{"hidden_size": 2147483648, "intermediate_size": 8192, "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 1000, "max_position_embeddings": 8192}\n' >"$w/huge.json"
mkdir -p "$w/corpus_dir" && echo "some text" >"$w/corpus_dir/a.txt"
: >"$w/empty.txt"
printf 'caf\xe9 au lait\n' >"$w/latin1.txt"
printf '{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.0}\n' >"$w/metrics.jsonl"
cp -r "$data" "$w/data_no_val" && rm -f "$w/data_no_val"/val-*.bin
cp -r "$data" "$w/data_no_meta" && rm -f "$w/data_no_meta/meta.json"

cases=(
  "1e400 in a config|train $w/overflow.json --data.dir=$data --print-config"
  "1e400 in a cluster file|estimate --model tiny --cluster $w/cluster.json --gpus 1 --tp 1 --cp 1 --pp 1 --dp 1 --seq-len 128 --global-batch 8"
  "one rank out of memory|train --data.dir=$data --model.name=tiny --data.seq_len=128 --parallel.microbatch_size=100000 --train.global_batch=100000 --train.steps=1 --generate.samples=0"
  "herd model tiny --seq-len 3|model tiny --seq-len 3"
  "hidden_size 2^31: parameter count|model $w/huge.json --json"
  "activation bytes overflow|estimate --model tiny --cluster h200 --gpus 1 --tp 1 --cp 1 --pp 1 --dp 1 --microbatch-size 2147483647 --seq-len 2147483646 --global-batch 2147483647 --json"
  "NaN --backward-factor|schedule --pp 2 --microbatches 4 --cost llama --backward-factor nan"
  "NaN --val-fraction|data --input corpus/sotu.jsonl.xz --tokenizer $data.model --output $w/d --val-fraction nan"
  "data --input DIR|data --input $w/corpus_dir --tokenizer $data.model --output $w/d2"
  "empty .txt corpus|data --input $w/empty.txt --tokenizer $data.model --output $w/d3"
  "non-UTF-8 .txt names the file|data --input $w/latin1.txt --tokenizer $data.model --output $w/d4"
  "data verify: held-out shard deleted|data verify $w/data_no_val"
  "data verify: meta.json missing|data verify $w/data_no_meta"
  "plot --title 'R&D' well-formed|plot $w/metrics.jsonl --title R&D --svg $w/p.svg"
  "CLI range error bound|plan --model tiny --cluster h200 --gpus 0"
)
# One binary on one case: the exit status and the line that says what went wrong (an error, a warning
# or an abort, else the first line); for a case with a check, what the check finds in the output.
run() {  # binary, args, check
  local out rc msg
  out=$("$1" $2 2>&1)
  rc=$?
  msg=$(grep -E -m1 'error:|warning:|terminate|internal check|what\(\)|Abort' <<<"$out")
  [[ -n $msg ]] || msg=$(grep -v '^$' <<<"$out" | head -1)
  case $3 in
    params) msg="$msg | $(grep -E -m1 '"params_total"|"total"' <<<"$out" | tr -s ' ')" ;;
    activations) msg="$msg | $(grep -E -m1 '"activation' <<<"$out" | tr -s ' ')" ;;
    svg) if xmllint --noout "$w/p.svg" >/dev/null 2>&1; then msg="$msg | svg well-formed"; else msg="$msg | svg NOT well-formed"; fi
         rm -f "$w/p.svg" ;;
  esac
  echo "exit $rc: ${msg:0:170}"
}
for c in "${cases[@]}"; do
  name=${c%%|*} args=${c#*|}
  check=
  [[ $name == *"parameter count"* ]] && check=params
  [[ $name == "activation bytes"* ]] && check=activations
  [[ $name == plot* ]] && check=svg
  echo "== $name"
  echo "   before: $(run "$old" "$args" "$check")"
  echo "   after:  $(run "$new" "$args" "$check")"
done
