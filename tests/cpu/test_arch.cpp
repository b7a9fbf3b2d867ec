// test_arch.cpp -- THE arch parser (runtime/arch.h) behind $FA_ARCH and fa-tune --arch: the spellings it takes
// (Blackwell's 100, 103, 120 and 121 too), a bad $FA_ARCH rejected by fa_context_create, one default without a GPU
// for the library and fa-tune; a device's compute capability -> its arch and limits; NVRTC's target per arch.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "fa/fa.h"
#include "runtime/arch.h"
#include "runtime/context.h"
#include "runtime/nvrtc_compiler.h"
#include "tests/cpu/context_support.h"
#include "tuner/fa_tune_cli.h"

namespace {

TEST(Arch, ParserTakesTheKnownArchsInEverySpelling) {
  const std::pair<const char*, int> good[] = {
      {"80", 80},      {"86", 86},      {"89", 89},      {"90", 90},       {"sm_90", 90}, {"sm90", 90},
      {"90a", 90},     {"sm_90a", 90},  {"sm_80", 80},   {"sm86", 86},     {"sm_89", 89}, {"100", 100},
      {"sm_100", 100}, {"sm100", 100},  {"100a", 100},   {"sm_100a", 100}, {"103", 103},  {"sm_103a", 103},
      {"120", 120},    {"sm_120", 120}, {"sm120a", 120}, {"120a", 120},    {"121", 121},  {"sm_121a", 121}};
  for (const auto& [text, want] : good) {
    int got = -1;
    EXPECT_TRUE(fa::rt::parse_arch(text, &got)) << text;
    EXPECT_EQ(got, want) << text;
  }
  // No arch-specific target below sm_90, no family ("f") suffix, no arch fa does not know (Thor's 110, 101, 75).
  for (const char* bad :
       {"",      "banana", "75",      "sm_75", "70",   "80a",  "86a",  "sm_89a",  "sm_",   "090", " 90", "90 ",
        "SM_90", "110",    "sm_110a", "101",   "1000", "12.0", "120f", "sm_100f", "100aa", "a",   "sma"}) {
    int got = -1;
    EXPECT_FALSE(fa::rt::parse_arch(bad, &got)) << bad;
    EXPECT_EQ(got, -1) << bad;
  }
}

TEST(Arch, BadFaArchIsRejectedByContextCreate) {
  for (const char* bad : {"banana", "75", "110"}) {
    const std::string err = fa::test::context_create_error("FA_ARCH", bad);
    EXPECT_NE(err.find("FA_ARCH: expected 80, 86, 89, 90, 100, 103, 120 or 121"), std::string::npos) << err;
    EXPECT_NE(err.find(std::string("'") + bad + "'"), std::string::npos) << err;
  }
}

// A device's compute capability names its arch, and its limits are the device's own where it reports them, else
// the arch's (runtime/context.h: device_limits; generator/registry.cpp: limits_for_arch).
TEST(Arch, DeviceCapabilityMapsToItsArchAndLimits) {
  struct Case {
    int major, minor, arch, smem, threads;
  };
  // the arch-table figures: sm_100 / 103 227 KB and 2048 threads per SM, sm_120 / 121 99 KB and 1536
  for (const Case& k :
       {Case{8, 0, 80, 163 * 1024, 2048}, Case{9, 0, 90, 227 * 1024, 2048}, Case{10, 0, 100, 232448, 2048},
        Case{10, 3, 103, 232448, 2048}, Case{12, 0, 120, 101376, 1536}, Case{12, 1, 121, 101376, 1536}}) {
    EXPECT_EQ(fa::rt::arch_of_capability(k.major, k.minor), k.arch);
    EXPECT_TRUE(fa::rt::known_arch(k.arch)) << k.arch;
    const fa::gen::DeviceLimits table = fa::gen::limits_for_arch(k.arch);
    EXPECT_EQ(table.arch, k.arch);
    EXPECT_EQ(table.max_smem_optin, k.smem) << "sm_" << k.arch;
    EXPECT_EQ(table.max_threads_per_sm, k.threads) << "sm_" << k.arch;
    EXPECT_EQ(table.max_regs_per_thread, 255);
    // a device's own figures win (an RTX 5090 reports 170 SMs; a part with less shared memory is believed)
    const fa::gen::DeviceLimits dev = fa::rt::device_limits(k.major, k.minor, k.smem - 1024, k.threads, 170);
    EXPECT_EQ(dev.arch, k.arch);
    EXPECT_EQ(dev.max_smem_optin, k.smem - 1024);
    EXPECT_EQ(dev.sm_count, 170);
    // nothing reported: the arch's figures
    const fa::gen::DeviceLimits none = fa::rt::device_limits(k.major, k.minor, 0, 0, 0);
    EXPECT_EQ(none.max_smem_optin, table.max_smem_optin);
    EXPECT_EQ(none.max_threads_per_sm, table.max_threads_per_sm);
    EXPECT_EQ(none.sm_count, table.sm_count);
  }
  EXPECT_FALSE(fa::rt::known_arch(110));
  EXPECT_FALSE(fa::rt::known_arch(75));
}

// NVRTC's target per arch, and this NVRTC compiles for every arch fa names (CUDA 12.9 or newer).
TEST(Arch, NvrtcTargetsEveryKnownArch) {
  EXPECT_EQ(fa::rt::arch_option(90), "sm_90a");
  EXPECT_EQ(fa::rt::arch_option(80), "sm_80");
  EXPECT_EQ(fa::rt::arch_option(100), "sm_100");
  EXPECT_EQ(fa::rt::arch_option(103), "sm_103");
  EXPECT_EQ(fa::rt::arch_option(120), "sm_120");
  EXPECT_EQ(fa::rt::arch_option(121), "sm_121");
  if (fa::rt::nvrtc_version().empty()) GTEST_SKIP() << "NVRTC is not usable here";
  for (const int arch : fa::rt::kKnownArchs)
    EXPECT_TRUE(fa::rt::nvrtc_supports_arch(arch)) << "NVRTC " << fa::rt::nvrtc_version() << " sm_" << arch;
  EXPECT_FALSE(fa::rt::nvrtc_supports_arch(20));  // Fermi: no NVRTC of this decade
}

// The arch of a context without a device, under FA_ARCH = env (nullptr: unset); -1 when a device is present.
int arch_without_device(const char* env) {
  fa::test::ScopedEnv e("FA_ARCH", env);
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = ":memory:";
  fa_context c = nullptr;
  EXPECT_EQ(fa_context_create(&o, &c), FA_OK) << fa_last_error();
  const int arch = c == nullptr || c->has_device ? -1 : c->arch;
  fa_context_destroy(c);
  return arch;
}

TEST(Arch, OneDefaultWithoutAGpuForTheLibraryAndFaTune) {
  if (arch_without_device(nullptr) < 0) GTEST_SKIP() << "a GPU is present: its arch is used";
  EXPECT_EQ(arch_without_device(nullptr), fa::rt::kDefaultArchWithoutDevice);
  EXPECT_EQ(arch_without_device("sm_86"), 86);
  EXPECT_EQ(arch_without_device("90a"), 90);
  EXPECT_EQ(arch_without_device("sm_120"), 120);
  EXPECT_EQ(arch_without_device("100a"), 100);
  // fa-tune --dry-run without --arch compiles for the library's arch: the default, or $FA_ARCH.
  fa::tune::CliHooks h;
  h.context_create = &fa_context_create;
  h.context_destroy = &fa_context_destroy;
  for (const char* env : {static_cast<const char*>(nullptr), "89", "sm_120"}) {
    fa::test::ScopedEnv e("FA_ARCH", env);
    std::FILE* out = std::tmpfile();
    std::FILE* err = std::tmpfile();
    const int rc = fa::tune::run_fa_tune({"--preset", "ci", "--dry-run", "--max-candidates", "1", "--masks", "none",
                                          "--cache", ":memory:", "--no-progress"},
                                         h, out, err);
    std::rewind(out);
    char line[256] = {0};
    const bool read = std::fgets(line, sizeof line, out) != nullptr;
    std::fclose(out);
    std::fclose(err);
    EXPECT_EQ(rc, 0);
    ASSERT_TRUE(read);
    int want = fa::rt::kDefaultArchWithoutDevice;
    if (env) fa::rt::parse_arch(env, &want);
    EXPECT_EQ(std::string(line).rfind("dry run for sm_" + std::to_string(want) + ":", 0), 0u) << line;
  }
}

}  // namespace
