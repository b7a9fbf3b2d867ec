// plan_cache.h -- fa_run's fast path: a small per-context table from a validated problem's shape signature (every
// field of gen::ProblemDesc: dtype, batch, lengths, heads, head dims, mask, features, alignment flags, the KV-cache
// fields, the interned user code) and role to
// the resolved plan: the steps (the chooser's tunables already applied) and their loaded kernels. A repeated shape
// then costs validation, argument binding and the launches: no selector, chooser, string, SQLite or allocation.
//
// Invalidation: a generation counter. An entry records the generation read BEFORE its plan was chosen; bump() (a
// background tuning swapped a winner in) makes every older entry stale, and the next call of its shape rebuilds it
// through the slow path. Lookups take a shared lock; inserts and bumps are rare.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "generator/family.h"
#include "generator/problem.h"

namespace fa::rt {

struct Kernel;

// The shape signature of a validated problem and role, as plain words (compared exactly, hashed).
struct ShapeSignature {
  static constexpr int kWords = 10;
  std::array<uint64_t, kWords> w{};
  bool operator==(const ShapeSignature& o) const { return w == o.w; }
  uint64_t hash() const;
};
ShapeSignature shape_signature(gen::Role role, const gen::ProblemDesc& d);

struct CachedPlan {
  ShapeSignature sig;
  uint64_t generation = 0;
  gen::Plan plan;
  std::vector<std::shared_ptr<Kernel>> kernels;  // one per step, loaded
};

class PlanCache {
 public:
  static constexpr size_t kSlots = 64;  // direct-mapped by signature hash; a collision replaces the older entry

  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // Makes every entry stale (a chooser's answer changed).
  void bump() { generation_.fetch_add(1, std::memory_order_acq_rel); }
  // The current entry of `sig`, or nullptr (absent or stale).
  std::shared_ptr<const CachedPlan> find(const ShapeSignature& sig) const;
  // Stores an entry built from choices made at generation e->generation (ignored when already stale).
  void insert(std::shared_ptr<const CachedPlan> e);
  // Entries held (stale ones included); for tests.
  size_t size() const;

 private:
  mutable std::shared_mutex mu_;
  std::array<std::shared_ptr<const CachedPlan>, kSlots> slots_{};
  std::atomic<uint64_t> generation_{0};
};

}  // namespace fa::rt
