// SPDX-License-Identifier: MIT
#include "launchfit/kernel.hpp"

#include <cstring>
#include <fstream>
#include <utility>

#include "driver.hpp"
#include "kernel_arguments.hpp"
#include "kernel_internal.hpp"
#include "launchfit/error.hpp"
#include "plan_cache.hpp"
#include "ptx_scan.hpp"

namespace launchfit {

kernel_resources query_resources(CUfunction f) { return detail::query_resources(f, true); }

namespace detail {

std::string function_name(const driver_api& d, CUfunction f) {
  if (d.cuFuncGetName) {
    const char* name = nullptr;
    if (d.cuFuncGetName(&name, f) == CUDA_SUCCESS && name && *name) return name;
  }
  return "kernel@" + std::to_string(reinterpret_cast<std::uintptr_t>(f));
}

kernel_resources query_resources(CUfunction f, bool demangle_name) {
  const auto& d = detail::driver();
  if (!f) throw error(CUDA_ERROR_INVALID_HANDLE, "kernel", "null kernel handle");
  auto attr = [&](CUfunction_attribute a, const char* what) {
    int v = 0;
    detail::check(d.cuFuncGetAttribute(&v, a, f), what);
    return v;
  };
  kernel_resources k;
  k.name = function_name(d, f);
  if (demangle_name) k.demangled = demangle(k.name);
  k.regs_per_thread = attr(CU_FUNC_ATTRIBUTE_NUM_REGS, "cuFuncGetAttribute(NUM_REGS)");
  k.static_smem_bytes = static_cast<std::size_t>(attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "cuFuncGetAttribute"));
  k.local_bytes_per_thread = static_cast<std::size_t>(attr(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "cuFuncGetAttribute"));
  k.const_bytes = static_cast<std::size_t>(attr(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, "cuFuncGetAttribute"));
  k.max_threads_per_block = attr(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "cuFuncGetAttribute");
  k.ptx_version = attr(CU_FUNC_ATTRIBUTE_PTX_VERSION, "cuFuncGetAttribute");
  k.binary_version = attr(CU_FUNC_ATTRIBUTE_BINARY_VERSION, "cuFuncGetAttribute");
  k.max_dynamic_smem_bytes =
      static_cast<std::size_t>(attr(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "cuFuncGetAttribute"));
  // Compile-time __cluster_dims__ (sm_90+); a driver or device without clusters reports an error or 0: none.
  // Without a width there is no required cluster, and its height and depth are not asked (two driver calls
  // fewer per miss for nearly every kernel).
  const CUfunction_attribute cluster_attr[3] = {CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,
                                                CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,
                                                CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH};
  for (int i = 0; i < 3; ++i) {
    int v = 0;
    if (d.cuFuncGetAttribute(&v, cluster_attr[i], f) == CUDA_SUCCESS && v > 0) k.required_cluster[i] = static_cast<unsigned>(v);
    if (k.required_cluster[0] == 0) break;
  }
  return k;
}

void refuse_arguments(const std::size_t* sizes, std::size_t count, const std::vector<std::size_t>& expected,
                      const std::string& kernel, const std::string& plan) {
  if (expected.size() != count) {
    throw error(CUDA_ERROR_INVALID_VALUE, "launchfit::launch",
                "kernel takes " + std::to_string(expected.size()) + " parameters, " + std::to_string(count) +
                    " arguments given",
                kernel, plan);
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != sizes[i]) {
      throw error(CUDA_ERROR_INVALID_VALUE, "launchfit::launch",
                  "argument " + std::to_string(i) + " is " + std::to_string(sizes[i]) +
                      " bytes, the kernel's parameter is " + std::to_string(expected[i]) + " bytes",
                  kernel, plan);
    }
  }
  throw error(CUDA_ERROR_INVALID_VALUE, "launchfit::launch", "the arguments are not the kernel's parameters",
              kernel, plan);
}

std::string display_name(const kernel_resources& k) {
  return k.demangled.empty() ? demangle(k.name) : k.demangled;
}

std::string display_name(const kept_plan& k) {
  return k.kernel_demangled.empty() ? demangle(k.kernel_name) : k.kernel_demangled;
}

const std::string& name_kernel(kernel_resources& k) {
  if (k.demangled.empty()) k.demangled = demangle(k.name);
  return k.demangled;
}

void check(CUresult r, const char* call, const kernel_resources& k) {
  if (r != CUDA_SUCCESS) check(r, call, display_name(k));
}

void check(CUresult r, const char* call, const kernel_resources& k, const plan& p) {
  if (r != CUDA_SUCCESS) check(r, call, display_name(k), p.to_string());
}

}  // namespace detail

std::optional<std::vector<std::size_t>> query_param_sizes(CUfunction f) {
  const auto& d = detail::driver();
  if (!d.cuFuncGetParamInfo || !f) return std::nullopt;
  std::vector<std::size_t> sizes;
  sizes.reserve(8);  // one allocation for most kernels, not one per doubling (a miss makes several others)
  for (std::size_t i = 0;; ++i) {
    std::size_t offset = 0, size = 0;
    const CUresult r = d.cuFuncGetParamInfo(f, i, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (r != CUDA_SUCCESS) return std::nullopt;  // e.g. not supported for this binary
    sizes.push_back(size);
  }
  return sizes;
}

CUfunction kernel::function() const {
  if (function_) return function_;
  if (!kernel_) throw error(CUDA_ERROR_INVALID_HANDLE, "kernel", "empty launchfit::kernel");
  const auto& d = detail::driver();
  CUfunction f = nullptr;
  detail::check(d.cuKernelGetFunction(&f, kernel_), "cuKernelGetFunction");
  return f;
}

kernel_resources kernel::resources() const { return query_resources(function()); }

std::optional<std::vector<std::size_t>> kernel::param_sizes() const { return query_param_sizes(function()); }

std::optional<bool> kernel::waits_for_predecessor() const { return detail::kernel_waits(id()); }

namespace {

// A PTX file's text, read once at load (bounded: the driver would not JIT-compile more); nullopt for a cubin
// or fatbin, or a file that cannot be read again.
std::optional<std::string> ptx_text_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4096] = {};
  in.read(head, sizeof head);
  if (!detail::looks_like_ptx(std::string_view(head, static_cast<std::size_t>(in.gcount())))) return std::nullopt;
  in.clear();
  in.seekg(0);
  constexpr std::size_t max_ptx_bytes = std::size_t(256) << 20;
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_ptx_bytes) return std::nullopt;
  }
  return text;
}

// PTX text in memory: the image is NUL-terminated text unless it starts as a cubin (ELF) or a fatbin does.
std::optional<std::string_view> ptx_text_of_image(const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  const bool elf = b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
  const bool fatbin = b[0] == 0x50 && b[1] == 0xed && b[2] == 0x55 && b[3] == 0xba;  // 0xba55ed50
  if (elf || fatbin) return std::nullopt;
  const std::string_view text(static_cast<const char*>(image));
  if (!detail::looks_like_ptx(text)) return std::nullopt;
  return text;
}

}  // namespace

module module::from_file(const std::string& path) {
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw error(CUDA_ERROR_FILE_NOT_FOUND, "cuLibraryLoadFromFile", "cannot open '" + path + "'");
  }
  const auto& d = detail::driver();
  CUlibrary lib = nullptr;
  detail::check(d.cuLibraryLoadFromFile(&lib, path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                "cuLibraryLoadFromFile", {}, path);
  module m(lib, path);
  if (const auto ptx = ptx_text_of_file(path)) m.handed_out_->entries_without_wait = detail::entries_without_wait(*ptx);
  return m;
}

module module::from_memory(const void* image) {
  if (!image) throw error(CUDA_ERROR_INVALID_VALUE, "cuLibraryLoadData", "null module image");
  const auto& d = detail::driver();
  CUlibrary lib = nullptr;
  detail::check(d.cuLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0), "cuLibraryLoadData");
  module m(lib, "<memory>");
  if (const auto ptx = ptx_text_of_image(image)) m.handed_out_->entries_without_wait = detail::entries_without_wait(*ptx);
  return m;
}

module::module(CUlibrary l, std::string origin) :library_(l), origin_(std::move(origin)),
    handed_out_(std::make_unique<detail::kernel_id_set>()) {}

module::module(module&& other) noexcept
    : library_(std::exchange(other.library_, nullptr)),
      origin_(std::move(other.origin_)),
      handed_out_(std::move(other.handed_out_)) {}

module& module::operator=(module&& other) noexcept {
  if (this != &other) {
    module dying(std::move(*this));
    library_ = std::exchange(other.library_, nullptr);
    origin_ = std::move(other.origin_);
    handed_out_ = std::move(other.handed_out_);
  }
  return *this;
}

module::~module() {
  if (!library_) return;
  // Plans of unloaded kernels must never be reused by a kernel loaded later at the same address.
  if (handed_out_) {
    for (std::uintptr_t id : handed_out_->ids()) {
      detail::forget_kernel(id);
      detail::forget_kernel_wait(id);
    }
  }
  if (detail::driver_available()) detail::driver().cuLibraryUnload(library_);
}

kernel module::get(const std::string& name) const {
  if (!library_) throw error(CUDA_ERROR_INVALID_HANDLE, "cuLibraryGetKernel", "moved-from launchfit::module");
  const auto& d = detail::driver();
  CUkernel k = nullptr;
  const CUresult r = d.cuLibraryGetKernel(&k, library_, name.c_str());
  if (r != CUDA_SUCCESS) {
    throw error(r, "cuLibraryGetKernel",
                "no kernel '" + name + "' in " + origin_ + " (use the mangled name or extern \"C\")", name);
  }
  const auto id = reinterpret_cast<std::uintptr_t>(k);
  handed_out_->insert(id);
  if (const auto& no_wait = handed_out_->entries_without_wait) detail::note_kernel_wait(id, no_wait->count(name) == 0);
  return kernel(k);
}

}  // namespace launchfit
