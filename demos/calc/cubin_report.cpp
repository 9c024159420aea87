// SPDX-License-Identifier: MIT
// launchfit-calc --cubin: the cubin/fatbin/host-ELF reader, the occupancy rows and the CI gates.
//
// Formats, as the CUDA 11-13 toolkits write them (checked against nvcc 13.0 and the driver on an H200):
// - A cubin is a little-endian ELF64 with e_machine 190 (EM_CUDA). Its SM is e_flags & 0xff for
//   EI_ABIVERSION 7, (e_flags >> 8) & 0xff for EI_ABIVERSION 8.
// - .nv.info and .nv.info.<kernel> hold attributes: a format byte, an attribute byte, then a 16-bit field
//   that is the payload size for EIFMT_SVAL (4) and the value itself for the other formats. Symbol
//   attributes (REGCOUNT, FRAME_SIZE, ...) carry a 32-bit symbol index then a 32-bit value.
// - .nv.shared.<kernel> (NOBITS) sizes static shared memory; from sm_90 on, nvlink places the 1 KiB
//   per-block reserve at its start, which the driver does not count in CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
//   and ptxas -v does not print. A linked (ET_EXEC) cubin marks it with a .nv.shared.reserved.* section,
//   or, built with -G, only with a .nv.reservedSmem.* symbol; a relocatable (-rdc) cubin has no reserve yet
//   although it names the symbol.
// - EIATTR_MIN_STACK_SIZE 0xffffffff: ptxas could not bound the stack (recursion, indirect calls).
// - A fatbin is containers (magic 0xBA55ED50, 16-byte header) of entries (64-byte or longer header:
//   kind, header size, payload size, ..., arch, flags), each a cubin (kind 2), PTX (kind 1) or other code;
//   a payload may be compressed: flag 0x8000 is zstd (nvcc 13's default for PTX, for -rdc objects' cubins
//   and for -Xfatbin -compress-all), 0x2000 LZ4 (older toolkits). A zstd entry's header holds the
//   compressed size at +16 (the payload is padded to 8 bytes) and the inflated size at +56.
//   Host objects keep fatbins in .nv_fatbin or __nv_relfatbin.

#include "cubin_report.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "launchfit/detail/text.hpp"
#include "launchfit/error.hpp"
#include "launchfit/kernel.hpp"

namespace launchfit::calc {
namespace {

constexpr std::uint16_t em_cuda = 190, et_exec = 2;
constexpr std::uint32_t fatbin_magic = 0xBA55ED50u;
constexpr std::uint32_t sht_symtab = 2, sht_nobits = 8, sht_symtab_shndx = 18;
constexpr std::uint8_t eifmt_sval = 4;
constexpr std::uint8_t eiattr_max_threads = 0x05, eiattr_reqntid = 0x10, eiattr_frame_size = 0x11,
                       eiattr_min_stack_size = 0x12, eiattr_maxreg_count = 0x1b, eiattr_regcount = 0x2f;
constexpr std::uint8_t sto_cuda_entry = 0x10;
constexpr std::size_t demangle_max_bytes = 4096;  // longer names are shown mangled
constexpr std::uint64_t default_smem_reserve = 1024;
constexpr std::uint32_t stack_undetermined = 0xffffffffu;  // EIATTR_MIN_STACK_SIZE when ptxas cannot bound it

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

const char* attribute_name(std::uint8_t attr) {
  switch (attr) {
    case eiattr_max_threads:
      return "EIATTR_MAX_THREADS";
    case eiattr_reqntid:
      return "EIATTR_REQNTID";
    case eiattr_frame_size:
      return "EIATTR_FRAME_SIZE";
    case eiattr_min_stack_size:
      return "EIATTR_MIN_STACK_SIZE";
    case eiattr_maxreg_count:
      return "EIATTR_MAXREG_COUNT";
    case eiattr_regcount:
      return "EIATTR_REGCOUNT";
    default:
      return "attribute";
  }
}

// The budget of bytes looked at, shared by everything read from one input.
class work_budget {
 public:
  work_budget(std::uint64_t input_bytes, std::uint64_t per_byte)
      : per_byte_(std::max<std::uint64_t>(per_byte, 1)),
        left_(input_bytes > (UINT64_MAX - (1u << 20)) / per_byte_ ? UINT64_MAX
                                                                  : input_bytes * per_byte_ + (1u << 20)) {}
  void charge(std::uint64_t bytes, const std::string& where) {
    if (bytes > left_)
      throw cubin_error(where +
                        ": sections that overlap or share their bytes would make reading take more than " +
                        std::to_string(per_byte_) + " times the input's size; refused");
    left_ -= bytes;
  }
  // Inflated bytes are input too: the work stays linear in what was read, and they are capped themselves.
  void add_input(std::uint64_t bytes) {
    const std::uint64_t more = bytes > UINT64_MAX / per_byte_ ? UINT64_MAX : bytes * per_byte_;
    left_ = more > UINT64_MAX - left_ ? UINT64_MAX : left_ + more;
  }

 private:
  std::uint64_t per_byte_;
  std::uint64_t left_;
};

struct context {
  const cubin_limits& limits;
  work_budget budget;
  std::uint64_t kernels = 0;
  std::uint64_t inflated_bytes = 0;  // by zstd, over the whole input
  cubin_contents out;
};

// A bounded view: every read is checked against the end, with the part's name in the error.
class bytes_view {
 public:
  bytes_view(std::string_view data, std::string where) : data_(data), where_(std::move(where)) {}
  std::uint64_t size() const noexcept { return data_.size(); }
  const std::string& where() const noexcept { return where_; }
  bool has(std::uint64_t offset, std::uint64_t length) const noexcept {
    return offset <= data_.size() && length <= data_.size() - offset;
  }
  void need(std::uint64_t offset, std::uint64_t length, const std::string& what) const {
    if (!has(offset, length))
      throw cubin_error(where_ + ": " + what + " (" + std::to_string(length) + " bytes at offset " +
                        hex(offset) + ") runs past the end (" + std::to_string(data_.size()) + " bytes)");
  }
  std::uint8_t u8(std::uint64_t at, const char* what) const {
    need(at, 1, what);
    return static_cast<std::uint8_t>(data_[at]);
  }
  std::uint16_t u16(std::uint64_t at, const char* what) const {
    return static_cast<std::uint16_t>(le(at, 2, what));
  }
  std::uint32_t u32(std::uint64_t at, const char* what) const {
    return static_cast<std::uint32_t>(le(at, 4, what));
  }
  std::uint64_t u64(std::uint64_t at, const char* what) const { return le(at, 8, what); }
  std::string_view sub(std::uint64_t offset, std::uint64_t length, const std::string& what) const {
    need(offset, length, what);
    return data_.substr(offset, length);
  }
  std::string_view data() const noexcept { return data_; }

 private:
  std::uint64_t le(std::uint64_t at, int n, const char* what) const {
    need(at, static_cast<std::uint64_t>(n), what);
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(data_[at + i]);
    return v;
  }
  std::string_view data_;
  std::string where_;
};

struct section {
  std::uint32_t name = 0, type = 0, link = 0, info = 0;
  std::uint64_t offset = 0, size = 0, entsize = 0;
  std::string_view bytes;  // empty for NOBITS
  std::string label;       // "section 12 (.nv.info)"
  std::string name_text;
};

class elf_file {
 public:
  elf_file(bytes_view v, context& ctx) : v_(std::move(v)), ctx_(ctx) { read_headers(); }

  std::uint16_t machine() const noexcept { return machine_; }
  std::uint16_t type() const noexcept { return type_; }
  std::uint8_t abi_version() const noexcept { return abi_version_; }
  std::uint32_t flags() const noexcept { return flags_; }
  const std::vector<section>& sections() const noexcept { return sections_; }
  const bytes_view& view() const noexcept { return v_; }

  // A NUL-terminated string at `offset` of string table section `strtab`.
  std::string_view string_at(std::uint32_t strtab, std::uint64_t offset, const std::string& what) const {
    if (strtab >= sections_.size())
      throw cubin_error(v_.where() + ": " + what + " names string table " + std::to_string(strtab) +
                        ", but there are " + std::to_string(sections_.size()) + " sections");
    const section& s = sections_[strtab];
    if (s.type == sht_nobits || offset >= s.bytes.size())
      throw cubin_error(v_.where() + ": " + what + " has name offset " + hex(offset) + " outside " + s.label +
                        " (" + std::to_string(s.bytes.size()) + " bytes)");
    const std::string_view rest = s.bytes.substr(offset);
    const std::size_t end = rest.find('\0');
    ctx_.budget.charge(end == std::string_view::npos ? rest.size() : end + 1, v_.where());
    if (end == std::string_view::npos)
      throw cubin_error(v_.where() + ": " + what + " has a name that runs to the end of " + s.label +
                        " without a terminating NUL");
    return rest.substr(0, end);
  }

 private:
  void read_headers() {
    const bytes_view& v = v_;
    v.need(0, 64, "the ELF header");
    const auto ident = v.data();
    if (ident.substr(0, 4) != std::string_view("\x7f"
                                               "ELF",
                                               4))
      throw cubin_error(v.where() + ": not an ELF file (no \\x7fELF magic)");
    if (static_cast<std::uint8_t>(ident[4]) == 1)
      throw cubin_error(v.where() + ": a 32-bit ELF file; only 64-bit ELF files hold CUDA code read here");
    if (static_cast<std::uint8_t>(ident[4]) != 2)
      throw cubin_error(v.where() + ": an invalid ELF class " +
                        std::to_string(static_cast<std::uint8_t>(ident[4])) +
                        " (EI_CLASS is 1 for 32-bit and 2 for 64-bit ELF files)");
    if (static_cast<std::uint8_t>(ident[5]) != 1)
      throw cubin_error(v.where() + ": a big-endian ELF file; CUDA code is little-endian");
    abi_version_ = static_cast<std::uint8_t>(ident[8]);
    type_ = v.u16(16, "e_type");
    machine_ = v.u16(18, "e_machine");
    flags_ = v.u32(48, "e_flags");
    const std::uint64_t shoff = v.u64(40, "e_shoff");
    const std::uint16_t shentsize = v.u16(58, "e_shentsize");
    std::uint64_t shnum = v.u16(60, "e_shnum");
    std::uint64_t shstrndx = v.u16(62, "e_shstrndx");
    if (shoff == 0) throw cubin_error(v.where() + ": the ELF file has no section header table (e_shoff 0)");
    if (shentsize != 64)
      throw cubin_error(v.where() + ": section headers of " + std::to_string(shentsize) +
                        " bytes (e_shentsize); ELF64 section headers have 64");
    // Extended numbering: the real count and string-table index live in section 0.
    if (shnum == 0 || shstrndx == 0xffff) {
      v.need(shoff, 64, "section header 0 (extended section numbering)");
      if (shnum == 0) shnum = v.u64(shoff + 32, "section 0 sh_size");
      if (shstrndx == 0xffff) shstrndx = v.u32(shoff + 40, "section 0 sh_link");
    }
    if (shnum > ctx_.limits.max_sections)
      throw cubin_error(v.where() + ": " + std::to_string(shnum) + " sections, more than the " +
                        std::to_string(ctx_.limits.max_sections) + " read here");
    if (shnum > (UINT64_MAX / 64)) throw cubin_error(v.where() + ": section count overflows");
    v.need(
        shoff, shnum * 64,
        "the section header table (" + std::to_string(shnum) + " headers of 64 bytes at " + hex(shoff) + ")");
    ctx_.budget.charge(shnum * 64, v.where());
    sections_.resize(static_cast<std::size_t>(shnum));
    for (std::uint64_t i = 0; i < shnum; ++i) {
      const std::uint64_t h = shoff + i * 64;
      section& s = sections_[static_cast<std::size_t>(i)];
      s.name = v.u32(h, "sh_name");
      s.type = v.u32(h + 4, "sh_type");
      s.offset = v.u64(h + 24, "sh_offset");
      s.size = v.u64(h + 32, "sh_size");
      s.link = v.u32(h + 40, "sh_link");
      s.info = v.u32(h + 44, "sh_info");
      s.entsize = v.u64(h + 56, "sh_entsize");
      s.label = "section " + std::to_string(i);
      if (i == 0 || s.type == 0 || s.type == sht_nobits) continue;
      if (!v.has(s.offset, s.size))
        throw cubin_error(v.where() + ": " + s.label + " (" + std::to_string(s.size) + " bytes at " +
                          hex(s.offset) + ") runs past the end of the ELF data (" + std::to_string(v.size()) +
                          " bytes)");
      s.bytes = v.data().substr(s.offset, s.size);
    }
    if (shstrndx == 0 || shstrndx >= shnum)
      throw cubin_error(v.where() + ": the section name table index (e_shstrndx " + std::to_string(shstrndx) +
                        ") is not one of the " + std::to_string(shnum) + " sections");
    for (std::size_t i = 1; i < sections_.size(); ++i) {
      section& s = sections_[i];
      s.name_text = std::string(string_at(static_cast<std::uint32_t>(shstrndx), s.name, s.label));
      s.label += " (" + launchfit::detail::escape_text(s.name_text, 80) + ")";
    }
  }

  bytes_view v_;
  context& ctx_;
  std::uint16_t machine_ = 0, type_ = 0;
  std::uint8_t abi_version_ = 0;
  std::uint32_t flags_ = 0;
  std::vector<section> sections_;
};

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

std::string kernel_demangled(const std::string& name) {
  if (name.size() > demangle_max_bytes) return name;
  return launchfit::demangle(name);
}

struct kernel_facts {
  cubin_kernel k;
  std::uint32_t text_section = 0;
  bool has_regcount = false;
  std::string label;  // where its attributes come from
};

// Reads the attributes of one .nv.info* section, calling `on(attr, fmt, value16, payload, offset)`.
template <class F>
void for_each_attribute(const elf_file& elf, const section& s, F&& on) {
  const std::string_view b = s.bytes;
  std::uint64_t at = 0;
  while (at < b.size()) {
    if (b.size() - at < 4)
      throw cubin_error(elf.view().where() + ": " + s.label + " ends inside an attribute header (" +
                        std::to_string(b.size() - at) + " bytes left at offset " + hex(at) + ")");
    const auto fmt = static_cast<std::uint8_t>(b[at]);
    const auto attr = static_cast<std::uint8_t>(b[at + 1]);
    const std::uint16_t field = static_cast<std::uint16_t>(static_cast<std::uint8_t>(b[at + 2]) |
                                                           (static_cast<std::uint8_t>(b[at + 3]) << 8));
    if (fmt < 1 || fmt > 4)
      throw cubin_error(elf.view().where() + ": " + s.label + " has an attribute of unknown format " +
                        hex(fmt) + " at offset " + hex(at));
    std::string_view payload;
    std::uint64_t next = at + 4;
    if (fmt == eifmt_sval) {
      if (field > b.size() - next)
        throw cubin_error(elf.view().where() + ": " + s.label + ": " + attribute_name(attr) + " (" +
                          hex(attr) + ") at offset " + hex(at) + " says " + std::to_string(field) +
                          " bytes but " + std::to_string(b.size() - next) + " remain");
      payload = b.substr(next, field);
      next += field;
    }
    on(attr, fmt, field, payload, at);
    at = next;
  }
}

std::uint32_t payload_u32(std::string_view p, std::size_t i) {
  std::uint32_t v = 0;
  for (int k = 3; k >= 0; --k) v = (v << 8) | static_cast<std::uint8_t>(p[i * 4 + k]);
  return v;
}

// The section a symbol belongs to (following SHN_XINDEX through .symtab_shndx).
std::uint32_t symbol_section(const section* shndx_table, std::uint64_t index, std::uint16_t st_shndx) {
  if (st_shndx != 0xffff) return st_shndx;
  if (!shndx_table || shndx_table->bytes.size() / 4 <= index) return 0;
  return payload_u32(shndx_table->bytes, static_cast<std::size_t>(index));
}

int cubin_sm(const elf_file& elf) {
  return elf.abi_version() >= 8 ? static_cast<int>((elf.flags() >> 8) & 0xff)
                                : static_cast<int>(elf.flags() & 0xff);
}

void read_cubin_elf(const elf_file& elf, const std::string& where, int fatbin_sm, context& ctx) {
  const auto& secs = elf.sections();
  const std::string& file = elf.view().where();
  if (ctx.out.images.size() >= ctx.limits.max_images)
    throw cubin_error(file + ": more than " + std::to_string(ctx.limits.max_images) + " cubins; refused");

  std::unordered_map<std::string_view, std::uint64_t> shared_by_name;
  std::unordered_map<std::uint32_t, std::uint64_t> shared_by_text;
  const auto text_section = [&secs](std::uint32_t index) {
    return index > 0 && index < secs.size() && starts_with(secs[index].name_text, ".text.");
  };
  const section* global_info = nullptr;
  const section* symtab = nullptr;
  const section* shndx_table = nullptr;
  bool smem_reserve = false;
  for (std::uint32_t i = 1; i < secs.size(); ++i) {
    const section& s = secs[i];
    const std::string_view n = s.name_text;
    if (starts_with(n, ".nv.shared.reserved.")) {
      // Linked sm_90+ cubins of nvcc 12.x/13 start each kernel's shared section with the per-block reserve.
      smem_reserve = true;
    } else if (starts_with(n, ".nv.shared.")) {
      if (text_section(s.info)) shared_by_text[s.info] = s.size;
      shared_by_name[n.substr(11)] = s.size;
    }
    if (n == ".nv.info") global_info = &s;
    if (s.type == sht_symtab && !symtab) symtab = &s;
    if (s.type == sht_symtab_shndx && !shndx_table) shndx_table = &s;
  }

  // Kernels are the entry-point symbols (STO_CUDA_ENTRY); other functions (callees) only lend figures.
  std::vector<kernel_facts> kernels;
  std::unordered_map<std::uint32_t, std::size_t> kernel_by_text;
  std::unordered_map<std::string_view, std::size_t> kernel_by_name;
  std::vector<std::uint32_t> symbol_text;  // symbol index -> its section
  if (symtab) {
    if (symtab->entsize != 24)
      throw cubin_error(file + ": " + symtab->label + " has " + std::to_string(symtab->entsize) +
                        "-byte entries (sh_entsize); ELF64 symbols have 24");
    const std::uint64_t count = symtab->bytes.size() / 24;
    ctx.budget.charge(symtab->bytes.size(), file);
    symbol_text.resize(static_cast<std::size_t>(count));
    const bytes_view sv(symtab->bytes, file + ", " + symtab->label);
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t at = i * 24;
      const std::uint8_t info = sv.u8(at + 4, "st_info"), other = sv.u8(at + 5, "st_other");
      const std::uint32_t sec = symbol_section(shndx_table, i, sv.u16(at + 6, "st_shndx"));
      symbol_text[static_cast<std::size_t>(i)] = sec;
      // The -G marker of the shared-memory reserve: an undefined object, resolved by the driver.
      if ((info & 0xf) == 1 /* STT_OBJECT */ && sec == 0 && elf.type() == et_exec && !smem_reserve &&
          starts_with(elf.string_at(symtab->link, sv.u32(at, "st_name"),
                                    symtab->label + " symbol " + std::to_string(i)),
                      ".nv.reservedSmem."))
        smem_reserve = true;
      if ((info & 0xf) != 2 /* STT_FUNC */ || !(other & sto_cuda_entry)) continue;
      const std::string what = symtab->label + " symbol " + std::to_string(i);
      if (!text_section(sec))
        throw cubin_error(file + ": kernel " + what + " lies in section " + std::to_string(sec) +
                          ", which is not a .text section");
      if (kernel_by_text.count(sec)) continue;
      if (ctx.kernels >= ctx.limits.max_kernels)
        throw cubin_error(file + ": more than " + std::to_string(ctx.limits.max_kernels) +
                          " kernels; refused");
      ++ctx.kernels;
      kernel_facts f;
      const std::string_view name = elf.string_at(symtab->link, sv.u32(at, "st_name"), what);
      f.k.name = std::string(name);
      f.k.demangled = kernel_demangled(f.k.name);
      f.text_section = sec;
      f.label = what;
      kernels.push_back(std::move(f));
      kernel_by_text[sec] = kernels.size() - 1;
      kernel_by_name.emplace(name, kernels.size() - 1);
    }
  }

  const auto kernel_of_symbol = [&](std::uint32_t sym) -> kernel_facts* {
    if (sym >= symbol_text.size()) return nullptr;
    const auto it = kernel_by_text.find(symbol_text[sym]);
    return it == kernel_by_text.end() ? nullptr : &kernels[it->second];
  };
  // Symbol attributes (index, value): in .nv.info, and in some toolkits in the function's own section.
  const auto symbol_attribute = [&](const section& s, std::uint8_t attr, std::uint8_t fmt, std::string_view p,
                                    std::uint64_t at) {
    if (attr != eiattr_regcount && attr != eiattr_frame_size && attr != eiattr_min_stack_size) return;
    if (fmt != eifmt_sval || p.size() != 8)
      throw cubin_error(file + ": " + s.label + ": " + attribute_name(attr) + " at offset " + hex(at) +
                        " has " + std::to_string(p.size()) + " bytes of format " + std::to_string(fmt) +
                        "; expected a symbol index and a value (8 bytes)");
    const std::uint32_t sym = payload_u32(p, 0), value = payload_u32(p, 1);
    if (sym >= symbol_text.size())
      throw cubin_error(file + ": " + s.label + ": " + attribute_name(attr) + " at offset " + hex(at) +
                        " names symbol " + std::to_string(sym) + ", but there are " +
                        std::to_string(symbol_text.size()) + " symbols");
    kernel_facts* k = kernel_of_symbol(sym);
    if (!k) return;  // a callee's figures
    if (attr == eiattr_regcount) {
      const std::string of = file + ": " + s.label + ": " + attribute_name(attr) + " at offset " + hex(at) +
                             " of kernel " + launchfit::detail::escape_text(k->k.name, 80);
      if (value > 255)
        throw cubin_error(of + " is " + std::to_string(value) +
                          " registers per thread; no GPU has more than 255");
      // Every compiled kernel holds at least one register, and ptxas states the count once: a second or a
      // zero count is a damaged or forged file, and either figure taken would be a guess.
      if (value == 0) throw cubin_error(of + " is 0 registers per thread; a compiled kernel uses at least 1");
      if (k->has_regcount)
        throw cubin_error(of + " says " + std::to_string(value) +
                          " registers per thread, but the kernel's count (" +
                          std::to_string(k->k.regs_per_thread) +
                          ") was already given; refused rather than "
                          "choosing one");
      k->k.regs_per_thread = static_cast<int>(value);
      k->has_regcount = true;
    } else if (attr == eiattr_frame_size) {
      k->k.local_bytes_per_thread = value;
    } else if (value == stack_undetermined) {
      k->k.stack_undetermined = true;
    } else {
      k->k.stack_bytes_per_thread = value;
    }
  };

  if (global_info) {
    ctx.budget.charge(global_info->bytes.size(), file);
    for_each_attribute(elf, *global_info,
                       [&](std::uint8_t attr, std::uint8_t fmt, std::uint16_t, std::string_view p,
                           std::uint64_t at) { symbol_attribute(*global_info, attr, fmt, p, at); });
  }
  for (std::uint32_t i = 1; i < secs.size(); ++i) {
    const section& s = secs[i];
    if (!starts_with(s.name_text, ".nv.info.")) continue;
    ctx.budget.charge(s.bytes.size(), file);
    kernel_facts* k = nullptr;
    if (auto it = kernel_by_text.find(s.info); text_section(s.info) && it != kernel_by_text.end())
      k = &kernels[it->second];
    else if (auto named = kernel_by_name.find(std::string_view(s.name_text).substr(9));
             named != kernel_by_name.end())
      k = &kernels[named->second];
    for_each_attribute(
        elf, s,
        [&](std::uint8_t attr, std::uint8_t fmt, std::uint16_t field, std::string_view p, std::uint64_t at) {
          if (attr == eiattr_regcount || attr == eiattr_frame_size || attr == eiattr_min_stack_size)
            return symbol_attribute(s, attr, fmt, p, at);
          if (!k) return;  // a callee's section: checked, not reported
          if (attr == eiattr_maxreg_count && fmt != eifmt_sval) k->k.max_reg_count = field;
          if (attr != eiattr_max_threads && attr != eiattr_reqntid) return;
          if (fmt != eifmt_sval || p.size() != 12)
            throw cubin_error(file + ": " + s.label + ": " + attribute_name(attr) + " at offset " + hex(at) +
                              " has " + std::to_string(p.size()) + " bytes; expected x, y, z (12 bytes)");
          const std::uint64_t x = payload_u32(p, 0), y = payload_u32(p, 1), z = payload_u32(p, 2);
          if (x == 0 || y == 0 || z == 0)
            throw cubin_error(file + ": " + s.label + ": " + attribute_name(attr) + " at offset " + hex(at) +
                              " is " + std::to_string(x) + " x " + std::to_string(y) + " x " +
                              std::to_string(z) + " threads: no block fits");
          // Each factor is below 2^32: x * y cannot wrap, and the third factor saturates.
          const std::uint64_t xy = x * y;
          const std::uint64_t threads = xy > UINT64_MAX / z ? UINT64_MAX : xy * z;
          const int bounded = static_cast<int>(std::min<std::uint64_t>(threads, 1024));
          if (std::string_view(k->k.max_threads_from) == "default" || bounded < k->k.max_threads_per_block) {
            k->k.max_threads_per_block = bounded;
            k->k.max_threads_from = attr == eiattr_max_threads ? "maxntid" : "reqntid";
          }
        });
  }

  const std::uint64_t reserve = smem_reserve ? default_smem_reserve : 0;
  cubin_image image;
  image.sm = cubin_sm(elf);
  if (image.sm == 0) image.sm = fatbin_sm;
  // sm_90 machine code is 16-byte instructions whose low 12 bits are the opcode; griddepcontrol.wait is
  // 0x82e (ACQBULK). Read for sm_90 only: other encodings are not known here. A device function of the
  // cubin (a .text section no kernel owns) that waits may be called by any kernel: then none is said not to.
  std::unordered_set<std::uint32_t> kernel_texts;
  for (const kernel_facts& f : kernels) kernel_texts.insert(f.text_section);
  const auto executes_wait = [](std::string_view code) {
    for (std::size_t at = 0; at + 16 <= code.size(); at += 16)
      if (((static_cast<std::uint8_t>(code[at]) | static_cast<std::uint8_t>(code[at + 1]) << 8) & 0xfff) ==
          0x82e)
        return true;
    return false;
  };
  bool a_function_waits = false;
  if (image.sm == 90)
    for (std::uint32_t i = 1; i < secs.size(); ++i)
      if (text_section(i) && !kernel_texts.count(i) && executes_wait(secs[i].bytes)) a_function_waits = true;
  image.where = where;
  image.kernels.reserve(kernels.size());
  for (kernel_facts& f : kernels) {
    if (!f.has_regcount)
      throw cubin_error(file + ": kernel " + launchfit::detail::escape_text(f.k.name, 120) + " (" + f.label +
                        ") has no EIATTR_REGCOUNT in .nv.info");
    std::optional<std::uint64_t> shared;
    if (auto it = shared_by_text.find(f.text_section); it != shared_by_text.end())
      shared = it->second;
    else if (auto named = shared_by_name.find(f.k.name); named != shared_by_name.end())
      shared = named->second;
    if (shared) f.k.static_smem_bytes = static_cast<std::size_t>(*shared > reserve ? *shared - reserve : 0);
    if (f.k.stack_undetermined) f.k.stack_bytes_per_thread = f.k.local_bytes_per_thread;
    if (image.sm == 90 && text_section(f.text_section))
      f.k.waits_for_predecessor = a_function_waits || executes_wait(secs[f.text_section].bytes);
    image.kernels.push_back(std::move(f.k));
  }
  ctx.out.images.push_back(std::move(image));
}

// Inflates one zstd frame of `declared` bytes (the fatbin entry's own figure), streaming into a buffer that
// grows only as real output appears: a small hostile frame cannot make the reader allocate its claimed size,
// and output beyond the claim or the cap stops the work at once.
std::string inflate_zstd(std::string_view frame, std::uint64_t declared, const std::string& where,
                         context& ctx) {
  const std::uint64_t cap = ctx.limits.max_decompressed_bytes;
  const std::uint64_t room = cap > ctx.inflated_bytes ? cap - ctx.inflated_bytes : 0;
  const std::string limit_text = "the " + std::to_string(cap) + " bytes inflated per input here";
  if (declared == 0) throw cubin_error(where + ": a compressed cubin whose header gives no inflated size");
  if (declared > room)
    throw cubin_error(where + ": a compressed cubin of " + std::to_string(declared) +
                      " bytes when inflated (its header says), more than " + limit_text + "; refused");
  const unsigned long long frame_size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (frame_size == ZSTD_CONTENTSIZE_ERROR)
    throw cubin_error(where + ": flagged zstd-compressed, but the payload is not a zstd frame");
  if (frame_size != ZSTD_CONTENTSIZE_UNKNOWN && frame_size != declared)
    throw cubin_error(where + ": the zstd frame says " + std::to_string(frame_size) +
                      " bytes inflated, the fatbin entry " + std::to_string(declared) + "; refused");
  struct dctx_free {
    void operator()(ZSTD_DCtx* d) const noexcept { ZSTD_freeDCtx(d); }
  };
  const std::unique_ptr<ZSTD_DCtx, dctx_free> dctx(ZSTD_createDCtx());
  if (!dctx) throw cubin_error(where + ": cannot create a zstd decompression context (out of memory)");
  // The window bounds zstd's own buffers; cubins of nvcc 13 use far less than 2^27 bytes.
  ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_windowLogMax, 27);
  std::string out;
  ZSTD_inBuffer in{frame.data(), frame.size(), 0};
  std::size_t status = 1;
  while (status != 0) {
    if (out.size() == declared) {
      // All the declared bytes are out: the frame must end here, without one byte more.
      char probe = 0;
      ZSTD_outBuffer one{&probe, 1, 0};
      const std::size_t in_before = in.pos;
      status = ZSTD_decompressStream(dctx.get(), &one, &in);
      if (ZSTD_isError(status))
        throw cubin_error(where + ": the zstd data is damaged (" + ZSTD_getErrorName(status) + ")");
      if (one.pos > 0)
        throw cubin_error(where + ": the zstd data inflates to more than the " + std::to_string(declared) +
                          " bytes the fatbin entry says; refused");
      if (status != 0 && (in.pos == in.size || in.pos == in_before))
        throw cubin_error(where + ": the zstd data ends before its frame does (truncated)");
      continue;
    }
    const std::size_t used = out.size();
    const std::size_t grow = static_cast<std::size_t>(std::min<std::uint64_t>(declared - used, 1u << 20));
    out.resize(used + grow);
    ZSTD_outBuffer buffer{&out[used], grow, 0};
    const std::size_t in_before = in.pos;
    status = ZSTD_decompressStream(dctx.get(), &buffer, &in);
    if (ZSTD_isError(status))
      throw cubin_error(where + ": the zstd data is damaged (" + ZSTD_getErrorName(status) + ")");
    out.resize(used + buffer.pos);
    if (status != 0 && buffer.pos == 0 && in.pos == in_before)
      throw cubin_error(where + ": the zstd data ends after " + std::to_string(out.size()) + " of " +
                        std::to_string(declared) + " bytes (truncated)");
  }
  if (out.size() != declared)
    throw cubin_error(where + ": the zstd data inflates to " + std::to_string(out.size()) +
                      " bytes, the fatbin entry says " + std::to_string(declared) + "; refused");
  ctx.inflated_bytes += out.size();
  ctx.budget.add_input(out.size());
  return out;
}

// `where` names the image for the report ("" for a bare cubin); `v.where()` is the context for errors.
void read_fatbin(const bytes_view& v, const std::string& where, context& ctx);

void read_elf(const bytes_view& v, const std::string& where, int fatbin_sm, bool host_allowed, context& ctx) {
  const elf_file elf(v, ctx);
  if (elf.machine() == em_cuda) {
    read_cubin_elf(elf, where.empty() ? "the file" : where, fatbin_sm, ctx);
    return;
  }
  // Only the top level may be a host ELF: a fatbin entry holds cubins, so nothing nests deeper.
  if (!host_allowed)
    throw cubin_error(v.where() + ": an ELF for machine " + std::to_string(elf.machine()) +
                      " where a cubin (machine 190, EM_CUDA) belongs");
  bool found = false;
  for (const section& s : elf.sections()) {
    if (s.name_text != ".nv_fatbin" && s.name_text != "__nv_relfatbin") continue;
    if (s.type == sht_nobits)
      throw cubin_error(v.where() + ": " + s.label + " has no bytes in the file (NOBITS)");
    found = true;
    read_fatbin(bytes_view(s.bytes, v.where() + ", " + s.label + " at " + hex(s.offset)),
                s.name_text + " at " + hex(s.offset) + ", ", ctx);
  }
  if (!found)
    throw cubin_error(v.where() + ": an ELF file for machine " + std::to_string(elf.machine()) +
                      " with no .nv_fatbin or __nv_relfatbin section: it holds no CUDA device code");
  ctx.out.format = "host ELF";
}

void read_fatbin(const bytes_view& v, const std::string& where, context& ctx) {
  ctx.budget.charge(v.size(), v.where());
  std::uint64_t at = 0;
  int container = 0;
  while (at < v.size()) {
    // Containers follow each other, padded with zeros.
    if (container > 0 && v.data()[at] == '\0') {
      ++at;
      continue;
    }
    ++container;
    const std::string cwhere = "fatbin container " + std::to_string(container) + " at " + hex(at);
    v.need(at, 16, cwhere + " header");
    const std::uint32_t magic = v.u32(at, "fatbin magic");
    if (magic != fatbin_magic)
      throw cubin_error(v.where() + ": " + cwhere +
                        " does not start with the fatbin magic 0xba55ed50 (found " + hex(magic) + ")");
    const std::uint16_t header = v.u16(at + 6, "fatbin header size");
    const std::uint64_t body = v.u64(at + 8, "fatbin size");
    if (header < 16 || !v.has(at, header))
      throw cubin_error(v.where() + ": " + cwhere + " has a header size of " + std::to_string(header) +
                        " bytes (16 or more, within the data)");
    if (!v.has(at + header, body))
      throw cubin_error(v.where() + ": " + cwhere + " says " + std::to_string(body) +
                        " bytes of entries but " + std::to_string(v.size() - at - header) + " remain");
    const std::uint64_t end = at + header + body;
    std::uint64_t e = at + header;
    int entry = 0;
    while (e < end) {
      ++entry;
      const std::string ewhere = cwhere + ", entry " + std::to_string(entry) + " at " + hex(e);
      if (end - e < 64)
        throw cubin_error(v.where() + ": " + ewhere + " is cut off: " + std::to_string(end - e) +
                          " bytes left for a 64-byte entry header");
      const std::uint16_t kind = v.u16(e, "entry kind");
      const std::uint32_t ehs = v.u32(e + 4, "entry header size");
      const std::uint64_t payload = v.u64(e + 8, "entry size");
      const std::uint32_t arch = v.u32(e + 28, "entry arch");
      const std::uint64_t flags = v.u64(e + 40, "entry flags");
      if (ehs < 64 || ehs > end - e)
        throw cubin_error(v.where() + ": " + ewhere + " has a header size of " + std::to_string(ehs) +
                          " bytes (64 or more, within the container)");
      if (payload > end - e - ehs)
        throw cubin_error(v.where() + ": " + ewhere + " says " + std::to_string(payload) +
                          " bytes of code but " + std::to_string(end - e - ehs) + " remain in the container");
      const std::string_view code = v.data().substr(e + ehs, payload);
      const std::string what = (kind == 1   ? "PTX for compute_"
                                : kind == 2 ? "cubin for sm_"
                                            : "code for sm_") +
                               std::to_string(arch);
      const bool zstd = (flags & 0x8000) ||
                        (code.size() >= 4 && code.substr(0, 4) == std::string_view("\x28\xb5\x2f\xfd", 4));
      const bool lz4 = !zstd && (flags & 0x2000);
      if (kind == 2 && lz4) {
        ctx.out.skipped.push_back(where + ewhere + ": " + what +
                                  " is compressed with LZ4 (an older toolkit's fatbin), not read: rebuild it "
                                  "with nvcc 12.4 or later, or with --no-compress");
      } else if (kind == 2 && zstd) {
        const std::string ctx_where = v.where() + ", " + ewhere + " (" + what + ", zstd-compressed)";
        // The frame is the payload less the padding to 8 bytes; the header says how much of it is data.
        const std::uint64_t stored = v.u64(e + 16, "entry compressed size");
        const std::string_view frame = stored > 0 && stored <= code.size() ? code.substr(0, stored) : code;
        const std::string inflated =
            inflate_zstd(frame, v.u64(e + 56, "entry inflated size"), ctx_where, ctx);
        read_elf(bytes_view(inflated, ctx_where), where + ewhere,
                 static_cast<int>(std::min<std::uint32_t>(arch, 10000)), false, ctx);
      } else if (kind == 2) {
        read_elf(bytes_view(code, v.where() + ", " + ewhere + " (" + what + ")"), where + ewhere,
                 static_cast<int>(std::min<std::uint32_t>(arch, 10000)), false, ctx);
      } else {
        ctx.out.skipped.push_back(where + ewhere + ": " + what +
                                  (kind == 1 ? ", not read (launchfit-calc reads compiled cubins)"
                                             : ", entry kind " + std::to_string(kind) + ", not a cubin"));
      }
      e += ehs + payload;
    }
    at = end;
  }
}

}  // namespace

cubin_contents read_cubin(std::string_view bytes, const cubin_limits& limits, const std::string& name) {
  context ctx{limits, work_budget(bytes.size(), limits.work_per_byte), 0, 0, {}};
  const bytes_view v(bytes, name);
  if (bytes.empty()) throw cubin_error(name + ": empty (0 bytes)");
  if (starts_with(bytes, std::string_view("\x7f"
                                          "ELF",
                                          4))) {
    read_elf(v, "", 0, true, ctx);
    if (ctx.out.format.empty()) ctx.out.format = "cubin";
  } else if (starts_with(bytes, std::string_view("\x50\xed\x55\xba", 4))) {
    read_fatbin(v, "", ctx);
    ctx.out.format = "fatbin";
  } else {
    std::size_t skip = 0;
    while (skip < bytes.size() && skip < 4096 && std::strchr(" \t\r\n", bytes[skip]) && bytes[skip]) ++skip;
    const std::string_view head = bytes.substr(skip);
    if (starts_with(head, "//") || starts_with(head, ".version"))
      throw cubin_error(name +
                        ": PTX text; --cubin reads compiled code (a cubin, a fatbin, or an object, "
                        "executable or library with an embedded fatbin)");
    std::string first;
    for (std::size_t i = 0; i < bytes.size() && i < 4; ++i) {
      char b[4];
      std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(bytes[i]));
      first += (i ? " " : "") + std::string(b);
    }
    throw cubin_error(name + ": not a cubin, a fatbin or an ELF file (it starts with bytes " + first + ")");
  }
  if (ctx.out.images.empty()) {
    std::string why = name + ": no cubin to read";
    if (!ctx.out.skipped.empty()) why += "; " + ctx.out.skipped.front();
    if (ctx.out.skipped.size() > 1)
      why += " (and " + std::to_string(ctx.out.skipped.size() - 1) + " more entries)";
    throw cubin_error(why);
  }
  return std::move(ctx.out);
}

cubin_contents read_cubin_file(const std::string& path, const cubin_limits& limits) {
  const std::string name = "--cubin " + launchfit::detail::quote_text(path, 200, '\'');
  // O_NONBLOCK: opening a FIFO with no writer must not wait; only regular files are read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw cubin_file_error(name + ": cannot open: " + std::strerror(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw cubin_file_error(name + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw cubin_error(name + ": not a regular file (a directory, device, FIFO or socket)");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > limits.max_file_bytes)
    throw cubin_error(name + ": " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(limits.max_file_bytes) + " read here");
  std::string bytes(static_cast<std::size_t>(size), '\0');
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, &bytes[got], bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw cubin_file_error(name + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;  // the file shrank while read: what is there is read (and checked) as it is
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);
  return read_cubin(bytes, limits, name);
}

// ---- occupancy rows and gates ----

namespace {

// The image of `contents` the driver would load on `device`: same major version, highest minor at or
// below the device's.
const cubin_image* image_for(const cubin_contents& contents, const device_limits& device) {
  const cubin_image* best = nullptr;
  for (const cubin_image& image : contents.images) {
    if (image.sm / 10 != device.cc_major || image.sm % 10 > device.cc_minor) continue;
    if (!best || image.sm > best->sm) best = &image;
  }
  return best;
}

kernel_row make_row(const cubin_kernel& k, const cubin_image& image, std::optional<device_limits> device,
                    const row_options& o) {
  kernel_row row;
  row.kernel = &k;
  row.cubin_sm = image.sm;
  row.image_where = image.where;
  row.device = std::move(device);
  row.max_threads_per_block = k.max_threads_per_block;
  row.max_threads_from = k.max_threads_from;
  if (row.device) {
    // As the driver computes CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: a block whose registers do not fit
    // (96 registers per thread allow 640 threads on sm_90, not 1024) cannot be launched at all.
    if (row.device->max_threads_per_block < row.max_threads_per_block) {
      row.max_threads_per_block = row.device->max_threads_per_block;
      row.max_threads_from = "device";
    }
    try {
      const register_block_limit regs = registers_per_block_limit(*row.device, k.regs_per_thread);
      if (regs.max_threads < row.max_threads_per_block) {
        row.max_threads_per_block = regs.max_threads;
        row.max_threads_from = "registers";
      }
    } catch (const launchfit::error&) {
      // Registers the architecture cannot hold: the occupancy below is refused, saying why.
    }
  }
  row.block_threads = o.block_threads;
  if (row.max_threads_per_block < row.block_threads) {
    row.block_threads = row.max_threads_per_block;
    row.block_clamped = true;
  }
  if (!row.device) {
    row.refusal = "no sm_" + std::to_string(image.sm) + " entry in launchfit's architecture table";
    return row;
  }
  auto resources =
      kernel_resources::manual(k.regs_per_thread, k.static_smem_bytes, row.max_threads_per_block, k.name);
  resources.demangled = k.demangled;
  resources.local_bytes_per_thread = k.local_bytes_per_thread;
  try {
    row.occupancy = occupancy(*row.device, resources, row.block_threads, o.dynamic_smem_bytes);
  } catch (const launchfit::error& e) {
    row.refusal = e.message().empty() ? e.what() : e.message();
  }
  return row;
}

std::optional<device_limits> table_entry(int sm) {
  for (const device_limits& d : device_limits::builtin_table())
    if (d.cc() == sm) return d;
  return std::nullopt;
}

std::string sm_list(const cubin_contents& contents) {
  std::string text;
  for (const cubin_image& image : contents.images) {
    const std::string sm = "sm_" + std::to_string(image.sm);
    if (text.find(sm) == std::string::npos) text += (text.empty() ? "" : ", ") + sm;
  }
  return text;
}

std::string percent(double fraction) { return detail::percent_text(fraction); }

}  // namespace

std::string local_memory_text(const cubin_kernel& k) {
  std::string text = std::to_string(k.local_bytes_per_thread) + " B";
  if (k.stack_undetermined) return text + "+?";
  if (k.stack_bytes_per_thread > k.local_bytes_per_thread)
    text += "+" + std::to_string(k.stack_bytes_per_thread - k.local_bytes_per_thread);
  return text;
}

std::vector<kernel_row> occupancy_rows(const cubin_contents& contents, const row_options& o) {
  std::vector<kernel_row> rows;
  if (o.arch.empty()) {
    for (const cubin_image& image : contents.images) {
      const auto device = table_entry(image.sm);
      for (const cubin_kernel& k : image.kernels) rows.push_back(make_row(k, image, device, o));
    }
    return rows;
  }
  std::vector<device_limits> devices;
  if (o.arch == "all")
    devices = device_limits::builtin_table();
  else
    devices.push_back(device_limits::for_arch(o.arch));
  for (const device_limits& device : devices) {
    const cubin_image* image = image_for(contents, device);
    if (!image) continue;
    for (const cubin_kernel& k : image->kernels) rows.push_back(make_row(k, *image, device, o));
  }
  if (rows.empty() && o.arch != "all")
    throw cubin_error("no cubin in the file runs on " + devices.front().arch() + " (the file has " +
                      sm_list(contents) +
                      "; a cubin runs on its own major version at an equal or higher minor)");
  return rows;
}

std::vector<std::string> gate_failures(const std::vector<kernel_row>& rows, const gates& g) {
  std::vector<std::string> out;
  for (const kernel_row& row : rows) {
    const std::string who = "kernel " + launchfit::detail::escape_text(row.kernel->demangled, 200) + " (sm_" +
                            std::to_string(row.cubin_sm) + " cubin" +
                            (row.device ? ", on " + row.device->arch() : std::string()) + ")";
    const cubin_kernel& k = *row.kernel;
    if (g.fail_on_spill && k.stack_undetermined)
      out.push_back(who +
                    ": a stack size that ptxas could not determine (recursion or calls through "
                    "pointers), " +
                    std::to_string(k.local_bytes_per_thread) +
                    " bytes of its own frame per thread; --fail-on-spill allows 0");
    else if (g.fail_on_spill && k.local_bytes_per_thread > 0)
      out.push_back(who + ": " + std::to_string(k.local_bytes_per_thread) +
                    " bytes of local memory per thread (stack frame or spills); --fail-on-spill allows 0");
    else if (g.fail_on_spill && k.stack_bytes_per_thread > 0)
      out.push_back(who + ": " + std::to_string(k.stack_bytes_per_thread) +
                    " bytes of local memory per thread in the functions it calls; --fail-on-spill allows 0");
    if (g.max_regs && row.kernel->regs_per_thread > *g.max_regs)
      out.push_back(who + ": " + std::to_string(row.kernel->regs_per_thread) +
                    " registers per thread; --max-regs " + std::to_string(*g.max_regs));
    if (g.min_occupancy_pct) {
      const double occ = row.occupancy ? row.occupancy->occupancy : 0.0;
      if (occ * 100.0 < *g.min_occupancy_pct - 1e-9) {
        char limit[32];
        std::snprintf(limit, sizeof limit, "%g", *g.min_occupancy_pct);
        out.push_back(who + ": occupancy " + percent(occ) + " at " + std::to_string(row.block_threads) +
                      " threads per block" +
                      (row.occupancy ? ", limited by " + limiter_names(row.occupancy->limiters)
                                     : " (" + row.refusal + ")") +
                      "; --min-occupancy " + limit + "%");
      }
    }
  }
  return out;
}

}  // namespace launchfit::calc
