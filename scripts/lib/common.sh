# Shared by scripts/setup.sh and scripts/test.sh (sourced, not run).

# ccache: objects are reused across build trees and clones at other paths (paths under the checkout
# are rewritten to relative ones). The sanitizer build carries debug info (-g), for which ccache would
# also hash the working directory and so miss in every new clone; without it the objects are reused,
# their debug info naming the first clone.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

# install_packages NAME...: installs the Debian packages not yet installed (apt-get update only then).
install_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# configure_release [CMAKE_ARG...]: the Release tree build/ with -Werror, shared by setup.sh and
# test.sh so that the test command reuses the objects setup.sh built.
configure_release() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHERD_WERROR=ON "$@" >/dev/null
}

# configure_sanitize: build/sanitize, one clang tree for the sanitizer test pass and the fuzzers:
# AddressSanitizer + UndefinedBehaviorSanitizer everywhere, libFuzzer's coverage in every object, the
# test executables and the libFuzzer targets (fuzz/). One tree compiles the libraries once for both, and
# clang compiles a test source under the sanitizers in about 60% of GCC's time (11 s against 19 s for
# a 227-line test source of tests/train/ at -O1). No -Werror here: warnings are the Release tree's (GCC).
configure_sanitize() {
  cmake -S . -B build/sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DHERD_SANITIZE=ON -DHERD_FUZZ=ON -DHERD_BUILD_TESTS=ON \
    -DHERD_BUILD_BENCH=OFF -DHERD_ENABLE_CUDA=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >/dev/null
}

# The packages of the sanitizer tree: clang with its sanitizer and libFuzzer runtimes, clang's OpenMP
# (libomp: herd's kernels use OpenMP), GoogleTest.
sanitize_packages=(clang libclang-rt-14-dev libomp-dev libgtest-dev libgmock-dev)
