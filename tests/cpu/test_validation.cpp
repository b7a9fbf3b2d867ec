// test_validation.cpp -- every rejection of the C API, one test each: the status, the named field in the message,
// and that nothing else happened (validation runs before any device work, so a context without a GPU suffices;
// on a machine with a GPU the same calls must fail the same way).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "fa/fa.h"
#include "generator/problem.h"
#include "runtime/validate.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/params_support.h"

namespace {

using fa::test::fake_addr;
void* addr(uintptr_t x) { return fake_addr(x); }

struct Fixture : ::testing::Test {
  fa_context ctx = nullptr;
  fa_params p{};
  fa_bwd_params b{};
  void SetUp() override {
    ctx = fa::test::make_context(":memory:", -1);
    ASSERT_NE(ctx, nullptr);
    fa::test::fake_bshd_params(&p, 2, 64, 80, 8, 2, 64);
    fa_bwd_params_init(&b);
  }
  void TearDown() override { fa_context_destroy(ctx); }

  // Expects fa_run, fa_prepare and fa_is_supported to reject p with `status` naming `field`.
  void expect_rejected(fa_status status, const char* field) {
    fa_status st = fa_run(ctx, &p, nullptr);
    EXPECT_EQ(st, status) << fa_last_error();
    const std::string msg = fa_last_error();
    EXPECT_NE(msg.find(field), std::string::npos) << "message must name " << field << ": " << msg;
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got"), std::string::npos) << msg;
    EXPECT_EQ(fa_prepare(ctx, &p), status);
    EXPECT_EQ(fa_is_supported(ctx, &p), 0);
    char key[256];
    EXPECT_EQ(fa_problem_key(ctx, &p, key, sizeof key), status);
  }
};

using Validation = Fixture;

TEST_F(Validation, ValidParamsPassValidation) {
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
  const fa_status st = fa_run(ctx, &p, nullptr);
  if (fa_context_has_device(ctx)) GTEST_SKIP() << "a GPU is present: fake pointers must not be launched";
  EXPECT_EQ(st, FA_ERROR_NO_DEVICE) << "valid params reach the device check: " << fa_last_error();
}

TEST_F(Validation, NullContext) {
  EXPECT_EQ(fa_run(nullptr, &p, nullptr), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa_last_error()).find("context"), std::string::npos);
}
TEST_F(Validation, NullParams) {
  EXPECT_EQ(fa_run(ctx, nullptr, nullptr), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa_last_error()).find("params"), std::string::npos);
}
TEST_F(Validation, WrongVersion) {
  p.version = 99;
  expect_rejected(FA_ERROR_INVALID_VERSION, "version");
}
TEST_F(Validation, WrongStructSize) {
  p.struct_size = 12;
  expect_rejected(FA_ERROR_INVALID_VERSION, "struct_size");
}
TEST_F(Validation, UnknownDtype) {
  p.dtype = 7;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "dtype");
}
TEST_F(Validation, BatchZero) {
  p.batch = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "batch");
}
TEST_F(Validation, SeqlenQZero) {
  p.seqlen_q = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "seqlen_q");
}
TEST_F(Validation, SeqlenKNegative) {
  p.seqlen_k = -1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "seqlen_k");
}
TEST_F(Validation, HeadsQZero) {
  p.heads_q = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "heads_q");
}
TEST_F(Validation, HeadsKvZero) {
  p.heads_kv = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "heads_kv");
}
TEST_F(Validation, HeadsNotDivisible) {
  p.heads_kv = 3;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "heads_kv");
}
TEST_F(Validation, HeadDimNotMultipleOf8) {
  p.head_dim = 60;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "head_dim");
}
TEST_F(Validation, HeadDimTooLarge) {
  p.head_dim = 584;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "head_dim");
}
TEST_F(Validation, HeadDimVTooLarge) {
  p.head_dim_v = 520;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "head_dim_v");
}
TEST_F(Validation, HeadDimVOutOfRange) {
  p.head_dim_v = 4;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "head_dim_v");
}
TEST_F(Validation, NullQ) {
  p.q = nullptr;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "q");
}
TEST_F(Validation, NullK) {
  p.k = nullptr;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "k");
}
TEST_F(Validation, NullV) {
  p.v = nullptr;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "v");
}
TEST_F(Validation, NullO) {
  p.o = nullptr;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "o");
}
TEST_F(Validation, MisalignedQ) {
  p.q = addr(0x10000001);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "q");
}
TEST_F(Validation, MisalignedFp32O) {
  p.dtype = FA_DTYPE_FP32;
  p.o = addr(0x40000002);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "o");
}
TEST_F(Validation, NegativeStride) {
  p.k_stride_seq = -128;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "k_stride_seq");
}
TEST_F(Validation, ZeroStrideAliases) {
  p.v_stride_seq = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "v_stride_seq");
}
TEST_F(Validation, HeadStrideOverlapsRows) {
  p.q_stride_head = 32;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "q_stride_head");
}
TEST_F(Validation, SeqStrideOverlapsHeads) {
  p.o_stride_seq = 100;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "o_stride_seq");
}
TEST_F(Validation, OffsetOverflow) {
  p.q_stride_batch = int64_t(1) << 62;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "q_stride_batch");
}
TEST_F(Validation, OutputOverlapsInput) {
  p.o = const_cast<void*>(p.q);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "o");
}
TEST_F(Validation, LseOverlapsOutput) {
  p.lse = static_cast<float*>(p.o);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "lse");
}
TEST_F(Validation, MisalignedLse) {
  p.lse = reinterpret_cast<float*>(0x50000002);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "lse");
}
TEST_F(Validation, UnknownMask) {
  p.mask = 5;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "mask");
}
TEST_F(Validation, WindowWithoutWindowMask) {
  p.mask = FA_MASK_CAUSAL;
  p.window_left = 4;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "window_left");
}
TEST_F(Validation, WindowRightWithoutWindowMask) {
  p.window_right = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "window_right");
}
TEST_F(Validation, WindowBelowMinusOne) {
  p.mask = FA_MASK_SLIDING_WINDOW;
  p.window_left = -2;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "window_left");
}
TEST_F(Validation, NegativeSoftcap) {
  p.softcap = -1.0f;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "softcap");
}
TEST_F(Validation, NanScale) {
  p.softmax_scale = NAN;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "softmax_scale");
}
TEST_F(Validation, BiasStridesWithoutBias) {
  p.bias_stride_q = 80;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "bias");
}
TEST_F(Validation, NegativeBiasStride) {
  p.bias = addr(0x60000000);
  p.bias_stride_k = -1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "bias_stride_k");
}
TEST_F(Validation, MisalignedBias) {
  p.bias = addr(0x60000001);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "bias");
}
TEST_F(Validation, MisalignedAlibi) {
  p.alibi_slopes = reinterpret_cast<const float*>(0x70000002);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "alibi_slopes");
}
TEST_F(Validation, VarlenMissingCuSeqlensK) {
  p.cu_seqlens_q = reinterpret_cast<const int32_t*>(0x80000000);
  p.max_seqlen_q = p.max_seqlen_k = 64;
  p.total_q = p.total_k = 128;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "cu_seqlens_k");
}
TEST_F(Validation, VarlenMissingCuSeqlensQ) {
  p.cu_seqlens_k = reinterpret_cast<const int32_t*>(0x80000000);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "cu_seqlens_q");
}
TEST_F(Validation, VarlenTotalBelowMax) {
  p.cu_seqlens_q = reinterpret_cast<const int32_t*>(0x80000000);
  p.cu_seqlens_k = reinterpret_cast<const int32_t*>(0x80001000);
  p.max_seqlen_q = 64;
  p.max_seqlen_k = 64;
  p.total_q = 10;
  p.total_k = 128;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "total_q");
}
TEST_F(Validation, VarlenNegativeMax) {
  p.cu_seqlens_q = reinterpret_cast<const int32_t*>(0x80000000);
  p.cu_seqlens_k = reinterpret_cast<const int32_t*>(0x80001000);
  p.max_seqlen_q = -1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "max_seqlen_q");
}
TEST_F(Validation, ProblemKeyNeedsABuffer) {
  EXPECT_EQ(fa_problem_key(ctx, &p, nullptr, 10), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa_last_error()).find("buf"), std::string::npos);
  // A short buffer: the size needed is reported and nothing is written.
  char full[256];
  ASSERT_EQ(fa_problem_key(ctx, &p, full, sizeof full), FA_OK) << fa_last_error();
  const size_t need = std::strlen(full) + 1;
  char shortbuf[256];
  std::memset(shortbuf, 'x', sizeof shortbuf);
  EXPECT_EQ(fa_problem_key(ctx, &p, shortbuf, need - 1), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa_last_error()).find(">= " + std::to_string(need) + " bytes"), std::string::npos)
      << fa_last_error();
  EXPECT_NE(std::string(fa_last_error()).find("size"), std::string::npos);
  EXPECT_EQ(shortbuf[0], 'x');
  EXPECT_EQ(fa_problem_key(ctx, &p, shortbuf, need), FA_OK);
  EXPECT_STREQ(shortbuf, full);
}
TEST_F(Validation, ProblemKeyHasNoLengths) {
  char a[256], c[256];
  ASSERT_EQ(fa_problem_key(ctx, &p, a, sizeof a), FA_OK) << fa_last_error();
  p.seqlen_q = 31;
  p.seqlen_k = 77;
  p.batch = 1;
  ASSERT_EQ(fa_problem_key(ctx, &p, c, sizeof c), FA_OK) << fa_last_error();
  EXPECT_STREQ(a, c);
  EXPECT_EQ(std::string(a).find("77"), std::string::npos);
}

// ---- backward ----
struct BwdValidation : Fixture {
  void SetUp() override {
    Fixture::SetUp();
    p.lse = reinterpret_cast<float*>(0x50000000);
    const int64_t D = 64;
    b.fwd = &p;
    b.dout = addr(0x90000000);
    b.dout_stride_batch = 64 * 8 * D;
    b.dout_stride_seq = 8 * D;
    b.dout_stride_head = D;
    b.dq = addr(0xa0000000);
    b.dq_stride_batch = 64 * 8 * D;
    b.dq_stride_seq = 8 * D;
    b.dq_stride_head = D;
    b.dk = addr(0xb0000000);
    b.dk_stride_batch = 80 * 2 * D;
    b.dk_stride_seq = 2 * D;
    b.dk_stride_head = D;
    b.dv = addr(0xc0000000);
    b.dv_stride_batch = 80 * 2 * D;
    b.dv_stride_seq = 2 * D;
    b.dv_stride_head = D;
  }
  void expect_bwd_rejected(fa_status status, const char* field) {
    EXPECT_EQ(fa_run_backward(ctx, &b, nullptr), status) << fa_last_error();
    const std::string msg = fa_last_error();
    EXPECT_NE(msg.find(field), std::string::npos) << "message must name " << field << ": " << msg;
    size_t bytes = 0;
    EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), status);
    EXPECT_EQ(fa_prepare_backward(ctx, &b), status);
  }
};

TEST_F(BwdValidation, ValidParamsPassValidation) {
  size_t bytes = 0;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
  EXPECT_GT(bytes, 0u);
}
TEST_F(BwdValidation, NullForward) {
  b.fwd = nullptr;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "fwd");
}
TEST_F(BwdValidation, WrongVersion) {
  b.version = 0;
  expect_bwd_rejected(FA_ERROR_INVALID_VERSION, "version");
}
TEST_F(BwdValidation, ForwardInvalid) {
  p.head_dim = 7;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "head_dim");
}
TEST_F(BwdValidation, MissingLse) {
  p.lse = nullptr;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "lse");
}
TEST_F(BwdValidation, NullDout) {
  b.dout = nullptr;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "dout");
}
TEST_F(BwdValidation, NullDq) {
  b.dq = nullptr;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "dq");
}
TEST_F(BwdValidation, DkOverlapsDv) {
  b.dv = b.dk;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "dv");
}
TEST_F(BwdValidation, DqOverlapsQ) {
  b.dq = const_cast<void*>(p.q);
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "dq");
}
TEST_F(BwdValidation, BadDeterministicFlag) {
  b.deterministic = 2;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "deterministic");
}
TEST_F(BwdValidation, MisalignedWorkspace) {
  b.workspace = addr(0xd0000010);
  b.workspace_size = 1 << 20;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "workspace");
}
TEST_F(BwdValidation, WorkspaceSizeWithoutWorkspace) {
  b.workspace_size = 4096;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "workspace_size");
}
TEST_F(BwdValidation, DkStrideOverlap) {
  b.dk_stride_seq = 10;
  expect_bwd_rejected(FA_ERROR_INVALID_ARGUMENT, "dk_stride_seq");
}

TEST(Api, StatusStringsAreStableAndNeverNull) {
  EXPECT_STREQ(fa_status_string(FA_OK), "FA_OK");
  EXPECT_STREQ(fa_status_string(FA_ERROR_INVALID_ARGUMENT), "FA_ERROR_INVALID_ARGUMENT");
  EXPECT_STREQ(fa_status_string(FA_ERROR_COMPILE), "FA_ERROR_COMPILE");
  EXPECT_NE(fa_status_string(static_cast<fa_status>(999)), nullptr);
  EXPECT_STREQ(fa_version_string(), "0.1.0");
}

TEST(Api, ContextOptionsAreValidated) {
  fa_context c = nullptr;
  fa_context_options o;
  fa_context_options_init(&o);
  o.tune_policy = 9;
  EXPECT_EQ(fa_context_create(&o, &c), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa_last_error()).find("tune_policy"), std::string::npos);
  EXPECT_EQ(c, nullptr);
  fa_context_options_init(&o);
  o.device_ordinal = -1;
  EXPECT_EQ(fa_context_create(&o, &c), FA_ERROR_INVALID_ARGUMENT);
  fa_context_options_init(&o);
  o.struct_size = 8;
  EXPECT_EQ(fa_context_create(&o, &c), FA_ERROR_INVALID_VERSION);
  EXPECT_EQ(fa_context_create(nullptr, nullptr), FA_ERROR_INVALID_ARGUMENT);
  fa_context_destroy(nullptr);  // no-op
}

TEST(Api, LastErrorIsPerThreadAndClearedOnSuccess) {
  fa_params p;
  fa_params_init(&p);
  EXPECT_EQ(fa_run(nullptr, &p, nullptr), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_STRNE(fa_last_error(), "");
  std::string other;
  std::thread t([&] { other = fa_last_error(); });
  t.join();
  EXPECT_EQ(other, "");
  EXPECT_EQ(fa_params_init(&p), FA_OK);
  EXPECT_STREQ(fa_last_error(), "");
}

}  // namespace

// The Hopper forward reads q, k, v through TMA tensor maps: where a stride breaks TMA's rules (a byte stride of 2^40
// or more, here; alignment is the 16-byte rule already, zero strides over extents > 1 are rejected by validation)
// the problem is not tma_ok and the selector falls back to fwd_mma on sm_90; with every stride within the rules it
// picks fwd_wgmma.
TEST_F(Validation, TmaStrideRuleDecidesTheHopperForward) {
  fa_params out;
  fa::gen::ProblemDesc d;
  ASSERT_TRUE(fa::rt::validate_forward(&p, &out, &d).ok());
  EXPECT_TRUE(d.aligned16);
  EXPECT_TRUE(d.tma_ok);
  EXPECT_STREQ(fa::gen::family_name(fa::gen::select_forward(d, 90)), "fwd_wgmma");
  EXPECT_STREQ(fa::gen::family_name(fa::gen::select_forward(d, 80)), "fwd_mma");
  p.k = addr(0x700000000000);           // far from the others: K spans 2^40 bytes
  p.k_stride_batch = int64_t{1} << 39;  // 2^40 bytes between the two batch entries of K: legal, not a TMA tensor
  fa::rt::Status st = fa::rt::validate_forward(&p, &out, &d);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_TRUE(d.aligned16);
  EXPECT_FALSE(d.tma_ok);
  EXPECT_STREQ(fa::gen::family_name(fa::gen::select_forward(d, 90)), "fwd_mma");
  p.batch = 1;  // one batch entry: its stride is never used, so TMA takes any
  p.seqlen_q = 64;
  st = fa::rt::validate_forward(&p, &out, &d);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_TRUE(d.tma_ok);
  p.q_stride_seq = 8 * 64 + 4;  // not a multiple of 16 bytes: neither fast family
  st = fa::rt::validate_forward(&p, &out, &d);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_FALSE(d.aligned16);
  EXPECT_FALSE(d.tma_ok);
  EXPECT_STREQ(fa::gen::family_name(fa::gen::select_forward(d, 90)), "fwd_ref");
}

// The Hopper forward's fixed-length epilogue stores O through a TMA map (templates/fwd_wgmma.cuh), so O's strides
// follow the same rule as q, k and v there: an O whose batch entries lie 2^40 bytes apart is legal and served by
// fwd_mma on sm_90. Varlen kernels store O with 16-byte stores: the same O stride leaves them on fwd_wgmma.
TEST_F(Validation, TmaStrideRuleOfOutputDecidesTheFixedLengthHopperForward) {
  fa_params out;
  fa::gen::ProblemDesc d;
  ASSERT_TRUE(fa::rt::validate_forward(&p, &out, &d).ok());
  ASSERT_TRUE(d.tma_ok);
  ASSERT_STREQ(fa::gen::family_name(fa::gen::select_forward(d, 90)), "fwd_wgmma");
  p.o = addr(0x700000000000);           // far from the others: O spans 2^40 bytes
  p.o_stride_batch = int64_t{1} << 39;  // 2^40 bytes between the two batch entries of O
  fa::rt::Status st = fa::rt::validate_forward(&p, &out, &d);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_TRUE(d.aligned16);
  EXPECT_FALSE(d.tma_ok);
  EXPECT_STREQ(fa::gen::family_name(fa::gen::select_forward(d, 90)), "fwd_mma");
  p.cu_seqlens_q = reinterpret_cast<const int32_t*>(0x80000000);  // varlen: packed tokens, O's batch stride unused
  p.cu_seqlens_k = reinterpret_cast<const int32_t*>(0x80001000);
  p.max_seqlen_q = 64;
  p.max_seqlen_k = 80;
  p.total_q = 128;
  p.total_k = 160;
  st = fa::rt::validate_forward(&p, &out, &d);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_TRUE(d.varlen);
  EXPECT_TRUE(d.tma_ok);
  EXPECT_STREQ(fa::gen::family_name(fa::gen::select_forward(d, 90)), "fwd_wgmma");
}
