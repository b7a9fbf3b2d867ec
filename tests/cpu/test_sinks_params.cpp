// test_sinks_params.cpp -- attention sinks in the API (fa_params.sinks, fa_bwd_params.dsinks) without a GPU: the
// validation rules with a case breaking each and a message naming the field, expected and actual value; sinks enter
// the kernel key and the plan signature; the one validity predicate and the selector refuse every family that does
// not read sinks (so no kernel ever ignores the pointer); the plans carry sinks only to the steps that read them
// (the split-KV combine yes, the block classification and bwd_post no) and the backward plans get the dsinks
// reduction (bwd_pre's partials, then bwd_sinks); fa_bwd_params version 1 still validates without sinks.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "fa/fa.h"
#include "generator/family.h"
#include "generator/problem.h"
#include "generator/user_mods.h"
#include "runtime/plan_cache.h"
#include "runtime/validate.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/params_support.h"

namespace {

using fa::test::fake_addr;
using namespace fa::gen;
float* fptr(uintptr_t x) { return static_cast<float*>(fake_addr(x)); }

// A bf16 prefill (batch 2, 64 queries, 80 keys, 8 query heads over 2 KV heads, d 64) with sinks and an LSE.
struct Sinks : ::testing::Test {
  fa_context ctx = nullptr;
  fa_params p{};
  void SetUp() override {
    ctx = fa::test::make_context(":memory:", -1);
    ASSERT_NE(ctx, nullptr);
    fa::test::fake_bshd_params(&p, 2, 64, 80, 8, 2, 64);
    p.sinks = fptr(0x70000000);
    p.lse = fptr(0x78000000);
  }
  void TearDown() override { fa_context_destroy(ctx); }

  // fa_run, fa_prepare, fa_is_supported and fa_problem_key reject p, the message naming each of `parts`.
  void expect_rejected(std::initializer_list<const char*> parts) {
    EXPECT_EQ(fa_run(ctx, &p, nullptr), FA_ERROR_INVALID_ARGUMENT) << fa_last_error();
    const std::string msg = fa_last_error();
    for (const char* part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "must name " << part << ": " << msg;
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got"), std::string::npos) << msg;
    EXPECT_EQ(fa_prepare(ctx, &p), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(fa_is_supported(ctx, &p), 0);
    char key[256] = "untouched";
    EXPECT_EQ(fa_problem_key(ctx, &p, key, sizeof key), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(key, "untouched");
  }
  std::string key_of() {
    char key[256] = {};
    EXPECT_EQ(fa_problem_key(ctx, &p, key, sizeof key), FA_OK) << fa_last_error();
    return key;
  }
  // The backward of p: gradients at fake addresses, dsinks given.
  fa_bwd_params bwd() {
    fa_bwd_params b;
    fa::test::fake_bwd_params(&b, &p);
    b.dsinks = fptr(0x7c000000);
    return b;
  }
  // fa_backward_workspace_size rejects b with `status`, the message naming each of `parts`.
  void expect_bwd_rejected(const fa_bwd_params& b, fa_status status, std::initializer_list<const char*> parts) {
    size_t bytes = 0;
    EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), status) << fa_last_error();
    const std::string msg = fa_last_error();
    for (const char* part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "must name " << part << ": " << msg;
  }
};

TEST_F(Sinks, ValidateAndEnterTheKey) {
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
  EXPECT_TRUE(fa::test::validated_desc(p).has_sinks);
  const std::string with = key_of();
  EXPECT_NE(with.find(".sinks"), std::string::npos) << with;
  p.sinks = nullptr;
  EXPECT_FALSE(fa::test::validated_desc(p).has_sinks);
  const std::string without = key_of();
  EXPECT_EQ(without.find(".sinks"), std::string::npos) << without;
  EXPECT_EQ(with, without + ".sinks");
}

TEST_F(Sinks, MisalignedSinks) {
  p.sinks = fptr(0x70000002);
  expect_rejected({"sinks", "4-byte aligned", "0x70000002"});
}

TEST_F(Sinks, TakenWithAnFp8CacheAndRejectedMisalignedThereToo) {
  fa::test::fake_paged_decode_params(&p);
  p.kv_dtype = FA_DTYPE_E4M3;
  p.k_scale = fptr(0x70000000);
  p.v_scale = fptr(0x70000100);
  p.sinks = fptr(0x70000200);
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
  EXPECT_NE(key_of().find("fwd_split"), std::string::npos) << key_of();
  EXPECT_NE(key_of().find(".sinks"), std::string::npos) << key_of();
  p.sinks = fptr(0x70000201);
  expect_rejected({"sinks", "4-byte aligned"});
}

TEST_F(Sinks, EnterThePlanSignature) {
  ProblemDesc d;
  const auto sig = fa::rt::shape_signature(Role::Forward, d);
  d.has_sinks = true;
  EXPECT_FALSE(fa::rt::shape_signature(Role::Forward, d) == sig);
}

// Every family without Family::sinks: the predicate refuses any of its configs with sinks (naming sinks and the
// family), the selector passes it over; the families that declare sinks accept their defaults with sinks.
TEST(SinksPredicate, FamiliesThatDoNotReadSinksAreRefused) {
  int refused = 0, accepted = 0;
  for (const Family* f : all_families()) {
    const int arch = f->arch_min > 80 ? f->arch_min : 80;
    Semantic s;
    s.family = f;
    s.arch = arch;
    s.dtype = kBf16;
    s.head_dim = s.head_dim_v = 64;
    s.has_sinks = true;
    if (f->name == std::string("fwd_mla")) {
      s.head_dim = 576;
      s.head_dim_v = 512;
    }
    std::string why;
    const bool ok = is_valid(KernelConfig{s, f->defaults(s)}, limits_for_arch(arch), &why);
    if (!f->sinks) {
      ++refused;
      EXPECT_FALSE(ok) << f->name;
      EXPECT_NE(why.find("sinks"), std::string::npos) << f->name << ": " << why;
      EXPECT_NE(why.find(f->name), std::string::npos) << why;
      ProblemDesc p;
      p.has_sinks = true;
      p.aligned16 = p.tma_ok = true;
      std::string reason;
      EXPECT_FALSE(family_covers(*f, p, arch, &reason)) << f->name;
      EXPECT_NE(reason.find("sinks"), std::string::npos) << reason;
    } else {
      ++accepted;
      EXPECT_TRUE(ok) << f->name << ": " << why;
    }
  }
  EXPECT_GE(refused, 2) << "mask_blocks and bwd_post read no sinks";
  EXPECT_GE(accepted, 10);
  EXPECT_FALSE(find_family("mask_blocks")->sinks);
  EXPECT_FALSE(find_family("bwd_post")->sinks);
}

std::vector<std::string> steps_of(const Plan& plan, std::vector<bool>* sinks) {
  std::vector<std::string> names;
  for (const KernelConfig& c : plan.steps) {
    names.push_back(family_name(c.s));
    sinks->push_back(c.s.has_sinks);
    std::string why;
    EXPECT_TRUE(is_valid(c, limits_for_arch(c.s.arch), &why)) << canonical_key(c) << ": " << why;
  }
  return names;
}

ProblemDesc prefill(bool backward) {
  ProblemDesc p;
  p.dtype = kBf16;
  p.batch = 3;
  p.seqlen_q = 100;
  p.seqlen_k = 120;
  p.total_q = 300;
  p.total_k = 360;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = p.head_dim_v = 64;
  p.has_lse = true;
  p.has_sinks = true;
  p.aligned16 = p.tma_ok = true;
  p.backward = backward;
  return p;
}

TEST(SinksPlans, BackwardPlansReduceTheGradient) {
  for (int arch : {80, 90})
    for (bool det : {false, true}) {
      ProblemDesc p = prefill(true);
      p.deterministic = det;
      const Semantic s = select_backward(p, arch);
      const Plan plan = make_plan(s, p);
      std::vector<bool> sinks;
      const std::vector<std::string> names = steps_of(plan, &sinks);
      ASSERT_GE(names.size(), 4u);
      EXPECT_EQ(names[0], "bwd_pre");
      EXPECT_TRUE(sinks[0]) << "bwd_pre writes the partial sums";
      EXPECT_EQ(names[1], "bwd_sinks");
      EXPECT_TRUE(s.has_sinks);
      if (names.back() == "bwd_post") { EXPECT_FALSE(sinks.back()) << "bwd_post does not read sinks"; }
      EXPECT_EQ(plan.dsink_blocks, (100 + 31) / 32);  // bwd_pre's 32-row blocks
      EXPECT_EQ(plan.dsink_parts, 3 * plan.dsink_blocks);
      ASSERT_NE(plan.off_dsink_part, SIZE_MAX);
      EXPECT_EQ(plan.off_dsink_part % 256, 0u);
      EXPECT_LE(plan.off_dsink_part + size_t(plan.dsink_parts) * 8 * 4, plan.workspace_bytes);
      EXPECT_GE(plan.off_dsink_part, size_t(300) * 8 * 4) << "after Delta";
      p.has_sinks = false;
      const Plan plain = make_plan(select_backward(p, arch), p);
      EXPECT_EQ(plain.off_dsink_part, SIZE_MAX);
      for (const KernelConfig& c : plain.steps) EXPECT_NE(family_name(c.s), std::string("bwd_sinks"));
    }
}

TEST(SinksPlans, ForwardStepsCarrySinksWhereTheyAreRead) {
  // A mask_mod: [mask_blocks, fwd_*]; the classification reads no sinks.
  static const int dtypes[1] = {1}, ranks[1] = {1};
  ProblemDesc p = prefill(false);
  p.mods = intern_user_mods("return j <= i;", "", 1, dtypes, ranks);
  for (int arch : {80, 90}) {
    std::vector<bool> sinks;
    const std::vector<std::string> names = steps_of(make_plan(select_forward(p, arch), p), &sinks);
    ASSERT_EQ(names.size(), 2u);
    EXPECT_EQ(names[0], "mask_blocks");
    EXPECT_FALSE(sinks[0]);
    EXPECT_TRUE(sinks[1]) << names[1];
  }
  // A decode forced to split: [fwd_split, fwd_combine], the combine adding the sink once.
  ProblemDesc d = prefill(false);
  d.seqlen_q = 1;
  d.seqlen_k = 4096;
  d.seqused = true;
  d.num_splits = 4;
  std::vector<bool> sinks;
  const std::vector<std::string> names = steps_of(make_plan(select_forward(d, 90), d), &sinks);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "fwd_split");
  EXPECT_EQ(names[1], "fwd_combine");
  EXPECT_TRUE(sinks[0]);
  EXPECT_TRUE(sinks[1]);
}

TEST_F(Sinks, BackwardNeedsDsinksExactlyWithSinks) {
  fa_bwd_params b = bwd();
  size_t bytes = 0;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
  b.dsinks = nullptr;
  expect_bwd_rejected(b, FA_ERROR_INVALID_ARGUMENT, {"dsinks", "expected", "as fwd.sinks is set", "got NULL"});
  b.dsinks = fptr(0x7c000001);
  expect_bwd_rejected(b, FA_ERROR_INVALID_ARGUMENT, {"dsinks", "4-byte aligned", "0x7c000001"});
  b.dsinks = static_cast<float*>(const_cast<void*>(b.dq)) + 4;
  expect_bwd_rejected(b, FA_ERROR_INVALID_ARGUMENT, {"dsinks", "not overlapping dq"});
  b.dsinks = p.lse + 8;
  expect_bwd_rejected(b, FA_ERROR_INVALID_ARGUMENT, {"dsinks", "not overlapping lse"});
  b.dsinks = const_cast<float*>(p.sinks);
  expect_bwd_rejected(b, FA_ERROR_INVALID_ARGUMENT, {"dsinks", "not overlapping sinks"});
  p.sinks = nullptr;
  b.dsinks = fptr(0x7c000000);
  expect_bwd_rejected(b, FA_ERROR_INVALID_ARGUMENT, {"dsinks", "NULL when fwd.sinks is NULL"});
  b.dsinks = nullptr;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
}

// A version-1 fa_bwd_params (before dsinks): validates without sinks, the bytes past it never read; with sinks the
// error says dsinks needs version 2.
TEST_F(Sinks, BackwardVersionOneStructs) {
  fa_bwd_params b = bwd();
  b.version = 1;
  b.struct_size = offsetof(fa_bwd_params, dsinks);
  std::memset(reinterpret_cast<char*>(&b) + offsetof(fa_bwd_params, dsinks), 0xab,
              sizeof b - offsetof(fa_bwd_params, dsinks));
  expect_bwd_rejected(b, FA_ERROR_INVALID_ARGUMENT, {"dsinks", "version 2", "absent (fa_bwd_params version 1)"});
  p.sinks = nullptr;
  size_t bytes = 0;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
  fa::rt::BwdView v;
  ProblemDesc d;
  ASSERT_TRUE(fa::rt::validate_backward(&b, &v, &d).ok());
  EXPECT_EQ(v.bwd.dsinks, nullptr);
  b.struct_size = sizeof(fa_bwd_params);  // a version-1 struct of the version-2 size is a caller bug
  expect_bwd_rejected(b, FA_ERROR_INVALID_VERSION, {"bwd.struct_size", "for version 1"});
}

}  // namespace
