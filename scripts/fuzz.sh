#!/usr/bin/env bash
# Builds herd's libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer) in build/sanitize
# (the sanitizer tree scripts/test.sh also runs the tests in; scripts/lib/common.sh) and
# runs each one on its committed seed corpus (fuzz/corpus/<target>/) for SECONDS seconds (default 120).
# New inputs that reach new code go to build/sanitize/fuzz-corpus/<target>/ (not committed); a crash stops the
# target, leaves its input as build/sanitize/fuzz-artifacts/<target>/crash-*, and makes the script exit non-zero
# after the other targets have run. Add the input to fuzz/corpus/<target>/ and a regression test.
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 600 model_config
#   scripts/fuzz.sh --runs N [TARGET...]       N executions each from a fixed seed: the same inputs every
#                                              time, so a pass or a failure repeats (what scripts/test.sh
#                                              runs, HERD_FUZZ_RUNS, default 3000; 0 skips)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=(-max_total_time=120)
budget="120 s"
if [ "${1:-}" = "--runs" ]; then
  limit=(-runs="$2" -seed=1)
  budget="$2 runs"
  shift 2
elif [ $# -gt 0 ]; then
  limit=(-max_total_time="$1")
  budget="$1 s"
  shift
fi
source scripts/lib/common.sh
install_packages "${sanitize_packages[@]}"
configure_sanitize
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^set(HERD_FUZZ_TARGETS \(.*\))$/\1/p' fuzz/CMakeLists.txt | tr ' ' '\n')
fi
cmake --build build/sanitize -j "$(nproc)" --target "${targets[@]/#/herd_fuzz_}"
failed=()
summary=()
for t in "${targets[@]}"; do
  # New inputs go to the first corpus directory: kept across timed runs, fresh for a fixed-seed one.
  work="build/sanitize/fuzz-corpus/$t"
  [ "$budget" = "${budget% runs}" ] || work=$(mktemp -d)
  mkdir -p "$work" "build/sanitize/fuzz-artifacts/$t"
  log="build/sanitize/fuzz-artifacts/$t/fuzz.log"
  # -rss_limit_mb: a parser that allocates what a corrupt size field asks for is a bug too.
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build/sanitize/fuzz/herd_fuzz_$t" "${limit[@]}" -rss_limit_mb=2048 -max_len=65536 -timeout=20 \
    -artifact_prefix="build/sanitize/fuzz-artifacts/$t/" "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
    :
  else
    failed+=("$t")
  fi
  [ "$work" = "build/sanitize/fuzz-corpus/$t" ] || rm -rf "$work"
  runs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1 | awk '{print $2, "executions in", $5, "s"}' || true)
  summary+=("$(printf '%-14s %s (limit %s)%s' "$t" "${runs:-?}" "$budget" \
    "$([[ " ${failed[*]} " == *" $t "* ]] && echo '  CRASH: see '"$log")")")
done
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${failed[*]} crashed; the inputs are in build/sanitize/fuzz-artifacts/<target>/" >&2
  exit 1
fi
