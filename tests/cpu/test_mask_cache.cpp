// test_mask_cache.cpp -- the context's cache of block classifications (runtime/mask_cache.h) without a GPU: its key
// changes with everything the classification reads (lengths, the mask and window, the code, a buffer's pointer,
// shape or strides, a scalar, the varlen offsets' pointers, mask_epoch, the sharing bits, the plan's tile and role)
// and with nothing else (q's pointer); which calls may use it (fa_mods version 4 with a nonzero epoch, a plan with a
// classification step); and the table's decisions over a fake device: fill then hit, a fill visible only once
// released, a failed fill never hit, hits on another stream wait for the fill and pin the entry, refills only of idle
// entries of the filling stream, the byte and entry caps, no cache at 0 bytes, every entry freed at destruction.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "fa/fa.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "runtime/launch.h"
#include "runtime/mask_cache.h"
#include "runtime/validate.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/params_support.h"

namespace {

using fa::rt::MaskCache;
using fa::rt::MaskCacheKey;

// A forward problem with a document mask_mod (buffer 0: int32 ids, scalars read too) on a device-less context.
struct MaskKeys : ::testing::Test {
  fa_context ctx = nullptr;
  fa_params p{};
  fa_mods m{};
  void SetUp() override {
    ctx = fa::test::make_context(":memory:", FA_TUNE_DEFAULTS_ONLY);
    ASSERT_NE(ctx, nullptr);
    fa::test::fake_bshd_params(&p, 2, 1024, 1024, 4, 4, 128);
    ASSERT_EQ(fa_mods_init(&m), FA_OK);
    m.mask_mod = "const int* d = static_cast<const int*>(u.buf[0]);\nreturn j <= i + u.iscalar[0] && d[i] == d[j];";
    m.num_buffers = 1;
    m.buffers[0] = fa_user_buffer{fa::test::fake_addr(0x50000000), FA_USER_I32, 1, {1024}, {1}};
    m.iscalars[0] = 0;
    m.mask_epoch = 1;
    p.mods = &m;
  }
  void TearDown() override { fa_context_destroy(ctx); }

  // The cache key of p's forward (or backward) classification; *eligible: whether a call would use the cache.
  MaskCacheKey key(bool backward = false, bool* eligible = nullptr) {
    fa_params v;
    fa::gen::ProblemDesc d;
    EXPECT_TRUE(fa::rt::validate_forward(&p, &v, &d).ok()) << fa_last_error();
    d.backward = backward;
    const fa::gen::Role role = backward ? fa::gen::Role::Backward : fa::gen::Role::Forward;
    const fa::gen::Plan plan = fa::gen::make_plan(fa::gen::select(role, d, 90), d);
    const FaUser user = fa::rt::make_user_args(v);
    FaFwdArgs args{};
    fa::rt::PlanArgs pa;
    fa::rt::cache_classes(ctx, role, d, plan, v, user, &args, &pa);
    if (eligible != nullptr) *eligible = pa.cache_classes;
    return pa.cache_classes ? pa.cls_key : MaskCacheKey{};
  }
};

TEST_F(MaskKeys, SameInputsSameKeyEveryClassificationInputChangesIt) {
  bool eligible = false;
  const MaskCacheKey k0 = key(false, &eligible);
  ASSERT_TRUE(eligible);
  EXPECT_EQ(key(), k0) << "the same inputs give the same key";
  p.q = fa::test::fake_addr(0x11000000);  // the classification never reads q, k, v or o
  EXPECT_EQ(key(), k0);
  std::vector<MaskCacheKey> keys{k0};
  auto differs = [&](const char* what) {
    const MaskCacheKey k = key();
    for (const MaskCacheKey& o : keys) EXPECT_FALSE(k == o) << what << " must change the key";
    keys.push_back(k);
  };
  fa::test::fake_bshd_params(&p, 2, 1024, 1040, 4, 4, 128);  // fake_bshd_params resets mods
  p.mods = &m;
  differs("a new key length");
  p.seqlen_q = 1000;
  differs("a new query length");
  p.mask = FA_MASK_CAUSAL;
  differs("the built-in mask");
  p.mask = FA_MASK_SLIDING_WINDOW;
  p.window_left = 100;
  p.window_right = 0;
  differs("a window");
  p.window_left = 101;
  differs("another window");
  m.buffers[0].ptr = fa::test::fake_addr(0x51000000);
  differs("a new buffer pointer");
  m.buffers[0].shape[0] = 2048;
  differs("a buffer's shape");
  m.buffers[0].stride[0] = 2;
  differs("a buffer's stride");
  m.iscalars[0] = 3;
  differs("a new int scalar");
  m.scalars[5] = 0.5f;
  differs("a new float scalar");
  m.mask_epoch = 2;
  differs("a new epoch");
  m.mask_mod_depends = 0;
  differs("the sharing bits (FA_MOD_DEPENDS_*)");
  m.mask_mod = "const int* d = static_cast<const int*>(u.buf[0]);\nreturn j <= i && d[i] == d[j];";
  differs("other code");
  p.heads_q = 8;
  p.q_stride_seq = 8 * 128;
  p.o_stride_seq = 8 * 128;
  p.q_stride_batch = 1000 * 8 * 128;
  p.o_stride_batch = 1000 * 8 * 128;
  differs("more heads");
  keys.push_back(key(true));
  for (size_t n = 0; n + 1 < keys.size(); ++n) EXPECT_FALSE(keys.back() == keys[n]) << "the backward's own classes";
}

TEST_F(MaskKeys, VarlenKeysHoldTheOffsetsPointers) {
  fa::test::fake_bshd_params(&p, 3, 1, 1, 4, 4, 128);
  p.q_stride_batch = p.k_stride_batch = p.v_stride_batch = p.o_stride_batch = 0;
  p.cu_seqlens_q = static_cast<const int32_t*>(fa::test::fake_addr(0x60000000));
  p.cu_seqlens_k = static_cast<const int32_t*>(fa::test::fake_addr(0x61000000));
  p.max_seqlen_q = p.max_seqlen_k = 500;
  p.total_q = p.total_k = 1200;
  p.mods = &m;
  const MaskCacheKey k0 = key();
  EXPECT_EQ(key(), k0);
  p.cu_seqlens_k = static_cast<const int32_t*>(fa::test::fake_addr(0x62000000));
  EXPECT_FALSE(key() == k0) << "new offsets";
}

// fwd_wgmma's plan keeps the sub-tile records and the hidden-pair slots (templates/fa_args.cuh: blk_sub, blk_bits)
// inside the span the classification writes, so a cached copy keeps them too: four slots per query-block row of every
// classified (batch, head), a counter word first, and the binding gives the kernels their pointers and the count.
TEST_F(MaskKeys, WgmmaPlansKeepTheHiddenPairSlotsInTheClassesSpan) {
  fa_params v;
  fa::gen::ProblemDesc d;
  ASSERT_TRUE(fa::rt::validate_forward(&p, &v, &d).ok()) << fa_last_error();
  const fa::gen::Plan plan = fa::gen::make_plan(fa::gen::select(fa::gen::Role::Forward, d, 90), d);
  ASSERT_EQ(std::string(plan.steps.back().s.family->name), "fwd_wgmma");
  ASSERT_NE(plan.off_blk_sub, SIZE_MAX);
  ASSERT_NE(plan.off_blk_bits, SIZE_MAX);
  const int bm = 64 * plan.steps.back().t[0];
  const size_t tiles = static_cast<size_t>(plan.blk_mblocks) * plan.blk_nkb;
  const size_t classified = ((plan.blk_shared & 1) ? 1 : 2) * ((plan.blk_shared & 2) ? 1 : 4);  // batch 2, 4 heads
  EXPECT_EQ(plan.blk_mblocks, (1024 + bm - 1) / bm);
  EXPECT_EQ(static_cast<size_t>(plan.blk_bits_cap),
            std::min(tiles, 4 * static_cast<size_t>(plan.blk_mblocks)) * classified);
  EXPECT_LE(plan.off_blk_cls, plan.off_blk_sub);
  EXPECT_GE(plan.off_blk_bits, plan.off_blk_sub + classified * tiles * (bm / 64 + 1) * sizeof(unsigned))
      << "the records (block_m / 64 code words and a slot per tile) end before the slots";
  EXPECT_GE(plan.off_blk_cls_end, plan.off_blk_bits + 256 + static_cast<size_t>(plan.blk_bits_cap) * bm * 32)
      << "every slot lies in the span the classification writes (and a cache keeps)";
  EXPECT_GE(plan.workspace_bytes, plan.off_blk_cls_end);
  EXPECT_GE(plan.reported_workspace(), plan.workspace_bytes);
  FaFwdArgs args{};
  std::vector<char> span(plan.off_blk_cls_end - plan.off_blk_cls);
  fa::rt::bind_block_classes(plan, &args, span.data());
  EXPECT_EQ(reinterpret_cast<char*>(args.blk_bits), span.data() + (plan.off_blk_bits - plan.off_blk_cls));
  EXPECT_EQ(reinterpret_cast<char*>(args.blk_sub), span.data() + (plan.off_blk_sub - plan.off_blk_cls));
  EXPECT_EQ(args.blk_bits_cap, plan.blk_bits_cap);
  // the backward's plan (its classes transposed, no sub-tile records) has no slots
  d.backward = true;
  const fa::gen::Plan bwd = fa::gen::make_plan(fa::gen::select(fa::gen::Role::Backward, d, 90), d);
  ASSERT_NE(bwd.off_blk_cls, SIZE_MAX);
  EXPECT_EQ(bwd.off_blk_sub, SIZE_MAX);
  EXPECT_EQ(bwd.off_blk_bits, SIZE_MAX);
}

TEST_F(MaskKeys, OnlyVersion4WithAnEpochAndAClassificationUsesTheCache) {
  bool eligible = true;
  m.mask_epoch = 0;
  key(false, &eligible);
  EXPECT_FALSE(eligible) << "epoch 0: classified on every call";
  m.mask_epoch = 7;
  m.version = 3;
  m.struct_size = offsetof(fa_mods, mask_epoch);
  key(false, &eligible);
  EXPECT_FALSE(eligible) << "version 3 has no epoch: its callers never asked for a cache";
  m.version = 4;
  m.struct_size = sizeof(fa_mods);
  key(false, &eligible);
  EXPECT_TRUE(eligible);
  key(true, &eligible);
  EXPECT_TRUE(eligible) << "the backward's classification (transposed too) is cached alike";
  m.mask_mod = nullptr;
  m.score_mod = "return s;";
  key(false, &eligible);
  EXPECT_FALSE(eligible) << "no mask_mod: no classification";
}

// ---- the table over a fake device -------------------------------------------------------------------------------

struct FakeDevice {
  std::vector<size_t> allocs;
  int events = 0;
  bool fail_alloc = false;
  std::vector<CUdeviceptr> freed;
  std::vector<CUevent> destroyed;
  MaskCache::Device hooks() {
    MaskCache::Device d;
    d.alloc = [this](size_t bytes, CUstream, CUdeviceptr* out) {
      if (fail_alloc) return false;
      allocs.push_back(bytes);
      *out = 0x1000000 * allocs.size();
      return true;
    };
    d.new_event = [this](CUevent* ev) {
      *ev = reinterpret_cast<CUevent>(static_cast<uintptr_t>(0x100 + ++events));
      return true;
    };
    d.release_all = [this](const std::vector<CUdeviceptr>& mem, const std::vector<CUevent>& evs) {
      freed = mem;
      destroyed = evs;
    };
    return d;
  }
};

MaskCacheKey key_of(uint64_t x) {
  MaskCacheKey k;
  k.w[0] = x;
  k.hash = x * 0x9E3779B97F4A7C15ull;
  return k;
}

constexpr uint64_t kS1 = 11, kS2 = 22;  // stream ids
CUstream stream_of(uint64_t id) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(id)); }

TEST(MaskCacheTable, FillThenHitOnTheSameStreamLaunchesNothingNew) {
  FakeDevice dev;
  MaskCache cache(dev.hooks(), 1 << 20);
  MaskCache::Lease a = cache.acquire(key_of(1), kS1, stream_of(kS1), 4096);
  ASSERT_EQ(a.use, MaskCache::Use::kFill);
  EXPECT_NE(a.ptr, 0u);
  EXPECT_NE(a.ready, nullptr);
  MaskCache::Lease early = cache.acquire(key_of(1), kS1, stream_of(kS1), 4096);
  EXPECT_NE(early.use, MaskCache::Use::kHit) << "a fill is hit only once its launches are enqueued (released)";
  cache.release(early, true);
  cache.release(a, true);
  MaskCache::Lease h = cache.acquire(key_of(1), kS1, stream_of(kS1), 4096);
  ASSERT_EQ(h.use, MaskCache::Use::kHit);
  EXPECT_EQ(h.ptr, a.ptr);
  EXPECT_FALSE(h.wait_ready) << "the same stream is ordered after the fill";
  cache.release(h, true);
  EXPECT_EQ(cache.acquire(key_of(2), kS1, stream_of(kS1), 4096).use, MaskCache::Use::kFill) << "another key: a miss";
  const fa::rt::MaskCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.fills, 3u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, 3u * 4096);
}

TEST(MaskCacheTable, AFailedFillIsNeverHit) {
  FakeDevice dev;
  MaskCache cache(dev.hooks(), 1 << 20);
  MaskCache::Lease a = cache.acquire(key_of(1), kS1, stream_of(kS1), 4096);
  cache.release(a, false);
  MaskCache::Lease b = cache.acquire(key_of(1), kS1, stream_of(kS1), 4096);
  EXPECT_EQ(b.use, MaskCache::Use::kFill);
  cache.release(b, true);
}

TEST(MaskCacheTable, AHitOnAnotherStreamWaitsAndPinsTheEntry) {
  FakeDevice dev;
  MaskCache cache(dev.hooks(), 3 * 4096);  // room for 3 entries
  MaskCache::Lease a = cache.acquire(key_of(1), kS1, stream_of(kS1), 4096);
  cache.release(a, true);
  MaskCache::Lease h = cache.acquire(key_of(1), kS2, stream_of(kS2), 4096);
  ASSERT_EQ(h.use, MaskCache::Use::kHit);
  EXPECT_TRUE(h.wait_ready) << "another stream waits for the fill's ready event";
  EXPECT_EQ(h.ready, a.ready);
  cache.release(h, true);
  for (uint64_t k = 2; k <= 3; ++k) cache.release(cache.acquire(key_of(k), kS1, stream_of(kS1), 4096), true);
  // full: stream 1 refills its least recently used idle entry, never the pinned one (read on stream 2)
  MaskCache::Lease r = cache.acquire(key_of(4), kS1, stream_of(kS1), 4096);
  ASSERT_EQ(r.use, MaskCache::Use::kFill);
  EXPECT_NE(r.ptr, a.ptr);
  cache.release(r, true);
  EXPECT_EQ(cache.acquire(key_of(1), kS1, stream_of(kS1), 4096).use, MaskCache::Use::kHit) << "the pinned entry stays";
}

TEST(MaskCacheTable, RefillsOnlyIdleEntriesOfTheFillingStreamWithinTheCaps) {
  FakeDevice dev;
  MaskCache cache(dev.hooks(), 2 * 4096);
  MaskCache::Lease a = cache.acquire(key_of(1), kS1, stream_of(kS1), 4096);
  MaskCache::Lease b = cache.acquire(key_of(2), kS1, stream_of(kS1), 4096);
  ASSERT_EQ(a.use, MaskCache::Use::kFill);
  ASSERT_EQ(b.use, MaskCache::Use::kFill);
  EXPECT_EQ(cache.acquire(key_of(3), kS1, stream_of(kS1), 4096).use, MaskCache::Use::kNone)
      << "full, and both entries are between acquire and release";
  cache.release(a, true);
  EXPECT_EQ(cache.acquire(key_of(3), kS2, stream_of(kS2), 4096).use, MaskCache::Use::kNone)
      << "another stream never refills stream 1's entries";
  EXPECT_EQ(cache.acquire(key_of(3), kS1, stream_of(kS1), 8192).use, MaskCache::Use::kNone) << "too small";
  MaskCache::Lease c = cache.acquire(key_of(3), kS1, stream_of(kS1), 4096);
  ASSERT_EQ(c.use, MaskCache::Use::kFill);
  EXPECT_EQ(c.ptr, a.ptr) << "the idle entry is refilled";
  cache.release(c, true);
  cache.release(b, true);
  EXPECT_NE(cache.acquire(key_of(1), kS1, stream_of(kS1), 4096).use, MaskCache::Use::kHit) << "key 1 was replaced";
  EXPECT_EQ(dev.allocs.size(), 2u) << "no allocation past the byte cap";
  EXPECT_EQ(cache.stats().uncached, 3u);
}

TEST(MaskCacheTable, EntryCapAndFailedAllocations) {
  FakeDevice dev;
  MaskCache cache(dev.hooks(), size_t{1} << 30);
  for (int n = 0; n < MaskCache::kMaxEntries; ++n)
    cache.release(cache.acquire(key_of(100 + n), kS1, stream_of(kS1), 256), true);
  EXPECT_EQ(cache.acquire(key_of(1), kS2, stream_of(kS2), 256).use, MaskCache::Use::kNone) << "entry cap";
  EXPECT_EQ(cache.stats().entries, static_cast<size_t>(MaskCache::kMaxEntries));
  FakeDevice none;
  none.fail_alloc = true;
  MaskCache empty(none.hooks(), 1 << 20);
  EXPECT_EQ(empty.acquire(key_of(1), kS1, stream_of(kS1), 256).use, MaskCache::Use::kNone) << "out of memory";
}

TEST(MaskCacheTable, ZeroBytesCachesNothingAndDestructionFreesEverything) {
  FakeDevice off;
  {
    MaskCache cache(off.hooks(), 0);
    EXPECT_FALSE(cache.enabled());
    EXPECT_EQ(cache.acquire(key_of(1), kS1, stream_of(kS1), 256).use, MaskCache::Use::kNone);
  }
  EXPECT_TRUE(off.allocs.empty());
  EXPECT_TRUE(off.freed.empty());
  FakeDevice dev;
  {
    MaskCache cache(dev.hooks(), 1 << 20);
    for (uint64_t k = 1; k <= 3; ++k) cache.release(cache.acquire(key_of(k), kS1, stream_of(kS1), 512), true);
  }
  EXPECT_EQ(dev.freed.size(), 3u);
  EXPECT_EQ(dev.destroyed.size(), 3u);
  EXPECT_EQ(std::set<CUdeviceptr>(dev.freed.begin(), dev.freed.end()).size(), 3u);
}

TEST(MaskCacheEnv, ParsesMegabytesAndRejectsTheRest) {
  size_t bytes = 0;
  EXPECT_TRUE(fa::rt::parse_mask_cache_mb(nullptr, &bytes));
  EXPECT_EQ(bytes, size_t{64} << 20);
  EXPECT_TRUE(fa::rt::parse_mask_cache_mb("0", &bytes));
  EXPECT_EQ(bytes, 0u);
  EXPECT_TRUE(fa::rt::parse_mask_cache_mb("256", &bytes));
  EXPECT_EQ(bytes, size_t{256} << 20);
  for (const char* bad : {"-1", "1.5", "64M", "x", "99999999999999999999"})
    EXPECT_FALSE(fa::rt::parse_mask_cache_mb(bad, &bytes)) << bad;
  const std::string msg = fa::test::context_create_error("FA_MASK_CACHE_MB", "lots");
  EXPECT_NE(msg.find("FA_MASK_CACHE_MB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lots"), std::string::npos) << msg;
}

}  // namespace
