# SPDX-License-Identifier: MIT
# libzstd (Debian libzstd-dev) for launchfit-calc --cubin: nvcc 13 compresses the cubins of -rdc objects and
# -Xfatbin -compress-all fatbins with zstd. Debian's package ships pkg-config data, not a CMake package.
include_guard(GLOBAL)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LAUNCHFIT_ZSTD REQUIRED IMPORTED_TARGET GLOBAL libzstd)
