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
