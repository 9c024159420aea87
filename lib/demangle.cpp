// SPDX-License-Identifier: MIT
// A kernel's readable name, made within a budget: the demangler writes through a callback that counts what it
// wrote and stops it past the budget (libiberty's cplus_demangle_v3_callback, which allocates nothing: it may be
// left from its callback). A mangled name is untrusted input (a cubin's symbol table, a driver's answer): one of
// 420 bytes whose substitutions nest 40 deep demangles to 2^40 characters, and __cxa_demangle, which has no
// bound, ran for ever in the launching thread and took gigabytes in the logging thread.

#include <libiberty/demangle.h>

#include <csetjmp>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "demangle.hpp"
#include "launchfit/kernel.hpp"

namespace launchfit {

namespace {

// Mangled names longer than this are shown as they are: the demangler's tables live on the calling thread's
// stack, about 64 bytes per character of the name (a 4 KiB name: 256 KiB, as __cxa_demangle took).
constexpr std::size_t max_mangled = 4096;
// Readable names longer than this are shown mangled: no kernel's is, and a name that expands beyond it is a
// bomb of substitutions, not a kernel's.
constexpr std::size_t max_demangled = 64 * 1024;

thread_local std::uint64_t bytes_made = 0;

struct bounded_output {
  std::string text;
  std::jmp_buf stop;
};

extern "C" void append_within_budget(const char* piece, std::size_t size, void* opaque) {
  auto* out = static_cast<bounded_output*>(opaque);
  bytes_made += size;
  if (out->text.size() + size > max_demangled) std::longjmp(out->stop, 1);  // nothing of ours to unwind here
  out->text.append(piece, size);
}

// The demangler's result in `out` (true), or false where it failed or went past the budget. The caller owns
// `out`, so nothing of this frame is read after the jump back.
bool demangle_into(const char* mangled, bounded_output& out) {
  if (setjmp(out.stop) != 0) return false;
  return cplus_demangle_v3_callback(mangled, DMGL_PARAMS | DMGL_TYPES, &append_within_budget, &out) != 0;
}

}  // namespace

namespace detail {
std::uint64_t demangled_bytes() noexcept { return bytes_made; }
}  // namespace detail

std::string demangle(std::string_view mangled) {
  // Only Itanium function names: the demangler also accepts bare type encodings, and a kernel
  // declared extern "C" as "i" or "f" must not come back as "int" or "float".
  if (mangled.size() < 3 || mangled.substr(0, 2) != "_Z" || mangled.size() > max_mangled)
    return std::string(mangled);
  const std::string name(mangled);  // NUL-terminated (and a name with a NUL inside is not demangled past it)
  if (name.find('\0') != std::string::npos) return name;
  bounded_output out;
  if (!demangle_into(name.c_str(), out) || out.text.empty()) return name;
  return std::move(out.text);
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
