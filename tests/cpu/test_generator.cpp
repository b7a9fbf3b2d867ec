// test_generator.cpp -- the generator: deterministic rendering, stable and complete keys, hashes that move with
// every field, the validity predicate, the selector, and one real NVRTC compile with a ptxas report.
#include <gtest/gtest.h>

#include <set>

#include "generator/family.h"
#include "generator/backward_plan.h"
#include "generator/problem.h"
#include "runtime/nvrtc_compiler.h"
#include "templates/embedded.h"

using namespace fa::gen;

namespace {

KernelConfig sample() {
  KernelConfig c;
  c.s.kind = Kind::FwdRef;
  c.s.arch = 80;
  c.s.dtype = kBf16;
  c.s.head_dim = 96;
  c.s.head_dim_v = 64;
  c.s.mask = kMaskCausal;
  c.t = family(Kind::FwdRef).defaults(c.s);
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
  EXPECT_EQ(canonical_key(sample()), "fwd_ref.sm80.bf16.d96.dv64.causal.b0a0s0v0e0l1|m8.n32.w8.s1.qr0.x0");
}

TEST(Generator, EveryFieldChangesTheKeyAndTheHash) {
  const KernelConfig base = sample();
  std::vector<KernelConfig> variants;
  auto add = [&](auto mutate) {
    KernelConfig c = base;
    mutate(c);
    variants.push_back(c);
  };
  add([](KernelConfig& c) { c.s.kind = Kind::FwdMma; });
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
  add([](KernelConfig& c) { c.t.block_m = 16; });
  add([](KernelConfig& c) { c.t.block_n = 64; });
  add([](KernelConfig& c) { c.t.warps = 4; });
  add([](KernelConfig& c) { c.t.stages = 2; });
  add([](KernelConfig& c) { c.t.q_in_regs = 1; });
  add([](KernelConfig& c) { c.t.extra = 1; });
  std::set<std::string> keys{canonical_key(base)};
  std::set<uint64_t> hashes{compile_hash(base, "x")};
  for (const auto& v : variants) {
    EXPECT_TRUE(keys.insert(canonical_key(v)).second) << canonical_key(v);
    if (family_available(v.s.kind)) {
      EXPECT_TRUE(hashes.insert(compile_hash(v, "x")).second) << canonical_key(v);
    }
  }
  EXPECT_NE(compile_hash(base, "nvrtc 13.0"), compile_hash(base, "nvrtc 13.1"));
}

TEST(Generator, TunablesKeyRoundTripsAndRejectsGarbage) {
  Tunables t{128, 64, 4, 2, 1, 3}, back;
  ASSERT_TRUE(parse_tunables_key(tunables_key(t), &back));
  EXPECT_EQ(back, t);
  for (const char* bad : {"", "m128", "m128.n64.w4.s2.qr1.x3.extra", "m-1.n64.w4.s2.qr1.x3x", "garbage",
                          "m0128.n64.w4.s2.qr1.x3"})
    EXPECT_FALSE(parse_tunables_key(bad, &back)) << bad;
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
  c.s.head_dim_v = 264;
  EXPECT_FALSE(is_valid(c, lim, &why));
  c = sample();
  c.s.arch = 75;
  EXPECT_FALSE(is_valid(c, limits_for_arch(75), &why));
  c = sample();
  c.s.arch = 90;
  EXPECT_FALSE(is_valid(c, lim, &why)) << "arch must match the device limits";
  c = sample();
  c.t.block_n = 64;
  EXPECT_FALSE(is_valid(c, lim, &why));
  EXPECT_NE(why.find("block_n"), std::string::npos);
  c = sample();
  c.s.varlen = true;
  c.s.even_k = true;
  EXPECT_FALSE(is_valid(c, lim, &why));
}

// Whatever the selector and the backward plan pick for a problem, with heuristic defaults, must be valid: the
// defaults serve every problem until tuning exists.
TEST(Validity, DefaultsOfEverySelectedKernelAreValid) {
  for (int arch : {80, 86, 89, 90}) {
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
          p.aligned16 = true;
          p.seqlen_q = p.seqlen_k = 512;
          p.total_q = p.total_k = 512;
          const Semantic s = select_forward(p, arch);
          const Tunables t = family(s.kind).defaults(s);
          const KernelConfig c = finalize(s, t, p);
          std::string why;
          EXPECT_TRUE(is_valid(c, lim, &why)) << canonical_key(c) << ": " << why;
          const auto space = family(s.kind).space(s);
          EXPECT_NE(std::find(space.begin(), space.end(), t), space.end()) << canonical_key(c) << " default not in space";
          p.backward = true;
          for (const KernelConfig& step : plan_backward(p, arch).steps)
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
  EXPECT_EQ(select_forward(p, 90).kind, Kind::FwdRef);
  p.dtype = kBf16;
  p.aligned16 = false;
  EXPECT_EQ(select_forward(p, 90).kind, Kind::FwdRef);
  p.aligned16 = true;
  const Kind k = select_forward(p, 90).kind;
  EXPECT_EQ(k, family_available(Kind::FwdMma) ? Kind::FwdMma : Kind::FwdRef);
}

TEST(Selector, SequenceLengthsNeverEnterTheKey) {
  ProblemDesc a, b;
  a.dtype = b.dtype = kFp16;
  a.aligned16 = b.aligned16 = true;
  // Only the shape class (seqlen_k a multiple of the key block, for the no-predicate specialisation) may differ.
  a.seqlen_q = 1;
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
  EXPECT_EQ(p.stack_bytes, 16);
  EXPECT_EQ(p.smem_static, 4096);
}

}  // namespace
