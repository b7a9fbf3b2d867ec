// test_tunables_agree.cpp -- tunables never change results: for a sample of problems, the valid tunable points of
// every forward family that covers the problem on this GPU (the knobs' whole product; at most kMaxPoints per
// family and problem, spread evenly over it, the default always) are compiled, launched and checked against the
// float64 oracle, problems with user code (fa_mods) through each point's own plan ([mask_blocks at its tile,
// forward] with a mask_mod), MLA latent caches (fwd_mla) at every point through its own plan (with the combine step);
// and large problems (up to seqlen 16k) from the selected fast kernel are checked against the reference kernel on
// the GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/launch.h"
#include "runtime/validate.h"
#include "tests/gpu/gpu_support.h"
#include "tests/gpu/plan_support.h"

namespace fa::test {
namespace {

constexpr size_t kMaxPoints = 40;
constexpr size_t kMaxModPoints = 16;  // with user code (two kernels per plan)

// Up to `most` of `all`, evenly spread, with `def` among them, plus the first valid point of every knob value that
// the spread missed (an even step over the product can skip the values of the innermost knob).
std::vector<gen::Tunables> spread(const std::vector<gen::Tunables>& all, const gen::Tunables& def,
                                  size_t most = kMaxPoints) {
  std::vector<gen::Tunables> out;
  const size_t step = std::max<size_t>(1, (all.size() + most - 1) / most);
  for (size_t i = 0; i < all.size(); i += step) out.push_back(all[i]);
  if (std::find(out.begin(), out.end(), def) == out.end() && std::find(all.begin(), all.end(), def) != all.end())
    out.push_back(def);
  for (int k = 0; k < gen::Tunables::kMaxKnobs; ++k)
    for (const gen::Tunables& t : all) {
      auto same = [&](const gen::Tunables& u) { return u[k] == t[k]; };
      if (std::none_of(out.begin(), out.end(), same)) out.push_back(t);
    }
  return out;
}

// Launches `cfg` on the case's buffers (outputs re-poisoned first).
std::string launch_config(Case& c, const gen::KernelConfig& cfg) {
  Gpu& g = gpu();
  fa_params p;
  gen::ProblemDesc d;
  rt::Status st = rt::validate_forward(&c.params, &p, &d);
  if (!st.ok()) return st.message;
  std::shared_ptr<rt::Kernel> k;
  st = rt::kernel_for(g.ctx, cfg, true, &k);
  if (!st.ok()) return st.message;
  const size_t es = c.dtype == FA_DTYPE_FP32 ? 4 : 2;
  std::vector<uint8_t> poison(c.o_n * es, 0xff);
  c.d_o.upload(poison.data(), poison.size());
  FaFwdArgs args = rt::make_fwd_args(p, d);
  st = rt::launch_config(g.ctx, cfg, gen::launch_shape(d), &args, sizeof args, g.stream);
  if (!st.ok()) return st.message;
  g.d->cuStreamSynchronize(g.stream);
  return "";
}

TEST(GpuTunables, EveryValidPointGivesTheSameAnswer) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 21);
  // dtype, d, dv, heads q/kv, mask, sq, sk, bias, alibi, softcap, varlen
  const CaseSpec problems[] = {
      {FA_DTYPE_FP16, 64, 64, 4, 2, 1, 257, 257, false, false, false, false},
      {FA_DTYPE_BF16, 128, 128, 4, 2, 0, 200, 333, true, false, false, false},
      {FA_DTYPE_BF16, 256, 256, 4, 2, 1, 130, 190, false, true, true, false},
      {FA_DTYPE_FP16, 72, 40, 4, 2, 2, 150, 150, false, false, true, false},
      {FA_DTYPE_BF16, 128, 128, 4, 2, 1, 0, 0, true, true, false, true},
      {FA_DTYPE_FP16, 32, 32, 4, 2, 0, 64, 128, false, false, false, false},
      // decode shapes (fwd_split: seqlen_q * group <= 16 packed rows)
      {FA_DTYPE_BF16, 128, 128, 8, 2, 1, 2, 333, false, false, false, false},
      {FA_DTYPE_FP16, 256, 256, 4, 1, 2, 1, 190, false, true, true, false},
      {FA_DTYPE_BF16, 64, 64, 8, 1, 0, 1, 1000, false, false, false, false},
  };
  int points = 0;
  std::map<std::string, int> per_family;
  for (const CaseSpec& pr : problems) {
    for (bool aligned : {false, true}) {
      Case c;
      materialize_spec(rng, pr, aligned, &c);
      fa_params p;
      gen::ProblemDesc d;
      ASSERT_TRUE(rt::validate_forward(&c.params, &p, &d).ok());
      for (const gen::Family* f : gen::ranked_families(gen::Role::Forward, g.ctx->arch)) {
        if (!gen::family_covers(*f, d, g.ctx->arch, nullptr)) continue;
        if (!aligned && !f->reference) continue;  // the unaligned layout is the reference family's
        const gen::Semantic s = gen::semantic_for(*f, d, g.ctx->arch);
        const auto space = spread(gen::all_valid_points(s, g.ctx->limits), f->defaults(s));
        ASSERT_FALSE(space.empty()) << gen::semantic_key(s);
        parallel_for(space.size(), [&](size_t i) {  // compile in parallel, then launch serially
          std::shared_ptr<rt::Kernel> k;
          rt::kernel_for(g.ctx, gen::finalize(s, space[i], d), true, &k);
        });
        per_family[f->name] += static_cast<int>(space.size());
        for (const gen::Tunables& t : space) {
          const gen::KernelConfig cfg = gen::finalize(s, t, d);
          const std::string err = launch_config(c, cfg);
          ASSERT_EQ(err, "") << gen::canonical_key(cfg);
          const CaseResult r = compare_outputs(c);
          EXPECT_LE(r.err_o, tolerance(c.dtype)) << gen::canonical_key(cfg) << " [" << c.desc << "]";
          EXPECT_LE(r.err_lse, 2e-3) << gen::canonical_key(cfg);
          EXPECT_TRUE(r.padding_intact) << gen::canonical_key(cfg);
          ++points;
        }
      }
    }
  }
  std::string fams;
  for (const auto& [name, n] : per_family) fams += fmt::format(" {} {}", name, n);
  std::printf("GPU SUMMARY tunables: %d (problem, family, tunable point) triples checked against the oracle:%s\n",
              points, fams.c_str());
}

// The same with user code (fa_mods), each point through its own plan ([mask_blocks at its tile, forward] with a
// mask_mod: block skipping), at most kMaxModPoints per family and problem: a document mask (ids from a buffer) with a
// per-head score_mod over the causal mask, fixed length; a mask_mod alone, varlen (three sequences); a score_mod
// alone (no classification step) with a window and softcap, ragged keys; causal document masks whose classification
// is shared over heads and batch entries (FA_MOD_DEPENDS_* 0) or over batch entries only, even and ragged keys.
TEST(GpuTunables, EveryValidPointWithUserCodeGivesTheSameAnswer) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 22);
  int points = 0;
  std::map<std::string, int> per_family;
  std::vector<int> doc(512);
  for (int j = 0; j < 512; ++j) doc[size_t(j)] = (j * 7) / 400;
  DevBuf d_doc(doc.size() * 4);
  d_doc.upload(doc.data(), doc.size() * 4);
  struct ModProblem {
    CaseSpec spec;
    const char* mask_mod;
    const char* score_mod;
    std::function<bool(int, int, int, int)> mask;
    std::function<double(double, int, int, int, int)> score;
    int depends = FA_MOD_DEPENDS_BATCH | FA_MOD_DEPENDS_HEAD;
  };
  const char* doc_body = "const fa_buf0_t* d = static_cast<const fa_buf0_t*>(u.buf[0]);\nreturn d[i] == d[j];";
  auto doc_ref = [&doc](int, int, int i, int j) { return doc[size_t(i)] == doc[size_t(j)]; };
  auto head_score = [](double x, int, int h, int, int) { return x + 0.25 * h; };
  const char* doc_causal_body = "const int* d = static_cast<const int*>(u.buf[0]);\nreturn j <= i && d[i] == d[j];";
  auto doc_causal_ref = [&doc](int, int, int i, int j) { return j <= i && doc[size_t(i)] == doc[size_t(j)]; };
  const ModProblem mod_problems[] = {
      {{FA_DTYPE_BF16, 128, 128, 4, 2, 1, 257, 257, false, false, false, false},
       doc_body,
       "return s + 0.25f * (float)h;",
       doc_ref,
       head_score},
      {{FA_DTYPE_FP16, 64, 64, 4, 2, 0, 0, 0, false, false, false, true},
       "return j <= i + 1 && (j % 5) != 3;",
       nullptr,
       [](int, int, int i, int j) { return j <= i + 1 && (j % 5) != 3; },
       {}},
      {{FA_DTYPE_BF16, 64, 64, 4, 2, 2, 150, 333, false, false, true, false},
       nullptr,
       "return s + 0.25f * (float)h;",
       {},
       head_score},
      {{FA_DTYPE_BF16, 128, 128, 2, 1, 0, 512, 512, false, false, false, false},
       doc_causal_body,
       nullptr,
       doc_causal_ref,
       {},
       0},
      {{FA_DTYPE_BF16, 64, 64, 2, 1, 0, 449, 449, false, false, false, false},
       doc_causal_body,
       nullptr,
       doc_causal_ref,
       {},
       FA_MOD_DEPENDS_HEAD},
  };
  for (const ModProblem& mp : mod_problems) {
    Case c;
    c.op.mask_mod = mp.mask;
    c.op.score_mod = mp.score;
    materialize_spec(rng, mp.spec, true, &c);
    fa_mods m;
    fa_mods_init(&m);
    m.mask_mod = mp.mask_mod;
    m.score_mod = mp.score_mod;
    m.num_buffers = 1;
    m.buffers[0] = fa_user_buffer{d_doc.get(), FA_USER_I32, 1, {512}, {1}};
    m.mask_mod_depends = mp.depends;
    c.params.mods = &m;
    fa_params p;
    gen::ProblemDesc d;
    ASSERT_TRUE(rt::validate_forward(&c.params, &p, &d).ok());
    std::vector<std::pair<const gen::Family*, gen::Tunables>> pts;
    for (const gen::Family* f : fast_families(c)) {
      const gen::Semantic s = gen::semantic_for(*f, d, g.ctx->arch);
      for (const gen::Tunables& t : spread(gen::all_valid_points(s, g.ctx->limits), f->defaults(s), kMaxModPoints))
        pts.emplace_back(f, t);
    }
    ASSERT_FALSE(pts.empty()) << c.desc;
    parallel_for(pts.size(), [&](size_t n) { compile_plan(c, *pts[n].first, &pts[n].second); });
    for (const auto& [f, t] : pts) {
      const CaseResult r = run_plan(c, *f, &t);
      const std::string key = std::string(f->name) + "|" + gen::tunables_key(gen::semantic_for(*f, d, g.ctx->arch), t);
      EXPECT_EQ(r.failure, "") << key;
      EXPECT_LE(r.err_o, tolerance(c.dtype)) << key << " [user code]";
      EXPECT_LE(r.err_lse, 2e-3) << key;
      EXPECT_TRUE(r.padding_intact) << key;
      ++per_family[f->name];
      ++points;
    }
  }
  std::string fams;
  for (const auto& [name, n] : per_family) fams += fmt::format(" {} {}", name, n);
  std::printf(
      "GPU SUMMARY tunables with user code: %d (problem, family, tunable point) triples checked against the "
      "oracle:%s\n",
      points, fams.c_str());
}

// fwd_wgmma's persistent tile loop on problems with more tiles than SMs at every consumer count, so that each CTA
// runs several tiles (the K/V ring, the Q buffers and the ping-pong turns continued across them): the valid
// persistent points (spread) against the oracle, with tiles whose rows see no key (a window over fewer keys than
// queries: zeros and -inf between tiles with keys), varlen sequences of uneven lengths (tiles past a sequence
// skipped), GQA, and user code whose mask hides whole query blocks (empty tiles through the classification step).
TEST(GpuTunables, PersistentTileLoopOverSeveralTilesPerCta) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  const gen::Family* f = gen::find_family("fwd_wgmma");
  if (f == nullptr || g.ctx->arch < f->arch_min || g.ctx->arch > f->arch_max) GTEST_SKIP() << "fwd_wgmma: sm_90 only";
  std::mt19937_64 rng(test_seed() + 23);
  const CaseSpec problems[] = {
      {FA_DTYPE_FP16, 64, 64, 16, 4, 1, 800, 800, false, false, false, false},
      {FA_DTYPE_BF16, 128, 128, 16, 16, 2, 900, 400, false, false, false, false},
      {FA_DTYPE_BF16, 64, 64, 48, 8, 1, 0, 0, false, false, false, true},
      {FA_DTYPE_FP16, 64, 64, 16, 4, 0, 800, 800, false, false, false, false},  // with the mask_mod below
  };
  int points = 0;
  for (size_t n = 0; n < std::size(problems); ++n) {
    const bool user = n == 3;
    Case c;
    if (user) c.op.mask_mod = [](int, int, int i, int j) { return i >= 300 && j <= i; };
    materialize_spec(rng, problems[n], true, &c);
    fa_mods m;
    fa_mods_init(&m);
    if (user) {
      m.mask_mod = "return i >= 300 && j <= i;";
      m.mask_mod_depends = 0;
      c.params.mods = &m;
    }
    fa_params p;
    gen::ProblemDesc d;
    ASSERT_TRUE(rt::validate_forward(&c.params, &p, &d).ok());
    ASSERT_TRUE(gen::family_covers(*f, d, g.ctx->arch, nullptr)) << c.desc;
    const gen::Semantic s = gen::semantic_for(*f, d, g.ctx->arch);
    std::vector<gen::Tunables> persistent;
    for (const gen::Tunables& t : gen::all_valid_points(s, g.ctx->limits))
      if (t[f->knob_index("persistent")] != 0) persistent.push_back(t);
    const auto space = spread(persistent, persistent.front(), 24);
    const int consumers = f->knob_index("consumers");
    for (const gen::Tunables& t : space) {  // every point gives some CTA several tiles
      const long long tiles =
          (long long)((d.seqlen_q + 64 * t[consumers] - 1) / (64 * t[consumers])) * d.heads_q * d.batch;
      EXPECT_GT(tiles, g.ctx->limits.sm_count) << c.desc << " " << gen::tunables_key(s, t);
    }
    parallel_for(space.size(), [&](size_t i) {
      if (user) compile_plan(c, *f, &space[i]);
      else {
        std::shared_ptr<rt::Kernel> k;
        rt::kernel_for(g.ctx, gen::finalize(s, space[i], d), true, &k);
      }
    });
    for (const gen::Tunables& t : space) {
      const std::string key = gen::tunables_key(s, t);
      CaseResult r;
      if (user) {
        r = run_plan(c, *f, &t);
        EXPECT_EQ(r.failure, "") << key;
      } else {
        ASSERT_EQ(launch_config(c, gen::finalize(s, t, d)), "") << key;
        r = compare_outputs(c);
      }
      EXPECT_LE(r.err_o, tolerance(c.dtype)) << key << " [" << c.desc << "]";
      EXPECT_LE(r.err_lse, 2e-3) << key << " [" << c.desc << "]";
      EXPECT_TRUE(r.padding_intact) << key;
      ++points;
    }
  }
  std::printf(
      "GPU SUMMARY persistent tiles: %d fwd_wgmma persistent points on multi-tile problems checked against the "
      "oracle\n",
      points);
}

// MLA's latent cache (v = k's first head_dim_v columns): the case's k also serves as v (the oracle recomputed on that
// view); paged: one page per sequence (page size = the capacity, a power of two; block table = identity, so the
// oracle stands), the kernels' page walk and flags in use.
void make_latent(Case* c, bool paged, DevBuf* table) {
  c->v = c->k;
  c->v_sb = c->k_sb;
  c->v_ss = c->k_ss;
  c->v_sh = c->k_sh;
  oracle::forward(c->op, {c->q.data(), c->q_sb, c->q_ss, c->q_sh}, {c->k.data(), c->k_sb, c->k_ss, c->k_sh},
                  {c->k.data(), c->k_sb, c->k_ss, c->k_sh}, {c->o_ref.data(), c->o_sb, c->o_ss, c->o_sh},
                  c->lse_ref.data());
  fa_params& P = c->params;
  P.v = P.k;
  P.v_stride_batch = P.k_stride_batch;
  P.v_stride_seq = P.k_stride_seq;
  P.v_stride_head = P.k_stride_head;
  c->desc += paged ? " latent paged" : " latent";
  if (!paged) return;
  std::vector<int32_t> ids(static_cast<size_t>(c->op.batch));
  for (int b = 0; b < c->op.batch; ++b) ids[size_t(b)] = b;
  *table = DevBuf(ids.size() * 4);
  table->upload(ids.data(), ids.size() * 4);
  P.block_table = static_cast<const int32_t*>(table->get());
  P.block_table_stride = 1;
  P.page_size = P.seqlen_k;
  P.num_pages = c->op.batch;
}

// fwd_mla (sm_90) at every valid tunable point, each through its own plan (split-KV and the combine step where the
// point's split target splits): head dims 576 and 512, 128 / 64 / 16 query heads (full, partial and many row
// tiles), one and several query tokens, no mask / causal / window, contiguous and paged latent caches.
TEST(GpuTunables, EveryValidMlaPointGivesTheSameAnswer) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  const gen::Family* f = gen::find_family("fwd_mla");
  if (f == nullptr || g.ctx->arch < f->arch_min || g.ctx->arch > f->arch_max) GTEST_SKIP() << "fwd_mla: sm_90 only";
  std::mt19937_64 rng(test_seed() + 24);
  struct MlaSpec {
    CaseSpec spec;
    bool paged;
  };
  // dtype, d, dv, heads q/kv, mask, sq, sk, bias, alibi, softcap, varlen
  const MlaSpec specs[] = {{{FA_DTYPE_BF16, 576, 512, 128, 1, 0, 1, 700, false, false, false, false}, false},
                           {{FA_DTYPE_FP16, 512, 512, 64, 1, 1, 3, 512, false, false, false, false}, true},
                           {{FA_DTYPE_BF16, 576, 512, 16, 2, 2, 5, 256, false, false, false, false}, true},
                           {{FA_DTYPE_BF16, 576, 512, 128, 1, 1, 2, 512, false, false, false, false}, true},
                           {{FA_DTYPE_FP16, 576, 512, 128, 1, 0, 1, 1500, false, false, false, false}, false}};
  int points = 0;
  for (const MlaSpec& ms : specs) {
    Case c;
    DevBuf table;
    materialize_spec(rng, ms.spec, true, &c);
    make_latent(&c, ms.paged, &table);
    fa_params p;
    gen::ProblemDesc d;
    ASSERT_TRUE(rt::validate_forward(&c.params, &p, &d).ok()) << c.desc;
    std::string why;
    ASSERT_TRUE(gen::family_covers(*f, d, g.ctx->arch, &why)) << c.desc << ": " << why;
    const gen::Semantic s = gen::semantic_for(*f, d, g.ctx->arch);
    const auto space = gen::all_valid_points(s, g.ctx->limits);
    ASSERT_FALSE(space.empty());
    parallel_for(space.size(), [&](size_t i) { compile_plan(c, *f, &space[i]); });
    for (const gen::Tunables& t : space) {
      const CaseResult r = run_plan(c, *f, &t);
      const std::string key = gen::tunables_key(s, t) + " [" + c.desc + "]";
      EXPECT_EQ(r.failure, "") << key;
      EXPECT_LE(r.err_o, tolerance(c.dtype)) << key;
      EXPECT_LE(r.err_lse, 2e-3) << key;
      EXPECT_TRUE(r.padding_intact) << key;
      ++points;
    }
  }
  std::printf("GPU SUMMARY tunables MLA: %d (problem, fwd_mla tunable point) pairs checked against the oracle\n",
              points);
}

TEST(GpuTunables, LargeProblemsMatchTheReferenceKernel) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 23);
  struct L {
    int dt, d, s, mask;
  };
  const L large[] = {{FA_DTYPE_BF16, 128, 16384, 0},
                     {FA_DTYPE_FP16, 128, 16384, 1},
                     {FA_DTYPE_BF16, 64, 8192, 1},
                     {FA_DTYPE_FP16, 256, 4096, 0}};
  double worst = 0;
  for (const L& l : large) {
    // Inputs on the device only (no float64 oracle at this size): the reference kernel is the oracle.
    const int H = 2048 / l.d, D = l.d;
    const size_t n = size_t(l.s) * H * D;
    std::vector<double> host(n);
    std::uniform_real_distribution<double> u(-1, 1);
    DevBuf q(n * 2), k(n * 2), v(n * 2), o1(n * 2), o2(n * 2);
    for (DevBuf* b : {&q, &k, &v}) {
      for (auto& x : host) x = u(rng);
      b->upload(encode(l.dt, host).data(), n * 2);
    }
    fa_params p;
    fa_params_init(&p);
    p.dtype = l.dt;
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = l.s;
    p.heads_q = p.heads_kv = H;
    p.head_dim = D;
    p.q = q.get();
    p.k = k.get();
    p.v = v.get();
    p.o = o1.get();
    p.q_stride_batch = p.k_stride_batch = p.v_stride_batch = p.o_stride_batch = int64_t(n);
    p.q_stride_seq = p.k_stride_seq = p.v_stride_seq = p.o_stride_seq = int64_t(H) * D;
    p.q_stride_head = p.k_stride_head = p.v_stride_head = p.o_stride_head = D;
    p.mask = l.mask;
    ASSERT_EQ(fa_run(g.ctx, &p, g.stream), FA_OK) << fa_last_error();
    fa_params pr = p;
    pr.o = o2.get();
    gen::ProblemDesc d;
    fa_params tmp;
    ASSERT_TRUE(rt::validate_forward(&pr, &tmp, &d).ok());
    gen::Semantic s = gen::select_forward(d, g.ctx->arch);
    s.family = gen::find_family("fwd_ref");
    const gen::KernelConfig cfg = gen::finalize(s, s.family->defaults(s), d);
    std::shared_ptr<rt::Kernel> kern;
    ASSERT_TRUE(rt::kernel_for(g.ctx, cfg, true, &kern).ok());
    FaFwdArgs args = rt::make_fwd_args(tmp, d);
    ASSERT_TRUE(rt::launch_config(g.ctx, cfg, gen::launch_shape(d), &args, sizeof args, g.stream).ok());
    g.d->cuStreamSynchronize(g.stream);
    std::vector<uint8_t> b1(n * 2), b2(n * 2);
    o1.download(b1.data(), b1.size());
    o2.download(b2.data(), b2.size());
    const auto a = decode(l.dt, b1), r = decode(l.dt, b2);
    const double e = oracle::relative_error(std::span<const double>(a), std::span<const double>(r));
    worst = std::max(worst, e);
    EXPECT_LE(e, tolerance(l.dt)) << fmt::format("d{} s{} mask{} dtype{}", l.d, l.s, l.mask, l.dt);
  }
  std::printf("GPU SUMMARY large: fast kernel vs reference kernel up to seqlen 16k, worst rel err %.3g\n", worst);
}

}  // namespace
}  // namespace fa::test
