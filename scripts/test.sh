#!/usr/bin/env bash
# Runs every test: a Release build with -Werror, then the same suite under ASan + UBSan.
#   scripts/test.sh            both builds
#   HERD_TEST_ASAN=0 scripts/test.sh   the Release build only
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== herd tests: Release, -Wall -Wextra -Werror =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHERD_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 900

if [ "${HERD_TEST_ASAN:-1}" != "0" ]; then
  echo "== herd tests: AddressSanitizer + UndefinedBehaviorSanitizer =="
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHERD_WERROR=ON -DHERD_SANITIZE=ON \
    -DHERD_BUILD_BENCH=OFF >/dev/null
  cmake --build build/asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    HERD_SANITIZED=1 ctest --test-dir build/asan -j "$jobs" --output-on-failure --timeout 1800
fi
