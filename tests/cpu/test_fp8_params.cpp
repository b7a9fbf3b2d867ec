// test_fp8_params.cpp -- the fp8 fields of fa_params version 3 (dtype / kv_dtype e4m3 and e5m2, o_dtype, descale_q /
// k / v, k_scale / v_scale): each rule with a case that breaks it and a message naming the field, version-2 structs
// still validate, fp8 inputs select the Hopper forward (fwd_wgmma) on sm_90, an arch without fp8 tensor cores (or,
// for fp8 inputs, without wgmma) and a problem no fp8 kernel reads fail with FA_ERROR_NOT_SUPPORTED (never a 16-bit
// kernel over fp8 bytes), the backward refuses fp8, and the new dtypes enter the kernel key and the plan signature
// (no GPU needed: validation and selection).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "fa/fa.h"
#include "generator/problem.h"
#include "runtime/plan_cache.h"
#include "runtime/validate.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/params_support.h"

namespace {

using fa::test::fake_addr;
const float* fptr(uintptr_t x) { return static_cast<const float*>(fake_addr(x)); }

// The paged decode problem of fa::test::fake_paged_decode_params (batch 2, one token, 8 query heads over 2 KV heads,
// d 64, pages of 16 rows, 12 pages) with an e4m3 cache and per-head scales.
struct Fp8 : ::testing::Test {
  fa_context ctx = nullptr;
  fa_params p{};
  void SetUp() override {
    ctx = fa::test::make_context(":memory:", -1);
    ASSERT_NE(ctx, nullptr);
    fa::test::fake_paged_decode_params(&p);
    p.kv_dtype = FA_DTYPE_E4M3;
    p.k_scale = fptr(0x70000000);
    p.k_scale_stride_head = 1;
    p.v_scale = fptr(0x70000100);
    p.v_scale_stride_head = 1;
  }
  void TearDown() override { fa_context_destroy(ctx); }

  // fa_run, fa_prepare, fa_is_supported and fa_problem_key reject p with `status`, the message naming each of `parts`.
  void expect_rejected(fa_status status, std::initializer_list<const char*> parts) {
    EXPECT_EQ(fa_run(ctx, &p, nullptr), status) << fa_last_error();
    const std::string msg = fa_last_error();
    for (const char* part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "must name " << part << ": " << msg;
    if (status == FA_ERROR_INVALID_ARGUMENT) {
      EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
      EXPECT_NE(msg.find("got"), std::string::npos) << msg;
    }
    EXPECT_EQ(fa_prepare(ctx, &p), status);
    EXPECT_EQ(fa_is_supported(ctx, &p), 0);
    char key[256] = "untouched";
    EXPECT_EQ(fa_problem_key(ctx, &p, key, sizeof key), status);
    EXPECT_STREQ(key, "untouched");
  }
  // p as fp8 inputs: q, k, v e4m3 (contiguous, fixed length), o bf16, per-(batch, kv head) descales.
  void make_fp8_inputs() {
    fa::test::fake_bshd_params(&p, 2, 64, 80, 8, 2, 64);
    p.dtype = FA_DTYPE_E4M3;
    p.o_dtype = FA_DTYPE_BF16;
    p.descale_q = fptr(0x70000000);
    p.descale_q_stride_batch = 2;
    p.descale_q_stride_head = 1;
    p.descale_k = fptr(0x70000100);
    p.descale_v = fptr(0x70000200);  // per tensor: strides 0
  }
  fa::gen::ProblemDesc desc() { return fa::test::validated_desc(p); }
};

TEST_F(Fp8, CacheFieldsValidate) {
  const fa::gen::ProblemDesc d = desc();
  EXPECT_EQ(d.dtype, FA_DTYPE_BF16);
  EXPECT_EQ(d.kv_dtype, FA_DTYPE_E4M3);
  EXPECT_EQ(d.o_dtype, 0);
  EXPECT_TRUE(d.aligned16) << "fp8 strides of 16 elements are 16 bytes";
  EXPECT_FALSE(d.tma_ok);
  p.k_stride_head = 72;  // 72 fp8 bytes: not a multiple of 16 bytes (it would be as bf16 elements)
  p.v_stride_head = 72;
  p.k_stride_seq = p.v_stride_seq = 2 * 72;
  p.k_stride_batch = p.v_stride_batch = 16 * 2 * 72;
  EXPECT_FALSE(desc().aligned16);
}

TEST_F(Fp8, PagedDecodeRunsTheSplitFamily) {
  for (int kv : {FA_DTYPE_E4M3, FA_DTYPE_E5M2}) {
    p.kv_dtype = kv;
    EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
    char key[256];
    ASSERT_EQ(fa_problem_key(ctx, &p, key, sizeof key), FA_OK) << fa_last_error();
    EXPECT_EQ(std::string(key).rfind("fwd_split.sm90.bf16.d64.dv64", 0), 0u) << key;
    EXPECT_NE(std::string(key).find(kv == FA_DTYPE_E4M3 ? ".paged.kv_e4m3" : ".paged.kv_e5m2"), std::string::npos)
        << key;
  }
  // Forced splits: the combine step merges float32 partials, so its key is the 16-bit one.
  p.num_splits = 3;
  const fa::gen::ProblemDesc d = desc();
  const fa::gen::Plan plan = fa::gen::make_plan(fa::gen::select_forward(d, 90), d);
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[0].s.kv_dtype, FA_DTYPE_E5M2);
  EXPECT_EQ(std::string(plan.steps[1].s.family->name), "fwd_combine");
  EXPECT_EQ(plan.steps[1].s.kv_dtype, 0);
  // The contiguous decode class (one token, 4 query heads a KV head) with per-tensor scales, on Ada too.
  p.block_table = nullptr;
  p.block_table_stride = 0;
  p.page_size = p.num_pages = 0;
  p.seqused_k = nullptr;
  p.k_stride_batch = p.v_stride_batch = 80 * 2 * 64;
  p.k_scale_stride_head = p.v_scale_stride_head = 0;
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
  fa::test::ScopedEnv arch("FA_ARCH", "89");
  fa_context ada = fa::test::make_context(":memory:", -1);
  ASSERT_NE(ada, nullptr);
  EXPECT_EQ(fa_is_supported(ada, &p), 1) << fa_last_error();
  fa_context_destroy(ada);
}

TEST_F(Fp8, WideHeadsHaveNoFp8Kernel) {
  // MLA's 576 / 512 over an fp8 latent cache: the wide kernels read no fp8 yet.
  fa::test::fake_bshd_params(&p, 2, 1, 64, 16, 1, 576);
  p.head_dim_v = 512;
  p.v = p.k;
  p.v_stride_batch = p.k_stride_batch;
  p.v_stride_seq = p.k_stride_seq;
  p.v_stride_head = p.k_stride_head;
  p.o_stride_head = 512;
  p.o_stride_seq = p.o_stride_batch = 16 * 512;
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << "the 16-bit latent cache runs: " << fa_last_error();
  p.kv_dtype = FA_DTYPE_E4M3;
  expect_rejected(FA_ERROR_NOT_SUPPORTED, {"no fp8 forward kernel yet", "e4m3 KV cache", "576 / dv 512"});
}

TEST_F(Fp8, SameDtypeKvAndOutputNormaliseToZero) {
  p.kv_dtype = FA_DTYPE_BF16;
  p.k_scale = p.v_scale = nullptr;
  p.k_scale_stride_head = p.v_scale_stride_head = 0;
  p.o_dtype = FA_DTYPE_BF16;
  const fa::gen::ProblemDesc d = desc();
  EXPECT_EQ(d.kv_dtype, 0);
  EXPECT_EQ(d.o_dtype, 0);
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
}

TEST_F(Fp8, UnknownDtypes) {
  p.dtype = 6;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"dtype", "FA_DTYPE_E4M3 (4)"});
  p.dtype = FA_DTYPE_BF16;
  p.kv_dtype = 7;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"kv_dtype", "FA_DTYPE_E5M2 (5)"});
}

TEST_F(Fp8, CacheNeedsASixteenBitQuery) {
  p.dtype = FA_DTYPE_FP32;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"kv_dtype", "fp32"});
}

TEST_F(Fp8, OutputDtypeOnlyWithFp8Inputs) {
  p.o_dtype = FA_DTYPE_FP16;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"o_dtype", "unless dtype is fp8"});
}

TEST_F(Fp8, ScalesNeedAnFp8Cache) {
  p.kv_dtype = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"k_scale", "NULL unless kv_dtype"});
  p.k_scale = nullptr;
  p.k_scale_stride_head = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"v_scale", "NULL unless kv_dtype"});
}

TEST_F(Fp8, ScaleRules) {
  p.k_scale = fptr(0x70000002);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"k_scale", "4-byte aligned"});
  p.k_scale = fptr(0x70000000);
  p.v_scale_stride_head = -1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"v_scale_stride_head", ">= 0"});
  p.v_scale_stride_head = int64_t(1) << 60;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"v_scale_stride_head", "2^59"});
  p.v_scale = nullptr;
  p.v_scale_stride_head = 1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"v_scale_stride_head", "0 when v_scale is NULL"});
  p.v_scale_stride_head = 0;  // a NULL scale is 1
  EXPECT_EQ(desc().kv_dtype, FA_DTYPE_E4M3);
}

TEST_F(Fp8, DescalesNeedFp8Inputs) {
  p.descale_q = fptr(0x70000200);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"descale_q", "NULL unless dtype"});
}

TEST_F(Fp8, Fp8InputsNeedASixteenBitOutput) {
  make_fp8_inputs();
  p.o_dtype = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"o_dtype", "o is never fp8"});
  p.o_dtype = FA_DTYPE_E4M3;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"o_dtype", "FA_DTYPE_BF16 (2)"});
  p.o_dtype = FA_DTYPE_FP32;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"o_dtype"});
}

TEST_F(Fp8, Fp8InputsTakeOneDtype) {
  make_fp8_inputs();
  p.kv_dtype = FA_DTYPE_E5M2;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"kv_dtype", "0 or dtype (4)"});
  p.kv_dtype = FA_DTYPE_E4M3;
  p.k_scale = fptr(0x70000300);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"k_scale", "NULL unless kv_dtype"});
}

TEST_F(Fp8, DescaleRules) {
  make_fp8_inputs();
  p.descale_k = fptr(0x70000101);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"descale_k", "4-byte aligned"});
  p.descale_k = fptr(0x70000100);
  p.descale_q_stride_batch = -2;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"descale_q_stride_batch", ">= 0"});
  p.descale_q_stride_batch = 2;
  p.descale_v_stride_head = 1;
  p.descale_v = nullptr;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"descale_v_stride_head", "0 when descale_v is NULL"});
}

TEST_F(Fp8, Fp8InputsRunTheHopperForward) {
  make_fp8_inputs();
  const fa::gen::ProblemDesc d = desc();
  EXPECT_EQ(d.dtype, FA_DTYPE_E4M3);
  EXPECT_EQ(d.o_dtype, FA_DTYPE_BF16);
  EXPECT_EQ(d.kv_dtype, 0);
  EXPECT_TRUE(d.tma_ok) << "fp8 rows of 64 bytes and a bf16 o are TMA tensors";
  for (int dt : {FA_DTYPE_E4M3, FA_DTYPE_E5M2})
    for (int od : {FA_DTYPE_BF16, FA_DTYPE_FP16}) {
      p.dtype = dt;
      p.o_dtype = od;
      EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
      char key[256];
      ASSERT_EQ(fa_problem_key(ctx, &p, key, sizeof key), FA_OK) << fa_last_error();
      const std::string k = key;
      EXPECT_EQ(k.rfind(dt == FA_DTYPE_E4M3 ? "fwd_wgmma.sm90.e4m3.d64.dv64" : "fwd_wgmma.sm90.e5m2.d64.dv64", 0), 0u)
          << k;
      EXPECT_NE(k.find(od == FA_DTYPE_BF16 ? ".o_bf16" : ".o_fp16"), std::string::npos) << k;
      // the default point is valid, a multiple of 32 keys (k32 steps)
      const fa::gen::Semantic s = fa::gen::select_forward(desc(), 90);
      ASSERT_NE(s.family, nullptr);
      const fa::gen::Tunables t = s.family->defaults(s);
      std::string why;
      EXPECT_TRUE(fa::gen::is_valid(fa::gen::KernelConfig{s, t}, fa::gen::limits_for_arch(90), &why)) << why;
      EXPECT_EQ(t[1] % 32, 0) << fa::gen::tunables_key(s, t);
    }
  // A bias or a layout TMA cannot describe: no fp8 kernel (no fallback to a 16-bit one).
  p.dtype = FA_DTYPE_E4M3;
  p.o_dtype = FA_DTYPE_BF16;
  p.bias = fake_addr(0x80000000);
  p.bias_stride_k = 1;
  expect_rejected(FA_ERROR_NOT_SUPPORTED, {"no fp8 forward kernel yet", "e4m3", "a bias"});
  p.bias = nullptr;
  p.bias_stride_k = 0;
  p.q_stride_head = 72;  // 72 fp8 bytes: not a multiple of 16
  p.q_stride_seq = 8 * 72;
  p.q_stride_batch = 64 * 8 * 72;
  EXPECT_EQ(fa::gen::select_forward(desc(), 90).family, nullptr);
  expect_rejected(FA_ERROR_NOT_SUPPORTED, {"no fp8 forward kernel yet", "e4m3", "sm_90"});
}

TEST_F(Fp8, Fp8InputsNeedHopper) {
  make_fp8_inputs();
  // sm_89 has fp8 mma but no wgmma: the fp8 forward (fwd_wgmma) is Hopper's; the message names the dtype and the arch.
  fa::test::ScopedEnv arch("FA_ARCH", "89");
  fa_context ada = fa::test::make_context(":memory:", -1);
  ASSERT_NE(ada, nullptr);
  std::swap(ctx, ada);
  expect_rejected(FA_ERROR_NOT_SUPPORTED, {"no fp8 forward kernel yet", "e4m3", "sm_89"});
  p.dtype = FA_DTYPE_E5M2;
  expect_rejected(FA_ERROR_NOT_SUPPORTED, {"e5m2", "sm_89"});
  std::swap(ctx, ada);
  fa_context_destroy(ada);
  EXPECT_EQ(fa::gen::select_forward(desc(), 89).family, nullptr);
}

TEST_F(Fp8, BiasOfFp8InputsHasTheOutputDtype) {
  make_fp8_inputs();
  p.bias = fake_addr(0x80000001);  // odd: misaligned for a 2-byte o_dtype, fine for fp8's single byte
  p.bias_stride_k = 1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, {"bias", "aligned to 2 bytes"});
}

TEST_F(Fp8, CacheOutsideTheDecodeFamiliesHasNoKernel) {
  // A contiguous prefill (64 tokens x 4 heads a KV head: not the decode class) with an fp8 cache: no family reads it.
  fa::test::fake_bshd_params(&p, 2, 64, 80, 8, 2, 64);
  p.kv_dtype = FA_DTYPE_E4M3;
  expect_rejected(FA_ERROR_NOT_SUPPORTED, {"no fp8 forward kernel yet", "e4m3 KV cache", "sm_90"});
  p.kv_dtype = FA_DTYPE_E5M2;
  expect_rejected(FA_ERROR_NOT_SUPPORTED, {"no fp8 forward kernel yet", "e5m2 KV cache"});
}

TEST_F(Fp8, ArchWithoutFp8TensorCores) {
  fa::test::ScopedEnv arch("FA_ARCH", "86");
  fa_context old = fa::test::make_context(":memory:", -1);
  ASSERT_NE(old, nullptr);
  std::swap(ctx, old);
  expect_rejected(FA_ERROR_NOT_SUPPORTED, {"kv_dtype e4m3", "sm_86", "sm_89"});
  make_fp8_inputs();
  p.dtype = FA_DTYPE_E5M2;
  expect_rejected(FA_ERROR_NOT_SUPPORTED, {"dtype e5m2", "sm_86"});
  std::swap(ctx, old);
  fa_context_destroy(old);
}

TEST_F(Fp8, VersionTwoStructStillValidates) {
  fa_params v2;
  fa_params_init(&v2);
  std::memcpy(&v2, &p, offsetof(fa_params, o_dtype));
  v2.version = 2;
  v2.struct_size = offsetof(fa_params, o_dtype);
  // Whatever lies past the version-2 size is never read: poison it.
  std::memset(reinterpret_cast<char*>(&v2) + offsetof(fa_params, o_dtype), 0xab,
              sizeof v2 - offsetof(fa_params, o_dtype));
  EXPECT_EQ(fa_is_supported(ctx, &v2), 1) << fa_last_error();
  fa_params out;
  fa::gen::ProblemDesc d;
  ASSERT_TRUE(fa::rt::validate_forward(&v2, &out, &d).ok());
  EXPECT_EQ(d.kv_dtype, 0);
  EXPECT_EQ(out.k_scale, nullptr);
  v2.struct_size = sizeof(fa_params);  // a version-2 struct of the version-3 size is a caller bug
  EXPECT_EQ(fa_is_supported(ctx, &v2), 0);
  EXPECT_NE(std::string(fa_last_error()).find("struct_size"), std::string::npos) << fa_last_error();
}

TEST_F(Fp8, BackwardRefusesFp8) {
  p.block_table = nullptr;  // a problem the backward would otherwise take
  p.block_table_stride = 0;
  p.page_size = p.num_pages = 0;
  p.seqused_k = nullptr;
  p.k_stride_batch = p.v_stride_batch = 80 * 2 * 64;
  p.lse = reinterpret_cast<float*>(0x78000000);
  fa_bwd_params b;
  fa::test::fake_bwd_params(&b, &p);
  size_t bytes = 0;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(std::string(fa_last_error()).find("kv_dtype e4m3"), std::string::npos) << fa_last_error();
  p.kv_dtype = 0;
  p.k_scale = p.v_scale = nullptr;
  p.k_scale_stride_head = p.v_scale_stride_head = 0;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
}

// The kernel key and the plan signature hold the new dtypes (semantic parameters: they change results).
TEST(Fp8Key, DtypesEnterTheKeyAndTheSignature) {
  fa::gen::Semantic s;
  const std::string base = fa::gen::semantic_key(s);
  s.kv_dtype = fa::gen::kE4m3;
  EXPECT_EQ(fa::gen::semantic_key(s), base + ".kv_e4m3");
  s.kv_dtype = 0;
  s.dtype = fa::gen::kE5m2;
  s.o_dtype = fa::gen::kBf16;
  EXPECT_NE(fa::gen::semantic_key(s).find(".e5m2."), std::string::npos) << fa::gen::semantic_key(s);
  EXPECT_NE(fa::gen::semantic_key(s).find(".o_bf16"), std::string::npos) << fa::gen::semantic_key(s);
  fa::gen::ProblemDesc d;
  const auto sig = fa::rt::shape_signature(fa::gen::Role::Forward, d);
  fa::gen::ProblemDesc e = d;
  e.kv_dtype = fa::gen::kE4m3;
  EXPECT_FALSE(fa::rt::shape_signature(fa::gen::Role::Forward, e) == sig);
  e = d;
  e.kv_dtype = fa::gen::kE5m2;
  const auto sig_e5 = fa::rt::shape_signature(fa::gen::Role::Forward, e);
  e.kv_dtype = fa::gen::kE4m3;
  EXPECT_FALSE(fa::rt::shape_signature(fa::gen::Role::Forward, e) == sig_e5);
  e = d;
  e.o_dtype = fa::gen::kFp16;
  EXPECT_FALSE(fa::rt::shape_signature(fa::gen::Role::Forward, e) == sig);
}

}  // namespace
