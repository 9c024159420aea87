// SPDX-License-Identifier: MIT
#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "launchfit/kernel.hpp"

namespace launchfit {

std::string demangle(std::string_view mangled) {
  // Only Itanium function names: __cxa_demangle also accepts bare type encodings, and a kernel
  // declared extern "C" as "i" or "f" must not come back as "int" or "float".
  if (mangled.size() < 3 || mangled.substr(0, 2) != "_Z") return std::string(mangled);
  std::string name(mangled);  // __cxa_demangle needs a NUL-terminated string
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> readable(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  if (status != 0 || !readable) return name;
  return readable.get();
}

kernel_resources kernel_resources::manual(int regs_per_thread, std::size_t static_smem_bytes,
                                          int max_threads_per_block, std::string name) {
  kernel_resources k;
  k.demangled = demangle(name);
  k.name = std::move(name);
  k.regs_per_thread = regs_per_thread;
  k.static_smem_bytes = static_smem_bytes;
  k.max_threads_per_block = max_threads_per_block;
  return k;
}

}  // namespace launchfit
