#!/usr/bin/env bash
# Installs everything herd needs to build and test, from Debian packages, on a fresh Debian 12 machine
# as root (or with sudo). Idempotent: packages already present are not reinstalled, and apt-get update
# runs only when something is missing. Then configures and builds herd in build/.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build git ca-certificates xz-utils python3 python3-pip
  libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev clang-format
  libopenblas-dev libopenmpi-dev openmpi-bin iproute2
  libdnnl-dev  # kernels: oneDNN sgemm (optional, docs/blas.md)
  ccache       # reused compilations across builds and clones (CMakeLists.txt uses it when present)
  qemu-user    # tests: the kernels on the ISA paths this CPU does not take (tests/CMakeLists.txt)
  libblis-dev  # only bench/kernels/blas_compare loads it, at run time
  clang libclang-rt-14-dev  # fuzz/: libFuzzer targets with ASan + UBSan (scripts/fuzz.sh)
  pkg-config libpcre2-dev liblzma-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Project-specific assets (tokenizer, corpus) are fetched by scripts/fetch-assets.sh when present.
if [ -x scripts/fetch-assets.sh ]; then scripts/fetch-assets.sh; fi

# Same flags as scripts/test.sh (-Werror), so the test command reuses this build instead of redoing it.
# ccache rewrites paths under the checkout to relative ones, so another clone's objects are reused.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# The sanitizer build carries debug info (-g), for which ccache would also hash the working directory and
# so miss in every new clone; without it the objects are reused, their debug info naming the first clone.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHERD_WERROR=ON >/dev/null
cmake --build build -j "$(nproc)"
echo "setup: herd built at build/herd"
