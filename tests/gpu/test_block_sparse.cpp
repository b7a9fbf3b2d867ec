// test_block_sparse.cpp -- block skipping with a mask_mod (the plans [mask_blocks, fwd_mma] and [mask_blocks,
// fwd_wgmma], and bwd_mma's [bwd_pre, mask_blocks, bwd_mma, bwd_post] for the gradients) against the float64 oracle:
// document masks of 1, 2 and 8 documents (ids per batch entry: the mask depends on b), prefix-LM, sinks + window,
// chunked, masks that hide whole rows and whole query blocks, a mask that depends on h, and the FA_MOD_DEPENDS_*
// sharing (classification once for every head / batch entry). Each forward case runs through fa_run (the selected
// family) and through the plan of every tensor-core forward that covers it on this GPU (fwd_wgmma and fwd_mma on
// sm_90); the gradients through fa_run_backward (bwd_wgmma on sm_90 where it covers, else bwd_mma) and every valid
// bwd_mma and bwd_wgmma point. Lengths span several query blocks and
// key blocks, ragged and even; outputs and gradients poisoned before every run. Every tunable point of each forward
// with user code: test_tunables_agree.cpp.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/launch.h"
#include "runtime/validate.h"
#include "tests/gpu/gpu_support.h"
#include "tests/gpu/grad_support.h"
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

constexpr int kB = 2, kHq = 4, kHkv = 2;

// The masks of the block-skipping tests at length s, with the document ids they read (buffer 0, int32 [kB, s]):
// documents of 1, 2 and 8 random lengths per batch entry, prefix-LM, sinks + window, chunked, hidden rows and
// query blocks, a per-head mask, nothing visible.
struct SparseMasks {
  int s;
  std::vector<int> doc1, doc2, doc8;
  DevBuf d1, d2, d8;
  std::vector<std::pair<SparseCase, const DevBuf*>> cases;

  SparseMasks(std::mt19937_64& rng, int len) : s(len) {
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
    doc1 = make_docs(1);
    doc2 = make_docs(2);
    doc8 = make_docs(8);
    d1 = DevBuf(doc1.size() * 4);
    d2 = DevBuf(doc2.size() * 4);
    d8 = DevBuf(doc8.size() * 4);
    d1.upload(doc1.data(), doc1.size() * 4);
    d2.upload(doc2.data(), doc2.size() * 4);
    d8.upload(doc8.data(), doc8.size() * 4);
    const char* doc_body =
        "const fa_buf0_t* d = static_cast<const fa_buf0_t*>(u.buf[0]);\n"
        "return j <= i && d[b * u.stride[0][0] + i] == d[b * u.stride[0][0] + j];";
    auto doc_ref = [len](const std::vector<int>* ids) {
      return [ids, len](int b, int, int i, int j) {
        return j <= i && (*ids)[size_t(b) * len + i] == (*ids)[size_t(b) * len + j];
      };
    };
    const int BH = FA_MOD_DEPENDS_BATCH | FA_MOD_DEPENDS_HEAD;
    cases = {
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
  }
  // Case n of the list at head dim d in *c, its mod in *m.
  void make(std::mt19937_64& rng, size_t n, int d, Case* c, fa_mods* m) const {
    const auto& [sc, buf] = cases[n];
    sparse_case(rng, fmt::format("{} s {} d {}", sc.name, s, d), FA_DTYPE_BF16, kB, s, kHq, kHkv, d, sc.mask, c);
    fa_mods_init(m);
    m->mask_mod = sc.mask_mod;
    m->mask_mod_depends = sc.depends;
    m->num_buffers = 1;
    m->buffers[0] = fa_user_buffer{buf->get(), FA_USER_I32, 2, {kB, s}, {s, 1}};
    c->params.mods = m;
  }
};

TEST(GpuBlockSparse, MasksMatchTheOracle) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 2222);
  int failures = 0;
  for (int s : {640, 700}) {
    const SparseMasks masks(rng, s);
    // every case first (oracle results), then every plan compiled in parallel, then the runs one by one
    struct Run {
      Case c;
      fa_mods m;
    };
    std::vector<std::unique_ptr<Run>> runs;
    for (size_t n = 0; n < masks.cases.size(); ++n)
      for (int d : {64, 128}) {
        auto r = std::make_unique<Run>();
        masks.make(rng, n, d, &r->c, &r->m);
        runs.push_back(std::move(r));
      }
    std::vector<Case*> all;
    for (auto& r : runs) all.push_back(&r->c);
    failures += check_every_family(all);
  }
  EXPECT_EQ(failures, 0);
}

// The backward with block skipping (bwd_mma's [bwd_pre, mask_blocks, bwd_mma, bwd_post] plan: each key block's CTA
// visits the query blocks its classes name) against the oracle's gradients, every mask, GQA, ragged and even
// lengths, the deterministic mode (its dQ' tickets count the visible key blocks of each row) on every other case.
TEST(GpuBlockSparse, BackwardMatchesTheOracle) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 2225);
  std::vector<std::unique_ptr<SparseMasks>> masks;
  std::vector<std::unique_ptr<Case>> cases;
  std::vector<std::unique_ptr<fa_mods>> mods;
  std::vector<const fa_params*> problems;
  std::vector<const Case*> owners;
  for (int s : {640, 700}) {
    masks.push_back(std::make_unique<SparseMasks>(rng, s));
    for (size_t n = 0; n < masks.back()->cases.size(); ++n)
      for (int d : {64, 128}) {
        if (d == 128 && n % 3 != 2) continue;  // the float64 oracle's backward is the cost: a third at d 128
        cases.push_back(std::make_unique<Case>());
        mods.push_back(std::make_unique<fa_mods>());
        masks.back()->make(rng, n, d, cases.back().get(), mods.back().get());
        problems.push_back(&cases.back()->params);
        owners.push_back(cases.back().get());
      }
  }
  prepare_in_parallel(problems, owners);  // kernels compile in parallel, the checks below only launch
  int failures = 0;
  for (size_t n = 0; n < cases.size(); ++n) {
    Case& c = *cases[n];
    const CaseResult fwd = check_case(c);
    const bool fwd_ok =
        fwd.failure.empty() && fwd.err_o <= tolerance(FA_DTYPE_BF16) && fwd.err_lse <= 1e-3 && fwd.padding_intact;
    Grads gr;
    setup_grads(rng, c, gr);
    gr.b.deterministic = static_cast<int>(n % 2);
    const GradResult r = check_grads(c, gr);
    const bool ok = fwd_ok && r.ok(FA_DTYPE_BF16);
    if (!ok) ++failures;
    std::printf("  %-34s det %d %s err_o %.2e dq %.2e dk %.2e dv %.2e%s %s%s\n", c.desc.c_str(), gr.b.deterministic,
                ok ? "ok  " : "FAIL", fwd.err_o, r.dq, r.dk, r.dv, r.padding_ok ? "" : " PADDING WRITTEN",
                fwd.failure.c_str(), r.failure.c_str());
  }
  EXPECT_EQ(failures, 0);
}

// The plan: [mask_blocks, forward] with a mask_mod, its workspace sized by the sharing; a caller's workspace works.
TEST(GpuBlockSparse, CallerWorkspaceAndSizes) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 2223);
  Case c;
  sparse_case(
      rng, "chunked 64, caller workspace", FA_DTYPE_FP16, 2, 515, 4, 4, 128,
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

// Every valid point of sem's family (spread to at most 48), the kernels of each one's plan compiled in parallel (the
// checks then launch serially).
std::vector<gen::Tunables> compiled_points(const gen::Semantic& sem, const gen::ProblemDesc& pd) {
  Gpu& g = gpu();
  const std::vector<gen::Tunables> all = gen::all_valid_points(sem, g.ctx->limits);
  const size_t step = std::max<size_t>(1, (all.size() + 47) / 48);
  std::vector<gen::Tunables> pts;
  for (size_t n = 0; n < all.size(); n += step) pts.push_back(all[n]);
  parallel_for(pts.size(), [&](size_t n) {
    for (const gen::KernelConfig& k : gen::make_plan(sem, pts[n], pd).steps) {
      std::shared_ptr<rt::Kernel> kk;
      rt::kernel_for(g.ctx, k, true, &kk);
    }
  });
  return pts;
}

// The tunables tests' problem: batch 2 of s x s under a document mask of 5 equal documents (buffer 0, int32 [s]),
// classes shared over heads when s is even (FA_MOD_DEPENDS_HEAD otherwise).
struct DocumentFive {
  std::vector<int> ids;
  DevBuf dids;
  fa_mods m;
  void make(std::mt19937_64& rng, int s, int d, int dtype, int hq, int hkv, Case* c) {
    ids.resize(static_cast<size_t>(s));
    for (int j = 0; j < s; ++j) ids[size_t(j)] = (j * 5) / s;
    dids = DevBuf(ids.size() * 4);
    dids.upload(ids.data(), ids.size() * 4);
    const std::vector<int>* doc = &ids;
    sparse_case(
        rng, fmt::format("document 5 s {} d {}", s, d), dtype, 2, s, hq, hkv, d,
        [doc](int, int, int i, int j) { return j <= i && (*doc)[size_t(i)] == (*doc)[size_t(j)]; }, c);
    fa_mods_init(&m);
    m.mask_mod = "const int* d = static_cast<const int*>(u.buf[0]);\nreturn j <= i && d[i] == d[j];";
    m.num_buffers = 1;
    m.buffers[0] = fa_user_buffer{dids.get(), FA_USER_I32, 1, {s}, {1}};
    m.mask_mod_depends = s % 2 ? FA_MOD_DEPENDS_HEAD : 0;
    c->params.mods = &m;
  }
};

// Tunables never change the gradients with block skipping: every valid bwd_mma point (spread to at most 48), and on
// sm_90 every valid bwd_wgmma point (non-deterministic), runs
// through its own plan (mask_blocks at that tile) via rt::run_backward_at against the oracle's gradients, for a
// document mask with a GQA group of 2, classes per head and shared, ragged and even lengths, half the points in the
// deterministic mode.
TEST(GpuBlockSparse, EveryValidBackwardPointGivesTheSameGradients) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 2226);
  int failures = 0, runs = 0;
  for (int s : {512, 449})
    for (int d : {64, 128}) {
      Case c;
      DocumentFive doc;
      doc.make(rng, s, d, FA_DTYPE_FP16, 4, 2, &c);
      ASSERT_TRUE(check_case(c).failure.empty());
      Grads gr;
      setup_grads(rng, c, gr);
      rt::BwdView view;
      gen::ProblemDesc pd;
      ASSERT_TRUE(rt::validate_backward(&gr.b, &view, &pd).ok());
      // the selector's choice for a mask_mod (non-deterministic): the Hopper backward on sm_90
      EXPECT_STREQ(gen::select_backward(pd, g.ctx->arch).family->name, g.ctx->arch == 90 ? "bwd_wgmma" : "bwd_mma");
      for (const char* family : {"bwd_mma", "bwd_wgmma"}) {  // bwd_wgmma on sm_90, non-deterministic only
        const gen::Family& fam = *gen::find_family(family);
        const bool wgmma = std::string(family) == "bwd_wgmma";
        if (wgmma && !gen::family_covers(fam, pd, g.ctx->arch, nullptr)) continue;
        const gen::Semantic sem = gen::semantic_for(fam, pd, g.ctx->arch);
        const std::vector<gen::Tunables> pts = compiled_points(sem, pd);
        for (size_t n = 0; n < pts.size(); ++n) {
          gr.b.deterministic = wgmma ? 0 : static_cast<int>(n % 2);
          const GradResult r = check_grads_at(c, gr, pts[n], family);
          ++runs;
          if (!r.ok(c.dtype)) {
            ++failures;
            std::printf("  %s %s det %d: FAIL dq %.2e dk %.2e dv %.2e%s %s\n", c.desc.c_str(),
                        gen::tunables_key(sem, pts[n]).c_str(), gr.b.deterministic, r.dq, r.dk, r.dv,
                        r.padding_ok ? "" : " PADDING WRITTEN", r.failure.c_str());
          }
        }
        gr.b.deterministic = 0;
      }
    }
  std::printf("  %d backward plans checked\n", runs);
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace fa::test
