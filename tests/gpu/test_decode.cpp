// test_decode.cpp -- the KV-cache forward (fwd_split / fwd_mla + fwd_combine, issue 21) against the float64 oracle on
// fresh random problems: paged vs contiguous caches bit for bit at every page size 1..512 (same split count), split vs
// unsplit, random used lengths (0 and 1 included: o = 0, lse = -inf for 0), masks / softcap / ALiBi / GQA ratios /
// query tokens / head dims / dtypes, block-table entries outside the pool (masked, never read: the pool's other
// pages and the cache past the used lengths hold NaN), page layouts other than row-major pages (head-major, padded),
// and one captured CUDA graph replayed with new used lengths and block tables. Outputs are poisoned (NaN) before every
// run. The oracle runs per sequence on its used keys; keys of pages outside the pool are masked for it by a -inf bias.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "tests/gpu/decode_support.h"

namespace fa::test {
namespace {

#define REQUIRE_GPU() \
  Gpu& g = gpu();     \
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why

// Paged caches in `layout` at each of page_sizes bit for bit against the contiguous cache at the same split count
// (1 and 3), once the contiguous run matched the oracle.
void check_paged_matches_contiguous(std::mt19937_64& rng, const DecodeSpec& s, const std::vector<int>& page_sizes,
                                    PageLayout layout) {
  DecodeData x;
  make_data(rng, s, &x);
  const std::vector<int> used = random_used(rng, s.batch, s.cap);
  std::vector<double> o_ref, lse_ref;
  oracle_of(x, used, {}, &o_ref, &lse_ref);
  for (int splits : {1, 3}) {
    Cache flat;
    make_contiguous(x, used, &flat);
    set_used(&flat, used);
    const Out base = run(x, params_of(x, flat, true, splits));
    ASSERT_EQ(compare(x, base, o_ref, lse_ref), "") << describe(s) << " contiguous, splits " << splits;
    EXPECT_NE(base.key.find("fwd_split"), std::string::npos) << base.key;
    for (int ps : page_sizes) {
      Cache paged;
      make_paged(rng, x, used, ps, &paged, layout);
      set_used(&paged, used);
      const Out r = run(x, params_of(x, paged, true, splits));
      ASSERT_TRUE(r.failure.empty()) << r.failure;
      EXPECT_TRUE(r.o_bytes == base.o_bytes && r.lse_bytes == base.lse_bytes)
          << describe(s) << " layout " << int(layout) << " page size " << ps << " splits " << splits
          << ": paged differs from contiguous (" << compare(x, r, o_ref, lse_ref) << ")";
    }
  }
}

TEST(GpuDecode, PagedMatchesContiguousBitForBitAtEveryPageSize) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2101);
  for (int dtype : {FA_DTYPE_BF16, FA_DTYPE_FP16}) {
    DecodeSpec s;
    s.dtype = dtype;
    s.batch = 4;
    s.cap = 1100;
    s.hq = 8;
    s.hkv = 2;
    s.mask = dtype == FA_DTYPE_BF16 ? FA_MASK_CAUSAL : FA_MASK_NONE;
    s.sq = 2;
    check_paged_matches_contiguous(rng, s, {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}, kRowMajor);
  }
}

// Page layouts other than row-major pages: head-major pages ([hkv, page_size, d]: the page stride hkv * page_size
// row strides) and padded pages (a page stride that is no multiple of the row stride), page sizes 1..256.
TEST(GpuDecode, PagedLayoutsMatchContiguousBitForBit) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2112);
  DecodeSpec s;
  s.batch = 3;
  s.cap = 900;
  s.hq = 16;
  s.hkv = 4;
  for (PageLayout layout : {kHeadMajor, kPadded}) check_paged_matches_contiguous(rng, s, {1, 16, 64, 256}, layout);
}

TEST(GpuDecode, SplitAndUnsplitAgreeWithTheOracle) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2102);
  for (int cap : {64, 777, 5000}) {
    DecodeSpec s;
    s.batch = 2;
    s.cap = cap;
    s.hq = 16;
    s.hkv = 2;
    DecodeData x;
    make_data(rng, s, &x);
    std::vector<int> used(2, cap);
    std::vector<double> o_ref, lse_ref;
    oracle_of(x, used, {}, &o_ref, &lse_ref);
    Cache flat;
    make_contiguous(x, used, &flat);
    std::vector<std::vector<double>> outs;
    for (int splits : {1, 0, 2, 7, 64}) {
      const Out r = run(x, params_of(x, flat, false, splits));
      EXPECT_EQ(compare(x, r, o_ref, lse_ref), "") << describe(s) << " splits " << splits;
      if (r.failure.empty()) outs.push_back(decode(s.dtype, r.o_bytes));
    }
    for (size_t i = 1; i < outs.size(); ++i)
      EXPECT_LE(oracle::relative_error(outs[i], outs[0]), 2 * tolerance(s.dtype)) << describe(s) << " split run " << i;
  }
}

TEST(GpuDecode, RandomUsedLengthsFeaturesAndShapes) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2103);
  const int n = case_count(72);
  Pick pick{rng};
  int failures = 0;
  for (int c = 0; c < n; ++c) {
    DecodeSpec s;
    s.dtype = pick({FA_DTYPE_BF16, FA_DTYPE_FP16});
    const int group = pick({1, 4, 8});
    s.hkv = pick({1, 2});
    s.hq = s.hkv * group;
    const bool paged = c % 2 == 1;
    s.cap = pick({1, 17, 200, 640});
    random_features(pick, c, paged, &s);
    const int page_size = paged ? pick({1, 16, 64, 256}) : 0;
    const int splits = pick({0, 1, 3});
    std::string key;
    const std::string err = run_random_case(rng, s, page_size, splits, &key);
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << "case " << c << " " << describe(s) << (paged ? fmt::format(" paged {}", page_size) : "")
                    << " splits " << splits << ": " << err;
    } else {
      EXPECT_NE(key.find("fwd_split"), std::string::npos) << key;
    }
  }
  std::printf("GPU SUMMARY decode: %d random KV-cache problems, %d failed\n", n, failures);
}

// The family a latent MLA problem runs: the Hopper kernel (fwd_mla) on sm_90, the wide fwd_split kernel elsewhere.
std::string latent_family(const std::string& key) {
  return key.find(".sm90.") != std::string::npos ? "fwd_mla" : "fwd_split";
}

// One MLA-sized decode problem (wide heads, dv 512) against the oracle: contiguous at a forced split count (2 when the
// case says automatic) and automatic, without used lengths when every sequence uses its whole cache, and paged at
// each of page_sizes bit for bit against the contiguous run at the same split count (paged 64 also automatic). With a
// separate v the wide fwd_split kernel runs; with the latent layout (v = k's first columns) latent_family's.
struct MlaCase {
  int dtype, batch, sq, cap, hq, hkv, d, mask, wl, wr, splits;
};
void check_mla_case(std::mt19937_64& rng, const MlaCase& cs, bool latent, const std::vector<int>& page_sizes) {
  DecodeSpec s;
  s.dtype = cs.dtype;
  s.batch = cs.batch;
  s.sq = cs.sq;
  s.cap = cs.cap;
  s.hq = cs.hq;
  s.hkv = cs.hkv;
  s.d = cs.d;
  s.dv = 512;
  s.mask = cs.mask;
  s.wl = cs.wl;
  s.wr = cs.wr;
  DecodeData x;
  make_data(rng, s, &x);
  if (latent) make_latent(&x);
  const std::vector<int> used = random_used(rng, s.batch, s.cap);
  std::vector<double> o_ref, lse_ref;
  oracle_of(x, used, {}, &o_ref, &lse_ref);
  auto family = [&](const std::string& key) { return latent ? latent_family(key) : std::string("fwd_split"); };
  const int splits = cs.splits == 0 ? 2 : cs.splits;
  Cache flat;
  make_contiguous(x, used, &flat);
  flat.latent = latent;
  set_used(&flat, used);
  const Out base = run(x, params_of(x, flat, true, splits));
  EXPECT_EQ(compare(x, base, o_ref, lse_ref), "") << describe(s) << " contiguous, splits " << splits;
  EXPECT_NE(base.key.find(family(base.key)), std::string::npos) << base.key;
  const Out automatic = run(x, params_of(x, flat, true, 0));
  EXPECT_EQ(compare(x, automatic, o_ref, lse_ref), "") << describe(s) << " contiguous, automatic splits";
  if (*std::min_element(used.begin(), used.end()) == s.cap) {
    const Out plain = run(x, params_of(x, flat, false, cs.splits));
    EXPECT_EQ(compare(x, plain, o_ref, lse_ref), "") << describe(s) << " contiguous, no used lengths";
  }
  for (int ps : page_sizes) {
    Cache paged;
    make_paged(rng, x, used, ps, &paged);
    paged.latent = latent;
    set_used(&paged, used);
    const Out r = run(x, params_of(x, paged, true, splits));
    ASSERT_TRUE(r.failure.empty()) << r.failure;
    EXPECT_NE(r.key.find(family(r.key)), std::string::npos) << r.key;
    EXPECT_TRUE(r.o_bytes == base.o_bytes && r.lse_bytes == base.lse_bytes)
        << describe(s) << " page size " << ps << ": paged differs from contiguous (" << compare(x, r, o_ref, lse_ref)
        << ")";
    if (ps == 64) {
      const Out a = run(x, params_of(x, paged, true, 0));
      EXPECT_EQ(compare(x, a, o_ref, lse_ref), "") << describe(s) << " paged 64, automatic splits";
    }
  }
}

// MLA decode shapes with a separate v on the wide kernel (d 576 / dv 512, one latent KV head): 128 query heads (two
// 64-row tiles) and partial tiles (16 heads, several query tokens), used lengths 0 / 1 / full, causal masks, forced
// and automatic split counts, paged (page 64 and others) bit for bit against contiguous at the same split count.
TEST(GpuDecode, MlaWideHeadsMatchTheOracle) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2106);
  const MlaCase cases[] = {{FA_DTYPE_BF16, 3, 1, 300, 128, 1, 576, FA_MASK_NONE, -1, -1, 0},
                           {FA_DTYPE_BF16, 2, 1, 1000, 128, 1, 576, FA_MASK_NONE, -1, -1, 1},
                           {FA_DTYPE_FP16, 3, 5, 200, 16, 1, 576, FA_MASK_CAUSAL, -1, -1, 3},
                           {FA_DTYPE_BF16, 1, 2, 4100, 128, 1, 576, FA_MASK_CAUSAL, -1, -1, 0},
                           {FA_DTYPE_BF16, 3, 1, 96, 64, 1, 576, FA_MASK_NONE, -1, -1, 7}};
  for (const MlaCase& cs : cases) check_mla_case(rng, cs, false, {64, 1, 16, 256});
}

// MLA decode over the latent cache (fwd_mla on Hopper): 128 query heads (two 64-row tiles), partial tiles (16 / 32 /
// 64 heads, several query tokens, two latent heads), head dims 576 and 512, causal and window masks, used lengths 0 /
// 1 / full among random ones, forced and automatic split counts; every page size 1..512 bit for bit against the
// contiguous cache at the same split count.
TEST(GpuDecode, MlaLatentCacheMatchesTheOracleAtEveryPageSize) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2107);
  const MlaCase cases[] = {{FA_DTYPE_BF16, 3, 1, 300, 128, 1, 576, FA_MASK_NONE, -1, -1, 0},
                           {FA_DTYPE_BF16, 2, 1, 1000, 128, 1, 576, FA_MASK_NONE, -1, -1, 1},
                           {FA_DTYPE_FP16, 3, 5, 200, 16, 1, 576, FA_MASK_CAUSAL, -1, -1, 3},
                           {FA_DTYPE_BF16, 1, 2, 4100, 128, 1, 576, FA_MASK_CAUSAL, -1, -1, 0},
                           {FA_DTYPE_BF16, 3, 1, 96, 64, 1, 576, FA_MASK_NONE, -1, -1, 7},
                           {FA_DTYPE_BF16, 3, 3, 700, 32, 2, 512, FA_MASK_SLIDING_WINDOW, 40, 0, 2},
                           {FA_DTYPE_FP16, 4, 1, 2000, 128, 1, 576, FA_MASK_NONE, -1, -1, 0}};
  for (const MlaCase& cs : cases) check_mla_case(rng, cs, true, {1, 2, 4, 8, 16, 32, 64, 128, 256, 512});
}

// Block-table entries outside the pool at each page size (latent: MLA's v = k layout): their keys are masked (the
// oracle hides them with -inf), never read. Sequence 0: its second page is -1; sequence 1: its first page is past the
// pool; sequence 2: every page out.
void check_pages_outside_the_pool(const DecodeSpec& s, bool latent, std::initializer_list<int> page_sizes,
                                  uint64_t seed, PageLayout layout = kRowMajor) {
  std::mt19937_64 rng(seed);
  DecodeData x;
  make_data(rng, s, &x);
  if (latent) make_latent(&x);
  const std::vector<int> used = {300, 150, 77};
  for (int ps : page_sizes) {
    Cache cache;
    make_paged(rng, x, used, ps, &cache, layout);
    cache.latent = latent;
    std::vector<std::vector<uint8_t>> masked(size_t(s.batch), std::vector<uint8_t>(size_t(s.cap), 0));
    auto knock = [&](int b, int pg, int id) {
      cache.table[size_t(b) * cache.bt_stride + pg] = id;
      for (int r = 0; r < ps && pg * ps + r < s.cap; ++r) masked[size_t(b)][size_t(pg * ps + r)] = 1;
    };
    knock(0, 1, -1);
    knock(1, 0, cache.num_pages + 5);
    for (int pg = 0; pg * ps < used[2]; ++pg) knock(2, pg, pg % 2 ? cache.num_pages : -7);
    cache.d_bt.upload(cache.table.data(), cache.table.size() * 4);
    set_used(&cache, used);
    std::vector<double> o_ref, lse_ref;
    oracle_of(x, used, masked, &o_ref, &lse_ref);
    for (int splits : {1, 4}) {
      const Out r = run(x, params_of(x, cache, true, splits));
      EXPECT_EQ(compare(x, r, o_ref, lse_ref), "")
          << describe(s) << " page size " << ps << " splits " << splits << " layout " << int(layout);
      if (latent) { EXPECT_NE(r.key.find(latent_family(r.key)), std::string::npos) << r.key; }
    }
  }
}

// In each of make_paged's layouts (row-major, head-major and padded pages).
TEST(GpuDecode, PagesOutsideThePoolAreMaskedNeverRead) {
  REQUIRE_GPU();
  DecodeSpec s;
  s.batch = 3;
  s.cap = 300;
  s.hq = 8;
  s.hkv = 2;
  check_pages_outside_the_pool(s, false, {1, 16, 64}, test_seed() + 2104);
  check_pages_outside_the_pool(s, false, {1, 16, 64}, test_seed() + 2110, kHeadMajor);
  check_pages_outside_the_pool(s, false, {1, 16, 64}, test_seed() + 2111, kPadded);
}

TEST(GpuDecode, MlaLatentPagesOutsideThePoolAreMasked) {
  REQUIRE_GPU();
  check_pages_outside_the_pool(mla_spec(3, 300), true, {16, 64}, test_seed() + 2108);
}

// The driver's graph entry points (not in rt::Driver), from the already loaded libcuda.
struct GraphApi {
  CUresult (*begin)(CUstream, CUstreamCaptureMode) = nullptr;
  CUresult (*end)(CUstream, CUgraph*) = nullptr;
  CUresult (*instantiate)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*launch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*exec_destroy)(CUgraphExec) = nullptr;
  CUresult (*destroy)(CUgraph) = nullptr;
  bool ok = false;
};
GraphApi graph_api() {
  GraphApi a;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return a;
  a.begin = reinterpret_cast<decltype(a.begin)>(dlsym(h, "cuStreamBeginCapture_v2"));
  a.end = reinterpret_cast<decltype(a.end)>(dlsym(h, "cuStreamEndCapture"));
  a.instantiate = reinterpret_cast<decltype(a.instantiate)>(dlsym(h, "cuGraphInstantiateWithFlags"));
  a.launch = reinterpret_cast<decltype(a.launch)>(dlsym(h, "cuGraphLaunch"));
  a.exec_destroy = reinterpret_cast<decltype(a.exec_destroy)>(dlsym(h, "cuGraphExecDestroy"));
  a.destroy = reinterpret_cast<decltype(a.destroy)>(dlsym(h, "cuGraphDestroy"));
  a.ok = a.begin && a.end && a.instantiate && a.launch && a.exec_destroy && a.destroy;
  return a;
}

// One graph captured after fa_prepare (paged at page_size, latent: MLA's v = k layout), replayed with new used
// lengths (0 and 1 among them) and block tables.
void check_graph_replay(const DecodeSpec& s, int page_size, bool latent, uint64_t seed) {
  Gpu& g = gpu();
  const GraphApi api = graph_api();
  if (!api.ok) GTEST_SKIP() << "graph entry points not found in libcuda";
  std::mt19937_64 rng(seed);
  DecodeData x;
  make_data(rng, s, &x);
  if (latent) make_latent(&x);
  std::vector<int> used(size_t(s.batch), s.cap);
  Cache cache;
  make_paged(rng, x, used, page_size, &cache);
  cache.latent = latent;
  set_used(&cache, used);
  fa_params p = params_of(x, cache, true, 0);
  ASSERT_EQ(fa_prepare(g.ctx, &p), FA_OK) << fa_last_error();
  size_t ws_bytes = 0;
  ASSERT_EQ(fa_forward_workspace_size(g.ctx, &p, &ws_bytes), FA_OK) << fa_last_error();
  DevBuf ws(std::max<size_t>(ws_bytes, 256));
  if (ws_bytes > 0) {
    p.workspace = ws.get();
    p.workspace_size = ws_bytes;
  }
  ASSERT_EQ(api.begin(g.stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  const fa_status st = fa_run(g.ctx, &p, g.stream);
  const std::string err = st == FA_OK ? "" : fa_last_error();
  CUgraph graph = nullptr;
  ASSERT_EQ(api.end(g.stream, &graph), CUDA_SUCCESS);
  ASSERT_EQ(st, FA_OK) << err;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api.instantiate(&exec, graph, 0), CUDA_SUCCESS);
  for (int replay = 0; replay < 4; ++replay) {
    // New used lengths (0 and 1 among them) and a fresh page order: the pool is rewritten, the table re-uploaded.
    used = random_used(rng, s.batch, s.cap);
    if (replay == 3) used = {s.cap, 0, 1, s.cap - 1};
    Cache next;
    make_paged(rng, x, used, page_size, &next);
    ASSERT_EQ(next.num_pages, cache.num_pages);
    for (auto [dst, src] : {std::pair{&cache.dk, &next.dk}, std::pair{&cache.dv, &next.dv}}) {
      std::vector<uint8_t> host(src->bytes);
      src->download(host.data(), host.size());
      dst->upload(host.data(), host.size());
    }
    cache.d_bt.upload(next.table.data(), next.table.size() * 4);
    set_used(&cache, used);
    poison(x);
    ASSERT_EQ(api.launch(exec, g.stream), CUDA_SUCCESS);
    ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
    Out r;
    r.o_bytes.resize(x.o_n * 2);
    r.lse_bytes.resize(x.lse_n * 4);
    x.d_o.download(r.o_bytes.data(), r.o_bytes.size());
    x.d_lse.download(r.lse_bytes.data(), r.lse_bytes.size());
    std::vector<double> o_ref, lse_ref;
    oracle_of(x, used, {}, &o_ref, &lse_ref);
    EXPECT_EQ(compare(x, r, o_ref, lse_ref), "") << describe(s) << " replay " << replay;
  }
  api.exec_destroy(exec);
  api.destroy(graph);
}

TEST(GpuDecode, CapturedGraphReplaysWithNewUsedLengthsAndBlockTables) {
  REQUIRE_GPU();
  DecodeSpec s;
  s.batch = 4;
  s.cap = 2048;
  s.hq = 32;
  s.hkv = 8;
  s.mask = FA_MASK_CAUSAL;
  check_graph_replay(s, 16, false, test_seed() + 2105);
}

TEST(GpuDecode, MlaLatentGraphReplaysWithNewUsedLengthsAndBlockTables) {
  REQUIRE_GPU();
  check_graph_replay(mla_spec(4, 2048), 64, true, test_seed() + 2109);
}

}  // namespace
}  // namespace fa::test
