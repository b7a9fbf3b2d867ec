// test_alignment_note.cpp -- a problem sent to a reference kernel only by its alignment is reported at info level,
// once per problem class, naming the reference and the fast family it missed; aligned, fp32 and below-info-level
// problems say nothing. Directly (forward and backward) and through fa_prepare (which plans several shape classes).
#include <gtest/gtest.h>

#include <string>

#include "fa/fa.h"
#include "generator/family.h"
#include "runtime/alignment_note.h"
#include "runtime/context.h"
#include "tests/cpu/context_support.h"

namespace {

using fa::rt::LogLevel;
using fa::test::count_of;

fa::gen::ProblemDesc problem(int dtype, int head_dim, bool aligned, bool backward) {
  fa::gen::ProblemDesc d;
  d.dtype = dtype;
  d.batch = 2;
  d.heads_q = d.heads_kv = 4;
  d.head_dim = d.head_dim_v = head_dim;
  d.seqlen_q = d.seqlen_k = 256;
  d.total_q = d.total_k = 512;
  d.has_lse = true;
  d.aligned16 = aligned;
  d.backward = backward;
  return d;
}

// What note_alignment_fallback prints for (role, d) on a context at `level`.
std::string note(fa_context c, LogLevel level, fa::gen::Role role, const fa::gen::ProblemDesc& d) {
  c->log_level = level;
  testing::internal::CaptureStderr();
  fa::rt::note_alignment_fallback(c, role, d, fa::gen::select(role, d, c->arch));
  return testing::internal::GetCapturedStderr();
}

class AlignmentNote : public ::testing::Test {
 protected:
  void SetUp() override { c = fa::test::make_context(":memory:", FA_TUNE_DEFAULTS_ONLY); }
  void TearDown() override { fa_context_destroy(c); }
  fa_context c = nullptr;
};

TEST_F(AlignmentNote, ForwardSaysItOnceAtInfoLevel) {
  ASSERT_NE(c, nullptr);
  const fa::gen::ProblemDesc d = problem(fa::gen::kFp16, 72, false, false);
  ASSERT_TRUE(fa::gen::select(fa::gen::Role::Forward, d, c->arch).family->reference);
  EXPECT_EQ(note(c, LogLevel::kWarn, fa::gen::Role::Forward, d), "");  // below the level: nothing, not remembered
  const std::string first = note(c, LogLevel::kInfo, fa::gen::Role::Forward, d);
  EXPECT_EQ(count_of(first, "fa: info: forward "), 1u) << first;
  EXPECT_NE(first.find("fwd_ref"), std::string::npos) << first;
  // The family the same problem gets once aligned (fwd_wgmma on sm_90, fwd_mma before): the note names it.
  fa::gen::ProblemDesc aligned = d;
  aligned.aligned16 = aligned.tma_ok = true;
  const fa::gen::Semantic fast = fa::gen::select(fa::gen::Role::Forward, aligned, c->arch);
  ASSERT_FALSE(fast.family->reference);
  EXPECT_NE(first.find(std::string("for ") + fast.family->name), std::string::npos) << first;
  EXPECT_NE(first.find("16-byte aligned"), std::string::npos) << first;
  EXPECT_EQ(note(c, LogLevel::kDebug, fa::gen::Role::Forward, d), "");  // once per problem class
}

TEST_F(AlignmentNote, BackwardNamesItsTensors) {
  ASSERT_NE(c, nullptr);
  const fa::gen::ProblemDesc d = problem(fa::gen::kBf16, 96, false, true);
  ASSERT_FALSE(
      fa::gen::select(fa::gen::Role::Backward, problem(fa::gen::kBf16, 96, true, true), c->arch).family->reference);
  const std::string err = note(c, LogLevel::kInfo, fa::gen::Role::Backward, d);
  EXPECT_EQ(count_of(err, "fa: info: backward "), 1u) << err;
  EXPECT_NE(err.find("dout, dq, dk, dv"), std::string::npos) << err;
  EXPECT_NE(err.find("bwd_mma"), std::string::npos) << err;
}

TEST_F(AlignmentNote, AlignedAndFp32ProblemsSayNothing) {
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(note(c, LogLevel::kDebug, fa::gen::Role::Forward, problem(fa::gen::kFp16, 80, true, false)), "");
  EXPECT_EQ(note(c, LogLevel::kDebug, fa::gen::Role::Forward, problem(fa::gen::kFp32, 80, false, false)), "");
}

// fa_prepare plans every shape class of the bucket: still one message. Pointers aligned to 2 bytes only.
TEST(AlignmentNoteThroughPrepare, OneMessageForAMisalignedFp16Problem) {
  if (fa::rt::nvrtc_version().empty()) GTEST_SKIP() << "NVRTC unavailable";
  fa::test::ScopedEnv env("FA_LOG", "info");
  fa_context c = fa::test::make_context(":memory:", FA_TUNE_DEFAULTS_ONLY);
  ASSERT_NE(c, nullptr);
  fa_params p;
  fa_params_init(&p);
  p.dtype = FA_DTYPE_FP16;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = 200;
  p.heads_q = p.heads_kv = 2;
  p.head_dim = 56;
  const int64_t D = 56;
  auto at = [](uintptr_t x) { return reinterpret_cast<void*>(x); };
  p.q = at(0x10000002);
  p.q_stride_batch = 200 * 2 * D;
  p.q_stride_seq = 2 * D;
  p.q_stride_head = D;
  p.k = at(0x20000000);
  p.k_stride_batch = 200 * 2 * D;
  p.k_stride_seq = 2 * D;
  p.k_stride_head = D;
  p.v = at(0x30000000);
  p.v_stride_batch = 200 * 2 * D;
  p.v_stride_seq = 2 * D;
  p.v_stride_head = D;
  p.o = at(0x40000000);
  p.o_stride_batch = 200 * 2 * D;
  p.o_stride_seq = 2 * D;
  p.o_stride_head = D;
  testing::internal::CaptureStderr();
  const fa_status st = fa_prepare(c, &p);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(st == FA_OK || st == FA_ERROR_NO_DEVICE) << fa_last_error();
  EXPECT_EQ(count_of(err, "runs the reference kernel"), 1u) << err;
  EXPECT_NE(err.find(".d56."), std::string::npos) << err;  // the problem class is named
  fa_context_destroy(c);
}

}  // namespace
