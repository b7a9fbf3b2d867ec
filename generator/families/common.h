// common.h -- pieces every family folder shares: the standard knobs (same name, key tag and constexpr name in
// every family that has them), the failure helper, and the common launch geometries.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "generator/family.h"
#include "generator/problem.h"
#include "generator/user_mods.h"

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
// call: fwd_mma and fwd_wgmma run it (block_sparse_plan below).
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
inline Family query_rows_step(const char* name, const char* template_name, bool sinks = false) {
  return Family{.name = name,
                .template_name = template_name,
                .role = Role::Step,
                .sinks = sinks,
                .knobs = {block_m({32, 64, 128}), warps({4, 8})},
                .defaults = &query_rows_defaults,
                .launch = &query_rows_launch};
}

}  // namespace fa::gen::fam

namespace fa::gen::fam {

inline size_t align256(size_t x) { return (x + 255) & ~static_cast<size_t>(255); }
inline long long rows_q(const ProblemDesc& p) {
  return p.varlen ? p.total_q : static_cast<long long>(p.batch) * p.seqlen_q;
}

// A step of family `name` at its defaults for the same problem as `main`.
inline KernelConfig default_step(const char* name, const ProblemDesc& p, int arch) {
  const Family* f = find_family(name);
  const Semantic s = semantic_for(*f, p, arch);
  return KernelConfig{s, f->defaults(s)};
}
// The same for a step that runs no user code (bwd_pre, bwd_post): its key carries no mod tag, so every mod shares it.
inline KernelConfig plain_step(const char* name, const ProblemDesc& p, int arch) {
  KernelConfig c = default_step(name, p, arch);
  c.s.mods = nullptr;
  return c;
}

// The start of every backward plan: the float32 Delta region [heads_q * rows_q] (indexed like the LSE), and the
// bwd_pre step at its defaults; with attention sinks (p.has_sinks) also the region of bwd_pre's partial sums of their
// gradient (one per CTA: [heads_q][batch x query blocks]) and the bwd_sinks step that reduces them into dsinks.
// Returns the next free offset.
inline size_t backward_plan_start(const ProblemDesc& p, int arch, Plan* plan) {
  plan->off_delta = 0;
  const KernelConfig pre = plain_step("bwd_pre", p, arch);
  plan->steps.push_back(pre);
  size_t off = align256(static_cast<size_t>(rows_q(p)) * static_cast<size_t>(p.heads_q) * sizeof(float));
  if (!p.has_sinks) return off;
  const int block_m = pre.t[kRowsBlockM];
  plan->dsink_blocks = (p.seqlen_q + block_m - 1) / block_m;  // bwd_pre's grid: none when no sequence has a query
  plan->dsink_parts = p.batch * plan->dsink_blocks;
  plan->off_dsink_part = off;
  plan->steps.push_back(plain_step("bwd_sinks", p, arch));
  return align256(off + static_cast<size_t>(plan->dsink_parts) * static_cast<size_t>(p.heads_q) * sizeof(float));
}

// The float32 dQ accumulator of the tensor-core backwards (bwd_mma, bwd_wgmma) from offset `off`: [rows_q rounded up
// to 8, heads_q * head_dim], 8 x 8 tiled (templates/common/dq_accum.cuh: fa_dq_accum_off), zeroed by bwd_pre and read
// by bwd_post. Sets off_dq_accum and accum_q_stride_row; returns the next free offset.
inline size_t dq_accum_region(const ProblemDesc& p, size_t off, Plan* plan) {
  plan->off_dq_accum = off;
  plan->accum_q_stride_row = static_cast<long long>(p.heads_q) * p.head_dim;
  const size_t rows8 = static_cast<size_t>((rows_q(p) + 7) / 8 * 8);
  return align256(off + rows8 * static_cast<size_t>(plan->accum_q_stride_row) * sizeof(float));
}

// One 4D tensor map (head_dim, seq, heads, batch) of a q/k/v/dO-like tensor for the Hopper kernels' TMA loads
// (templates/fa_tma_args.cuh): strides in elements, box (one 128-byte row: 64 16-bit or 128 fp8 elements, rows, 1, 1),
// 128-byte swizzle, zero fill past the tensor; a dimension of extent 1 may carry any stride (TMA wants a positive
// multiple of 16 bytes: 16 stands in).
inline TensorMapDesc tma_map_4d(int dtype, const void* base, int dim, long long seq, long long heads, long long batch,
                                long long s_seq, long long s_head, long long s_batch, int rows) {
  TensorMapDesc m;
  m.dtype = dtype;
  m.rank = 4;
  m.base = base;
  const long long ext[4] = {dim, std::max(1LL, seq), std::max(1LL, heads), std::max(1LL, batch)};
  const long long str[3] = {s_seq, s_head, s_batch};
  for (int i = 0; i < 4; ++i) m.dims[i] = static_cast<uint64_t>(ext[i]);
  const long long es = is_fp8(dtype) ? 1 : 2;
  for (int i = 0; i < 3; ++i) m.strides[i] = ext[i + 1] > 1 ? static_cast<uint64_t>(str[i] * es) : 16u;
  m.box[0] = static_cast<uint32_t>(128 / es);
  m.box[1] = static_cast<uint32_t>(rows);
  m.box[2] = m.box[3] = 1;
  m.swizzle = 128;
  return m;
}

// Encodes the tensor maps maps[0..n) into dst[0..n) (128-byte CUtensorMaps) with the device's encoder (BindInput).
inline bool encode_tensor_maps(const BindInput& in, const TensorMapDesc* maps, void* const* dst, int n,
                               const char* family, std::string* why) {
  if (in.encode_tensor_map == nullptr) return fail(why, family, "no tensor-map encoder (no device)");
  for (int i = 0; i < n; ++i)
    if (!in.encode_tensor_map(in.encoder_ctx, maps[i], dst[i], why)) return false;
  return true;
}

// The end of every backward plan: the family's own step `main` (the tuned one), then bwd_post at its defaults; the
// workspace ends at `off` (at least 256 bytes).
inline void backward_plan_end(const KernelConfig& main, const ProblemDesc& p, size_t off, Plan* plan) {
  plan->tuned_step = static_cast<int>(plan->steps.size());
  plan->steps.push_back(main);
  KernelConfig post = plain_step("bwd_post", p, main.s.arch);
  post.s.has_sinks = false;  // dq alone: one kernel with and without sinks
  plan->steps.push_back(post);
  plan->workspace_bytes = std::max<size_t>(off, 256);
}

// Block skipping (a mask_mod; templates/mask_blocks.cuh, fa_args.cuh): which classifications are shared
// (LaunchShape::blk_shared: 1 over batch entries, never in varlen, whose lengths differ; 2 over heads), from
// fa_mods.mask_mod_depends.
inline int blk_shared(const ProblemDesc& p) {
  return ((p.mask_mod_depends & 1) == 0 && !p.varlen ? 1 : 0) | ((p.mask_mod_depends & 2) == 0 ? 2 : 0);
}

// How a kernel skips blocks: its tile, every tile its family may choose (the size query reserves the largest
// layout, so that a caller's buffer stays large enough when tuning swaps another winner in), and which regions it
// reads beside the tile classes: the classes transposed (key block major: the backward's CTAs), visiting lists
// (fwd_mma's and bwd_mma's; fwd_wgmma's warps walk the classes themselves) and sub-tile codes (fwd_wgmma's: user code
// runs only on the 16-row x key-group sub-tiles the mask cuts; block_m a multiple of 64).
struct BlockSkipping {
  int block_m = 0, block_n = 0;
  std::vector<int> block_ms, block_ns;
  bool transposed = false, lists = false, sub = false;
};

// The workspace of block skipping at a block_m x block_n tile, from offset `off`: the tile classes ([batch or 1]
// [heads_q or 1][query blocks][key blocks] bytes), with `transposed` the same classes key block major, with `sub` the
// sub-tile records (the classes' layout, block_m / 64 + 1 uint32 per tile) and the hidden-pair slots, with `lists`
// the kernels' visiting lists ([batch][heads_q][query blocks][key blocks] int32: a forward CTA's key blocks, or a
// backward CTA's query blocks of each head of its group). Fills the plan's block fields; returns the end.
constexpr size_t kBlkBitsMaxBytes = size_t{64} << 20;  // the hidden-pair slots of one classification, at most
inline size_t block_workspace(const ProblemDesc& p, int block_m, int block_n, bool transposed, bool lists, bool sub,
                              size_t off, Plan* out) {
  out->blk_shared = blk_shared(p);
  out->blk_mblocks = std::max(1, (p.seqlen_q + block_m - 1) / block_m);
  out->blk_nkb = std::max(1, (p.seqlen_k + block_n - 1) / block_n);
  const size_t tiles = static_cast<size_t>(out->blk_mblocks) * static_cast<size_t>(out->blk_nkb);
  const size_t batch_c = (out->blk_shared & 1) ? 1 : static_cast<size_t>(p.batch);
  const size_t heads_c = (out->blk_shared & 2) ? 1 : static_cast<size_t>(p.heads_q);
  out->off_blk_cls = off;
  off = align256(off + batch_c * heads_c * tiles);
  if (transposed) {
    out->off_blk_cls_t = off;
    off = align256(off + batch_c * heads_c * tiles);
  }
  if (sub) {
    out->off_blk_sub = off;
    off = align256(off + batch_c * heads_c * tiles * static_cast<size_t>(block_m / 64 + 1) * sizeof(unsigned));
    // slots for the hidden pairs of partial tiles: four per query-block row (a band, a document boundary, a sink
    // and the diagonal), at most kBlkBitsMaxBytes; tiles past them run the user's code instead
    const size_t slot_bytes = static_cast<size_t>(block_m) * 32;
    const size_t cap =
        std::min({batch_c * heads_c * tiles, batch_c * heads_c * out->blk_mblocks * 4, kBlkBitsMaxBytes / slot_bytes});
    out->off_blk_bits = off;
    out->blk_bits_cap = static_cast<int>(cap);
    off = align256(off + 256 + cap * slot_bytes);
  }
  out->off_blk_cls_end = off;  // what mask_blocks writes ends here (Plan::off_blk_cls_end); the kernels' lists follow
  if (!lists) return off;
  out->off_blk_list = off;
  return off + align256(static_cast<size_t>(p.batch) * p.heads_q * tiles * sizeof(int));
}

// Appends the mask_blocks step at the kernel's tile (main's block skipping `b`) to the plan and lays out its
// workspace from `off` (block_workspace), reserving the largest layout over b's tiles. Returns the end.
inline size_t plan_mask_blocks(const KernelConfig& main, const ProblemDesc& p, const BlockSkipping& b, size_t off,
                               Plan* out) {
  KernelConfig cls = default_step("mask_blocks", p, main.s.arch);
  cls.s.has_sinks = false;  // the tile classes do not depend on sinks: one kernel with and without
  cls.t[0] = b.block_m;
  cls.t[1] = b.block_n;
  cls.t[2] = b.sub ? 1 : 0;  // mask_blocks' sub_tiles knob: the sub-tile codes compiled in
  out->blk_cls_step = static_cast<int>(out->steps.size());
  out->steps.push_back(cls);
  for (int bm : b.block_ms)
    for (int bn : b.block_ns) {
      Plan probe;
      out->workspace_reserve_bytes =
          std::max(out->workspace_reserve_bytes, block_workspace(p, bm, bn, b.transposed, b.lists, b.sub, off, &probe));
    }
  return block_workspace(p, b.block_m, b.block_n, b.transposed, b.lists, b.sub, off, out);
}

// The plan of a forward (`main`) with a mask_mod: [mask_blocks at its tile, main] over the block-sparse workspace
// (plan_mask_blocks; per batch entry in varlen, whose lengths differ). Without a mask_mod: the plan of one.
inline Plan block_sparse_plan(const KernelConfig& main, const ProblemDesc& p, const BlockSkipping& b) {
  Plan out;
  if (has_mask_mod(main.s.mods)) out.workspace_bytes = plan_mask_blocks(main, p, b, 0, &out);
  out.steps.push_back(main);
  out.tuned_step = static_cast<int>(out.steps.size()) - 1;
  return out;
}

}  // namespace fa::gen::fam
