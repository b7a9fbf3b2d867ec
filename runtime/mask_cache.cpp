// mask_cache.cpp -- the context's cache of block classifications (see mask_cache.h).
#include "runtime/mask_cache.h"

#include <cstring>

namespace fa::rt {

namespace {

uint64_t pack2(int64_t a, int64_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
uint64_t word(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

}  // namespace

MaskCacheKey mask_cache_key(gen::Role role, const gen::ProblemDesc& d, const gen::Plan& plan, const FaUser& user,
                            const void* cu_seqlens_q, const void* cu_seqlens_k, uint64_t epoch) {
  MaskCacheKey k;
  size_t n = 0;
  for (uint64_t x : shape_signature(role, d).w) k.w[n++] = x;
  // the classification step's config: family, semantic, tile (and any knob it grows)
  const gen::KernelConfig& cls = plan.steps[static_cast<size_t>(plan.blk_cls_step)];
  const gen::Semantic& s = cls.s;
  k.w[n++] = word(s.family);
  k.w[n++] = word(s.mods);
  k.w[n++] = pack2(s.arch, s.dtype);
  k.w[n++] = pack2(s.head_dim, s.head_dim_v);
  const uint32_t flags = (s.has_bias ? 1u : 0u) | (s.has_alibi ? 2u : 0u) | (s.has_softcap ? 4u : 0u) |
                         (s.varlen ? 8u : 0u) | (s.even_k ? 16u : 0u) | (s.has_lse ? 32u : 0u) | (s.paged ? 64u : 0u);
  k.w[n++] = pack2(s.mask, flags);
  for (size_t i = 0; i < cls.t.v.size(); i += 2) k.w[n++] = pack2(cls.t.v[i], cls.t.v[i + 1]);
  // the plan's layout of the classes (the kernels' view of the span)
  k.w[n++] = pack2(plan.blk_mblocks, plan.blk_nkb);
  k.w[n++] = pack2(plan.blk_shared, plan.blk_cls_step);
  k.w[n++] = plan.off_blk_cls_end - plan.off_blk_cls;
  k.w[n++] = plan.off_blk_cls_t == SIZE_MAX ? ~uint64_t{0} : plan.off_blk_cls_t - plan.off_blk_cls;
  k.w[n++] = word(cu_seqlens_q);
  k.w[n++] = word(cu_seqlens_k);
  k.w[n++] = epoch;
  std::memcpy(&k.w[n], &user, sizeof user);
  n += MaskCacheKey::kUserWords;
  static_assert(sizeof(gen::Tunables::v) == 4 * sizeof(uint64_t), "the tile takes 4 words of the key");
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= k.w[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  k.hash = h ^ (h >> 31);
  return k;
}

MaskCache::~MaskCache() {
  std::vector<CUdeviceptr> mem;
  std::vector<CUevent> events;
  for (const Entry& e : entries_) {
    if (e.ptr != 0) mem.push_back(e.ptr);
    if (e.ready != nullptr) events.push_back(e.ready);
  }
  if ((!mem.empty() || !events.empty()) && dev_.release_all) dev_.release_all(mem, events);
}

MaskCache::Lease MaskCache::acquire(const MaskCacheKey& key, uint64_t stream_id, CUstream stream, size_t bytes) {
  Lease l;
  std::lock_guard<std::mutex> lock(mu_);
  ++tick_;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (!e.valid || !(e.key == key)) continue;
    ++e.users;
    e.last_use = tick_;
    ++hits_;
    l.use = Use::kHit;
    l.slot = static_cast<int>(i);
    l.ptr = e.ptr;
    l.ready = e.ready;
    l.wait_ready = e.owner != stream_id;
    if (l.wait_ready) e.pinned = true;  // its readers on this stream are not ordered with its owner's next fill
    return l;
  }
  int slot = -1;
  if (enabled() && static_cast<int>(entries_.size()) < kMaxEntries && bytes <= max_bytes_ - bytes_) {
    CUdeviceptr p = 0;
    if (dev_.alloc(bytes, stream, &p)) {
      Entry e;
      e.ptr = p;
      e.capacity = bytes;
      e.owner = stream_id;
      entries_.push_back(e);
      bytes_ += bytes;
      slot = static_cast<int>(entries_.size()) - 1;
    }
  }
  if (slot < 0) {  // refill the least recently used idle entry of this stream that is large enough
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (e.pinned || e.users != 0 || e.owner != stream_id || e.capacity < bytes) continue;
      if (slot < 0 || e.last_use < entries_[static_cast<size_t>(slot)].last_use) slot = static_cast<int>(i);
    }
  }
  if (slot >= 0) {
    Entry& e = entries_[static_cast<size_t>(slot)];
    if (e.ready == nullptr && !dev_.new_event(&e.ready)) e.ready = nullptr;
    if (e.ready != nullptr) {
      e.key = key;
      e.valid = false;
      ++e.users;
      e.last_use = tick_;
      ++fills_;
      l.use = Use::kFill;
      l.slot = slot;
      l.ptr = e.ptr;
      l.ready = e.ready;
      return l;
    }
  }
  ++uncached_;
  return l;
}

MaskCache::Lease MaskCache::acquire_none() {
  std::lock_guard<std::mutex> lock(mu_);
  ++uncached_;
  return Lease{};
}

void MaskCache::release(const Lease& l, bool ok) {
  if (l.use == Use::kNone) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[static_cast<size_t>(l.slot)];
  --e.users;
  if (l.use == Use::kFill) e.valid = ok;
}

MaskCacheStats MaskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MaskCacheStats s;
  s.hits = hits_;
  s.fills = fills_;
  s.uncached = uncached_;
  s.classified = classified_.load(std::memory_order_relaxed);
  s.entries = entries_.size();
  s.bytes = bytes_;
  return s;
}

bool parse_mask_cache_mb(const char* text, size_t* bytes) {
  if (text == nullptr || *text == '\0') {
    *bytes = size_t{64} << 20;
    return true;
  }
  size_t mb = 0;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9' || mb > (size_t{1} << 24)) return false;
    mb = mb * 10 + static_cast<size_t>(*c - '0');
  }
  if (mb > (size_t{1} << 24)) return false;
  *bytes = mb << 20;
  return true;
}

}  // namespace fa::rt
