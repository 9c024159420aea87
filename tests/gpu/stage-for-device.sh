#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds launchfit for sm_90 in build-device/ and stages what a GPU machine needs to run the GPU tests,
# demos and benchmarks without a compiler or the -dev packages: binaries, PTX/cubin, plugins and the
# shared libraries they load that a stock CUDA image lacks (spdlog, fmt, benchmark), in .device/.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-device
if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S . -B $build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
fi
cmake --build $build -j"${LAUNCHFIT_JOBS:-2}" --target all benchmarks
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
# plan-store starts its own Redis. The server and the libraries it loads that a stock CUDA image may lack
# go to _runtime/redis/, off LD_LIBRARY_PATH (which covers _runtime for every step), so they never stand in
# for the image's own copies of libssl, libsystemd, libzstd...; _runtime/redis-server runs the server with
# them (exec: the PID plan-store stops is the server's). libhiredis, which launchfit loads at run time, goes
# to _runtime itself.
server=$(command -v redis-server || true)
if [[ -n $server ]]; then
  mkdir -p .device/_runtime/redis
  # Debian's redis-server is a symlink to redis-check-rdb, which picks its mode by the name it runs under.
  cp -L "$server" .device/_runtime/redis/redis-server
  # Not libc, libm, libstdc++, libgcc_s or the loader: the image has those, and they must be its own.
  needed='liblzf|libjemalloc|libsystemd|libssl|libcrypto|libgcrypt|liblz4|libzstd|libcap|liblzma'
  needed+='|libgpg-error|libatomic'
  ldd "$server" | awk '/=> \//{print $3}' | { grep -E "/($needed)\.so" || true; } |
    while read -r lib; do cp -L "$lib" .device/_runtime/redis/; done
  cat >.device/_runtime/redis-server <<'WRAPPER'
#!/bin/sh
here=$(dirname "$0")
LD_LIBRARY_PATH="$here/redis${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/redis/redis-server" "$@"
WRAPPER
  chmod +x .device/_runtime/redis-server
else
  echo "redis-server not found: plan-store will skip its Redis rows on the GPU machine" >&2
fi
hiredis=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true) |
  awk '$1 ~ /^libhiredis\.so\.[0-9]/ {print $NF}' | sort -u)
if [[ -n $hiredis ]]; then
  for lib in $hiredis; do cp -L "$lib" .device/_runtime/; done
else
  echo "libhiredis not found: launchfit's remote plan store stays off on the GPU machine" >&2
fi
du -sh .device/_runtime/redis .device/_runtime/libhiredis.so.* 2>/dev/null || true
echo "$PWD" > .device/.source-dir
du -sh .device
