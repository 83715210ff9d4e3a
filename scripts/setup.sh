#!/usr/bin/env bash
# Installs what herd needs to build and run, from Debian packages, on a fresh Debian 12 machine as root
# (or with sudo), then builds the herd binary in build/. Idempotent: packages already present are not
# reinstalled, and apt-get update runs only when something is missing.
#
# Only what `herd` itself needs is installed and built here; scripts/test.sh installs the test-only
# packages and builds the tests, benchmarks and fuzzers in the same tree. The CUDA backend is compiled
# here only on a machine with an NVIDIA GPU (nvidia-smi lists one) or with HERD_CUDA=ON; test.sh
# always compiles it where nvcc is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh

start=$SECONDS
# Compilers and build tools; JSON and the command line; OpenBLAS and oneDNN for the kernels
# (docs/blas.md); OpenMPI and gloo (the two transports between processes); PCRE2 and liblzma for the tokenizer and shards; ccache; python3 and pip
# for scripts/fetch-assets.sh.
install_packages build-essential cmake ninja-build ccache git ca-certificates xz-utils pkg-config \
  python3 python3-pip nlohmann-json3-dev libcli11-dev libopenblas-dev libdnnl-dev libopenmpi-dev \
  openmpi-bin libgloo-dev libpcre2-dev liblzma-dev
echo "setup: packages ready ($((SECONDS - start)) s)"

# Assets herd may not commit (the Llama 3 tokenizer): scripts/fetch-assets.sh.
scripts/fetch-assets.sh

cuda=${HERD_CUDA:-}
if [ -z "$cuda" ]; then
  cuda=OFF
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then cuda=ON; fi
fi
configure_release -DHERD_ENABLE_CUDA="$cuda" -DHERD_BUILD_TESTS=OFF -DHERD_BUILD_BENCH=OFF
cmake --build build -j "$(nproc)" --target herd
echo "setup: herd built at build/herd (CUDA backend: $cuda; $((SECONDS - start)) s in all)"
