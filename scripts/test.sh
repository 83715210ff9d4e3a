#!/usr/bin/env bash
# Runs every test: a Release build with -Werror and the whole suite, then the in-process tests under
# ASan + UBSan, then the fuzzers.
#   scripts/test.sh                    everything
#   HERD_TEST_ASAN=0 scripts/test.sh   without the sanitizer pass
#   HERD_FUZZ_RUNS=0 scripts/test.sh   without the fuzzers
# Installs the test-only packages first, then completes the Release tree scripts/setup.sh started
# (tests, benchmarks, and the CUDA backend where nvcc is installed: compiled with -Werror, run only on a
# GPU). The sanitizer pass and the fuzzers share one clang tree, build/sanitize (scripts/lib/common.sh):
# ASan + UBSan with libFuzzer's coverage; the sanitizer pass builds and runs the in-process tests (target
# herd_inprocess_tests; the end-to-end tests, label e2e, run the herd binary and are the Release pass's),
# the fuzzers their own targets on the same libraries.
# Tests labelled `full` (the whole parity matrix, minutes) run with `ctest --test-dir build -L full`,
# not here; those labelled `isa` (the kernels under qemu on the ISA paths this CPU does not take) run in
# the Release pass only. Every libFuzzer target (fuzz/, scripts/fuzz.sh) runs HERD_FUZZ_RUNS executions
# (default 3000, a few seconds; 0 skips) from a fixed seed on its committed seed corpus, so it repeats.
# Each phase prints its wall time; ctest prints each test's. docs/testing.md has the rules and times.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh
jobs=$(nproc)
phase() { echo "== herd tests: $1 (${SECONDS}s so far) =="; }

phase "test packages"
# GoogleTest; qemu-user runs the kernels on the ISA paths this CPU does not take; iproute2 gives the
# two-host MPI test its network namespaces; clang, its runtimes and its OpenMP build the sanitizer tree.
install_packages qemu-user iproute2 "${sanitize_packages[@]}"

phase "Release, -Wall -Wextra -Werror: build"
configure_release -DHERD_ENABLE_CUDA=ON -DHERD_BUILD_TESTS=ON -DHERD_BUILD_BENCH=ON
cmake --build build -j "$jobs"
phase "Release: ctest"
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 900 -LE full

if [ "${HERD_TEST_ASAN:-1}" != "0" ]; then
  phase "AddressSanitizer + UndefinedBehaviorSanitizer (clang, build/sanitize): build (in-process tests)"
  configure_sanitize
  cmake --build build/sanitize -j "$jobs" --target herd_inprocess_tests
  phase "AddressSanitizer + UndefinedBehaviorSanitizer: ctest (in-process tests)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build/sanitize -j "$jobs" --output-on-failure --timeout 1800 -LE "full|isa|e2e"
fi
if [ "${HERD_FUZZ_RUNS:-3000}" != "0" ]; then
  phase "libFuzzer targets (build/sanitize): ${HERD_FUZZ_RUNS:-3000} runs each from a fixed seed"
  scripts/fuzz.sh --runs "${HERD_FUZZ_RUNS:-3000}"
fi
phase "done"
