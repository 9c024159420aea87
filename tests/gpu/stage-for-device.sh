#!/usr/bin/env bash
# Builds launchfit for sm_90 in build-device/ and stages what a GPU machine needs to run the GPU tests,
# demos and benchmarks without a compiler or the -dev packages: binaries, PTX/cubin, plugins and the
# shared libraries they load that a stock CUDA image lacks (spdlog, fmt, benchmark), in .device/.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-device
if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S . -B $build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
fi
cmake --build $build -j"${LAUNCHFIT_JOBS:-2}"
rm -rf .device
mkdir -p .device
cp -a $build/. .device/
find .device \( -name '*.o' -o -name '*.a' -o -name '.ninja_*' -o -name '*.d' \) -type f -delete
rm -rf .device/CMakeFiles/[0-9]*  # the compiler-identification builds: nothing on the GPU machine runs them
# Symbols stay here: the staged copy must fit what a device run carries (64 MiB).
find .device -type f -perm -u+x -exec sh -c 'head -c4 "$1" | grep -q ELF && strip --strip-unneeded "$1"' _ {} \;
# LAUNCHFIT_STAGE_GPU_ONLY=1 leaves the CPU tests out (they run on every machine; this keeps the copy small).
if [[ ${LAUNCHFIT_STAGE_GPU_ONLY:-0} == 1 ]]; then
  rm -rf .device/tests/fault
  find .device/tests -maxdepth 1 -type f -name '*-test' -delete
fi
mkdir -p .device/_runtime
for bin in $(find .device -type f -perm -u+x) $(find .device -name '*.so'); do
  ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}' | grep -E 'libspdlog|libfmt|libbenchmark|libgtest|libgmock|libboost' || true
done | sort -u | while read -r lib; do cp -L "$lib" .device/_runtime/; done
echo "$PWD" > .device/.source-dir
du -sh .device
