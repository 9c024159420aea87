#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs launchfit's dependencies (Debian packages; the CUDA toolkit must already be installed),
# configures launchfit in build/ and builds the targets named (default: dropin, the README's demo, and the
# library it needs; tests/run.sh asks for all). Safe to run again: it installs only what is missing.
#   cmake/setup.sh [target...]
set -euo pipefail
cd "$(dirname "$0")/.."

# libzstd-dev: launchfit-calc --cubin inflates the zstd-compressed cubins nvcc 13 writes.
# libhiredis-dev: the remote plan store (the library loads libhiredis at run time); redis-server and
# redis-tools: tests/run.sh starts a server for its tests.
# doxygen: the API reference (the docs target, checked in CI).
# libiberty-dev: the demangler launchfit makes kernels' readable names with, within a budget.
packages=(cmake ninja-build g++ pkgconf doxygen libspdlog-dev libgtest-dev nlohmann-json3-dev libbenchmark-dev
          libcli11-dev libhiredis-dev redis-server redis-tools libzstd-dev libiberty-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Boost >= 1.75 (Boost.PFR) under a different package name per release: Ubuntu 24.04's libboost-dev is
# 1.83, Debian 12's is 1.74 (there: libboost1.81-dev). Headers already installed decide first.
boost_headers_ok() {
  local v
  v=$(sed -n 's/^#define BOOST_VERSION \([0-9]*\).*/\1/p' /usr/include/boost/version.hpp 2>/dev/null)
  [[ -n $v ]] && ((v >= 107500))
}
boost_package() {  # the first package whose candidate version is at least 1.75
  local p v
  for p in libboost-dev libboost1.83-dev libboost1.81-dev; do
    v=$(apt-cache policy "$p" 2>/dev/null | awk '$1 == "Candidate:" { print $2 }')
    if [[ -n $v && $v != "(none)" ]] && dpkg --compare-versions "$v" ge 1.75; then
      echo "$p"
      return
    fi
  done
  echo "launchfit setup: no package provides Boost >= 1.75 (Boost.PFR)" >&2
  return 1
}

if ((${#missing[@]})) || ! boost_headers_ok; then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  if ! boost_headers_ok; then
    boost=$(boost_package) || exit 1
    missing+=("$boost")
  fi
  echo "launchfit setup: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [[ -x $d/nvcc ]] && export PATH="$d:$PATH" && break; done
fi
command -v nvcc >/dev/null || { echo "launchfit setup: nvcc not found (install the CUDA toolkit)" >&2; exit 1; }

build=${LAUNCHFIT_BUILD_DIR:-build}
targets=("$@")
((${#targets[@]})) || targets=(dropin)
if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S . -B "$build" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} \
    -DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES:-90} ${LAUNCHFIT_CMAKE_ARGS:-}
elif [[ -n ${CMAKE_CUDA_ARCHITECTURES:-} ]]; then
  # A build that exists keeps its cache: an architecture asked for now must reach it, not be ignored.
  cached=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")
  if [[ $cached != "$CMAKE_CUDA_ARCHITECTURES" ]]; then
    echo "launchfit setup: CMAKE_CUDA_ARCHITECTURES ${cached:-unset} -> $CMAKE_CUDA_ARCHITECTURES in $build (reconfiguring)"
    cmake -S . -B "$build" -DCMAKE_CUDA_ARCHITECTURES="$CMAKE_CUDA_ARCHITECTURES"
  fi
fi
cmake --build "$build" -j"${LAUNCHFIT_JOBS:-2}" --target "${targets[@]}"
