// common.h -- pieces every family folder shares: the standard knobs (same name, key tag and constexpr name in
// every family that has them), the failure helper, and the common launch geometries.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "generator/family.h"
#include "generator/problem.h"

namespace fa::gen::fam {

inline Knob block_m(std::vector<int> v) { return {"block_m", "m", "kBlockM", std::move(v)}; }
inline Knob block_n(std::vector<int> v) { return {"block_n", "n", "kBlockN", std::move(v)}; }
inline Knob warps(std::vector<int> v) { return {"warps", "w", "kWarps", std::move(v)}; }
inline Knob stages(std::vector<int> v) { return {"stages", "s", "kStages", std::move(v)}; }

// Sets *why to "<family>: <msg>" and returns false.
inline bool fail(std::string* why, const char* family, const std::string& msg) {
  if (why != nullptr) *why = std::string(family) + ": " + msg;
  return false;
}


// The prefill families' common limits (fwd_mma, fwd_wgmma): contiguous k / v without used lengths (the KV-cache
// fields are fwd_split's and fwd_ref's), head dims up to kMaxHeadDimFast. User code (fa_mods) is each family's own
// call: fwd_mma runs it, fwd_wgmma not yet.
inline bool contiguous_kv_fast_dims(const ProblemDesc& p, const char* family, std::string* why) {
  if (p.paged) return fail(why, family, "reads no paged KV cache");
  if (p.seqused) return fail(why, family, "takes no seqused_k");
  if (p.head_dim > kMaxHeadDimFast || p.head_dim_v > kMaxHeadDimFast)
    return fail(why, family, "head dims up to " + std::to_string(kMaxHeadDimFast));
  return true;
}

// Grid (row blocks of `rows_per_cta`, heads, batch) with `warps` warps: the shape of every kernel that gives each
// CTA a block of rows of one (batch, head).
inline Launch rows_launch(int rows, int rows_per_cta, int heads, int batch, int warps, unsigned smem) {
  Launch l;
  l.grid[0] = static_cast<unsigned>((rows + rows_per_cta - 1) / rows_per_cta);
  l.grid[1] = static_cast<unsigned>(heads);
  l.grid[2] = static_cast<unsigned>(batch);
  l.block = static_cast<unsigned>(warps * 32);
  l.smem = smem;
  return l;
}

}  // namespace fa::gen::fam

namespace fa::gen::fam {

// A backward step whose CTA owns block_m query rows of one (batch, query head) with `warps` warps and no shared
// memory (bwd_pre, bwd_post). Knobs: block_m in {32, 64, 128}, warps in {4, 8}.
// Default 32 rows x 8 warps, the fastest point of both on an H100 (bf16, 16k tokens x hidden 2048, per call):
//   bwd_pre:  one row group of four per warp, twice the CTAs of 64 x 4: d 128 115 -> 93 us, d 64 102 -> 93 us,
//             d 256 122 -> 96 us (FA2's dot_do_o: 95 / 99.5 us at d 128 / 64); 64 x 8: 100 / 95 / 109 us;
//   bwd_post: with the 16-byte path, d 128 82 -> 70 us, d 64 79 -> 69 us, d 256 87 -> 78 us against the old scalar
//             path at 64 x 4 (FA2's convert_dq: 77.5 / 79.6 us at d 128 / 64); 64 x 8 and 32 x 4 within 3 us,
//             64 x 4 and 128 x 4 7 and 20 us slower at d 256.
enum { kRowsBlockM, kRowsWarps };
inline Launch query_rows_launch(const KernelConfig& c, const LaunchShape& sh) {
  return rows_launch(sh.max_seqlen_q, c.t[kRowsBlockM], sh.heads_q, sh.batch, c.t[kRowsWarps], 0);
}
inline Tunables query_rows_defaults(const Semantic&) { return Tunables{{32, 8}}; }
inline Family query_rows_step(const char* name, const char* template_name) {
  return Family{.name = name, .template_name = template_name, .role = Role::Step,
                .knobs = {block_m({32, 64, 128}), warps({4, 8})}, .defaults = &query_rows_defaults,
                .launch = &query_rows_launch};
}

}  // namespace fa::gen::fam

namespace fa::gen::fam {

inline size_t align256(size_t x) { return (x + 255) & ~static_cast<size_t>(255); }
inline long long rows_q(const ProblemDesc& p) { return p.varlen ? p.total_q : static_cast<long long>(p.batch) * p.seqlen_q; }

// The start of every backward plan: the float32 Delta region [heads_q * rows_q] (indexed like the LSE), and the
// bwd_pre step at its defaults. Returns the next free offset.
inline size_t backward_plan_start(const ProblemDesc& p, int arch, Plan* plan) {
  plan->off_delta = 0;
  const Family* pre = find_family("bwd_pre");
  const Semantic s = semantic_for(*pre, p, arch);
  plan->steps.push_back(KernelConfig{s, pre->defaults(s)});
  return align256(static_cast<size_t>(rows_q(p)) * static_cast<size_t>(p.heads_q) * sizeof(float));
}

// A step of family `name` at its defaults for the same problem as `main`.
inline KernelConfig default_step(const char* name, const ProblemDesc& p, int arch) {
  const Family* f = find_family(name);
  const Semantic s = semantic_for(*f, p, arch);
  return KernelConfig{s, f->defaults(s)};
}

}  // namespace fa::gen::fam
