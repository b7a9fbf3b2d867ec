// test_mask_cache.cpp -- the context's cache of block classifications on the GPU (runtime/mask_cache.h; fa.h,
// "Caching the classification") against the float64 oracle: a document mask whose ids live in a device buffer,
// fa_mods.mask_epoch set. The first call classifies into an entry, a repeated call launches no classification
// (the cache's counters: the classification launches do not move) and still matches the oracle; new ids written at
// the same address with a new epoch give the new answer; epoch 0 never caches; a hit on another stream waits for
// the fill on the first; the backward's (transposed) classification is cached alike. Outputs and gradients are
// poisoned before every run.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "runtime/context.h"
#include "tests/gpu/gpu_support.h"
#include "tests/gpu/grad_support.h"

namespace fa::test {
namespace {

constexpr const char* kDocBody = "const int* d = static_cast<const int*>(u.buf[0]);\nreturn j <= i && d[i] == d[j];";

// Document ids [s] (`docs` random documents) on the device, and the oracle's mask over the host copy.
struct DocIds {
  int s = 0;
  std::vector<int> ids;
  DevBuf buf;
  DocIds(std::mt19937_64& rng, int len, int docs) : s(len), ids(size_t(len)), buf(size_t(len) * 4) {
    refill(rng, docs);
  }
  // New ids written at the same device address.
  void refill(std::mt19937_64& rng, int docs) {
    std::vector<int> cuts;
    for (int n = 1; n < docs; ++n) cuts.push_back(1 + int(rng() % uint64_t(s - 1)));
    std::sort(cuts.begin(), cuts.end());
    for (int j = 0; j < s; ++j) ids[size_t(j)] = int(std::upper_bound(cuts.begin(), cuts.end(), j) - cuts.begin());
    buf.upload(ids.data(), ids.size() * 4);
  }
  std::function<bool(int, int, int, int)> mask() const {
    const std::vector<int>* p = &ids;
    return [p](int, int, int i, int j) { return j <= i && (*p)[size_t(i)] == (*p)[size_t(j)]; };
  }
};

// A bf16 case of batch 2, s x s, 4 query heads over 2 KV heads at head dim d under doc's mask (its oracle computed
// now), with the mods m (version 4, epoch `epoch`, classes shared over batch entries and heads) attached.
void doc_case(std::mt19937_64& rng, const DocIds& doc, int d, uint64_t epoch, Case* c, fa_mods* m) {
  c->dtype = FA_DTYPE_BF16;
  c->op.batch = 2;
  c->op.seqlen_q = c->op.seqlen_k = doc.s;
  c->op.heads_q = 4;
  c->op.heads_kv = 2;
  c->op.head_dim = c->op.head_dim_v = d;
  c->op.mask_mod = doc.mask();
  c->want_lse = true;
  c->force_aligned = true;
  materialize(rng, c);
  fa_mods_init(m);
  m->mask_mod = kDocBody;
  m->mask_mod_depends = 0;
  m->num_buffers = 1;
  m->buffers[0] = fa_user_buffer{doc.buf.get(), FA_USER_I32, 1, {doc.s}, {1}};
  m->mask_epoch = epoch;
  c->params.mods = m;
}

void repoison(Case& c) {
  const size_t es = c.dtype == FA_DTYPE_FP32 ? 4 : 2;
  std::vector<uint8_t> ff(c.o_n * es, 0xff);
  c.d_o.upload(ff.data(), ff.size());
  std::vector<uint8_t> lff(std::max<size_t>(c.lse_n, 1) * 4, 0xff);
  c.d_lse.upload(lff.data(), lff.size());
}

rt::MaskCacheStats stats() { return gpu().ctx->mask_cache->stats(); }

void expect_matches(const CaseResult& r, const char* what) {
  EXPECT_TRUE(r.failure.empty()) << what << ": " << r.failure;
  EXPECT_LE(r.err_o, tolerance(FA_DTYPE_BF16)) << what;
  EXPECT_LE(r.err_lse, 1e-3) << what;
  EXPECT_TRUE(r.padding_intact) << what;
}

// The cache's teardown frees its entries after cuCtxSynchronize: that call must synchronize (resolved at CUDA 13,
// the driver table's entry was cuCtxSynchronize_v2, which failed with 709 when called without a context).
TEST(GpuMaskCache, TheTeardownsContextSynchronizeSucceeds) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  rt::CtxGuard guard(g.ctx);
  ASSERT_TRUE(guard.status().ok()) << guard.status().message;
  EXPECT_EQ(g.ctx->drv->cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST(GpuMaskCache, AHitLaunchesNoClassificationAndANewEpochSeesNewContents) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  ASSERT_TRUE(g.ctx->mask_cache->enabled()) << "FA_MASK_CACHE_MB=0 in the environment";
  std::mt19937_64 rng(test_seed() + 4101);
  for (int d : {64, 128}) {
    DocIds doc(rng, 700, 5);
    Case c;
    fa_mods m;
    doc_case(rng, doc, d, 1, &c, &m);
    const rt::MaskCacheStats s0 = stats();
    expect_matches(check_case(c), "first call (fills an entry)");
    const rt::MaskCacheStats s1 = stats();
    EXPECT_EQ(s1.fills, s0.fills + 1);
    EXPECT_EQ(s1.classified, s0.classified + 1);
    repoison(c);
    expect_matches(check_case(c), "repeated call (a hit)");
    const rt::MaskCacheStats s2 = stats();
    EXPECT_EQ(s2.hits, s1.hits + 1);
    EXPECT_EQ(s2.classified, s1.classified) << "a hit launches no classification";
    // new ids at the same address, new inputs and oracle, and a new epoch: the new answer
    doc.refill(rng, 9);
    materialize(rng, &c);
    c.params.mods = &m;
    m.mask_epoch = 2;
    expect_matches(check_case(c), "new contents, new epoch");
    const rt::MaskCacheStats s3 = stats();
    EXPECT_EQ(s3.fills, s2.fills + 1);
    EXPECT_EQ(s3.classified, s2.classified + 1);
    repoison(c);
    expect_matches(check_case(c), "new contents, repeated");
    EXPECT_EQ(stats().classified, s3.classified);
    // epoch 0: classified on every call, nothing cached or looked up
    m.mask_epoch = 0;
    repoison(c);
    const rt::MaskCacheStats s4 = stats();
    expect_matches(check_case(c), "epoch 0");
    const rt::MaskCacheStats s5 = stats();
    EXPECT_EQ(s5.classified, s4.classified + 1);
    EXPECT_EQ(s5.hits, s4.hits);
    EXPECT_EQ(s5.fills, s4.fills);
  }
}

// A fill on the test stream and, before it is synchronized, a hit on a second stream (into its own output): the
// hit waits for the fill's classification.
TEST(GpuMaskCache, AHitOnAnotherStreamWaitsForTheFill) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 4102);
  DocIds doc(rng, 1000, 7);
  Case c;
  fa_mods m;
  doc_case(rng, doc, 128, 77, &c, &m);
  ASSERT_EQ(fa_prepare(g.ctx, &c.params), FA_OK) << fa_last_error();  // compiled: the two calls below only launch
  CUstream other = nullptr;
  ASSERT_EQ(g.d->cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  DevBuf o2(c.d_o.bytes), lse2(c.d_lse.bytes);
  std::vector<uint8_t> ff(std::max(c.d_o.bytes, c.d_lse.bytes), 0xff);
  o2.upload(ff.data(), o2.bytes);
  lse2.upload(ff.data(), lse2.bytes);
  fa_params p2 = c.params;
  p2.o = o2.get();
  p2.lse = static_cast<float*>(lse2.get());
  const rt::MaskCacheStats s0 = stats();
  ASSERT_EQ(fa_run(g.ctx, &c.params, g.stream), FA_OK) << fa_last_error();
  ASSERT_EQ(fa_run(g.ctx, &p2, other), FA_OK) << fa_last_error();
  ASSERT_EQ(g.d->cuStreamSynchronize(other), CUDA_SUCCESS);
  ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
  g.d->cuStreamDestroy(other);
  const rt::MaskCacheStats s1 = stats();
  EXPECT_EQ(s1.fills, s0.fills + 1);
  EXPECT_EQ(s1.hits, s0.hits + 1);
  expect_matches(compare_outputs(c), "the fill's stream");
  std::swap(c.d_o, o2);
  std::swap(c.d_lse, lse2);
  expect_matches(compare_outputs(c), "the hit's stream");
}

// The backward keeps its own classification (its tile, transposed too): the second backward hits and its gradients
// still match the oracle's.
TEST(GpuMaskCache, BackwardHitsGiveTheOracleGradients) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 4103);
  DocIds doc(rng, 640, 6);
  Case c;
  fa_mods m;
  doc_case(rng, doc, 64, 9, &c, &m);
  expect_matches(check_case(c), "forward");
  Grads gr;
  setup_grads(rng, c, gr);
  const rt::MaskCacheStats s0 = stats();
  const GradResult r1 = check_grads(c, gr);
  EXPECT_TRUE(r1.ok(FA_DTYPE_BF16)) << r1.failure << " dq " << r1.dq << " dk " << r1.dk << " dv " << r1.dv;
  const rt::MaskCacheStats s1 = stats();
  EXPECT_EQ(s1.fills, s0.fills + 1) << "the backward's classification is its own entry";
  const GradResult r2 = check_grads(c, gr);
  EXPECT_TRUE(r2.ok(FA_DTYPE_BF16)) << r2.failure << " dq " << r2.dq << " dk " << r2.dk << " dv " << r2.dv;
  const rt::MaskCacheStats s2 = stats();
  EXPECT_EQ(s2.hits, s1.hits + 1);
  EXPECT_EQ(s2.classified, s1.classified) << "a hit launches no classification";
}

}  // namespace
}  // namespace fa::test
