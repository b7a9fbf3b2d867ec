// test_fa_tune_args.cpp -- fa-tune's command line: every error path (exit code 2, flag named), ranges, presets,
// grid expansion; the missing-GPU path (exit code 3); and a --dry-run of the ci preset through run_fa_tune.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "cache_db/cache_db.h"
#include "fa/fa.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/fa_tune_support.h"
#include "tests/cpu/temp_dir.h"
#include "tuner/bucket.h"
#include "tuner/fa_tune_args.h"
#include "tuner/fa_tune_cli.h"
#include "tuner/thread_pool.h"
#include "tuner/tuner.h"

using namespace fa;

namespace {

using test::CliRun;
using test::lines;
using test::read_bytes;
using test::run_cli;

}  // namespace

TEST(FaTuneArgs, SeqlenRangesExpandToPowersOfTwo) {
  std::vector<int> v;
  std::string why;
  ASSERT_TRUE(tune::parse_seqlens("512:16384", &v, &why)) << why;
  EXPECT_EQ(v, (std::vector<int>{512, 1024, 2048, 4096, 8192, 16384}));
  ASSERT_TRUE(tune::parse_seqlens("100,300:1200", &v, &why));
  EXPECT_EQ(v, (std::vector<int>{100, 300, 600, 1200}));
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 50; ++i) {
    const int a = std::uniform_int_distribution<int>(1, 5000)(rng),
              b = std::uniform_int_distribution<int>(a, 100000)(rng);
    ASSERT_TRUE(tune::parse_seqlens(std::to_string(a) + ":" + std::to_string(b), &v, &why));
    ASSERT_FALSE(v.empty());
    EXPECT_EQ(v.front(), a);
    EXPECT_LE(v.back(), b);
    EXPECT_GT(2LL * v.back(), b);
    for (size_t k = 1; k < v.size(); ++k) EXPECT_EQ(v[k], 2 * v[k - 1]);
  }
  for (const char* bad : {"", "a", "5:2", "0:4", "4:", ":4", "1:2:3", "-8", "99999999999", "16,", "1.5"})
    EXPECT_FALSE(tune::parse_seqlens(bad, &v, &why)) << bad;
}

TEST(FaTuneArgs, ErrorsNameTheFlagAndExitWith2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus"}, "--bogus"},
      {{"stray"}, "stray"},
      {{"--heads", "x"}, "--heads"},
      {{"--heads", "0"}, "--heads"},
      {{"--heads"}, "--heads"},
      {{"--head-dims", "100"}, "--head-dims"},
      {{"--head-dims", "512"}, "--head-dims"},
      {{"--seqlens", "9:3"}, "--seqlens"},
      {{"--seqlens=abc"}, "--seqlens"},
      {{"--batch-tokens", "-1"}, "--batch-tokens"},
      {{"--dtypes", "fp8"}, "--dtypes"},
      {{"--masks", "diagonal"}, "--masks"},
      {{"--masks", "window:4"}, "--masks"},
      {{"--masks", "window:a:0"}, "--masks"},
      {{"--features", "rope"}, "--features"},
      {{"--features", "softcap:-1"}, "--features"},
      {{"--preset", "llama9"}, "--preset"},
      {{"--arch", "70"}, "--arch"},
      {{"--arch", "banana"}, "'banana'"},
      {{"--arch", "110"}, "--arch: expected 80, 86, 89, 90, 100, 103, 120 or 121 (also written sm_120"},
      {{"--arch", "86a"}, "got '86a'"},
      {{"--budget-ms", "0"}, "--budget-ms"},
      {{"--idle-ratio", "-1"}, "--idle-ratio"},
      {{"--idle-ratio", "x"}, "--idle-ratio"},
      {{"--threads", "many"}, "--threads"},
      {{"--max-candidates", "0"}, "--max-candidates"},
      {{"--heads", "16", "--kv-heads", "5"}, "--kv-heads"},
      {{"--list=yes"}, "--list"},
      {{"--json", ""}, "--json"},
      {{"--json"}, "--json: missing FILE"},
      {{"--cache", "a.sqlite", "--export", "--list"}, "--export: missing FILE: the next argument '--list' is a flag"},
      {{"--export", "--cache", "t.sqlite"}, "--export: missing FILE: the next argument '--cache' is a flag"},
      {{"--preset", "--dry-run"}, "--preset: missing NAME"},
      {{"--progress=fast"}, "--progress: expected bar, lines or final"},
      {{"--no-progress=1"}, "--no-progress: takes no value"},
      {{"--preset", "ci", "--devices", "x"}, "--devices: expected 'all' or device ordinals"},
      {{"--preset", "ci", "--devices", ""}, "--devices: empty value"},
      {{"--preset", "ci", "--devices", "0,0"}, "--devices: device 0 is listed twice"},
      {{"--preset", "ci", "--devices", "-1"}, "--devices"},
      {{"--preset", "ci", "--devices", "0,"}, "--devices"},
      {{"--preset", "ci", "--devices", "1024"}, "--devices"},
      {{"--preset", "ci", "--devices=all,0"}, "--devices"},
      {{"--devices", "all"}, "--devices: applies to tuning a grid"},
      {{"--list", "--devices", "0"}, "--devices: applies to tuning a grid"},
      {{"--preset", "ci", "--dry-run", "--devices", "all"}, "--devices: applies to tuning a grid"},
      {{}, "nothing to do"},
  };
  for (const auto& [args, needle] : cases) {
    tune::TuneArgs a;
    std::string e;
    const CliRun r = run_cli(args);
    EXPECT_EQ(r.rc, 2) << (args.empty() ? "(none)" : args[0]) << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    if (!args.empty()) { EXPECT_FALSE(tune::parse_tune_args(args, &a, &e)); }
  }
  const CliRun h = run_cli({"--help"});
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.out.find("--dry-run"), std::string::npos);
  EXPECT_NE(h.out.find("llama3-8b"), std::string::npos);
}

TEST(FaTuneArgs, IdleRatioReachesTheTunerOptions) {
  tune::TuneArgs a;
  std::string e;
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "ci"}, &a, &e)) << e;
  EXPECT_LT(a.idle_ratio, 0.0);  // the tuner's default
  for (const char* v : {"0", "0.5", "3"}) {
    tune::TuneArgs b;
    ASSERT_TRUE(tune::parse_tune_args({"--preset", "ci", "--idle-ratio", v}, &b, &e)) << e;
    EXPECT_EQ(b.idle_ratio, std::strtod(v, nullptr)) << v;
  }
}

TEST(FaTuneArgs, PresetsAndOverrides) {
  tune::TuneArgs a;
  std::string e;
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "llama3-8b"}, &a, &e)) << e;
  auto g = tune::expand_grid(a);
  ASSERT_FALSE(g.empty());
  for (const auto& p : g) {
    EXPECT_EQ(p.desc.dtype, gen::kBf16);
    EXPECT_EQ(p.desc.heads_q, 32);
    EXPECT_EQ(p.desc.heads_kv, 8);
    EXPECT_EQ(p.desc.head_dim, 128);
    EXPECT_EQ(p.desc.mask, gen::kMaskCausal);
    EXPECT_EQ(static_cast<long long>(p.desc.batch), std::max(1LL, a.batch_tokens / p.desc.seqlen_q));
  }
  ASSERT_TRUE(tune::parse_tune_args({"--preset=gemma2-9b", "--seqlens", "2048"}, &a, &e)) << e;
  g = tune::expand_grid(a);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].desc.head_dim, 256);
  EXPECT_TRUE(g[0].desc.has_softcap);
  EXPECT_FLOAT_EQ(g[0].softcap, 50.0f);
  EXPECT_EQ(g[0].desc.seqlen_k, 2048);
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "mistral-7b"}, &a, &e)) << e;
  g = tune::expand_grid(a);
  ASSERT_FALSE(g.empty());
  EXPECT_EQ(g[0].desc.mask, gen::kMaskWindow);
  EXPECT_EQ(g[0].desc.win_left + 1, 4096);
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "gpt2"}, &a, &e)) << e;
  EXPECT_EQ(tune::expand_grid(a)[0].desc.heads_q, 12);
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "ci"}, &a, &e)) << e;
  EXPECT_EQ(tune::expand_grid(a).size(), 2u);  // none + causal, one length

  // A full explicit grid: the product of the lists.
  ASSERT_TRUE(tune::parse_tune_args(
      {"--dtypes", "bf16,fp16", "--head-dims", "64,128", "--heads", "16", "--kv-heads", "16,4", "--seqlens", "512:2048",
       "--masks", "none,causal,window:128:0", "--features", "none,bias+alibi,softcap:30"},
      &a, &e))
      << e;
  g = tune::expand_grid(a);
  EXPECT_EQ(g.size(), 2u * 2 * 2 * 3 * 3 * 3);
  int gqa = 0, bias_alibi = 0;
  for (const auto& p : g) {
    gqa += p.desc.heads_kv == 4;
    bias_alibi += p.desc.has_bias && p.desc.has_alibi;
  }
  EXPECT_EQ(gqa, static_cast<int>(g.size()) / 2);
  EXPECT_EQ(bias_alibi, static_cast<int>(g.size()) / 3);

  // gpt-oss: attention sinks, alone and with a window.
  ASSERT_TRUE(tune::parse_tune_args({"--dtypes", "bf16", "--head-dims", "64", "--heads", "64", "--kv-heads", "8",
                                     "--seqlens", "1024", "--masks", "causal,window:128:0", "--features", "sinks"},
                                    &a, &e))
      << e;
  g = tune::expand_grid(a);
  ASSERT_EQ(g.size(), 2u);
  for (const auto& p : g) EXPECT_TRUE(p.desc.has_sinks && !p.desc.has_bias && !p.desc.has_alibi);
}

TEST(FaTuneArgs, DevicesParseAndResolve) {
  tune::TuneArgs a;
  std::string e;
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "ci", "--devices", "all"}, &a, &e)) << e;
  EXPECT_TRUE(a.all_devices);
  EXPECT_TRUE(a.devices_given());
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "ci", "--devices=2,0,1"}, &a, &e)) << e;
  EXPECT_FALSE(a.all_devices);
  EXPECT_EQ(a.devices, (std::vector<int>{2, 0, 1}));  // the order given
  std::vector<int> got;
  EXPECT_TRUE(tune::resolve_devices(a, 4, 0, &got, &e)) << e;
  EXPECT_EQ(got, (std::vector<int>{2, 0, 1}));
  EXPECT_FALSE(tune::resolve_devices(a, 2, 0, &got, &e));
  EXPECT_EQ(e, "device 2 does not exist (this host has 2 GPUs: 0..1)");
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "ci", "--devices", "all"}, &a, &e)) << e;
  EXPECT_TRUE(tune::resolve_devices(a, 3, 0, &got, &e));
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(tune::resolve_devices(a, 1, 0, &got, &e));
  EXPECT_EQ(got, (std::vector<int>{0}));
  EXPECT_FALSE(tune::resolve_devices(a, 0, 0, &got, &e));
  EXPECT_EQ(e, "no GPU is present");
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "ci", "--devices", "1"}, &a, &e)) << e;
  EXPECT_FALSE(tune::resolve_devices(a, 1, 0, &got, &e));
  EXPECT_EQ(e, "device 1 does not exist (this host has 1 GPU: 0..0)");
  ASSERT_TRUE(tune::parse_tune_args({"--preset", "ci"}, &a, &e)) << e;  // not given: the context's device
  EXPECT_FALSE(a.devices_given());
  EXPECT_TRUE(tune::resolve_devices(a, 8, 5, &got, &e));
  EXPECT_EQ(got, (std::vector<int>{5}));
  const std::string help = run_cli({"--help"}).out;
  EXPECT_NE(help.find("--devices all|LIST"), std::string::npos) << help;
}

TEST(FaTuneArgs, ShardUnitsKeepEachTuningKeyTogetherInGridOrder) {
  tune::TuneArgs a;
  std::string e;
  ASSERT_TRUE(tune::parse_tune_args({"--dtypes", "bf16,fp16", "--head-dims", "64,128", "--heads", "8", "--masks",
                                     "none,causal", "--seqlens", "512,600,700,1024,4096", "--batch-tokens", "512"},
                                    &a, &e))
      << e;
  const std::vector<tune::GridPoint> grid = tune::expand_grid(a);
  for (bool by_semantic : {false, true}) {
    const auto units = tune::shard_units(grid, 90, by_semantic);
    auto key = [&](size_t i) {
      const gen::Semantic s = gen::select_forward(grid[i].desc, 90);
      return by_semantic ? tune::tuning_semantic_key(s) : tune::tuning_key(s, grid[i].desc);
    };
    std::vector<int> seen(grid.size(), 0);
    std::set<std::string> keys;
    size_t last_first = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      ASSERT_FALSE(units[u].empty());
      if (u > 0) {
        EXPECT_GT(units[u].front(), last_first);  // units in grid order of their first point
      }
      last_first = units[u].front();
      EXPECT_TRUE(keys.insert(key(units[u].front())).second) << "a key split over two units";
      for (size_t k = 0; k < units[u].size(); ++k) {
        ++seen[units[u][k]];
        EXPECT_EQ(key(units[u][k]), key(units[u].front()));
        if (k > 0) { EXPECT_GT(units[u][k], units[u][k - 1]); }
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1);
    if (by_semantic) {
      EXPECT_EQ(units.size(), 8u);  // 2 dtypes x 2 head dims x 2 masks
    } else {
      EXPECT_GT(units.size(), 8u);  // lengths in several buckets
    }
  }
}

// An ordinal past the host's GPUs is a command-line error naming it (exit 2) where a GPU is present; without one
// the missing GPU is reported first (exit 3).
// fa-tune --devices compiles the grid's candidates once on the threads every GPU brings (the one-GPU cap of 8 each,
// bounded by the host's cores and memory); $FA_TUNE_THREADS sets the total.
TEST(FaTuneArgs, EachGpuBringsTheOneGpuCompileThreads) {
  const char* saved = std::getenv("FA_TUNE_THREADS");
  const std::string keep = saved != nullptr ? saved : "";
  unsetenv("FA_TUNE_THREADS");
  const int one = fa::tune::default_compile_threads();
  EXPECT_EQ(fa::tune::multi_device_compile_threads(1), one);
  EXPECT_GE(one, 1);
  EXPECT_LE(one, 8);
  for (int gpus : {2, 4, 8}) {
    const int n = fa::tune::multi_device_compile_threads(gpus);
    EXPECT_GE(n, one) << gpus;
    EXPECT_LE(n, 8 * gpus) << gpus;
    EXPECT_LE(n, std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) << gpus;
  }
  setenv("FA_TUNE_THREADS", "5", 1);
  EXPECT_EQ(fa::tune::default_compile_threads(), 5);
  EXPECT_EQ(fa::tune::multi_device_compile_threads(4), 5);
  if (saved != nullptr) setenv("FA_TUNE_THREADS", keep.c_str(), 1);
  else unsetenv("FA_TUNE_THREADS");
}

// $FA_TUNE_THREADS and $FA_TUNE_BUDGET_MS are validated as every other variable is: a bad value fails
// fa_context_create (and so fa-tune) naming the variable, the expected and the actual value; a good one is used.
TEST(FaTuneEnv, ThreadsAndBudgetAreValidated) {
  for (const char* bad : {"abc", "0", "-3", "257", "4x", "1.5"}) {
    const std::string err = test::context_create_error("FA_TUNE_THREADS", bad);
    EXPECT_EQ(err, std::string("FA_ERROR_INVALID_ARGUMENT: FA_TUNE_THREADS: expected a whole number of compile "
                               "threads in [1, 256] (unset: automatic), got '") +
                       bad + "'");
  }
  for (const char* bad : {"fast", "0", "-1", "4000000", "nan", "inf", "10ms"}) {
    const std::string err = test::context_create_error("FA_TUNE_BUDGET_MS", bad);
    EXPECT_EQ(err, std::string("FA_ERROR_INVALID_ARGUMENT: FA_TUNE_BUDGET_MS: expected milliseconds in (0, 3600000] "
                               "(unset: 2000), got '") +
                       bad + "'");
  }
  {
    test::ScopedEnv threads("FA_TUNE_THREADS", "3"), budget("FA_TUNE_BUDGET_MS", "250.5");
    fa_context c = test::make_context(":memory:", FA_TUNE_DEFAULTS_ONLY);
    EXPECT_NE(c, nullptr);
    fa_context_destroy(c);
    EXPECT_EQ(tune::default_compile_threads(), 3);
    EXPECT_EQ(tune::default_budget_ms(), 250.5);
  }
  {
    test::ScopedEnv threads("FA_TUNE_THREADS", ""), budget("FA_TUNE_BUDGET_MS", nullptr);
    EXPECT_EQ(tune::default_budget_ms(), 2000.0);
    EXPECT_GE(tune::default_compile_threads(), 1);
  }
  test::ScopedEnv threads("FA_TUNE_THREADS", "abc");
  const CliRun r = run_cli({"--preset", "ci", "--dry-run", "--cache", ":memory:"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("FA_TUNE_THREADS: expected a whole number of compile threads in [1, 256]"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("got 'abc'"), std::string::npos) << r.err;
}

TEST(FaTuneCli, DevicesBeyondTheHostAreRejected) {
  const CliRun r = run_cli({"--preset", "ci", "--cache", ":memory:", "--devices", "1023", "--no-progress"});
  if (r.rc == 3) {
    EXPECT_NE(r.err.find("no usable GPU"), std::string::npos) << r.err;
    return;
  }
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("fa-tune: --devices: device 1023 does not exist"), std::string::npos) << r.err;
}

TEST(FaTuneCli, MissingGpuExitsWith3) {
  fa_context c = nullptr;
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = ":memory:";
  ASSERT_EQ(fa_context_create(&o, &c), FA_OK);
  const bool has_device = fa_context_has_device(c) == 1;
  fa_context_destroy(c);
  if (has_device) GTEST_SKIP() << "a GPU is present; the no-GPU path cannot be exercised here";
  const CliRun r = run_cli({"--preset", "ci", "--cache", ":memory:"});
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("--dry-run"), std::string::npos) << r.err;
}

TEST(FaTuneCli, DryRunOfTheCiPresetCompilesAndPersists) {
  const test::TempDir tmp("tune_cli");
  const std::string dir = tmp.path();
  const std::string cache = dir + "/cache.sqlite", json = dir + "/dry.json", exported = dir + "/export.sqlite";
  const std::vector<std::string> args = {"--preset", "ci",      "--dry-run", "--arch", "80", "--max-candidates",
                                         "2",        "--cache", cache,       "--json", json, "--no-progress"};
  const CliRun r = run_cli(args);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("dry run for sm_80: 2 grid points, 2 kernel semantics"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cache: " + cache + " ("), std::string::npos) << "the file written is not named: " << r.out;
  EXPECT_EQ(r.out.find("cache: " + cache + " (0 kB)"), std::string::npos) << "its size was taken too early";
  EXPECT_EQ(r.err, "") << "--no-progress printed progress";
  std::ifstream jf(json);
  std::stringstream js;
  js << jf.rdbuf();
  EXPECT_NE(js.str().find("\"mode\":\"dry-run\""), std::string::npos);
  EXPECT_NE(js.str().find("\"status\":\"ok\""), std::string::npos);
  // Every compiled kernel is in the cache now: a second dry run compiles nothing and says so. Without --no-progress,
  // and with stderr not a terminal, progress is one final line; --progress=lines gives a line per kernel.
  size_t kernels = 0;
  ASSERT_EQ(std::sscanf(r.out.substr(r.out.find('\n') + 1).c_str(), "%zu kernel", &kernels), 1) << r.out;
  EXPECT_NE(r.out.find(": " + std::to_string(kernels) + " compiled by NVRTC ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("), 0 loaded from the cache"), std::string::npos) << r.out;
  std::vector<std::string> with_progress(args.begin(), args.end() - 1);
  const CliRun again = run_cli(with_progress);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.out.find(": 0 compiled by NVRTC (0.0 s of NVRTC time), " + std::to_string(kernels) +
                           " loaded from the cache"),
            std::string::npos)
      << again.out;
  EXPECT_EQ(lines(again.err), 1u) << again.err;
  EXPECT_EQ(again.err.rfind("compile: " + std::to_string(kernels) + " done in ", 0), 0u) << again.err;
  with_progress.push_back("--progress=lines");
  const CliRun lined = run_cli(with_progress);
  ASSERT_EQ(lined.rc, 0) << lined.err;
  EXPECT_EQ(lines(lined.err), kernels) << lined.err;
  EXPECT_EQ(lined.err.rfind("compile [1/" + std::to_string(kernels) + "] ", 0), 0u) << lined.err;
  // --list shows the cubins with their shared memory (the dynamic tiles, not ptxas's static 0) and leaves the file
  // as it was; --export copies them.
  const std::vector<char> before = read_bytes(cache);
  const CliRun list = run_cli({"--list", "--cache", cache, "--export", exported});
  ASSERT_EQ(list.rc, 0) << list.err;
  EXPECT_NE(list.out.find("sm_80"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("(read-only)"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find(" smem "), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find(" smem 0 "), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find(" smem -1 "), std::string::npos) << list.out;
  EXPECT_EQ(read_bytes(cache), before);
  EXPECT_NE(
      list.out.find("exported " + std::to_string(kernels) + " rows of " + cache + " into the new file " + exported),
      std::string::npos)
      << list.out;
  EXPECT_EQ(test::side_files(dir), std::vector<std::string>{}) << "--list / --export left SQLite's side files";
  {
    cache::Env env;
    auto db = cache::Db::open(exported, env);
    EXPECT_FALSE(db->list_cubins(true).empty());
  }
  const CliRun prune = run_cli({"--prune", "--cache", cache});
  EXPECT_EQ(prune.rc, 0) << prune.err;
  EXPECT_NE(prune.out.find("pruned 0 stale rows from " + cache), std::string::npos) << prune.out;
}

TEST(FaTuneCli, ListNeverModifiesACorruptOrMissingCache) {
  const test::TempDir tmp("tune_cli");
  const std::string dir = tmp.path();
  const std::string cache = dir + "/cache.sqlite", missing = dir + "/missing.sqlite";
  { std::ofstream(cache, std::ios::binary) << std::string(6000, 'q'); }
  const std::vector<char> before = read_bytes(cache);
  // One line saying what is wrong with the file, and nothing about an in-memory cache (fa-tune uses none here).
  const CliRun r = run_cli({"--list", "--cache", cache});
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("fa-tune: " + cache + " is not a valid fa cache: cannot be read as a database: ", 0), 0u)
      << r.err;
  EXPECT_EQ(r.err.find("memory"), std::string::npos) << r.err;
  const CliRun ex = run_cli({"--export", dir + "/out.sqlite", "--cache", cache});  // a copy of nothing is no export
  EXPECT_EQ(ex.rc, 1);
  EXPECT_EQ(ex.err, r.err);
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.sqlite"));
  EXPECT_EQ(read_bytes(cache), before);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".corrupt-"), std::string::npos) << e.path();
  }
  const CliRun m = run_cli({"--list", "--cache", missing});
  EXPECT_EQ(m.rc, 0) << m.err;
  EXPECT_NE(m.out.find("no such file"), std::string::npos) << m.out;
  EXPECT_EQ(m.err, "");
  EXPECT_FALSE(std::filesystem::exists(missing));
}

TEST(FaTuneCli, FailedExportAndImportSayItOnce) {
  const test::TempDir tmp("tune_cli");
  const std::string dir = tmp.path();
  const std::string cache = dir + "/cache.sqlite", plain = dir + "/plain.txt";
  { std::ofstream(plain) << "not a directory"; }
  cache::Env env;
  { ASSERT_TRUE(cache::Db::open(cache, env)->put_tune_results({{"s", "b", "t", 1.0, "ok"}})); }
  const std::string bad_target = plain + "/sub/export.sqlite", missing = dir + "/missing.sqlite";
  testing::internal::CaptureStderr();  // the library's own log must stay quiet: fa-tune reports the failure
  const CliRun ex = run_cli({"--cache", cache, "--export", bad_target});
  const CliRun im = run_cli({"--cache", ":memory:", "--import", missing});
  const std::string library_log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(library_log, "");
  EXPECT_EQ(ex.rc, 1);
  EXPECT_EQ(lines(ex.err), 1u) << ex.err;
  EXPECT_EQ(ex.err.rfind("fa-tune: export to " + bad_target + ": ", 0), 0u) << ex.err;
  EXPECT_EQ(im.rc, 1);
  EXPECT_EQ(im.err, "fa-tune: --import: " + missing +
                        " is not a valid fa cache: no such file; nothing was imported or "
                        "created\n");
  EXPECT_EQ(ex.err.find("fa cache"), std::string::npos) << ex.err;
  EXPECT_EQ(ex.err.find("cache: cache"), std::string::npos) << ex.err;
}
