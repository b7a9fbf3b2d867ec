// test_generator.cpp -- the generator: deterministic rendering, stable and complete keys, hashes that move with
// every field, the validity predicate, the selector, and one real NVRTC compile with a ptxas report.
#include <gtest/gtest.h>

#include <set>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/arch.h"
#include "runtime/nvrtc_compiler.h"
#include "templates/embedded.h"

using namespace fa::gen;

namespace {

KernelConfig sample() {
  KernelConfig c;
  c.s.family = find_family("fwd_ref");
  c.s.arch = 80;
  c.s.dtype = kBf16;
  c.s.head_dim = 96;
  c.s.head_dim_v = 64;
  c.s.mask = kMaskCausal;
  c.t = c.s.family->defaults(c.s);
  return c;
}

TEST(Generator, RenderingIsDeterministicAndCarriesEveryField) {
  const KernelConfig c = sample();
  const std::string a = render_source(c), b = render_source(c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a.find("constexpr int kHeadDim = 96;"), std::string::npos);
  EXPECT_NE(a.find("constexpr int kHeadDimV = 64;"), std::string::npos);
  EXPECT_NE(a.find("constexpr int kDtype = 2;"), std::string::npos);
  EXPECT_NE(a.find("constexpr int kMask = 1;"), std::string::npos);
  EXPECT_NE(a.find("#include \"fwd_ref.cuh\""), std::string::npos);
  EXPECT_NE(a.find(canonical_key(c)), std::string::npos);
}

TEST(Generator, KeyIsStableAndReadable) {
  // The canonical key format is part of the persistent cache: changing it must be deliberate.
  EXPECT_EQ(canonical_key(sample()), "fwd_ref.sm80.bf16.d96.dv64.causal.b0a0s0v0e0l1|w8");
  KernelConfig m = sample();
  m.s.family = find_family("fwd_mma");
  m.t = Tunables{{128, 64, 4, 2, 0, 1}};
  EXPECT_EQ(canonical_key(m), "fwd_mma.sm80.bf16.d96.dv64.causal.b0a0s0v0e0l1|m128.n64.w4.s2.qr0.kj1");
}

TEST(Generator, EveryFieldChangesTheKeyAndTheHash) {
  const KernelConfig base = sample();
  std::vector<KernelConfig> variants;
  auto add = [&](auto mutate) {
    KernelConfig c = base;
    mutate(c);
    variants.push_back(c);
  };
  add([](KernelConfig& c) { c.s.arch = 90; });
  add([](KernelConfig& c) { c.s.dtype = kFp16; });
  add([](KernelConfig& c) { c.s.head_dim = 104; });
  add([](KernelConfig& c) { c.s.head_dim_v = 72; });
  add([](KernelConfig& c) { c.s.mask = kMaskWindow; });
  add([](KernelConfig& c) { c.s.has_bias = true; });
  add([](KernelConfig& c) { c.s.has_alibi = true; });
  add([](KernelConfig& c) { c.s.has_softcap = true; });
  add([](KernelConfig& c) { c.s.varlen = true; });
  add([](KernelConfig& c) { c.s.even_k = true; });
  add([](KernelConfig& c) { c.s.has_lse = false; });
  // another family (at its defaults), and every knob of every family: another allowed value changes the key and the
  // hash
  for (const Family* f : all_families()) {
    KernelConfig fb = base;
    fb.s.family = f;
    fb.t = f->defaults(fb.s);
    if (f != base.s.family) variants.push_back(fb);
    for (size_t i = 0; i < f->knobs.size(); ++i)
      for (int v : f->knobs[i].values)
        if (v != fb.t[static_cast<int>(i)]) {
          KernelConfig c = fb;
          c.t[static_cast<int>(i)] = v;
          variants.push_back(c);
          break;
        }
  }
  std::set<std::string> keys{canonical_key(base)};
  std::set<uint64_t> hashes{compile_hash(base, "x")};
  for (const auto& v : variants) {
    EXPECT_TRUE(keys.insert(canonical_key(v)).second) << canonical_key(v);
    EXPECT_TRUE(hashes.insert(compile_hash(v, "x")).second) << canonical_key(v);
  }
  EXPECT_NE(compile_hash(base, "nvrtc 13.0"), compile_hash(base, "nvrtc 13.1"));
}

TEST(Generator, TunablesKeyRoundTripsAndRejectsGarbage) {
  Semantic s;
  s.family = find_family("fwd_mma");
  Tunables t{{128, 64, 4, 2, 1, 1}}, back;
  ASSERT_TRUE(parse_tunables_key(s, tunables_key(s, t), &back));
  EXPECT_EQ(back, t);
  for (const char* bad : {"", "m128", "m128.n64.w4.s2.qr1.kj1.extra", "m-1.n64.w4.s2.qr1.kj1x", "garbage",
                          "m0128.n64.w4.s2.qr1.kj1", "n64.m128.w4.s2.qr1.kj1", "m128.n64.w4.s2.qr1.x3x"})
    EXPECT_FALSE(parse_tunables_key(s, bad, &back)) << bad;
  // Every family's every point round-trips through its own schema.
  for (const Family* f : all_families()) {
    Semantic fs;
    fs.family = f;
    for (const Tunables& u : full_space(fs)) {
      ASSERT_TRUE(parse_tunables_key(fs, tunables_key(fs, u), &back)) << f->name << " " << tunables_key(fs, u);
      EXPECT_EQ(back, u);
    }
  }
  // Keys written before the knob schema still load (their fixed fillers dropped): a cache of old winners stays usable.
  ASSERT_TRUE(parse_tunables_key(s, "m128.n64.w4.s2.qr0.x1", &back));
  EXPECT_EQ(back, (Tunables{{128, 64, 4, 2, 0, 1}}));
  Semantic b;
  b.family = find_family("bwd_mma");
  ASSERT_TRUE(parse_tunables_key(b, "m64.n128.w8.s2.qr0.x0", &back));
  EXPECT_EQ(back, (Tunables{{64, 128, 8, 2}}));
  Semantic r;
  r.family = find_family("fwd_ref");
  ASSERT_TRUE(parse_tunables_key(r, "m8.n32.w8.s1.qr0.x0", &back));
  EXPECT_EQ(back, (Tunables{{8}}));
}

TEST(Registry, EveryFamilyIsRegisteredOnceWithAValidDefault) {
  std::set<std::string> names;
  for (const Family* f : all_families()) {
    EXPECT_TRUE(names.insert(f->name).second) << f->name;
    EXPECT_NE(fa::templates::find(f->template_name), nullptr) << f->name;
    EXPECT_NE(f->defaults, nullptr);
    EXPECT_NE(f->launch, nullptr);
    EXPECT_LE(f->knobs.size(), static_cast<size_t>(Tunables::kMaxKnobs));
    std::set<std::string> tags, cnames;
    for (const Knob& k : f->knobs) {
      EXPECT_TRUE(tags.insert(k.tag).second) << f->name << " tag " << k.tag;
      EXPECT_TRUE(cnames.insert(k.cname).second) << f->name << " " << k.cname;
      EXPECT_FALSE(k.values.empty());
    }
    EXPECT_EQ(find_family(f->name), f);
  }
  for (const char* n : {"fwd_ref", "fwd_mma", "bwd_pre", "bwd_ref_dq", "bwd_ref_dkdv", "bwd_mma", "bwd_post"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(find_family("nope"), nullptr);
  // Ranked: on sm_90 the Hopper MLA decode (latent caches only), then the decode family (split-KV, paged; it covers
  // decode shapes and KV caches only), the Hopper forward on sm_90, then the tensor-core forward, the reference last,
  // on every arch; a reference family in each direction.
  for (int arch : fa::rt::kKnownArchs) {
    const auto fwd = ranked_families(Role::Forward, arch);
    ASSERT_GE(fwd.size(), 3u);
    const size_t o = arch == 90 ? 1 : 0;
    if (arch == 90) { EXPECT_STREQ(fwd.front()->name, "fwd_mla"); }
    EXPECT_STREQ(fwd[o]->name, "fwd_split");
    EXPECT_STREQ(fwd[o + 1]->name, arch == 90 ? "fwd_wgmma" : "fwd_mma");
    EXPECT_STREQ(fwd[arch == 90 ? o + 2 : 1]->name, "fwd_mma");
    EXPECT_TRUE(fwd.back()->reference);
    EXPECT_TRUE(ranked_families(Role::Backward, arch).back()->reference);
  }
}

TEST(Generator, TemplatesAreEmbeddedAndDocumented) {
  ASSERT_GE(fa::templates::kCount, 3);
  for (int i = 0; i < fa::templates::kCount; ++i) {
    const std::string src = fa::templates::kAll[i].source;
    EXPECT_EQ(src.rfind("// ", 0), 0u) << fa::templates::kAll[i].name << " must open with its descriptive paragraph";
  }
  EXPECT_NE(fa::templates::find("fwd_ref.cuh"), nullptr);
  EXPECT_NE(fa::templates::find("fa_args.cuh"), nullptr);
  EXPECT_EQ(fa::templates::find("nope.cuh"), nullptr);
}

TEST(Validity, RejectsOutOfRangeSemantics) {
  const DeviceLimits lim = limits_for_arch(80);
  std::string why;
  KernelConfig c = sample();
  EXPECT_TRUE(is_valid(c, lim, &why)) << why;
  c.s.head_dim = 12;
  EXPECT_FALSE(is_valid(c, lim, &why));
  EXPECT_NE(why.find("head_dim"), std::string::npos);
  c = sample();
  c.s.head_dim_v = 520;
  EXPECT_FALSE(is_valid(c, lim, &why));
  c = sample();
  c.s.arch = 75;
  EXPECT_FALSE(is_valid(c, limits_for_arch(75), &why));
  c = sample();
  c.s.arch = 90;
  EXPECT_FALSE(is_valid(c, lim, &why)) << "arch must match the device limits";
  c = sample();
  c.t[0] = 3;  // fwd_ref's warps: 2, 4 or 8
  EXPECT_FALSE(is_valid(c, lim, &why));
  EXPECT_NE(why.find("warps"), std::string::npos);
  c = sample();
  c.t[1] = 64;  // fwd_ref has one knob
  EXPECT_FALSE(is_valid(c, lim, &why));
  c = sample();
  c.s.varlen = true;
  c.s.even_k = true;
  EXPECT_FALSE(is_valid(c, lim, &why));
}

// fwd_wgmma with 1 consumer, persistent, and ALiBi or softcap spilled 8-28 bytes past 128 padded columns (d 32 /
// dv 232 causal or window with softcap, the full compile sweep's random sample): the predicate keeps those points out
// and keeps their non-persistent twins and the persistent point at 128 columns in.
TEST(Validity, FwdWgmmaPersistentOneConsumerWithAlibiOrSoftcapPast128ColumnsIsOut) {
  const DeviceLimits lim = limits_for_arch(90);
  for (int dv : {232, 128}) {
    for (int feat = 0; feat < 2; ++feat) {
      ProblemDesc p;
      p.dtype = kBf16;
      p.head_dim = 32;
      p.head_dim_v = dv;
      p.mask = 1;
      p.has_softcap = feat == 0;
      p.has_alibi = feat == 1;
      p.aligned16 = p.tma_ok = true;
      p.seqlen_q = p.seqlen_k = 512;
      p.total_q = p.total_k = 512;
      const Semantic s = select_forward(p, 90);
      ASSERT_STREQ(s.family->name, "fwd_wgmma");
      std::string why;
      const KernelConfig persistent = finalize(s, Tunables{{1, 64, 2, 0, 1, 1}}, p);
      const KernelConfig grid = finalize(s, Tunables{{1, 64, 2, 0, 1, 0}}, p);
      EXPECT_TRUE(is_valid(grid, lim, &why)) << canonical_key(grid) << ": " << why;
      if (dv > 128) {
        EXPECT_FALSE(is_valid(persistent, lim, &why)) << canonical_key(persistent);
        EXPECT_NE(why.find("spills"), std::string::npos) << why;
      } else {
        EXPECT_TRUE(is_valid(persistent, lim, &why)) << canonical_key(persistent) << ": " << why;
      }
    }
  }
}

// fwd_wgmma's heuristic defaults under a built-in mask (fa-tune's H200 winners, session 20): 2 consumers up to 128
// padded columns take the paired head-major order (persistent 2), d 64 takes 3 x 128 x 3 persistent without
// ping-pong; unmasked problems, score features and wide heads keep the unmasked points.
TEST(Validity, FwdWgmmaDefaultsUnderABuiltInMaskTakeTheMeasuredPersistentPoints) {
  struct Case {
    int d, mask;
    bool softcap;
    Tunables want;
  };
  const Case cases[] = {
      {128, kMaskCausal, false, Tunables{{2, 128, 2, 1, 1, 2}}},
      {96, kMaskWindow, false, Tunables{{2, 128, 2, 1, 1, 2}}},
      {64, kMaskCausal, false, Tunables{{3, 128, 3, 0, 1, 1}}},
      {128, 0, false, Tunables{{2, 128, 2, 1, 1, 0}}},
      {64, 0, false, Tunables{{3, 128, 2, 1, 1, 0}}},
      {128, kMaskCausal, true, Tunables{{2, 128, 2, 1, 1, 0}}},
      {256, kMaskCausal, false, Tunables{{2, 80, 2, 1, 1, 0}}},
  };
  for (const Case& c : cases) {
    ProblemDesc p;
    p.dtype = kBf16;
    p.head_dim = p.head_dim_v = c.d;
    p.mask = c.mask;
    if (c.mask == kMaskWindow) p.win_left = p.win_right = 64;
    p.has_softcap = c.softcap;
    p.aligned16 = p.tma_ok = true;
    p.batch = 4;
    p.heads_q = p.heads_kv = 8;
    p.seqlen_q = p.seqlen_k = 1024;
    p.total_q = p.total_k = 4096;
    const Semantic s = select_forward(p, 90);
    ASSERT_STREQ(s.family->name, "fwd_wgmma");
    EXPECT_EQ(s.family->defaults(s), c.want) << "d " << c.d << " mask " << c.mask << " softcap " << c.softcap << ": "
                                             << tunables_key(s, s.family->defaults(s));
  }
}

// Whatever the selector and the backward plan pick for a problem, with heuristic defaults, must be valid: the
// defaults serve every problem until tuning exists.
TEST(Validity, DefaultsOfEverySelectedKernelAreValid) {
  for (int arch : fa::rt::kKnownArchs) {
    const DeviceLimits lim = limits_for_arch(arch);
    for (int dt : {kFp16, kBf16, kFp32}) {
      for (int d = 8; d <= 256; d += 8) {
        for (int feat = 0; feat < 6; ++feat) {
          ProblemDesc p;
          p.dtype = dt;
          p.head_dim = d;
          p.head_dim_v = feat == 5 ? 264 - d : d;
          p.mask = feat % 3;
          p.has_bias = feat >= 3;
          p.has_alibi = feat == 4;
          p.has_softcap = feat == 4;
          p.varlen = feat == 2;
          p.aligned16 = p.tma_ok = true;
          p.seqlen_q = p.seqlen_k = 512;
          p.total_q = p.total_k = 512;
          const Semantic s = select_forward(p, arch);
          const Tunables t = s.family->defaults(s);
          const KernelConfig c = finalize(s, t, p);
          std::string why;
          EXPECT_TRUE(is_valid(c, lim, &why)) << canonical_key(c) << ": " << why;
          const auto space = full_space(s);
          EXPECT_NE(std::find(space.begin(), space.end(), t), space.end())
              << canonical_key(c) << " default not in space";
          p.backward = true;
          for (const KernelConfig& step : make_plan(select_backward(p, arch), p).steps)
            EXPECT_TRUE(is_valid(step, lim, &why)) << "backward step " << canonical_key(step) << ": " << why;
        }
      }
    }
  }
}

TEST(Selector, FallsBackToReferenceForFp32AndUnalignedData) {
  ProblemDesc p;
  p.dtype = kFp32;
  p.aligned16 = true;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_ref");
  p.dtype = kBf16;
  p.aligned16 = false;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_ref");
  p.aligned16 = true;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_split");  // one query row per KV head: the decode class
  p.seqlen_q = 17;  // past the decode class (seqlen_q * group <= 16 packed rows)
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_mma");
}

TEST(Selector, SequenceLengthsNeverEnterTheKey) {
  ProblemDesc a, b;
  a.dtype = b.dtype = kFp16;
  a.aligned16 = b.aligned16 = true;
  // Only the shape class (seqlen_k a multiple of the key block, for the no-predicate specialisation; the decode
  // class seqlen_q * group <= 16 of fwd_split) may differ.
  a.seqlen_q = 17;
  a.seqlen_k = 4095;
  a.batch = 1;
  b.seqlen_q = 3000;
  b.seqlen_k = 17;
  b.batch = 9;
  EXPECT_EQ(semantic_key(select_forward(a, 80)), semantic_key(select_forward(b, 80)));
  a.seqlen_k = 4096;
  b.seqlen_k = 64;
  EXPECT_EQ(semantic_key(select_forward(a, 90)), semantic_key(select_forward(b, 90)));
  EXPECT_EQ(semantic_key(select_forward(a, 90)).find("4096"), std::string::npos);
}

TEST(Nvrtc, ReferenceKernelCompilesWithPtxasReport) {
  KernelConfig c = sample();
  c.s.has_bias = c.s.has_alibi = c.s.has_softcap = true;
  const fa::rt::CompileResult r = fa::rt::compile(c);
  ASSERT_TRUE(r.ok) << r.log;
  EXPECT_GT(r.cubin.size(), 1000u);
  EXPECT_GT(r.ptxas.registers, 0) << r.log;
  EXPECT_EQ(r.ptxas.spill_stores, 0) << r.log;
  EXPECT_EQ(r.hash, fa::rt::compile_hash_for(c));
}

TEST(Nvrtc, CompileErrorsCarryTheLogAndKey) {
  KernelConfig c = sample();
  c.s.head_dim = 0;  // invalid on purpose: the template's arrays become ill-formed or the compile fails
  c.s.head_dim_v = -8;
  const fa::rt::CompileResult r = fa::rt::compile(c);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.log.empty());
  EXPECT_NE(r.key.find("d0"), std::string::npos);
}

TEST(Nvrtc, PtxasParser) {
  const auto p = fa::rt::parse_ptxas(
      "ptxas info    : Compiling entry function 'fa_kernel' for 'sm_90a'\n"
      "ptxas info    : Function properties for fa_kernel\n"
      "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 4096 bytes smem, 912 bytes cmem[0]\n");
  EXPECT_EQ(p.registers, 168);
  EXPECT_EQ(p.spill_stores, 8);
  EXPECT_EQ(p.spill_loads, 12);
  EXPECT_FALSE(p.wgmma_serialized);
  const auto q = fa::rt::parse_ptxas(
      "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
      "wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in "
      "the function 'fa_kernel'\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 4096 bytes smem, 912 bytes cmem[0]\n");
  EXPECT_TRUE(q.wgmma_serialized);
  EXPECT_EQ(q.registers, 168);
  EXPECT_EQ(p.stack_bytes, 16);
  EXPECT_EQ(p.smem_static, 4096);
}

}  // namespace
