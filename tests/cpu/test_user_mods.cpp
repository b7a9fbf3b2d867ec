// test_user_mods.cpp -- user code in the params (fa_mods): validation names its fields, the kernel key holds a hash
// of the code and the buffers' types but never their values, the tensor-core forwards run it (fwd_wgmma on sm_90,
// fwd_mma before) with the plan [mask_blocks, forward] for a mask_mod, the backward's plan and its need for
// score_mod's derivative (fa_mods version 3; older versions by their struct size), and NVRTC compiles the code on
// this machine: a good body compiles (then fails only for want of a GPU), a bad one fails with
// FA_ERROR_COMPILE and NVRTC's log counting lines in the user's own snippet.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "fa/fa.h"
#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/validate.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/params_support.h"

namespace {

using fa::test::fake_addr;
void* addr(uintptr_t x) { return fake_addr(x); }

struct UserMods : ::testing::Test {
  fa_context ctx = nullptr;
  fa_params p{};
  fa_mods m{};
  void SetUp() override {
    ctx = fa::test::make_context(":memory:", FA_TUNE_DEFAULTS_ONLY);
    ASSERT_NE(ctx, nullptr);
    fa::test::fake_bshd_params(&p, 2, 64, 64, 4, 4, 64);
    ASSERT_EQ(fa_mods_init(&m), FA_OK);
    // A document mask: buffer 0 holds the document id of each key position.
    m.mask_mod =
        "const int* doc = static_cast<const fa_buf0_t*>(u.buf[0]);\n"
        "return doc[i * u.stride[0][0]] == doc[j * u.stride[0][0]];";
    m.num_buffers = 1;
    m.buffers[0].ptr = addr(0x50000000);
    m.buffers[0].dtype = FA_USER_I32;
    m.buffers[0].rank = 1;
    m.buffers[0].shape[0] = 64;
    m.buffers[0].stride[0] = 1;
    p.mods = &m;
  }
  void TearDown() override { fa_context_destroy(ctx); }

  std::string key() {
    char buf[256];
    EXPECT_EQ(fa_problem_key(ctx, &p, buf, sizeof buf), FA_OK) << fa_last_error();
    return buf;
  }
  void expect_rejected(fa_status status, const char* field) {
    EXPECT_EQ(fa_run(ctx, &p, nullptr), status) << fa_last_error();
    const std::string msg = fa_last_error();
    EXPECT_NE(msg.find(field), std::string::npos) << "message must name " << field << ": " << msg;
    EXPECT_EQ(fa_is_supported(ctx, &p), 0);
  }
};

TEST_F(UserMods, KeyHoldsTheCodeHashNotTheValues) {
  const std::string k1 = key();
  EXPECT_NE(k1.find(".mod"), std::string::npos) << k1;
  EXPECT_EQ(k1.rfind("fwd_wgmma", 0), 0u) << "the Hopper forward runs user code: " << k1;
  m.buffers[0].ptr = addr(0x58000000);  // new pointer, shape, stride and scalars: the same kernel
  m.buffers[0].shape[0] = 99;
  m.buffers[0].stride[0] = 2;
  m.scalars[3] = 2.5f;
  m.iscalars[1] = 7;
  EXPECT_EQ(key(), k1);
  m.buffers[0].dtype = FA_USER_I64;  // another type: another kernel
  const std::string k2 = key();
  EXPECT_NE(k2, k1);
  m.buffers[0].dtype = FA_USER_I32;
  m.mask_mod = "return j <= i;";  // other code: another kernel
  EXPECT_NE(key(), k1);
  std::string copy =
      "const int* doc = static_cast<const fa_buf0_t*>(u.buf[0]);\n"
      "return doc[i * u.stride[0][0]] == doc[j * u.stride[0][0]];";
  m.mask_mod = copy.c_str();  // the same text at another address: the same kernel
  EXPECT_EQ(key(), k1);
}

TEST_F(UserMods, NoModsNoTag) {
  p.mods = nullptr;
  EXPECT_EQ(key().find(".mod"), std::string::npos);
  fa_mods empty;
  fa_mods_init(&empty);
  p.mods = &empty;  // present but empty: no user code
  EXPECT_EQ(key().find(".mod"), std::string::npos);
}

// fa.h: fa_mods_init says the mask depends on both b and h (a 0 bit would share one classification wrongly).
TEST(UserModsInit, DependsOnBatchAndHeadByDefault) {
  fa_mods fresh;
  std::memset(&fresh, 0x5A, sizeof fresh);
  ASSERT_EQ(fa_mods_init(&fresh), FA_OK);
  EXPECT_EQ(fresh.mask_mod_depends, FA_MOD_DEPENDS_BATCH | FA_MOD_DEPENDS_HEAD);
  EXPECT_EQ(fresh.version, FA_MODS_VERSION);
  EXPECT_EQ(fresh.struct_size, sizeof fresh);
  EXPECT_EQ(fresh.mask_mod, nullptr);
}

TEST_F(UserMods, BadDepends) {
  m.mask_mod_depends = 4;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "mods.mask_mod_depends");
}
TEST_F(UserMods, Reserved1) {
  m.reserved1 = 1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "mods.reserved1");
}
TEST_F(UserMods, VersionOneStillAccepted) {
  m.version = 1;
  m.struct_size = offsetof(fa_mods, mask_mod_depends);
  m.mask_mod_depends = 99;  // beyond a version-1 struct: never read
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
}

// Both tensor-core forwards run user code: fwd_wgmma on sm_90 (TMA-describable tensors), fwd_mma on sm_80 and where
// TMA cannot describe the tensors; with a mask_mod each plan is [mask_blocks at the forward's own tile, forward].
TEST_F(UserMods, TensorCoreForwardsRunUserCode) {
  fa_params out;
  fa::gen::ProblemDesc d;
  ASSERT_TRUE(fa::rt::validate_forward(&p, &out, &d).ok());
  for (int arch : {80, 90}) {
    const fa::gen::Semantic s = fa::gen::select_forward(d, arch);
    ASSERT_STREQ(fa::gen::family_name(s), arch == 90 ? "fwd_wgmma" : "fwd_mma");
    const fa::gen::Plan plan = fa::gen::make_plan(s, d);
    ASSERT_EQ(plan.steps.size(), 2u);
    EXPECT_STREQ(fa::gen::family_name(plan.steps[0].s), "mask_blocks");
    EXPECT_EQ(plan.tuned_step, 1);
    const int block_m = arch == 90 ? 64 * fa::gen::knob_value(s, plan.steps[1].t, "consumers")
                                   : fa::gen::knob_value(s, plan.steps[1].t, "block_m");
    EXPECT_EQ(plan.steps[0].t[0], block_m) << "classified at the forward's own tile";
    EXPECT_EQ(plan.steps[0].t[1], fa::gen::knob_value(s, plan.steps[1].t, "block_n"));
    EXPECT_NE(plan.off_blk_cls, SIZE_MAX);
    // fwd_mma keeps per-CTA visiting lists in the workspace; fwd_wgmma's warps walk the classes themselves
    EXPECT_EQ(plan.off_blk_list == SIZE_MAX, arch == 90);
    EXPECT_EQ(plan.off_blk_cls_t, SIZE_MAX) << "only backward plans hold the classes transposed";
  }
  d.tma_ok = false;  // e.g. a stride TMA cannot describe: the mma forward serves sm_90 too
  EXPECT_STREQ(fa::gen::family_name(fa::gen::select_forward(d, 90)), "fwd_mma");
}

// Block skipping: a mask_mod gives the forward the plan [mask_blocks at its own tile, forward] with the classes (and
// fwd_mma's visiting lists) in the workspace; FA_MOD_DEPENDS_* bits shrink the classes; without a mask_mod, one step.
TEST_F(UserMods, MaskModPlanClassifiesBlocks) {
  size_t both = 0, none = 0, heads = 0;
  ASSERT_EQ(fa_forward_workspace_size(ctx, &p, &both), FA_OK) << fa_last_error();
  m.mask_mod_depends = 0;
  ASSERT_EQ(fa_forward_workspace_size(ctx, &p, &none), FA_OK) << fa_last_error();
  m.mask_mod_depends = FA_MOD_DEPENDS_HEAD;
  ASSERT_EQ(fa_forward_workspace_size(ctx, &p, &heads), FA_OK) << fa_last_error();
  EXPECT_GT(both, 0u);
  EXPECT_LE(none, heads);
  EXPECT_LE(heads, both);
  m.mask_mod = nullptr;
  m.score_mod = "return s;";
  size_t score_only = 1;
  ASSERT_EQ(fa_forward_workspace_size(ctx, &p, &score_only), FA_OK) << fa_last_error();
  EXPECT_EQ(score_only, 0u);
}

// A caller sizes its workspace with fa_forward_workspace_size before tuning may swap in another tile: the size must
// cover the plan of every valid point (smaller tiles mean more tile classes and longer visiting lists).
TEST_F(UserMods, WorkspaceSizeCoversEveryTunablePoint) {
  p.seqlen_q = 1000;
  p.seqlen_k = 1000;
  const int64_t D = 64;
  p.q_stride_batch = p.k_stride_batch = p.v_stride_batch = p.o_stride_batch = 1000 * 4 * D;
  size_t reported = 0;
  ASSERT_EQ(fa_forward_workspace_size(ctx, &p, &reported), FA_OK) << fa_last_error();
  fa_params out;
  fa::gen::ProblemDesc d;
  ASSERT_TRUE(fa::rt::validate_forward(&p, &out, &d).ok());
  const fa::gen::Semantic s = fa::gen::select_forward(d, 90);
  ASSERT_STREQ(fa::gen::family_name(s), "fwd_wgmma");
  size_t most = 0;
  int points = 0;
  for (const auto& t : fa::gen::all_valid_points(s, fa::gen::limits_for_arch(90))) {
    const fa::gen::Plan plan = fa::gen::make_plan(s, t, d);
    EXPECT_LE(plan.workspace_bytes, reported) << fa::gen::tunables_key(s, t);
    EXPECT_EQ(plan.reported_workspace(), reported) << fa::gen::tunables_key(s, t);
    most = std::max(most, plan.workspace_bytes);
    ++points;
  }
  EXPECT_GT(points, 1);
  EXPECT_EQ(most, reported) << "the report is the largest layout, not more";
}

TEST_F(UserMods, WrongVersion) {
  m.version = 7;
  expect_rejected(FA_ERROR_INVALID_VERSION, "mods.version");
}
TEST_F(UserMods, WrongStructSize) {
  m.struct_size = 8;
  expect_rejected(FA_ERROR_INVALID_VERSION, "mods.struct_size");
}
TEST_F(UserMods, TooManyBuffers) {
  m.num_buffers = 5;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "mods.num_buffers");
}
TEST_F(UserMods, UnknownBufferDtype) {
  m.buffers[0].dtype = 42;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "mods.buffers[0].dtype");
}
TEST_F(UserMods, BadRank) {
  m.buffers[0].rank = 5;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "mods.buffers[0].rank");
}
TEST_F(UserMods, NullBuffer) {
  m.buffers[0].ptr = nullptr;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "mods.buffers[0].ptr");
}
TEST_F(UserMods, MisalignedBuffer) {
  m.buffers[0].ptr = addr(0x50000002);
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "mods.buffers[0].ptr");
}
TEST_F(UserMods, NegativeStride) {
  m.buffers[0].stride[0] = -1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "mods.buffers[0].stride[0]");
}

// The backward of the fixture's problem (placeholder gradient buffers: nothing is launched on the CPU).
struct UserModsBackward : UserMods {
  fa_bwd_params b{};
  void SetUp() override {
    UserMods::SetUp();
    p.lse = reinterpret_cast<float*>(0x60000000);
    fa_bwd_params_init(&b);
    b.fwd = &p;
    const int64_t D = 64, sb = 64 * 4 * D, ss = 4 * D;
    b.dout = addr(0x90000000);
    b.dout_stride_batch = sb;
    b.dout_stride_seq = ss;
    b.dout_stride_head = D;
    b.dq = addr(0xa0000000);
    b.dq_stride_batch = sb;
    b.dq_stride_seq = ss;
    b.dq_stride_head = D;
    b.dk = addr(0xb0000000);
    b.dk_stride_batch = sb;
    b.dk_stride_seq = ss;
    b.dk_stride_head = D;
    b.dv = addr(0xc0000000);
    b.dv_stride_batch = sb;
    b.dv_stride_seq = ss;
    b.dv_stride_head = D;
  }
  fa::gen::Plan plan() {
    fa::rt::BwdView v;
    fa::gen::ProblemDesc d;
    const fa::rt::Status st = fa::rt::validate_backward(&b, &v, &d);
    EXPECT_TRUE(st.ok()) << st.message;
    return fa::gen::make_plan(fa::gen::select_backward(d, 90), d);
  }
  void expect_bwd_rejected(const char* field) {
    size_t bytes = 0;
    EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_ERROR_INVALID_ARGUMENT) << fa_last_error();
    EXPECT_NE(std::string(fa_last_error()).find(field), std::string::npos) << fa_last_error();
  }
};

// mask_mod needs nothing more: the backward's plan classifies tiles at the kernel's own tile (the classes transposed
// for its key-block-major CTAs): bwd_wgmma's 64 x 64 * consumers on sm_90 (its CTAs walk the classes), and bwd_mma's
// block_m x block_n with visiting lists; bwd_pre and bwd_post run no user code, so their keys carry no mod tag.
TEST_F(UserModsBackward, MaskModPlanClassifiesBlocks) {
  size_t bytes = 0;
  ASSERT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
  const fa::gen::Plan pl = plan();
  ASSERT_EQ(pl.steps.size(), 4u);
  const char* names[] = {"bwd_pre", "mask_blocks", "bwd_wgmma", "bwd_post"};
  for (size_t n = 0; n < 4; ++n) EXPECT_STREQ(fa::gen::family_name(pl.steps[n].s), names[n]);
  EXPECT_EQ(pl.tuned_step, 2);
  EXPECT_EQ(pl.steps[0].s.mods, nullptr);
  EXPECT_EQ(pl.steps[3].s.mods, nullptr);
  EXPECT_NE(pl.steps[2].s.mods, nullptr);
  const auto& mma = pl.steps[2];
  EXPECT_EQ(pl.steps[1].t[0], 64);
  EXPECT_EQ(pl.steps[1].t[1], 64 * mma.t[mma.s.family->knob_index("consumers")]);
  EXPECT_NE(pl.off_blk_cls, SIZE_MAX);
  EXPECT_NE(pl.off_blk_cls_t, SIZE_MAX);
  EXPECT_EQ(pl.off_blk_list, SIZE_MAX);
  {  // bwd_mma's plan of the same problem: its own tile, with visiting lists
    fa::rt::BwdView v;
    fa::gen::ProblemDesc d;
    ASSERT_TRUE(fa::rt::validate_backward(&b, &v, &d).ok());
    const fa::gen::Plan pm = fa::gen::make_plan(fa::gen::semantic_for(*fa::gen::find_family("bwd_mma"), d, 90), d);
    ASSERT_EQ(pm.steps.size(), 4u);
    const auto& bm = pm.steps[2];
    EXPECT_STREQ(fa::gen::family_name(bm.s), "bwd_mma");
    EXPECT_EQ(pm.steps[1].t[0], bm.t[bm.s.family->knob_index("block_m")]);
    EXPECT_EQ(pm.steps[1].t[1], bm.t[bm.s.family->knob_index("block_n")]);
    EXPECT_NE(pm.off_blk_cls_t, SIZE_MAX);
    EXPECT_NE(pm.off_blk_list, SIZE_MAX);
  }
  EXPECT_GT(pl.off_blk_cls, pl.off_dq_accum);
  EXPECT_GE(bytes, pl.workspace_bytes);
  // every tunable point's plan fits the reported size, which is the largest of them
  size_t most = 0;
  for (const auto& t : fa::gen::all_valid_points(mma.s, fa::gen::limits_for_arch(90))) {
    fa::rt::BwdView v;
    fa::gen::ProblemDesc d;
    ASSERT_TRUE(fa::rt::validate_backward(&b, &v, &d).ok());
    const fa::gen::Plan other = fa::gen::make_plan(mma.s, t, d);
    EXPECT_LE(other.workspace_bytes, bytes) << fa::gen::tunables_key(mma.s, t);
    most = std::max(most, other.workspace_bytes);
  }
  EXPECT_EQ(most, bytes);
  // without a mask_mod: no classification step
  m.mask_mod = nullptr;
  EXPECT_EQ(plan().steps.size(), 3u);
}

// A score_mod needs its derivative in the backward (never in the forward), named in the error; the derivative
// alone is refused; the forward's key ignores it, the backward's holds it.
TEST_F(UserModsBackward, ScoreModNeedsItsDerivative) {
  m.score_mod = "return s + 0.5f * (float)h;";
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
  expect_bwd_rejected("mods.score_mod_grad");
  const std::string fwd_key = key();
  m.score_mod_grad = "return 1.0f;";
  size_t bytes = 0;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
  EXPECT_EQ(key(), fwd_key) << "the forward never reads the derivative";
  const fa::gen::Plan with = plan();
  m.score_mod_grad = "return 2.0f;";
  EXPECT_NE(fa::gen::canonical_key(plan().steps[2]), fa::gen::canonical_key(with.steps[2]));
  m.score_mod = nullptr;  // a derivative without a score_mod
  EXPECT_EQ(fa_run(ctx, &p, nullptr), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa_last_error()).find("mods.score_mod_grad"), std::string::npos) << fa_last_error();
  expect_bwd_rejected("mods.score_mod_grad");
}

// Older fa_mods versions validate by their own struct size: version 2 (no derivative field) runs a mask_mod's
// backward, and a score_mod's backward fails naming the field and the version; sizes of other versions fail.
TEST_F(UserModsBackward, OlderVersionsBySize) {
  m.version = 2;
  m.struct_size = offsetof(fa_mods, score_mod_grad);
  m.score_mod_grad = "this field lies beyond a version-2 struct: never read";
  size_t bytes = 0;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
  m.score_mod = "return s;";
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
  expect_bwd_rejected("mods.score_mod_grad");
  EXPECT_NE(std::string(fa_last_error()).find("version 3"), std::string::npos) << fa_last_error();
  m.struct_size = sizeof(fa_mods);  // a version-2 struct has the version-2 size
  EXPECT_EQ(fa_run(ctx, &p, nullptr), FA_ERROR_INVALID_VERSION);
  EXPECT_NE(std::string(fa_last_error()).find("mods.struct_size"), std::string::npos) << fa_last_error();
  m.version = 3;
  m.struct_size = offsetof(fa_mods, score_mod_grad);
  EXPECT_EQ(fa_run(ctx, &p, nullptr), FA_ERROR_INVALID_VERSION);
  m.struct_size = offsetof(fa_mods, mask_epoch);  // version 3 ends before version 4's mask_epoch
  m.score_mod_grad = "return 1.0f;";
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
  m.struct_size = sizeof(fa_mods);  // a version-3 struct has the version-3 size
  EXPECT_EQ(fa_run(ctx, &p, nullptr), FA_ERROR_INVALID_VERSION);
  m.version = 4;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
  fa_mods fresh;
  ASSERT_EQ(fa_mods_init(&fresh), FA_OK);
  EXPECT_EQ(fresh.version, 4u);
  EXPECT_EQ(fresh.struct_size, sizeof(fa_mods));
  EXPECT_EQ(fresh.score_mod_grad, nullptr);
  EXPECT_EQ(fresh.mask_epoch, 0u) << "fa_mods_init: nothing cached unless the caller gives an epoch";
}

// NVRTC on the CPU: a derivative that does not compile fails the backward with FA_ERROR_COMPILE and the log
// counts lines in its own snippet.
TEST_F(UserModsBackward, BadDerivativeNamesItsLine) {
  m.mask_mod = nullptr;
  m.score_mod = "return s * 2.0f;";
  m.score_mod_grad = "float g = 2.0f;\nreturn g +;";
  EXPECT_EQ(fa_prepare_backward(ctx, &b), FA_ERROR_COMPILE);
  const std::string log = fa_last_error();
  EXPECT_NE(log.find("score_mod_grad(2)"), std::string::npos) << log;
}

// NVRTC on the CPU: the good body compiles (the call then stops at the missing GPU), the bad one does not, and the
// log names the user's snippet and line.
TEST_F(UserMods, GoodCodeCompilesBadCodeNamesItsLine) {
  m.score_mod = "return s + 0.5f * u.scalar[0];";
  const fa_status good = fa_prepare(ctx, &p);
  if (fa_context_has_device(ctx)) {
    EXPECT_EQ(good, FA_OK) << fa_last_error();
  } else {
    EXPECT_EQ(good, FA_ERROR_NO_DEVICE) << fa_last_error();  // compiled, but nothing to load it on
  }
  m.mask_mod = "int x = i;\nreturn undefined_name_here(x, j);";
  EXPECT_EQ(fa_prepare(ctx, &p), FA_ERROR_COMPILE);
  const std::string log = fa_last_error();
  EXPECT_NE(log.find("mask_mod(2)"), std::string::npos) << log;
  EXPECT_NE(log.find("undefined_name_here"), std::string::npos) << log;
  m.mask_mod = "return true;";
  m.score_mod = "float t = s;\n\nreturn t +;";
  EXPECT_EQ(fa_prepare(ctx, &p), FA_ERROR_COMPILE);
  EXPECT_NE(std::string(fa_last_error()).find("score_mod(3)"), std::string::npos) << fa_last_error();
  EXPECT_EQ(fa_run(ctx, &p, nullptr), fa_context_has_device(ctx) ? FA_ERROR_COMPILE : FA_ERROR_NO_DEVICE);
}

}  // namespace
