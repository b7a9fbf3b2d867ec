// test_progress.cpp -- fa-tune's progress output (tuner/progress.h): the mode each flag and terminal give (a bar on
// a terminal, else one final line), the exact text of each kind of line, how many lines each mode prints for a run
// of many items, and counted nouns ("1 grid point").
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "tests/cpu/fa_tune_support.h"
#include "tuner/fa_tune_args.h"
#include "tuner/progress.h"

namespace fa::tune {
namespace {

// What a Progress of `mode` over n items prints (heartbeat_s: kFinal's least time between lines).
std::string run_progress(ProgressMode mode, size_t n, double heartbeat_s = 60.0) {
  std::FILE* f = std::tmpfile();
  {
    Progress p(f, mode, n, "compile", heartbeat_s);
    for (size_t i = 0; i < n; ++i) p.step("kernel " + std::to_string(i));
    p.finish();
    p.finish();  // a second finish prints nothing more
  }
  return test::slurp(f);
}

TEST(Progress, ModeFollowsTheFlagElseTheTerminal) {
  EXPECT_EQ(progress_mode(-1, true), ProgressMode::kBar);
  EXPECT_EQ(progress_mode(-1, false), ProgressMode::kFinal);
  for (bool terminal : {false, true}) {
    EXPECT_EQ(progress_mode(0, terminal), ProgressMode::kOff);
    EXPECT_EQ(progress_mode(1, terminal), ProgressMode::kBar);
    EXPECT_EQ(progress_mode(2, terminal), ProgressMode::kLines);
    EXPECT_EQ(progress_mode(3, terminal), ProgressMode::kFinal);
  }
  const std::vector<std::pair<std::vector<std::string>, int>> flags = {{{}, -1},
                                                                       {{"--no-progress"}, 0},
                                                                       {{"--progress"}, 1},
                                                                       {{"--progress=bar"}, 1},
                                                                       {{"--progress=lines"}, 2},
                                                                       {{"--progress=final"}, 3},
                                                                       {{"--progress=lines", "--no-progress"}, 0}};
  for (const auto& [args, want] : flags) {
    TuneArgs a;
    std::string e;
    std::vector<std::string> argv = args;
    argv.push_back("--list");
    ASSERT_TRUE(parse_tune_args(argv, &a, &e)) << e;
    EXPECT_EQ(a.progress, want) << (args.empty() ? "(none)" : args.back());
  }
}

TEST(Progress, LineTexts) {
  EXPECT_EQ(Progress::line_text("tune", 3, 12, 65, "bf16 d128"), "tune [3/12] bf16 d128 (elapsed 1:05, ETA 3:15)");
  EXPECT_EQ(Progress::final_text("compile", 254, 254, 12.4), "compile: 254 done in 0:12");
  EXPECT_EQ(Progress::final_text("tune", 3, 5, 3725), "tune: 3 of 5 done in 1:02:05");
  const std::string bar = Progress::bar_text("compile", 3, 12, 65, std::string(50, 'k'));
  EXPECT_EQ(bar.rfind("compile [#######" + std::string(23, '.') + "] 3/12  25% elapsed 1:05 ETA 3:15  " +
                          std::string(37, 'k') + "...",
                      0),
            0u)
      << bar;
  EXPECT_EQ(Progress::bar_text("x", 9, 4, 1, "").find("[" + std::string(30, '#') + "]"), 2u);  // never past full
}

TEST(Progress, OffTerminalARunPrintsOneFinalLine) {
  const std::string final_only = run_progress(ProgressMode::kFinal, 382);
  EXPECT_EQ(test::lines(final_only), 1u) << final_only;
  EXPECT_EQ(final_only.rfind("compile: 382 done in 0:0", 0), 0u) << final_only;
  // With a heartbeat of 0 s every item but the last gets a line (the final line says the last).
  EXPECT_EQ(test::lines(run_progress(ProgressMode::kFinal, 5, 0.0)), 5u);
  const std::string lined = run_progress(ProgressMode::kLines, 7);
  EXPECT_EQ(test::lines(lined), 7u) << lined;
  EXPECT_EQ(lined.rfind("compile [1/7] kernel 0 (elapsed 0:00, ETA 0:00)\n", 0), 0u) << lined;
  const std::string bar = run_progress(ProgressMode::kBar, 9);
  EXPECT_EQ(test::lines(bar), 1u);
  EXPECT_EQ(std::count(bar.begin(), bar.end(), '\r'), 9);
  EXPECT_EQ(run_progress(ProgressMode::kOff, 9), "");
}

TEST(Progress, CountedNouns) {
  EXPECT_EQ(counted(1, "grid point"), "1 grid point");
  EXPECT_EQ(counted(0, "grid point"), "0 grid points");
  EXPECT_EQ(counted(254, "kernel"), "254 kernels");
}

}  // namespace
}  // namespace fa::tune
