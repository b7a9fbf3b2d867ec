// test_arch.cpp -- THE arch parser (runtime/arch.h) behind $FA_ARCH and fa-tune --arch: the spellings it takes, a bad
// $FA_ARCH rejected by fa_context_create, and one default without a GPU for the library and fa-tune.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "fa/fa.h"
#include "runtime/arch.h"
#include "runtime/context.h"
#include "tests/cpu/context_support.h"
#include "tuner/fa_tune_cli.h"

namespace {

TEST(Arch, ParserTakesTheKnownArchsInEverySpelling) {
  const std::pair<const char*, int> good[] = {{"80", 80},    {"86", 86},     {"89", 89},    {"90", 90},
                                              {"sm_90", 90}, {"sm90", 90},   {"90a", 90},   {"sm_90a", 90},
                                              {"sm_80", 80}, {"sm86", 86},   {"sm_89", 89}};
  for (const auto& [text, want] : good) {
    int got = -1;
    EXPECT_TRUE(fa::rt::parse_arch(text, &got)) << text;
    EXPECT_EQ(got, want) << text;
  }
  for (const char* bad : {"", "banana", "75", "sm_75", "70", "100", "80a", "sm_", "090", " 90", "90 ", "SM_90"}) {
    int got = -1;
    EXPECT_FALSE(fa::rt::parse_arch(bad, &got)) << bad;
    EXPECT_EQ(got, -1) << bad;
  }
}

TEST(Arch, BadFaArchIsRejectedByContextCreate) {
  for (const char* bad : {"banana", "75"}) {
    const std::string err = fa::test::context_create_error("FA_ARCH", bad);
    EXPECT_NE(err.find("FA_ARCH: expected 80, 86, 89 or 90"), std::string::npos) << err;
    EXPECT_NE(err.find(std::string("'") + bad + "'"), std::string::npos) << err;
  }
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
  // fa-tune --dry-run without --arch compiles for the library's arch: the default, or $FA_ARCH.
  fa::tune::CliHooks h;
  h.context_create = &fa_context_create;
  h.context_destroy = &fa_context_destroy;
  for (const char* env : {static_cast<const char*>(nullptr), "89"}) {
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
    const int want = env ? 89 : fa::rt::kDefaultArchWithoutDevice;
    EXPECT_EQ(std::string(line).rfind("dry run for sm_" + std::to_string(want) + ":", 0), 0u) << line;
  }
}

}  // namespace
