// test_block_sparse.cpp -- block skipping with a mask_mod (the plans [mask_blocks, fwd_mma] and [mask_blocks,
// fwd_wgmma]) against the float64 oracle: document masks of 1, 2 and 8 documents (ids per batch entry: the mask
// depends on b), prefix-LM, sinks + window, chunked, masks that hide whole rows and whole query blocks, a mask that
// depends on h, and the FA_MOD_DEPENDS_* sharing (classification once for every head / batch entry). Each case runs
// through fa_run (the selected family) and through the plan of every tensor-core forward that covers it on this GPU
// (fwd_wgmma and fwd_mma on sm_90). Lengths span several query blocks and key blocks, ragged and even; outputs
// poisoned before every run. Every tunable point of each family with user code: test_tunables_agree.cpp.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "tests/gpu/gpu_support.h"
#include "tests/gpu/plan_support.h"

namespace fa::test {
namespace {

struct SparseCase {
  std::string name;
  const char* mask_mod;
  int depends;
  std::function<bool(int b, int h, int i, int j)> mask;
};

// A fixed-length case of s x s under mask (the oracle's callback), LSE wanted, aligned strides, materialized.
void sparse_case(std::mt19937_64& rng, const std::string& desc, int dtype, int batch, int s, int hq, int hkv, int d,
                 std::function<bool(int, int, int, int)> mask, Case* c) {
  c->dtype = dtype;
  c->op.batch = batch;
  c->op.seqlen_q = s;
  c->op.seqlen_k = s;
  c->op.heads_q = hq;
  c->op.heads_kv = hkv;
  c->op.head_dim = d;
  c->op.head_dim_v = d;
  c->op.mask_mod = std::move(mask);
  c->want_lse = true;
  c->force_aligned = true;
  materialize(rng, c);
  c->desc = desc;  // the case's name (materialize writes the problem's)
}

TEST(GpuBlockSparse, MasksMatchTheOracle) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 2222);
  constexpr int kB = 2, kHq = 4, kHkv = 2;
  int failures = 0;
  for (int s : {640, 700}) {
    // Buffer 0: document ids int32 [kB, s] for `docs` documents of random lengths per batch entry.
    auto make_docs = [&](int docs) {
      std::vector<int> ids(size_t(kB) * s);
      for (int b = 0; b < kB; ++b) {
        std::vector<int> cuts;
        for (int n = 1; n < docs; ++n) cuts.push_back(1 + int(rng() % (s - 1)));
        std::sort(cuts.begin(), cuts.end());
        for (int j = 0; j < s; ++j)
          ids[size_t(b) * s + j] = int(std::upper_bound(cuts.begin(), cuts.end(), j) - cuts.begin());
      }
      return ids;
    };
    const std::vector<int> doc1 = make_docs(1), doc2 = make_docs(2), doc8 = make_docs(8);
    DevBuf d1(doc1.size() * 4), d2(doc2.size() * 4), d8(doc8.size() * 4);
    d1.upload(doc1.data(), doc1.size() * 4);
    d2.upload(doc2.data(), doc2.size() * 4);
    d8.upload(doc8.data(), doc8.size() * 4);
    const char* doc_body = "const fa_buf0_t* d = static_cast<const fa_buf0_t*>(u.buf[0]);\n"
                           "return j <= i && d[b * u.stride[0][0] + i] == d[b * u.stride[0][0] + j];";
    auto doc_ref = [s](const std::vector<int>* ids) {
      return [ids, s](int b, int, int i, int j) {
        return j <= i && (*ids)[size_t(b) * s + i] == (*ids)[size_t(b) * s + j];
      };
    };
    const int BH = FA_MOD_DEPENDS_BATCH | FA_MOD_DEPENDS_HEAD;
    std::vector<std::pair<SparseCase, const DevBuf*>> cases = {
        {{"document 1", doc_body, FA_MOD_DEPENDS_BATCH, doc_ref(&doc1)}, &d1},
        {{"document 2", doc_body, FA_MOD_DEPENDS_BATCH, doc_ref(&doc2)}, &d2},
        {{"document 8", doc_body, FA_MOD_DEPENDS_BATCH, doc_ref(&doc8)}, &d8},
        {{"document 8 (b, h)", doc_body, BH, doc_ref(&doc8)}, &d8},
        {{"prefix_lm 150", "return j <= i || j < 150;", 0, [](int, int, int i, int j) { return j <= i || j < 150; }},
         &d1},
        {{"sinks 4 + window 100", "return j <= i && (j < 4 || i - j < 100);", 0,
          [](int, int, int i, int j) { return j <= i && (j < 4 || i - j < 100); }},
         &d1},
        {{"chunked 128", "return j <= i && i / 128 == j / 128;", 0,
          [](int, int, int i, int j) { return j <= i && i / 128 == j / 128; }},
         &d1},
        {{"chunked 100", "return j <= i && i / 100 == j / 100;", 0,
          [](int, int, int i, int j) { return j <= i && i / 100 == j / 100; }},
         &d1},
        // rows 250..420 see nothing (a whole 128-row query block among them); rows % 7 == 3 see nothing
        {{"hidden rows", "return !(i >= 250 && i < 420) && i % 7 != 3 && j <= i;", 0,
          [](int, int, int i, int j) { return !(i >= 250 && i < 420) && i % 7 != 3 && j <= i; }},
         &d1},
        {{"per head", "return h % 2 == 0 ? j <= i : (j <= i && i - j < 64 + 32 * h);", FA_MOD_DEPENDS_HEAD,
          [](int, int h, int i, int j) { return h % 2 == 0 ? j <= i : (j <= i && i - j < 64 + 32 * h); }},
         &d1},
        {{"nothing visible", "return false;", 0, [](int, int, int, int) { return false; }}, &d1},
    };
    // every case first (oracle results), then every plan compiled in parallel, then the runs one by one
    struct Run {
      Case c;
      fa_mods m;
    };
    std::vector<std::unique_ptr<Run>> runs;
    for (auto& [sc, buf] : cases)
      for (int d : {64, 128}) {
        auto r = std::make_unique<Run>();
        sparse_case(rng, fmt::format("{} s {} d {}", sc.name, s, d), FA_DTYPE_BF16, kB, s, kHq, kHkv, d, sc.mask, &r->c);
        fa_mods_init(&r->m);
        r->m.mask_mod = sc.mask_mod;
        r->m.mask_mod_depends = sc.depends;
        r->m.num_buffers = 1;
        r->m.buffers[0] = fa_user_buffer{buf->get(), FA_USER_I32, 2, {kB, s}, {s, 1}};
        r->c.params.mods = &r->m;
        runs.push_back(std::move(r));
      }
    std::vector<Case*> all;
    for (auto& r : runs) all.push_back(&r->c);
    failures += check_every_family(all);
  }
  EXPECT_EQ(failures, 0);
}

// The plan: [mask_blocks, fwd_mma] with a mask_mod, its workspace sized by the sharing; a caller's workspace works.
TEST(GpuBlockSparse, CallerWorkspaceAndSizes) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 2223);
  Case c;
  sparse_case(rng, "chunked 64, caller workspace", FA_DTYPE_FP16, 2, 515, 4, 4, 128,
              [](int, int, int i, int j) { return j <= i && i / 64 == j / 64; }, &c);
  fa_mods m;
  fa_mods_init(&m);
  m.mask_mod = "return j <= i && i / 64 == j / 64;";
  c.params.mods = &m;
  size_t all = 0, shared = 0;
  ASSERT_EQ(fa_forward_workspace_size(g.ctx, &c.params, &all), FA_OK) << fa_last_error();
  m.mask_mod_depends = 0;
  ASSERT_EQ(fa_forward_workspace_size(g.ctx, &c.params, &shared), FA_OK) << fa_last_error();
  EXPECT_GT(all, 0u);
  EXPECT_LE(shared, all);
  DevBuf ws(all);
  c.params.workspace = ws.get();
  c.params.workspace_size = all;
  const CaseResult r = check_case(c);
  EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_LE(r.err_o, tolerance(FA_DTYPE_FP16));
  EXPECT_LE(r.err_lse, 1e-3);
}

}  // namespace
}  // namespace fa::test
