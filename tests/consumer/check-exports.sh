#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fails when a shared liblaunchfit exports a symbol that is not launchfit's: every defined dynamic symbol
# must be in namespace launchfit (functions, variables, their typeinfo and vtables) or a C launchfit_*
# name. A foreign one (std::, spdlog::, fmt::, an instantiation of another library's template) is listed.
# Usage: check-exports.sh liblaunchfit.so
set -euo pipefail
lib=${1:?usage: check-exports.sh liblaunchfit.so}
nm_out=$(nm -D --defined-only -C "$lib")
total=$(printf '%s\n' "$nm_out" | grep -c . || true)
foreign=$(printf '%s\n' "$nm_out" | awk '
  { name = $0; sub(/^[0-9a-fA-F]* *[A-Za-z] /, "", name) }
  name ~ /^launchfit::/ { next }
  name ~ /^(typeinfo|typeinfo name|vtable|VTT) for launchfit::/ { next }
  name ~ /^launchfit_[A-Za-z0-9_]*$/ { next }
  { print "  " $0 }')
if [[ -n $foreign ]]; then
  echo "$lib exports $(printf '%s\n' "$foreign" | wc -l) symbols that are not launchfit's (of $total):" >&2
  printf '%s\n' "$foreign" >&2
  exit 1
fi
# Symbols programs built against earlier headers of this soname call from their own template code: removing
# one breaks them at load time, so it stays exported until the soname changes.
for kept in 'launchfit::detail::hash_combine(unsigned long, unsigned long)'; do
  if ! printf '%s\n' "$nm_out" | grep -qF " $kept"; then
    echo "$lib no longer exports $kept, which earlier headers of this soname call" >&2
    exit 1
  fi
done
if ((total == 0)); then
  echo "$lib exports nothing: not a launchfit library?" >&2
  exit 1
fi
echo "$lib: $total exported symbols, all launchfit's"
