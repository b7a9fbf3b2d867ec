// mask_cache.h -- the context's cache of block classifications (fa.h: "Caching the classification"): the bytes a
// plan's mask_blocks step writes (Plan::off_blk_cls .. off_blk_cls_end, whatever they mean), kept in device memory
// under a key of everything that determines them, so that a later call with the same key skips the step and its
// kernels read the kept copy.
//
// Key: the problem's shape signature (plan_cache.h: lengths, heads, mask and window, the interned user code, the
// mask_mod_depends bits, ...), the classification step's config (its family, semantic and tile), the plan's layout of
// the classes, the cu_seqlens pointers (varlen), the user code's values (FaUser: every buffer's pointer, shape and
// strides, the scalars) and the caller's mask_epoch, which stands for the contents behind the pointers (0: the
// caller gives none, nothing is cached). Compared word for word.
//
// Safety (never a byte an in-flight kernel may read is rewritten or freed):
//  - An entry's memory is allocated stream-ordered on the stream of its first fill and freed only when the context
//    is destroyed, after the context's device work has finished.
//  - An entry is refilled (another key) only by a call on the stream that last filled it (its readers there are
//    ordered before the new classification), only when no host thread is between taking it and enqueueing its
//    launches (users == 0), and never once a call on another stream has read it (pinned). Streams are told apart by
//    cuStreamGetId, which a new stream never shares with a destroyed one.
//  - A hit on another stream waits for the fill's `ready` event (recorded after the classification) first; a fill
//    becomes visible to hits only after its launches were enqueued (release).
//  - While the caller's stream is being captured the cache is neither read nor filled (the runtime checks): a graph
//    classifies on every replay.
// When neither a hit, a new entry (within the byte and entry caps) nor a free entry of this stream is available, the
// call classifies into its workspace as without a cache.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/plan_cache.h"
#include "templates/fa_args.cuh"

namespace fa::rt {

struct MaskCacheKey {
  static constexpr int kUserWords = static_cast<int>(sizeof(FaUser) / sizeof(uint64_t));
  static constexpr int kWords = ShapeSignature::kWords + 9 + 4 + 3 + kUserWords;
  std::array<uint64_t, kWords> w{};
  uint64_t hash = 0;
  bool operator==(const MaskCacheKey& o) const { return hash == o.hash && w == o.w; }
};
static_assert(sizeof(FaUser) % sizeof(uint64_t) == 0, "FaUser is compared as whole words");

// The key of the classification of `plan` (a plan with a mask_blocks step) for the validated problem d of `role`,
// with the user code's values `user`, the varlen offsets' pointers and the caller's epoch.
MaskCacheKey mask_cache_key(gen::Role role, const gen::ProblemDesc& d, const gen::Plan& plan, const FaUser& user,
                            const void* cu_seqlens_q, const void* cu_seqlens_k, uint64_t epoch);

struct MaskCacheStats {
  uint64_t hits = 0;        // calls that launched no classification (read a kept copy)
  uint64_t fills = 0;       // calls that classified into an entry
  uint64_t uncached = 0;    // calls with a key that classified into the workspace (capturing, caps, no free entry)
  uint64_t classified = 0;  // classification launches of any call (cached or not): what a hit saves
  size_t entries = 0, bytes = 0;
};

class MaskCache {
 public:
  // What the cache asks of the device (the runtime's: the driver; tests: fakes). alloc: stream-ordered memory on
  // `stream` (false: none); new_event: an event for `ready`; release_all: waits for the context's device work, then
  // frees every entry's memory and event (context destruction).
  struct Device {
    std::function<bool(size_t bytes, CUstream stream, CUdeviceptr* out)> alloc;
    std::function<bool(CUevent* out)> new_event;
    std::function<void(const std::vector<CUdeviceptr>& mem, const std::vector<CUevent>& events)> release_all;
  };
  static constexpr int kMaxEntries = 64;

  MaskCache(Device dev, size_t max_bytes) : dev_(std::move(dev)), max_bytes_(max_bytes) {}
  ~MaskCache();
  MaskCache(const MaskCache&) = delete;
  MaskCache& operator=(const MaskCache&) = delete;

  enum class Use { kNone, kHit, kFill };
  struct Lease {
    Use use = Use::kNone;
    int slot = -1;
    CUdeviceptr ptr = 0;      // the entry's copy of the classification span
    CUevent ready = nullptr;  // kFill: record after the classification; kHit with wait_ready: wait for it first
    bool wait_ready = false;  // a hit on another stream than the fill's
  };
  // The entry of `key` for a call on `stream` (id `stream_id`: cuStreamGetId) that needs `bytes`: a hit (valid
  // entry), else an entry to fill (new within the caps, else the least recently used idle one of this stream that is
  // large enough), else kNone (classify into the workspace). Every lease but kNone must be released.
  Lease acquire(const MaskCacheKey& key, uint64_t stream_id, CUstream stream, size_t bytes);
  // A call with a key that may not use the cache now (its stream is being captured): counted, kNone.
  Lease acquire_none();
  // After the call's launches: a fill whose launches were enqueued (ok) becomes valid for later hits; a failed one
  // is left empty (its memory kept for a later fill).
  void release(const Lease& l, bool ok);
  // A classification launched (any call); for the stats.
  void count_classified() { classified_.fetch_add(1, std::memory_order_relaxed); }
  MaskCacheStats stats() const;
  bool enabled() const { return max_bytes_ > 0; }

 private:
  struct Entry {
    MaskCacheKey key;
    bool valid = false;  // filled and enqueued: hits may take it
    CUdeviceptr ptr = 0;
    size_t capacity = 0;
    uint64_t owner = 0;     // stream id of the last fill
    bool pinned = false;    // read on another stream: never refilled
    int users = 0;          // host threads between acquire and release
    uint64_t last_use = 0;  // LRU tick
    CUevent ready = nullptr;
  };
  Device dev_;
  size_t max_bytes_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
  uint64_t tick_ = 0;
  uint64_t hits_ = 0, fills_ = 0, uncached_ = 0;
  std::atomic<uint64_t> classified_{0};
};

// $FA_MASK_CACHE_MB: the cache's device memory cap in MiB (unset or "": 64; 0: no cache). false: not a number.
bool parse_mask_cache_mb(const char* text, size_t* bytes);

}  // namespace fa::rt
