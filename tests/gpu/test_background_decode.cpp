// test_background_decode.cpp -- under the default policy (FA_TUNE_ON_FIRST_USE) the background tuner tunes the keys
// of every decode family on their first use, with no warning: contiguous and paged caches with used lengths, a
// forced split count, speculative decode over a paged cache, and (on sm_90) MLA's latent cache, contiguous and paged.
// Each call matches the float64 oracle before the tuning (defaults) and after the swap (outputs poisoned, NaN past the
// used lengths); a second context on the same cache file under FA_TUNE_REQUIRE_TUNED runs every case (so each key was
// stored tuned), and nothing the library printed on stderr meanwhile is a warning. (Before the tuner's private buffers
// followed the problem's cache layout, every paged and MLA key failed with "private buffers give another key".)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/context.h"
#include "tests/cpu/context_support.h"
#include "tests/gpu/decode_support.h"
#include "tuner/chooser.h"

namespace fa::test {
namespace {

// Captures what is written on file descriptor 2 from construction to text().
class StderrCapture {
 public:
  explicit StderrCapture(const std::string& path) : path_(path) {
    std::fflush(stderr);
    saved_ = dup(2);
    FILE* f = std::fopen(path.c_str(), "w");
    if (f != nullptr) {
      dup2(fileno(f), 2);
      std::fclose(f);
    }
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

struct BgCase {
  std::string name;
  DecodeSpec spec;
  int page_size = 0;  // 0: contiguous
  bool latent = false, with_used = true;
  int splits = 0;
};

std::vector<BgCase> cases(bool hopper) {
  DecodeSpec gqa;
  gqa.batch = 4;
  gqa.cap = 1000;
  gqa.hq = 16;
  gqa.hkv = 2;
  DecodeSpec spec = gqa;
  spec.sq = 4;
  spec.mask = FA_MASK_CAUSAL;
  DecodeSpec split = gqa;  // 2 sequences: another shape bucket (bh) than gqa's, so a key of its own
  split.batch = 2;
  DecodeSpec wide = gqa;
  wide.d = wide.dv = 256;
  wide.softcap = 30.0f;
  std::vector<BgCase> out = {
      {"contiguous, used lengths", gqa, 0, false, true, 0},
      {"paged 64, used lengths", gqa, 64, false, true, 0},
      {"paged 16, speculative causal", spec, 16, false, true, 0},
      {"contiguous, 3 splits forced", split, 0, false, false, 3},
      {"paged 128, d 256 softcap", wide, 128, false, true, 0},
  };
  if (hopper) {
    out.push_back({"MLA latent contiguous", mla_spec(2, 700), 0, true, true, 0});
    out.push_back({"MLA latent paged 64", mla_spec(2, 700), 64, true, true, 0});
  }
  return out;
}

struct Prepared {
  BgCase c;
  DecodeData x;
  Cache cache;
  std::vector<double> o_ref, lse_ref;
};

void prepare(std::mt19937_64& rng, const BgCase& bc, Prepared* p) {
  p->c = bc;
  make_data(rng, bc.spec, &p->x);
  if (bc.latent) make_latent(&p->x);
  std::vector<int> used(static_cast<size_t>(bc.spec.batch), bc.spec.cap);
  if (bc.with_used) used = random_used(rng, bc.spec.batch, bc.spec.cap);
  oracle_of(p->x, used, {}, &p->o_ref, &p->lse_ref);
  p->cache.latent = bc.latent;
  if (bc.page_size > 0) make_paged(rng, p->x, used, bc.page_size, &p->cache);
  else make_contiguous(p->x, used, &p->cache);
  set_used(&p->cache, used);
}

std::string check(Prepared& p, fa_context ctx, const char* when) {
  const Out r = run(p.x, params_of(p.x, p.cache, p.c.with_used, p.c.splits), ctx);
  const std::string diff = compare(p.x, r, p.o_ref, p.lse_ref);
  return diff.empty() ? "" : p.c.name + " " + when + ": " + diff;
}

TEST(GpuBackgroundDecode, EveryDecodeFamilysFirstUseKeyIsTunedWithoutAWarning) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  const TempDir tmp("background_decode");
  const std::string dir = tmp.path();
  const std::string cache = dir + "/cache.sqlite";
  std::mt19937_64 rng(test_seed() + 23);
  const std::vector<BgCase> list = cases(g.ctx->arch >= 90);
  std::vector<Prepared> prepared(list.size());
  for (size_t i = 0; i < list.size(); ++i) prepare(rng, list[i], &prepared[i]);

  StderrCapture err(dir + "/stderr.txt");
  fa_context ctx = make_context(cache, FA_TUNE_ON_FIRST_USE);
  ASSERT_NE(ctx, nullptr);
  auto* chooser = dynamic_cast<tune::TuningChooser*>(ctx->chooser.get());
  ASSERT_NE(chooser, nullptr);
  chooser->options().max_candidates = 4;  // a short tuning: the background job's options are these
  chooser->options().budget_ms = 100;
  int failures = 0;
  for (Prepared& p : prepared) {
    const std::string diff = check(p, ctx, "at the defaults");
    if (!diff.empty()) ++failures, ADD_FAILURE() << diff;
  }
  const bool done = chooser->wait_background(600.0);
  const tune::BackgroundStats bs = chooser->background_stats();
  for (Prepared& p : prepared) {
    const std::string diff = check(p, ctx, "after the swap");
    if (!diff.empty()) ++failures, ADD_FAILURE() << diff;
  }
  fa_context_destroy(ctx);

  // Every key is in the file, tuned: a context that refuses untuned keys runs them all.
  fa_context strict = make_context(cache, FA_TUNE_REQUIRE_TUNED);
  ASSERT_NE(strict, nullptr);
  int untuned = 0;
  for (Prepared& p : prepared) {
    const std::string diff = check(p, strict, "under FA_TUNE_REQUIRE_TUNED");
    if (!diff.empty()) ++untuned, ADD_FAILURE() << diff;
  }
  fa_context_destroy(strict);
  const std::string printed = err.text();

  EXPECT_TRUE(done) << "the background tuning did not finish";
  EXPECT_EQ(bs.submitted, static_cast<long long>(list.size()));
  EXPECT_EQ(bs.finished, bs.submitted);
  EXPECT_EQ(bs.failed, 0);
  EXPECT_EQ(printed.find("warning"), std::string::npos) << printed;
  std::printf(
      "GPU SUMMARY background decode: %zu keys, %lld tuned in the background, %lld failed, %d wrong answers, "
      "%d untuned under require\n",
      list.size(), bs.finished, bs.failed, failures, untuned);
}

}  // namespace
}  // namespace fa::test
