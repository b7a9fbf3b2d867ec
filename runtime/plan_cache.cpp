// plan_cache.cpp -- the shape-signature table of fa_run's fast path (see plan_cache.h).
#include "runtime/plan_cache.h"

#include <mutex>

namespace fa::rt {

namespace {

uint64_t pack2(int64_t a, int64_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

// A field added to ProblemDesc changes what a plan depends on: it must enter the signature below (a stale plan would
// serve another problem). This trips when the struct grows; update the signature, then the size.
static_assert(sizeof(void*) != 8 || sizeof(gen::ProblemDesc) == 104,
              "gen::ProblemDesc changed: add its new fields to shape_signature, then update this size");

ShapeSignature shape_signature(gen::Role role, const gen::ProblemDesc& d) {
  ShapeSignature s;
  s.w[0] = pack2(static_cast<int>(role), d.dtype | (d.kv_dtype << 8) | (d.o_dtype << 16));
  s.w[1] = pack2(d.batch, d.seqlen_q);
  s.w[2] = pack2(d.seqlen_k, d.heads_q);
  s.w[3] = pack2(d.heads_kv, d.head_dim);
  s.w[4] = pack2(d.head_dim_v, d.mask);
  s.w[5] = pack2(d.total_q, d.total_k);
  s.w[6] = pack2(d.win_left, d.win_right);
  const uint32_t flags =
      (d.varlen ? 1u : 0u) | (d.has_bias ? 2u : 0u) | (d.has_alibi ? 4u : 0u) | (d.has_softcap ? 8u : 0u) |
      (d.has_lse ? 16u : 0u) | (d.aligned16 ? 32u : 0u) | (d.tma_ok ? 64u : 0u) | (d.backward ? 128u : 0u) |
      (d.deterministic ? 256u : 0u) | (d.seqused ? 512u : 0u) | (d.paged ? 1024u : 0u) |
      (static_cast<uint32_t>(d.mask_mod_depends & 3) << 11) | (d.v_in_k ? 8192u : 0u) | (d.has_sinks ? 16384u : 0u);
  s.w[7] = pack2(flags, d.sm_count);
  s.w[8] = pack2(d.page_size, d.num_splits);
  s.w[9] = reinterpret_cast<uintptr_t>(d.mods);  // interned: one pointer per distinct user code
  return s;
}

uint64_t ShapeSignature::hash() const {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (uint64_t x : w) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  return h ^ (h >> 31);
}

std::shared_ptr<const CachedPlan> PlanCache::find(const ShapeSignature& sig) const {
  const size_t i = sig.hash() % kSlots;
  std::shared_lock<std::shared_mutex> lock(mu_);
  const std::shared_ptr<const CachedPlan>& e = slots_[i];
  if (!e || e->generation != generation() || !(e->sig == sig)) return nullptr;
  return e;
}

void PlanCache::insert(std::shared_ptr<const CachedPlan> e) {
  if (!e || e->generation != generation()) return;
  const size_t i = e->sig.hash() % kSlots;
  std::unique_lock<std::shared_mutex> lock(mu_);
  slots_[i] = std::move(e);
}

size_t PlanCache::size() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  size_t n = 0;
  for (const auto& e : slots_) n += e != nullptr;
  return n;
}

}  // namespace fa::rt
