#!/usr/bin/env bash
# Installs launchfit's dependencies (Debian packages; the CUDA toolkit must already be installed) and
# configures and builds launchfit in build/. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ libspdlog-dev libboost1.81-dev libgtest-dev nlohmann-json3-dev libbenchmark-dev libcli11-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "launchfit setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [[ -x $d/nvcc ]] && export PATH="$d:$PATH" && break; done
fi
command -v nvcc >/dev/null || { echo "launchfit setup: nvcc not found (install the CUDA toolkit)" >&2; exit 1; }

build=${LAUNCHFIT_BUILD_DIR:-build}
if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S . -B "$build" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} \
    -DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES:-90} ${LAUNCHFIT_CMAKE_ARGS:-}
fi
cmake --build "$build" -j"${LAUNCHFIT_JOBS:-2}"
