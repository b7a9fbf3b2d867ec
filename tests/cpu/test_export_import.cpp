// test_export_import.cpp -- a tuned cache shipped with fa-tune --export and taken in with --import by another process
// (issue 23) serves its keys there with nothing compiled and nothing tuned: under FA_TUNE_REQUIRE_TUNED the chooser
// finds the stored winner and fa_prepare finds every kernel of the bucket's shape classes in the imported file. A
// fresh file without the import fails the same call with FA_ERROR_NOT_TUNED. Without a GPU the tuning rows are
// written as fa-tune writes them (a winner and the default); tests/gpu/test_export_import.cpp tunes for real.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "fa/fa.h"
#include "runtime/context.h"
#include "runtime/launch.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/validate.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/fa_tune_support.h"
#include "tests/cpu/params_support.h"
#include "tuner/bucket.h"
#include "tuner/cache_store.h"
#include "tuner/fa_tune_cli.h"

namespace {

int cli(const std::vector<std::string>& args) { return fa::test::run_cli(args).rc; }

// Runs fn in a child process; its exit status (1000 + signal when killed).
int in_child(const std::function<int()>& fn) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(fn());
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

TEST(ExportImport, AnImportedCacheServesItsKeysWithoutCompilingOrTuning) {
  if (fa::rt::nvrtc_version().empty()) GTEST_SKIP() << "NVRTC unavailable";
  const fa::test::TempDir tmp("export_import");
  const std::string dir = tmp.path();
  const std::string tuned = dir + "/tuned.sqlite", shipped = dir + "/shipped.sqlite", fresh = dir + "/fresh.sqlite",
                    bare = dir + "/bare.sqlite";
  fa_params p;
  fa::test::fake_bshd_params(&p, 2, 1000, 1000, 4, 4, 64);
  p.mask = FA_MASK_CAUSAL;
  p.lse = static_cast<float*>(fa::test::fake_addr(0x50000000));
  fa_params vp;
  fa::gen::ProblemDesc d;
  ASSERT_TRUE(fa::rt::validate_forward(&p, &vp, &d).ok());

  // The tuning machine: a winner other than the default stored under this key, every kernel fa_prepare needs
  // compiled into the file, then the export.
  fa_context a = fa::test::make_context(tuned, FA_TUNE_REQUIRE_TUNED);
  ASSERT_NE(a, nullptr);
  const fa::gen::Semantic s = fa::gen::select_forward(d, a->arch);
  const fa::gen::Tunables def = s.family->defaults(s);
  fa::gen::Tunables winner = def;
  for (const fa::gen::Tunables& t : fa::gen::valid_space(s, a->limits))
    if (!(t == def) && fa::gen::is_valid(fa::gen::finalize(s, t, d), a->limits, nullptr)) winner = t;
  ASSERT_FALSE(winner == def) << "no second valid point for " << fa::gen::semantic_key(s);
  const std::string sem = fa::tune::tuning_semantic_key(s), bucket = fa::tune::shape_bucket(d);
  ASSERT_TRUE(fa::tune::context_db(a)->put_tune_results({{sem, bucket, fa::gen::tunables_key(s, def), 2.0, "ok"},
                                                         {sem, bucket, fa::gen::tunables_key(s, winner), 1.0, "ok"}}));
  const fa_status prepared = fa_prepare(a, &p);
  const bool device = fa_context_has_device(a) == 1;
  EXPECT_EQ(prepared, device ? FA_OK : FA_ERROR_NO_DEVICE) << fa_last_error();
  EXPECT_GT(a->kernels->stats().compiles, 0);
  fa_context_destroy(a);
  ASSERT_EQ(cli({"--cache", tuned, "--export", shipped}), 0);

  // The serving machine, another process: import, then the same preparation compiles and tunes nothing.
  const int served = in_child([&] {
    if (cli({"--cache", fresh, "--import", shipped}) != 0) return 10;
    fa_context b = fa::test::make_context(fresh, FA_TUNE_REQUIRE_TUNED);
    if (b == nullptr) return 11;
    int code = 0;
    if (fa_prepare(b, &p) != (device ? FA_OK : FA_ERROR_NO_DEVICE)) code |= 1;
    if (b->kernels->stats().compiles != 0) code |= 2;
    if (b->kernels->stats().store_hits == 0) code |= 4;
    fa::gen::Plan plan;
    if (!fa::rt::plan_for(b, fa::gen::Role::Forward, d, nullptr, &plan).ok() || !(plan.steps[0].t == winner)) code |= 8;
    fa_context_destroy(b);
    return code;
  });
  EXPECT_EQ(served, 0) << "bit 1: fa_prepare's status, 2: compiled, 4: no store hit, 8: not the shipped winner";

  // Without the import: nothing tuned, the policy refuses.
  const int refused = in_child([&] {
    fa_context b = fa::test::make_context(bare, FA_TUNE_REQUIRE_TUNED);
    if (b == nullptr) return 11;
    const fa_status st = fa_prepare(b, &p);
    fa_context_destroy(b);
    return st == FA_ERROR_NOT_TUNED ? 0 : 1;
  });
  EXPECT_EQ(refused, 0);
}

}  // namespace
