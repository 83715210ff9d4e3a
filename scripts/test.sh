#!/usr/bin/env bash
# Runs every test: a Release build with -Werror, then the same suite under ASan + UBSan.
#   scripts/test.sh                    both builds
#   HERD_TEST_ASAN=0 scripts/test.sh   the Release build only
# The sanitizer pass builds only the test executables and the herd binary (target herd_tests). Tests
# labelled `full` (the whole parity matrix, minutes) run with `ctest --test-dir build -L full`, not here;
# those labelled `isa` (the kernels under qemu on the ISA paths this CPU does not take) run in the
# Release pass only. Then every libFuzzer target (fuzz/, scripts/fuzz.sh) runs HERD_FUZZ_RUNS executions
# (default 3000, a few seconds; 0 skips) from a fixed seed on its committed seed corpus, so it repeats. Each phase prints its wall time; ctest prints each test's.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"  # ccache: hits across clones at other paths
# The sanitizer build carries debug info (-g), for which ccache would also hash the working directory and
# so miss in every new clone; without it the objects are reused, their debug info naming the first clone.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
phase() { echo "== herd tests: $1 (${SECONDS}s so far) =="; }

phase "Release, -Wall -Wextra -Werror: build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHERD_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
phase "Release: ctest"
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 900 -LE full

if [ "${HERD_TEST_ASAN:-1}" != "0" ]; then
  phase "AddressSanitizer + UndefinedBehaviorSanitizer: build (test executables only)"
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHERD_WERROR=ON -DHERD_SANITIZE=ON \
    -DHERD_BUILD_BENCH=OFF >/dev/null
  cmake --build build/asan -j "$jobs" --target herd_tests
  phase "AddressSanitizer + UndefinedBehaviorSanitizer: ctest"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    HERD_SANITIZED=1 ctest --test-dir build/asan -j "$jobs" --output-on-failure --timeout 1800 -LE "full|isa"
fi
if [ "${HERD_FUZZ_RUNS:-3000}" != "0" ]; then
  phase "libFuzzer targets (clang, ASan + UBSan): ${HERD_FUZZ_RUNS:-3000} runs each from a fixed seed"
  scripts/fuzz.sh --runs "${HERD_FUZZ_RUNS:-3000}"
fi
phase "done"
