// test_export_import.cpp -- fa-tune's --export shipped to another process (issue 23): this process tunes one problem
// for real with fa-tune (the run_fa_tune entry, a fresh cache file) and exports the file; a new process (this test
// binary again, running only ExportImportChild with $FA_TEST_IMPORT_DIR set) imports the export into a fresh file,
// opens its test context on it under FA_TUNE_REQUIRE_TUNED (a key without a tuned entry fails there: nothing can be
// tuned) and runs the problem: the result matches the float64 oracle and nothing was compiled.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/context.h"
#include "tests/cpu/temp_dir.h"
#include "tests/gpu/gpu_support.h"
#include "tuner/fa_tune_cli.h"

extern char** environ;

namespace fa::test {
namespace {

int cli(const std::vector<std::string>& args, std::string* text) {
  tune::CliHooks h;
  h.context_create = &fa_context_create;
  h.context_destroy = &fa_context_destroy;
  std::FILE* out = std::tmpfile();
  const int rc = tune::run_fa_tune(args, h, out, out);
  std::rewind(out);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, out)) > 0) text->append(buf, n);
  std::fclose(out);
  return rc;
}

// The problem both processes use: fa-tune's grid point (bf16 d64 4 heads causal, 512 tokens, batch 1024 / 512 = 2)
// and materialize_spec's case (batch 2, aligned strides) fall in one tuning key.
const CaseSpec kSpec{FA_DTYPE_BF16, 64, 64, 4, 4, FA_MASK_CAUSAL, 512, 512, false, false, false, false};

TEST(ExportImport, AnExportServesAnotherProcessWithoutCompilingOrTuning) {
  if (!gpu().ok()) GTEST_SKIP() << gpu().why;
  const TempDir tmp("export_import");
  const std::string dir = tmp.path();
  std::string log;
  ASSERT_EQ(cli({"--cache",
                 dir + "/tuned.sqlite",
                 "--dtypes",
                 "bf16",
                 "--head-dims",
                 "64",
                 "--heads",
                 "4",
                 "--masks",
                 "causal",
                 "--seqlens",
                 "512",
                 "--batch-tokens",
                 "1024",
                 "--max-candidates",
                 "3",
                 "--budget-ms",
                 "200",
                 "--no-progress",
                 "--export",
                 dir + "/shipped.sqlite"},
                &log),
            0)
      << log;
  EXPECT_NE(log.find("tuned"), std::string::npos) << log;
  const std::string self = "/proc/self/exe", filter = "--gtest_filter=ExportImportChild.*";
  std::vector<std::string> env_s = {"FA_TEST_IMPORT_DIR=" + dir};
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string(*e).rfind("FA_TEST_IMPORT_DIR=", 0) != 0) env.push_back(*e);
  env.push_back(env_s[0].data());
  env.push_back(nullptr);
  std::vector<char*> argv = {const_cast<char*>(self.c_str()), const_cast<char*>(filter.c_str()), nullptr};
  std::fflush(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), env.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the importing process failed (its output is above)";
}

TEST(ExportImportChild, RunsFromTheImportedCache) {
  const char* dir = std::getenv("FA_TEST_IMPORT_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run by ExportImport.AnExportServesAnotherProcessWithoutCompilingOrTuning";
  const std::string fresh = std::string(dir) + "/fresh.sqlite";
  std::string log;
  ASSERT_EQ(cli({"--cache", fresh, "--import", std::string(dir) + "/shipped.sqlite"}, &log), 0) << log;
  EXPECT_NE(log.find("imported"), std::string::npos) << log;
  setenv("FA_TEST_CACHE", fresh.c_str(), 1);  // the test context (made on first use, below) serves the import
  setenv("FA_TUNE_POLICY", "require", 1);
  if (!gpu().ok()) GTEST_SKIP() << gpu().why;
  std::mt19937_64 rng(test_seed());
  Case c;
  materialize_spec(rng, kSpec, true, &c);
  const CaseResult r = check_case(c);
  ASSERT_EQ(r.failure, "");
  EXPECT_LT(r.err_o, tolerance(c.dtype));
  EXPECT_LT(r.err_lse, tolerance(c.dtype));
  EXPECT_EQ(gpu().ctx->kernels->stats().compiles, 0);
  EXPECT_GT(gpu().ctx->kernels->stats().store_hits, 0);
}

}  // namespace
}  // namespace fa::test
