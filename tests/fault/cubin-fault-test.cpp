// SPDX-License-Identifier: MIT
// Forged and truncated cubins, fatbins and host ELFs for launchfit-calc --cubin's reader: each read runs in
// a child with a deadline, and must end in time with either a report or one cubin_error that says what is
// wrong; never a crash, a hang or a huge allocation.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "fault/bounded.hpp"

// The reader is pure and lives with launchfit-calc (demos/calc); compiled in here.
#include "../../demos/calc/cubin_report.cpp"

namespace calc = launchfit::calc;

namespace {

constexpr int deadline_ms = 5000;

// Little-endian, n bytes; bytes past the 8 of a uint64 are zero.
char byte_of(std::uint64_t v, int i) { return static_cast<char>(i < 8 ? (v >> (8 * i)) & 0xff : 0); }
void put(std::string& b, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b += byte_of(v, i);
}
void set(std::string& b, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + i] = byte_of(v, i);
}

struct forged_section {
  std::string name;
  std::uint32_t type = 1;  // PROGBITS
  std::string data;
  std::uint32_t link = 0, info = 0;
  std::uint64_t entsize = 0, nobits_size = 0;
};

// A little-endian ELF64: header, section data, .shstrtab (last section), then the section headers.
struct forged_elf {
  std::string bytes;
  std::uint64_t shoff = 0;
  std::vector<std::uint64_t> offsets;  // of each section's data, by index
};

forged_elf build_elf(std::vector<forged_section> sections, std::uint16_t machine = 190,
                     std::uint32_t flags = 0x5a) {
  sections.insert(sections.begin(), forged_section{"", 0, "", 0, 0, 0, 0});
  forged_section names{".shstrtab", 3, std::string(1, '\0')};
  std::vector<std::uint32_t> name_at;
  for (auto& s : sections) {
    name_at.push_back(s.name.empty() ? 0 : static_cast<std::uint32_t>(names.data.size()));
    if (!s.name.empty()) names.data += s.name + '\0';
  }
  name_at.push_back(static_cast<std::uint32_t>(names.data.size()));
  names.data += std::string(".shstrtab") + '\0';
  sections.push_back(names);
  forged_elf e;
  e.bytes.assign(64, '\0');
  for (auto& s : sections) {
    e.offsets.push_back(e.bytes.size());
    if (s.type != 8) e.bytes += s.data;
    while (e.bytes.size() % 8) e.bytes += '\0';
  }
  e.shoff = e.bytes.size();
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const auto& s = sections[i];
    put(e.bytes, name_at[i], 4);
    put(e.bytes, s.type, 4);
    put(e.bytes, 0, 8);
    put(e.bytes, 0, 8);
    put(e.bytes, i == 0 ? 0 : e.offsets[i], 8);
    put(e.bytes, s.type == 8 ? s.nobits_size : s.data.size(), 8);
    put(e.bytes, s.link, 4);
    put(e.bytes, s.info, 4);
    put(e.bytes, 8, 8);
    put(e.bytes, s.entsize, 8);
  }
  std::string& b = e.bytes;
  b[0] = 0x7f, b[1] = 'E', b[2] = 'L', b[3] = 'F', b[4] = 2, b[5] = 1, b[6] = 1, b[7] = 0x33, b[8] = 7;
  set(b, 16, 2, 2);  // ET_EXEC
  set(b, 18, machine, 2);
  set(b, 20, 1, 4);
  set(b, 40, e.shoff, 8);
  set(b, 48, flags, 4);
  set(b, 52, 64, 2);
  set(b, 58, 64, 2);
  set(b, 60, sections.size(), 2);
  set(b, 62, sections.size() - 1, 2);
  return e;
}

std::string attribute(std::uint8_t fmt, std::uint8_t attr, const std::string& payload, int field = -1) {
  std::string a;
  put(a, fmt, 1);
  put(a, attr, 1);
  put(a, field >= 0 ? static_cast<std::uint64_t>(field) : payload.size(), 2);
  return a + payload;
}
std::string u32s(std::initializer_list<std::uint32_t> values) {
  std::string s;
  for (auto v : values) put(s, v, 4);
  return s;
}

// Section indexes of the good cubin below: 1 .strtab, 2 .symtab, 3 .nv.info, 4 .nv.info.kern, 5 .text.kern,
// 6 .nv.shared.kern, 7 .shstrtab. Kernel "kern": 40 registers, 16 B frame, maxntid 256, 2048 B static smem.
std::vector<forged_section> good_sections() {
  std::string symtab(24, '\0');  // symbol 0
  put(symtab, 1, 4);             // st_name "kern"
  put(symtab, 0x12, 1);          // GLOBAL FUNC
  put(symtab, 0x10, 1);          // STO_CUDA_ENTRY
  put(symtab, 5, 2);             // .text.kern
  put(symtab, 0, 8);
  put(symtab, 16, 8);
  return {
      {".strtab", 3, std::string("\0kern\0", 6)},
      {".symtab", 2, symtab, 1, 0, 24},
      {".nv.info", 0x70000000, attribute(4, 0x2f, u32s({1, 40})) + attribute(4, 0x11, u32s({1, 16}))},
      {".nv.info.kern", 0x70000000, attribute(4, 0x05, u32s({256, 1, 1})) + attribute(3, 0x1b, "", 255), 2,
       5},
      {".text.kern", 1, std::string(16, '\0')},
      {".nv.shared.kern", 8, "", 0, 5, 0, 2048},
  };
}

std::string good_cubin() { return build_elf(good_sections()).bytes; }

std::string fatbin_of(const std::vector<std::pair<std::uint16_t, std::string>>& entries,
                      std::uint32_t arch = 90) {
  std::string body;
  for (const auto& [kind, code] : entries) {
    put(body, kind, 2);
    put(body, 0x0101, 2);
    put(body, 64, 4);
    put(body, code.size(), 8);
    put(body, 0, 8);
    put(body, 0x00080001, 4);
    put(body, arch, 4);
    put(body, 0, 8);
    put(body, 0x11, 8);
    put(body, 0, 16);
    body += code;
  }
  std::string f;
  put(f, 0xBA55ED50u, 4);
  put(f, 1, 2);
  put(f, 16, 2);
  put(f, body.size(), 8);
  return f + body;
}

// A fatbin of one zstd-compressed cubin entry as nvcc 13 writes it: flag 0x8000, the frame's size at +16,
// the inflated size at +56 (`declared`), the payload padded to 8 bytes.
std::string zstd_fatbin_of(const std::string& frame, std::uint64_t declared) {
  std::string payload = frame;
  while (payload.size() % 8) payload += '\0';
  std::string f = fatbin_of({{2, payload}});
  set(f, 16 + 16, frame.size(), 8);
  set(f, 16 + 40, 0x8011, 8);
  set(f, 16 + 56, declared, 8);
  return f;
}

std::string zstd_frame(const std::string& data, int level = 3) {
  std::string frame(ZSTD_compressBound(data.size()), '\0');
  const std::size_t n = ZSTD_compress(&frame[0], frame.size(), data.data(), data.size(), level);
  frame.resize(ZSTD_isError(n) ? 0 : n);
  return frame;
}

// 0: read, or refused with a cubin_error holding `needle` in a message of at most 2000 bytes.
int refused_with(const std::string& bytes, const std::string& needle, const calc::cubin_limits& limits = {}) {
  try {
    calc::read_cubin(bytes, limits);
  } catch (const calc::cubin_error& e) {
    const std::string what = e.what();
    if (what.size() > 2000) return 3;
    if (what.find(needle) == std::string::npos) {
      std::fprintf(stderr, "message: %s\n", what.c_str());
      return 4;
    }
    return 0;
  }
  return 2;  // read without complaint
}

#define EXPECT_REFUSED(bytes, needle) \
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, ([&] { return refused_with(bytes, needle); }))

}  // namespace

TEST(CubinFault, TheForgedGoodCubinReads) {
  const auto c = calc::read_cubin(good_cubin());
  ASSERT_EQ(c.images.size(), 1u);
  ASSERT_EQ(c.images[0].kernels.size(), 1u);
  const auto& k = c.images[0].kernels[0];
  EXPECT_EQ(k.name, "kern");
  EXPECT_EQ(k.regs_per_thread, 40);
  EXPECT_EQ(k.local_bytes_per_thread, 16u);
  EXPECT_EQ(k.max_threads_per_block, 256);
  EXPECT_EQ(k.static_smem_bytes, 2048u);
  EXPECT_EQ(c.images[0].sm, 90);
}

TEST(CubinFault, EveryTruncationOfACubinAndAFatbinEndsInTimeWithAReportOrAnError) {
  const std::string cubin = good_cubin();
  const std::string fatbin = fatbin_of({{2, cubin}});
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, ([&] {
                             for (const std::string* whole : {&cubin, &fatbin})
                               for (std::size_t n = 0; n < whole->size(); ++n) {
                                 try {
                                   calc::read_cubin(whole->substr(0, n));
                                 } catch (const calc::cubin_error&) {
                                 }
                               }
                             return 0;
                           }));
}

TEST(CubinFault, OffsetsAndSizesPastTheEndAreNamed) {
  auto e = build_elf(good_sections());
  std::string b = e.bytes;
  set(b, 40, b.size() - 10, 8);  // e_shoff near the end
  EXPECT_REFUSED(b, "the section header table");
  b = e.bytes;
  set(b, e.shoff + 2 * 64 + 24, 0xfffffffffffffff0ull, 8);  // .symtab sh_offset
  EXPECT_REFUSED(b, "section 2 (48 bytes at 0xfffffffffffffff0) runs past the end");
  b = e.bytes;
  set(b, e.shoff + 2 * 64 + 32, 0xffffffffffffull, 8);  // .symtab sh_size
  EXPECT_REFUSED(b, "runs past the end of the ELF data");
}

TEST(CubinFault, HugeCountsAreRefusedBeforeAnythingIsAllocated) {
  auto e = build_elf(good_sections());
  std::string b = e.bytes;
  set(b, 60, 0, 2);                     // e_shnum 0: the count is section 0's sh_size
  set(b, e.shoff + 32, 1ull << 40, 8);  // 2^40 sections
  EXPECT_REFUSED(b, "1099511627776 sections, more than the 1048576 read here");
  // An attribute that says it is longer than its section.
  auto sections = good_sections();
  sections[2].data = attribute(4, 0x2f, u32s({1, 40})) + attribute(4, 0x11, "", 0xffff);
  EXPECT_REFUSED(build_elf(sections).bytes,
                 "EIATTR_FRAME_SIZE (0x11) at offset 0xc says 65535 bytes but 0 remain");
  // Registers, launch bounds and symbol indexes from outside any real range.
  sections = good_sections();
  sections[2].data = attribute(4, 0x2f, u32s({1, 0xffffffffu}));
  EXPECT_REFUSED(build_elf(sections).bytes, "is 4294967295 registers per thread; no GPU has more than 255");
  sections = good_sections();
  sections[2].data = attribute(4, 0x2f, u32s({0x7fffffff, 40}));
  EXPECT_REFUSED(build_elf(sections).bytes, "names symbol 2147483647, but there are 2 symbols");
  sections = good_sections();
  sections[3].data = attribute(4, 0x05, u32s({0, 1, 1}));
  EXPECT_REFUSED(build_elf(sections).bytes, "is 0 x 1 x 1 threads: no block fits");
  sections = good_sections();
  sections[3].data = attribute(4, 0x05, u32s({0xffffffffu, 0xffffffffu, 0xffffffffu}));
  const auto c = calc::read_cubin(build_elf(sections).bytes);
  EXPECT_EQ(c.images.at(0).kernels.at(0).max_threads_per_block, 1024);  // saturated, not wrapped
}

TEST(CubinFault, NamesWithoutANulAndStringTablesThatAreNotThereAreNamed) {
  auto sections = good_sections();
  sections[0].data = std::string("\0kern", 5);  // "kern" runs to the end of .strtab
  EXPECT_REFUSED(build_elf(sections).bytes, "without a terminating NUL");
  sections = good_sections();
  sections[1].link = 999;
  EXPECT_REFUSED(build_elf(sections).bytes, "names string table 999, but there are 8 sections");
  sections = good_sections();
  sections[1].entsize = 16;
  EXPECT_REFUSED(build_elf(sections).bytes, "has 16-byte entries (sh_entsize); ELF64 symbols have 24");
}

TEST(CubinFault, OverlappingSectionsCannotMultiplyTheWork) {
  // 60,000 .nv_fatbin sections of a host ELF all pointing at one 64 KiB fatbin: reading each would be
  // 60,000 x 64 KiB; the budget refuses after 8 x the file.
  std::string pad = fatbin_of({{1, std::string(65536, '.')}});
  std::vector<forged_section> sections{{".nv_fatbin", 1, pad}};
  auto e = build_elf(sections, 62);
  const std::uint64_t fatbin_offset = e.offsets[1];
  std::string b = e.bytes.substr(0, e.shoff);
  const std::size_t count = 60000;
  std::string headers(64, '\0');
  // Section 1: .shstrtab of the original (last section); sections 2..: copies of .nv_fatbin.
  const std::string original = e.bytes.substr(e.shoff);
  headers += original.substr(2 * 64, 64);
  for (std::size_t i = 0; i < count; ++i) headers += original.substr(64, 64);
  set(b, 40, b.size(), 8);
  set(b, 60, count + 2, 2);
  set(b, 62, 1, 2);
  b += headers;
  (void)fatbin_offset;
  EXPECT_REFUSED(b, "sections that overlap or share their bytes");
}

TEST(CubinFault, ZeroSizesAndEmptyContainersAreNamed) {
  EXPECT_REFUSED(std::string(), "empty (0 bytes)");
  EXPECT_REFUSED(fatbin_of({}), "no cubin to read");
  EXPECT_REFUSED(fatbin_of({{2, ""}}),
                 "entry 1 at 0x10 (cubin for sm_90): the ELF header (64 bytes at offset 0x0)");
  EXPECT_REFUSED(std::string("\x50\xed\x55\xba", 4), "fatbin container 1 at 0x0 header");
  // A fatbin entry whose code size runs past the container, and one whose header size is 0.
  std::string f = fatbin_of({{2, good_cubin()}});
  set(f, 16 + 8, 0xffffffffffffffffull, 8);
  EXPECT_REFUSED(f, "bytes of code but");
  f = fatbin_of({{2, good_cubin()}});
  set(f, 16 + 4, 0, 4);
  EXPECT_REFUSED(f, "has a header size of 0 bytes");
}

TEST(CubinFault, RecursiveContainersAreRefusedNotFollowed) {
  // A fatbin entry holding a fatbin, or a host ELF with its own .nv_fatbin: cubins only, one level.
  const std::string inner = fatbin_of({{2, good_cubin()}});
  EXPECT_REFUSED(fatbin_of({{2, inner}}), "not an ELF file");
  const std::string host = build_elf({{".nv_fatbin", 1, inner}}, 62).bytes;
  EXPECT_REFUSED(fatbin_of({{2, host}}),
                 "an ELF for machine 62 where a cubin (machine 190, EM_CUDA) belongs");
  // The well-formed chain itself reads: host ELF -> fatbin -> cubin.
  EXPECT_EQ(calc::read_cubin(host).images.at(0).kernels.at(0).regs_per_thread, 40);
}

TEST(CubinFault, AKernelNameOfAMegabyteOrDeepNestingIsReadAndShownShort) {
  auto sections = good_sections();
  std::string nested = "_Z1fI";
  for (int i = 0; i < 3000; ++i) nested += "N1aI";
  sections[0].data = std::string(1, '\0') + nested + std::string(1, '\0');
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, ([&] {
                             const auto c = calc::read_cubin(build_elf(sections).bytes);
                             const auto& k = c.images.at(0).kernels.at(0);
                             const std::string shown = launchfit::detail::escape_text(k.demangled, 200);
                             return k.demangled == k.name && shown.size() < 300 ? 0 : 1;
                           }));
  // Short enough to be demangled, nested a thousand deep.
  nested = "_Z1fI";
  for (int i = 0; i < 1000; ++i) nested += "N1aI";
  sections[0].data = std::string(1, '\0') + nested + std::string(1, '\0');
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, ([&] {
                             const auto c = calc::read_cubin(build_elf(sections).bytes);
                             return c.images.at(0).kernels.at(0).name == nested ? 0 : 1;
                           }));
  sections[0].data = std::string(1, '\0') + std::string(1 << 20, '\x1b') + std::string(1, '\0');
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, ([&] {
                             const auto c = calc::read_cubin(build_elf(sections).bytes);
                             const std::string shown =
                                 launchfit::detail::escape_text(c.images.at(0).kernels.at(0).demangled, 200);
                             return shown.find('\x1b') == std::string::npos && shown.size() < 1000 ? 0 : 1;
                           }));
}

TEST(CubinFault, SpecialFilesAreRefusedWithoutWaiting) {
  const std::string fifo = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/cubin-fault.fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string path : {fifo, std::string("/dev/zero"), std::string(LAUNCHFIT_TEST_BINARY_DIR)}) {
    LAUNCHFIT_EXPECT_BOUNDED(
        deadline_ms, ([&] {
          try {
            calc::read_cubin_file(path);
          } catch (const calc::cubin_error& e) {
            return std::string(e.what()).find("not a regular file") != std::string::npos ? 0 : 4;
          }
          return 2;
        }));
  }
  ::unlink(fifo.c_str());
}

TEST(CubinFault, ThirtyTwoBitBigEndianAndForeignFilesAreNamed) {
  std::string b = good_cubin();
  b[4] = 1;
  EXPECT_REFUSED(b, "a 32-bit ELF file");
  for (const char elf_class : {'\0', '\3', '\xff'}) {  // neither 32- nor 64-bit: invalid, never "32-bit"
    b[4] = elf_class;
    EXPECT_REFUSED(b, "an invalid ELF class " + std::to_string(static_cast<std::uint8_t>(elf_class)) +
                          " (EI_CLASS is 1 for 32-bit and 2 for 64-bit ELF files)");
  }
  b = good_cubin();
  b[5] = 2;
  EXPECT_REFUSED(b, "a big-endian ELF file");
  EXPECT_REFUSED(std::string("//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n"), "PTX text");
  EXPECT_REFUSED(std::string("\x89PNG\r\n", 6),
                 "not a cubin, a fatbin or an ELF file (it starts with bytes 89 50 4e 47)");
  EXPECT_REFUSED(build_elf({{".text", 1, "x"}}, 62).bytes, "with no .nv_fatbin or __nv_relfatbin section");
}

// A register count is stated once per kernel and is never 0: a second one or a zero is refused, naming
// both figures, instead of one being taken silently.
TEST(CubinFault, DuplicateOrZeroRegisterCountsAreRefused) {
  auto sections = good_sections();
  sections[2].data = attribute(4, 0x2f, u32s({1, 40})) + attribute(4, 0x2f, u32s({1, 64}));
  EXPECT_REFUSED(build_elf(sections).bytes,
                 "says 64 registers per thread, but the kernel's count (40) was already given");
  // The same count again, from the kernel's own .nv.info section, is a second statement too.
  sections = good_sections();
  sections[3].data += attribute(4, 0x2f, u32s({1, 40}));
  EXPECT_REFUSED(build_elf(sections).bytes, "(40) was already given");
  sections = good_sections();
  sections[2].data = attribute(4, 0x2f, u32s({1, 0}));
  EXPECT_REFUSED(build_elf(sections).bytes, "is 0 registers per thread; a compiled kernel uses at least 1");
}

// EIATTR_MIN_STACK_SIZE 0xffffffff: read as "cannot be determined", never as a 4 GiB stack.
TEST(CubinFault, AnUndeterminedStackIsFlaggedNotSized) {
  auto sections = good_sections();
  sections[2].data += attribute(4, 0x12, u32s({1, 0xffffffffu}));
  const auto c = calc::read_cubin(build_elf(sections).bytes);
  const auto& k = c.images.at(0).kernels.at(0);
  EXPECT_TRUE(k.stack_undetermined);
  EXPECT_EQ(k.stack_bytes_per_thread, 16u);  // its own frame
  EXPECT_EQ(calc::local_memory_text(k), "16 B+?");
}

TEST(CubinFault, AZstdCompressedCubinIsInflatedAndRead) {
  const std::string cubin = good_cubin();
  const auto c = calc::read_cubin(zstd_fatbin_of(zstd_frame(cubin), cubin.size()));
  EXPECT_EQ(c.images.at(0).kernels.at(0).regs_per_thread, 40);
  EXPECT_TRUE(c.skipped.empty());
}

// Truncated, damaged, lying and exploding zstd payloads: each ends in time with one cubin_error; none
// allocates what its header claims.
TEST(CubinFault, HostileZstdPayloadsAreRefusedBounded) {
  const std::string cubin = good_cubin();
  const std::string frame = zstd_frame(cubin);
  ASSERT_FALSE(frame.empty());
  // Every truncation of the frame (the entry's sizes kept).
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, ([&] {
                             for (std::size_t n = 0; n < frame.size(); ++n) {
                               try {
                                 calc::read_cubin(zstd_fatbin_of(frame.substr(0, n), cubin.size()));
                                 return 1;  // a cut frame must not read
                               } catch (const calc::cubin_error&) {
                               }
                             }
                             return 0;
                           }));
  EXPECT_REFUSED(zstd_fatbin_of(frame.substr(0, frame.size() - 3), cubin.size()), "truncated");
  EXPECT_REFUSED(zstd_fatbin_of(std::string(64, 'x'), cubin.size()), "not a zstd frame");
  std::string damaged = frame;
  damaged[damaged.size() / 2] ^= 0x5a;
  damaged[damaged.size() / 2 + 1] ^= 0x5a;
  EXPECT_REFUSED(zstd_fatbin_of(damaged, cubin.size()), "zstd");
  // The entry and the frame disagree, or the header claims a terabyte: refused before inflating.
  EXPECT_REFUSED(zstd_fatbin_of(frame, cubin.size() - 1), "the fatbin entry");
  EXPECT_REFUSED(zstd_fatbin_of(frame, 1ull << 40),
                 "1099511627776 bytes when inflated (its header says), more than the 268435456 bytes");
  EXPECT_REFUSED(zstd_fatbin_of(frame, 0), "gives no inflated size");
  // A bomb: 64 MiB of zeros in a few KiB, against a 1 MiB cap, with the frame's size left out (streamed
  // frames do not carry it) and the entry claiming the cap.
  const std::string zeros(64u << 20, '\0');
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  std::string bomb(ZSTD_compressBound(zeros.size()), '\0');
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
  const std::size_t n = ZSTD_compress2(cctx, &bomb[0], bomb.size(), zeros.data(), zeros.size());
  ZSTD_freeCCtx(cctx);
  ASSERT_FALSE(ZSTD_isError(n));
  bomb.resize(n);
  calc::cubin_limits small;
  small.max_decompressed_bytes = 1u << 20;
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, ([&] {
                             return refused_with(zstd_fatbin_of(bomb, 1u << 20),
                                                 "inflates to more than the 1048576 bytes", small);
                           }));
  // Many entries whose sum passes the cap: the cap is per input, not per entry.
  small.max_decompressed_bytes = cubin.size() * 2;
  std::string entry = zstd_fatbin_of(frame, cubin.size()).substr(16);
  std::string three;
  put(three, 0xBA55ED50u, 4);
  put(three, 1, 2);
  put(three, 16, 2);
  put(three, entry.size() * 3, 8);
  three += entry + entry + entry;
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, ([&] { return refused_with(three, "inflated per input", small); }));
}
