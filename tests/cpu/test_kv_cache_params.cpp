// test_kv_cache_params.cpp -- the KV-cache fields of fa_params version 2 (seqused_k, block table, page size,
// split count, workspace): each rejection names its field, version-1 structs still validate, the backward refuses
// the cache fields, and paged problems reach a family that reads pages (no GPU needed: validation and selection).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "fa/fa.h"
#include "generator/problem.h"
#include "runtime/validate.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/params_support.h"

namespace {

using fa::test::fake_addr;
void* addr(uintptr_t x) { return fake_addr(x); }

// A decode problem against a paged cache (fa::test::fake_paged_decode_params).
struct KvCache : ::testing::Test {
  fa_context ctx = nullptr;
  fa_params p{};
  void SetUp() override {
    ctx = fa::test::make_context(":memory:", -1);
    ASSERT_NE(ctx, nullptr);
    fa::test::fake_paged_decode_params(&p);
  }
  void TearDown() override { fa_context_destroy(ctx); }

  void expect_rejected(fa_status status, const char* field) {
    EXPECT_EQ(fa_run(ctx, &p, nullptr), status) << fa_last_error();
    const std::string msg = fa_last_error();
    EXPECT_NE(msg.find(field), std::string::npos) << "message must name " << field << ": " << msg;
    EXPECT_EQ(fa_prepare(ctx, &p), status);
    EXPECT_EQ(fa_is_supported(ctx, &p), 0);
    size_t bytes = 12345;
    EXPECT_EQ(fa_forward_workspace_size(ctx, &p, &bytes), status);
    EXPECT_EQ(bytes, 12345u) << "a rejected call writes nothing";
  }
  fa::gen::ProblemDesc desc() { return fa::test::validated_desc(p); }
};

TEST_F(KvCache, PagedDecodeIsSupported) {
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
  const fa::gen::ProblemDesc d = desc();
  EXPECT_TRUE(d.paged);
  EXPECT_TRUE(d.seqused);
  EXPECT_EQ(d.page_size, 16);
  char key[256];
  ASSERT_EQ(fa_problem_key(ctx, &p, key, sizeof key), FA_OK) << fa_last_error();
  EXPECT_NE(std::string(key).find(".paged"), std::string::npos) << key;
  EXPECT_EQ(std::string(key).find("fwd_mma"), std::string::npos) << "fwd_mma reads no pages: " << key;
  EXPECT_EQ(std::string(key).find("fwd_wgmma"), std::string::npos) << "fwd_wgmma reads no pages: " << key;
}

TEST_F(KvCache, ContiguousWithUsedLengthsAvoidsThePrefillFamilies) {
  p.block_table = nullptr;
  p.block_table_stride = 0;
  p.page_size = 0;
  p.num_pages = 0;
  p.k_stride_batch = 80 * 2 * 64;
  p.v_stride_batch = 80 * 2 * 64;
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
  char key[256];
  ASSERT_EQ(fa_problem_key(ctx, &p, key, sizeof key), FA_OK) << fa_last_error();
  EXPECT_EQ(std::string(key).find(".paged"), std::string::npos) << key;
  EXPECT_EQ(std::string(key).find("fwd_mma"), std::string::npos) << key;
}

TEST_F(KvCache, VersionOneStructStillValidates) {
  fa_params v1;
  fa_params_init(&v1);
  std::memcpy(&v1, &p, offsetof(fa_params, seqused_k));
  v1.version = 1;
  v1.struct_size = offsetof(fa_params, seqused_k);
  v1.k_stride_batch = 80 * 2 * 64;
  v1.v_stride_batch = 80 * 2 * 64;
  // Whatever lies past the version-1 size is never read: poison it.
  std::memset(reinterpret_cast<char*>(&v1) + offsetof(fa_params, seqused_k), 0xab,
              sizeof v1 - offsetof(fa_params, seqused_k));
  EXPECT_EQ(fa_is_supported(ctx, &v1), 1) << fa_last_error();
  fa_params out;
  fa::gen::ProblemDesc d;
  ASSERT_TRUE(fa::rt::validate_forward(&v1, &out, &d).ok());
  EXPECT_FALSE(d.paged);
  EXPECT_FALSE(d.seqused);
  EXPECT_EQ(out.workspace, nullptr);
  v1.struct_size = sizeof(fa_params);  // a version-1 struct of the version-2 size is a caller bug
  EXPECT_EQ(fa_is_supported(ctx, &v1), 0);
  EXPECT_NE(std::string(fa_last_error()).find("struct_size"), std::string::npos) << fa_last_error();
}

TEST_F(KvCache, PageSizeNotAPowerOfTwo) {
  p.page_size = 24;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "page_size");
}
TEST_F(KvCache, PageSizeAbove512) {
  p.page_size = 1024;
  p.block_table_stride = 1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "page_size");
}
TEST_F(KvCache, PageSizeZero) {
  p.page_size = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "page_size");
}
TEST_F(KvCache, NoPages) {
  p.num_pages = 0;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "num_pages");
}
TEST_F(KvCache, BlockTableTooNarrow) {
  p.block_table_stride = 4;  // 80 keys need 5 pages of 16
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "block_table_stride");
}
TEST_F(KvCache, BlockTableMisaligned) {
  p.block_table = static_cast<const int32_t*>(addr(0x60000002));
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "block_table");
}
TEST_F(KvCache, SequsedMisaligned) {
  p.seqused_k = static_cast<const int32_t*>(addr(0x50000001));
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "seqused_k");
}
TEST_F(KvCache, PageFieldsWithoutTable) {
  p.block_table = nullptr;
  p.k_stride_batch = 80 * 2 * 64;
  p.v_stride_batch = 80 * 2 * 64;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "page_size");
}
TEST_F(KvCache, PagedVarlen) {
  static int32_t cu[3] = {0, 1, 2};
  p.cu_seqlens_q = cu;
  p.cu_seqlens_k = cu;
  p.max_seqlen_q = 1;
  p.max_seqlen_k = 80;
  p.total_q = 2;
  p.total_k = 160;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "block_table");
}
TEST_F(KvCache, SplitsOutOfRange) {
  p.num_splits = 257;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "num_splits");
}
TEST_F(KvCache, SplitsNegative) {
  p.num_splits = -1;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "num_splits");
}
TEST_F(KvCache, ReservedNotZero) {
  p.reserved1 = 3;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "reserved1");
}
TEST_F(KvCache, WorkspaceMisaligned) {
  p.workspace = addr(0x70000010);
  p.workspace_size = 1 << 20;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "workspace");
}
TEST_F(KvCache, WorkspaceSizeWithoutWorkspace) {
  p.workspace_size = 64;
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "workspace_size");
}
TEST_F(KvCache, PagePoolStridesMustNotAlias) {
  p.k_stride_batch = 16;  // pages overlapping each other's rows
  expect_rejected(FA_ERROR_INVALID_ARGUMENT, "k_stride");
}

TEST_F(KvCache, MlaHeadDimsReachTheForward) {
  p.heads_q = 128;
  p.heads_kv = 1;
  p.head_dim = 576;
  p.head_dim_v = 512;
  p.page_size = 64;
  p.block_table_stride = 2;
  p.num_pages = 4;
  p.q_stride_head = 576;
  p.q_stride_seq = p.q_stride_batch = 128 * 576;
  p.k_stride_head = 576;
  p.k_stride_seq = 576;
  p.k_stride_batch = 64 * 576;
  p.v = addr(0x20000000);
  p.v_stride_head = 576;
  p.v_stride_seq = 576;
  p.v_stride_batch = 64 * 576;  // V = K's first 512
  p.o_stride_head = 512;
  p.o_stride_seq = p.o_stride_batch = 128 * 512;
  EXPECT_EQ(fa_is_supported(ctx, &p), 1) << fa_last_error();
}

TEST_F(KvCache, BackwardRefusesTheCacheFields) {
  p.lse = reinterpret_cast<float*>(0x78000000);
  fa_bwd_params b;
  fa::test::fake_bwd_params(&b, &p);
  size_t bytes = 0;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(std::string(fa_last_error()).find("block_table"), std::string::npos) << fa_last_error();
  p.block_table = nullptr;
  p.block_table_stride = 0;
  p.page_size = 0;
  p.num_pages = 0;
  p.k_stride_batch = 80 * 2 * 64;
  p.v_stride_batch = 80 * 2 * 64;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(std::string(fa_last_error()).find("seqused_k"), std::string::npos) << fa_last_error();
  p.seqused_k = nullptr;
  EXPECT_EQ(fa_backward_workspace_size(ctx, &b, &bytes), FA_OK) << fa_last_error();
}

}  // namespace

#include "generator/user_mods.h"
#include "runtime/plan_cache.h"

namespace {

// fa_run's fast path keys plans by the shape signature: every KV-cache field and the user code must change it.
TEST(KvCacheSignature, CacheFieldsAndUserCodeChangeTheSignature) {
  fa::gen::ProblemDesc d;
  const auto base = fa::rt::shape_signature(fa::gen::Role::Forward, d);
  auto differs = [&](auto&& mutate) {
    fa::gen::ProblemDesc e = d;
    mutate(e);
    return !(fa::rt::shape_signature(fa::gen::Role::Forward, e) == base);
  };
  EXPECT_TRUE(differs([](fa::gen::ProblemDesc& e) { e.paged = true; }));
  EXPECT_TRUE(differs([](fa::gen::ProblemDesc& e) { e.seqused = true; }));
  EXPECT_TRUE(differs([](fa::gen::ProblemDesc& e) { e.page_size = 16; }));
  EXPECT_TRUE(differs([](fa::gen::ProblemDesc& e) { e.num_splits = 3; }));
  EXPECT_TRUE(differs([](fa::gen::ProblemDesc& e) { e.sm_count = 132; }));
  const int dt[1] = {1}, rk[1] = {1};
  const fa::gen::UserMods* m = fa::gen::intern_user_mods("return j <= i;", "", 1, dt, rk);
  EXPECT_TRUE(differs([&](fa::gen::ProblemDesc& e) { e.mods = m; }));
}

}  // namespace
