// test_log.cpp -- $FA_LOG and fa_context_options.verbose: the level parser, a bad value rejected by
// fa_context_create, cache trouble warned on stderr by default (once per message) and silenced by FA_LOG=off, and
// the levels verbose raises to.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "fa/fa.h"
#include "runtime/context.h"
#include "runtime/log.h"
#include "tests/cpu/context_support.h"

namespace {

using fa::rt::LogLevel;
using fa::test::count_of;

// A file that is not a database at dir/name: opening a context on it moves it aside with a warning.
std::string corrupt_cache(const std::string& dir, const char* name) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << std::string(4096, 'z');
  return path;
}

// Creates and destroys a context on `cache` with `verbose`, returning what it printed on stderr.
std::string stderr_of_context(const std::string& cache, int verbose, fa_status* st) {
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = cache.c_str();
  o.verbose = verbose;
  fa_context c = nullptr;
  testing::internal::CaptureStderr();
  *st = fa_context_create(&o, &c);
  fa_context_destroy(c);
  return testing::internal::GetCapturedStderr();
}

TEST(Log, LevelNamesParse) {
  for (const LogLevel l : {LogLevel::kOff, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug}) {
    LogLevel got = LogLevel::kOff;
    ASSERT_TRUE(fa::rt::parse_log_level(fa::rt::log_level_name(l), &got)) << fa::rt::log_level_name(l);
    EXPECT_EQ(got, l);
  }
  LogLevel untouched = LogLevel::kDebug;
  for (const char* bad : {"", "WARN", "verbose", "2", "warning"}) {
    EXPECT_FALSE(fa::rt::parse_log_level(bad, &untouched)) << bad;
    EXPECT_EQ(untouched, LogLevel::kDebug);
  }
}

TEST(Log, EachMessagePrintedOncePerProcessAndOnlyUpToTheThreshold) {
  // unique in this process
  const std::string msg = "test message " + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  testing::internal::CaptureStderr();
  fa::rt::log_line(LogLevel::kWarn, LogLevel::kInfo, msg);  // above the threshold: not printed, not remembered
  fa::rt::log_line(LogLevel::kInfo, LogLevel::kInfo, msg);
  fa::rt::log_line(LogLevel::kDebug, LogLevel::kWarn, msg);
  fa::rt::log_line(LogLevel::kDebug, LogLevel::kDebug, "other " + msg, "key " + msg);
  fa::rt::log_line(LogLevel::kDebug, LogLevel::kDebug, "another " + msg, "key " + msg);  // same once_key
  fa::rt::log_line(LogLevel::kOff, LogLevel::kWarn, "off " + msg);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(err, "fa: info: " + msg + "\n"), 1u) << err;
  EXPECT_EQ(count_of(err, msg), 2u) << err;
  EXPECT_EQ(count_of(err, "fa: debug: other " + msg), 1u) << err;
}

TEST(Log, BadFaLogIsRejectedByContextCreate) {
  const std::string err = fa::test::context_create_error("FA_LOG", "loud");
  EXPECT_NE(err.find("FA_LOG"), std::string::npos) << err;
  EXPECT_NE(err.find("off, warn, info or debug"), std::string::npos) << err;
  EXPECT_NE(err.find("'loud'"), std::string::npos) << err;
}

TEST(Log, CacheTroubleIsWarnedByDefaultAndSilencedByOff) {
  const fa::test::TempDir tmp("log_cache");
  const std::string dir = tmp.path();
  fa_status st = FA_OK;
  {
    fa::test::ScopedEnv env("FA_LOG", nullptr);
    const std::string err = stderr_of_context(corrupt_cache(dir, "a.sqlite"), 0, &st);
    ASSERT_EQ(st, FA_OK);
    EXPECT_EQ(count_of(err, "fa: warning: cache: "), 1u) << err;
    EXPECT_EQ(count_of(err, "moved aside"), 1u) << err;
    EXPECT_NE(err.find(dir + "/a.sqlite"), std::string::npos) << err;
  }
  {
    fa::test::ScopedEnv env("FA_LOG", "off");
    // verbose=1 asks for at least info in code, so it wins over the environment's off.
    const std::string err = stderr_of_context(corrupt_cache(dir, "b.sqlite"), 1, &st);
    ASSERT_EQ(st, FA_OK);
    EXPECT_EQ(count_of(err, "moved aside"), 1u) << err;
    const std::string quiet = stderr_of_context(corrupt_cache(dir, "c.sqlite"), 0, &st);
    ASSERT_EQ(st, FA_OK);
    EXPECT_EQ(quiet, "");
  }
}

TEST(Log, VerboseRaisesTheLevelToInfo) {
  struct Case {
    const char* env;
    int verbose;
    LogLevel want;
  };
  for (const Case& k :
       {Case{nullptr, 0, LogLevel::kWarn}, Case{nullptr, 1, LogLevel::kInfo}, Case{"off", 0, LogLevel::kOff},
        Case{"debug", 0, LogLevel::kDebug}, Case{"debug", 1, LogLevel::kDebug}, Case{"warn", 1, LogLevel::kInfo}}) {
    fa::test::ScopedEnv env("FA_LOG", k.env);
    fa_context_options o;
    fa_context_options_init(&o);
    o.cache_path = ":memory:";
    o.verbose = k.verbose;
    fa_context c = nullptr;
    ASSERT_EQ(fa_context_create(&o, &c), FA_OK) << fa_last_error();
    EXPECT_EQ(c->log_level, k.want) << (k.env ? k.env : "unset") << " verbose " << k.verbose;
    fa_context_destroy(c);
  }
}

}  // namespace
