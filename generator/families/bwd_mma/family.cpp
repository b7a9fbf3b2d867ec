// bwd_mma -- host side of the tensor-core backward family (templates/bwd_mma.cuh): fp16/bf16 on sm_80+, 16-byte
// aligned problems. Grid: (key blocks of block_n, kv heads, batch); each CTA loops over its GQA group's query heads
// and the query blocks (block_m) that meet the mask band. Knobs: block_m in {16, 32, 64, 128}, block_n in {32, 64,
// 128}, warps in {4, 8}, stages in {1, 2} (Q/dO double buffering).
// Plan: bwd_pre -> [mask_blocks ->] bwd_mma -> bwd_post over one workspace (regions 256-byte aligned):
//   delta     float32 [heads_q * rows_q]         indexed like the LSE (args.f.lse_sb / lse_sh)
//   dq_accum  float32 [rows_q rounded up to 8, heads_q * head_dim], 8 x 8 tiled (fa_dq_accum_off in
//                                               templates/common/dq_accum.cuh); accum_q_stride_row = heads_q * head_dim
//   dk_accum  int32   [rows_q, heads_q]          deterministic mode only: the dQ ordering semaphores (no float32
//                                               dK/dV buffers: GQA groups are summed inside the CTA)
//   blk_*     with a mask_mod (fa_mods): mask_blocks' tile classes at this kernel's block_m x block_n, in both
//             layouts, and the CTAs' visiting lists (families/common.h: block_workspace; bwd_mma.cuh: block
//             skipping)
// rows_q = total_q (varlen) or batch * seqlen_q. Binding sets the causal CTA-order fields (fa_bwd_cta_order).
// The warp layouts come from templates/bwd_mma_tiling.cuh, compiled
// here and in the kernel, so `valid` and the template share one rule. `valid` also bounds the float32
// accumulators per thread (fa_bwd_acc_regs) so that every accepted point compiles without spills. The bounds
// hold because the template pins ptxas's register policy (explicit minBlocksPerSM = 1; each GEMM phase's k loop
// software-pipelined only within fa_bwd_pipe_budget, else unrolled by 2). They were calibrated by compiling every
// valid point through NVRTC with `-Xptxas -v` for sm_80 and sm_90a, with and without bias/ALiBi/softcap, head dims
// 32..256 (2026-11-22, NVRTC 13):
//   estimate <= 160 with a transient part (S^T/dP^T or dQ' tile) <= 64 floats, or <= 96 with evenly split head
//     columns: no spill (the worst used 255 registers); transient 128 (e.g. 128 x 128 x 8 warps at d 32) and
//     96 with uneven columns (128 x 32 x 8 warps at d 160) spilled 8 to 188 bytes;
//   estimate 192: spill-free only for 8-warp tiles with transient <= 64 and evenly split columns, i.e. FA2's own
//     tiles (64 x 128 at d 128, 64 x 64 at d 256); other 192-point tiles spilled up to 92/392 bytes;
//   estimate 256: spills everywhere; 2-warp tiles (dropped from the space) spilled a few bytes even at 160;
//   with bias/ALiBi/softcap and unevenly split columns (head dims 72, 112...), 128 already spilled (4-24 bytes):
//     such points are held to 96.
// The NVRTC sweep (tests/sweep) re-checks accepted points in CI (a covering sample) and under --full.
#include <algorithm>

#include <fmt/format.h>

#include "../bwd_cta_order.h"
#include "../common.h"
#include "generator/user_mods.h"
#include "templates/bwd_mma_tiling.cuh"
#include "templates/fa_args.cuh"
#include "templates/smem_layout.cuh"

namespace fa::gen {

namespace {

enum { kBlockM, kBlockN, kWarps, kStages };

// Bounds of fa_bwd_acc_regs() (float32 accumulator registers per thread); see the calibration in the header.
constexpr int kBwdMmaRegBudget = 160;   // any tile
constexpr int kBwdMmaWideBudget = 192;  // 8 warps with a transient tile of <= kBwdMmaWideTransient floats
constexpr int kBwdMmaWideTransient = 64;
constexpr int kBwdMmaMaxTransient = 96;       // S^T/dP^T or dQ' tile floats per thread at the narrow budget
constexpr int kBwdMmaFeatUnevenBudget = 96;   // bias/ALiBi/softcap with unevenly split head columns
constexpr int kBwdMmaBiasSTile = 64;          // with a bias, S^T/dP^T floats per thread and dK/dV registers from
constexpr int kBwdMmaBiasPersistent = 64;     // which only 8 warps, 2 stages and exactly 64 dK/dV registers are clean
constexpr int kBwdMmaBiasPaddedBudget = 144;  // with a bias and a head dim that is not a multiple of 16
constexpr int kBwdMmaCausalBudget = 144;      // with a bias and a causal mask (the CTA-order decode)
constexpr int kBwdMmaUserCodeBudget = 144;    // with a score_mod, or a bias and a mask_mod (user code, fa_mods)

FaBwdLayout layout(const KernelConfig& c) {
  return fa_bwd_layout(c.t[kBlockM], c.t[kBlockN], std::max(1, c.t[kWarps]), c.s.head_dim, c.s.head_dim_v);
}

int reg_estimate(const KernelConfig& c) { return fa_bwd_acc_regs(layout(c)); }

bool valid(const KernelConfig& c, std::string* why);
unsigned smem_bytes(const KernelConfig& c);

Tunables defaults(const Semantic& s) {
  const int d = std::max(s.head_dim, s.head_dim_v);
  std::vector<Tunables> prefs;
  // FA2's backward tiles where they compile without spills (64 x 128 x 8 warps up to d 128, 64 x 64 x 8 above;
  // one stage where two do not fit in shared memory, e.g. d 256 on sm_80), then smaller ones.
  // FA2's d 64 tile, 128 x 128 x 8 warps, comes first: valid() admits it only on sm_90 for plain problems whose
  // head dims pad to 64 (measured H100, bf16 4k x 16 heads x 4: 2.90 ms non-causal / 1.62 ms causal against
  // 3.17 / 1.72 ms for the next tile; tuner, 2026-11-22).
  if (d <= 128)
    prefs = {{{128, 128, 8, 2}}, {{64, 128, 8, 2}}, {{64, 128, 8, 1}},
             {{128, 64, 8, 2}},  {{64, 64, 8, 2}},  {{64, 64, 4, 2}}};
  else prefs = {{{64, 64, 8, 2}}, {{64, 64, 8, 1}}, {{64, 32, 8, 2}}, {{64, 32, 8, 1}}};
  // Then every point of the space, largest tiles first.
  std::vector<Tunables> rest = full_space(s);
  std::stable_sort(rest.begin(), rest.end(), [](const Tunables& x, const Tunables& y) {
    return x[kBlockM] * x[kBlockN] * x[kWarps] > y[kBlockM] * y[kBlockN] * y[kWarps];
  });
  prefs.insert(prefs.end(), rest.begin(), rest.end());
  const DeviceLimits lim = limits_for_arch(s.arch);
  for (const Tunables& t : prefs) {
    KernelConfig c{s, t};
    if (valid(c, nullptr) && smem_bytes(c) <= static_cast<unsigned>(lim.max_smem_optin)) return t;
  }
  return Tunables{{32, 32, 4, 1}};  // no valid point (e.g. features at d 136-176): bwd_mma_covers says no
}

bool valid(const KernelConfig& c, std::string* why) {
  const Tunables& t = c.t;
  auto fail = [&](std::string m) {
    if (why) *why = std::move(m);
    return false;
  };
  if (c.s.dtype != kFp16 && c.s.dtype != kBf16)
    return fail(fmt::format("dtype: expected fp16 or bf16 for bwd_mma, got {}", dtype_name(c.s.dtype)));
  const FaBwdLayout L = layout(c);
  if (!L.ok)
    return fail(fmt::format("warps: no warp layout of {} warps fits block_m {} x block_n {} (bwd_mma_tiling.cuh)",
                            t[kWarps], t[kBlockM], t[kBlockN]));
  const int regs = reg_estimate(c);
  const int transient = regs - fa_bwd_persistent_regs(L);
  const bool even_cols = fa_bwd_even_cols(L);
  const bool narrow =
      regs <= kBwdMmaRegBudget && transient <= kBwdMmaMaxTransient && (transient <= kBwdMmaWideTransient || even_cols);
  const bool wide = t[kWarps] == 8 && transient <= kBwdMmaWideTransient && regs <= kBwdMmaWideBudget && even_cols;
  // score_mod (user code) runs on the feature path (bwd_mma.cuh: kFeat), so it is held to the features' rules.
  const bool score_code = has_score_mod(c.s.mods);
  const bool features = c.s.has_bias || c.s.has_alibi || c.s.has_softcap || score_code;
  if (features && !even_cols && regs > kBwdMmaFeatUnevenBudget)
    return fail(
        fmt::format("registers: estimated {} float32 accumulators per thread with bias/ALiBi/softcap and "
                    "unevenly split head columns, expected <= {} (no spills)",
                    regs, kBwdMmaFeatUnevenBudget));
  // FA2's own d 64 tile, 128 x 128 with 8 warps (estimate 192, transient 128): spill-free on sm_90a without
  // bias/ALiBi/softcap at head dims 64 (NVRTC 13, plain, masked and varlen, fp16 and bf16; 2026-11-22). It spills
  // 12 bytes on sm_80, 24-84 bytes at head dims 32-48 and 12 bytes at 56 (padded to 64, one stage; 2026-11-23, also
  // before this session's changes), so it stays outside the rule elsewhere.
  // A mask_mod (user code in the masking step, block skipping; bwd_mma.cuh: kBlockSparse) spills 18-78 bytes there.
  const bool mask_code = has_mask_mod(c.s.mods);
  const bool fa2_d64_tile = c.s.arch >= 90 && !features && !mask_code && t[kBlockM] == 128 && t[kBlockN] == 128 &&
                            t[kWarps] == 8 && c.s.head_dim == 64 && c.s.head_dim_v == 64;
  if (!narrow && !wide && !fa2_d64_tile)
    return fail(
        fmt::format("registers: estimated {} float32 accumulators per thread ({} transient{}), expected <= {} "
                    "with <= {} transient (<= {} unless the columns split evenly), or <= {} with 8 warps, <= "
                    "{} transient and evenly split columns (no spills)",
                    regs, transient, even_cols ? "" : ", columns split unevenly", kBwdMmaRegBudget, kBwdMmaMaxTransient,
                    kBwdMmaWideTransient, kBwdMmaWideBudget, kBwdMmaWideTransient));
  // Two plain points that the address registers of the swizzled rows and the tiled dQ accumulator tip into spills
  // (ptxas -v over every valid point, sm_80 and sm_90a, head dims 32-256, 2026-11-23): 128 x 64 x 8 warps with two
  // stages at d 64 (4 bytes, both archs) and 64 x 64 x 8 warps with one stage at d 256 on sm_90a (56 bytes; two
  // stages, the default there, are spill-free).
  if (!features && t[kBlockM] == 128 && t[kBlockN] == 64 && t[kWarps] == 8 && t[kStages] == 2 && L.dp == 64 &&
      L.dvp == 64)
    return fail("tile: 128 x 64 x 8 warps with 2 stages at head dim 64 spills (ptxas); use 1 stage or another tile");
  // (With ALiBi too: d 248 varlen spilled 4 bytes, full sweep 2026-11-25.)
  if (c.s.arch >= 90 && t[kBlockM] == 64 && t[kBlockN] == 64 && t[kWarps] == 8 && t[kStages] == 1 && L.dp == 256 &&
      L.dvp == 256)
    return fail("tile: 64 x 64 x 8 warps with 1 stage at head dim 256 spills on sm_90 (ptxas); use 2 stages");
  // A bias costs registers that the estimate does not count: the addresses and guarded loads of its elements live
  // next to GEMM 1's S^T/dP^T tile. ptxas -v over the valid points with a bias (alone, with ALiBi, with softcap;
  // sm_80 and sm_90a; fp16 and bf16; head dims 8-256; 2026-11-23):
  //   - that tile at 64 floats per thread with dK/dV at 64 or more registers spilled 4-32 bytes (one stage at d 64
  //     64 x 64 x 4 and 64 x 128 x 8 and at d 128 128 x 64 x 8; d 96 64 x 64 x 4 and d 24 32 x 128 x 4 even with
  //     two stages), except 8 warps with 2 stages and exactly 64 dK/dV registers; with fewer dK/dV registers
  //     (d 8-16 64 x 64 x 4) it is clean;
  //   - above the narrow budget it spilled 4-60 bytes (d 256 64 x 64 x 8 on sm_90a, d 128 64 x 128 x 8);
  //   - head dims padded to 16 (guarded columns) spilled 4-8 bytes at estimate 160 (d 56 16 x 128 x 4, d 120
  //     32 x 64 x 4 and 32 x 128 x 8) and in the 8-warp 2-stage exception (d 56 64 x 128 x 8, d 120 128 x 64 x 8);
  //     144 was clean (d 120 16 x 128 x 8, d 184 64 x 64 x 8).
  // A causal kernel decodes its CTA order (bwd_mma_tiling.cuh: fa_bwd_cta_order) and re-reads it from shared
  // memory where used. ptxas -v over every valid causal point, one compile at a time (2026-11-23, sm_90a, bf16, head
  // dims 8-256, plain: 416 kernels): 3 spilled, d 56 128 x 128 x 8 one stage (12 bytes, also before the change; see
  // fa2_d64_tile), d 120 64 x 128 x 8 two stages (4 bytes) and d 64 64 x 64 x 4 one stage (8 bytes); with a bias
  // (bias + ALiBi + softcap, varlen) estimate 160 spilled 4-20 bytes (d 128 32 x 64 x 4, 32 x 128 x 8) and 144 was
  // clean. So: a causal bias is held to 144, and the two plain points are out.
  // A mask_mod keeps the wide budget except in FA2's d 128 tile shape on sm_90a with two stages (a 64-float S/dP
  // tile at estimate 192: 64 x 128 x 8 warps spilled 114 bytes there; one stage and sm_80 were clean; ptxas -v with a
  // document mask, 2026-11-25).
  if (mask_code && !narrow && c.s.arch >= 90 && t[kStages] == 2 && 2 * L.mt1 * L.nt1 * 4 >= 64)
    return fail(
        fmt::format("tile: {} x {} x {} warps with 2 stages and a mask_mod spills on sm_90 (ptxas); use 1 stage",
                    t[kBlockM], t[kBlockN], t[kWarps]));
  const bool causal = c.s.mask == kMaskCausal;
  const bool padded = L.dp != c.s.head_dim || L.dvp != c.s.head_dim_v;  // head dims padded to 16 (guarded)
  if (causal && !features && padded && t[kBlockN] == 128 && t[kWarps] == 8 && regs > kBwdMmaRegBudget)
    return fail(
        fmt::format("tile: {} x 128 x 8 warps (estimate {}) with a causal mask and head dims padded to 16 "
                    "spills (ptxas); use another tile",
                    t[kBlockM], regs));
  if (causal && !features && t[kBlockM] == 64 && t[kBlockN] == 64 && t[kWarps] == 4 && t[kStages] == 1 && L.dp == 64 &&
      L.dvp == 64)
    return fail("tile: 64 x 64 x 4 warps with 1 stage at head dim 64 spills with a causal mask (ptxas); use 2 stages");
  // User code costs what a bias costs, or more: a score_mod (and its derivative) runs beside every S element with
  // whatever it loads, a mask_mod beside every element of the masked tiles. ptxas -v over every valid point with a
  // document mask (buffer loads), the mask with a relative-bias score_mod (table loads; derivative 1) and a softcap
  // score_mod (tanh; its derivative), sm_80 and sm_90a, bf16, head dims 40-256, masks none / causal / window, with and
  // without bias + ALiBi + softcap and varlen (2026-11-25, 2 x ~80 semantics): a score_mod spilled 4-88 bytes past
  // estimate 144 (d 64 16 x 128 x 4, d 128 32 x 64 x 4 and 32 x 128 x 8) and with a 64-float S/dP tile beside
  // >= 64 dK/dV registers (d 64 64 x 64 x 4 and 64 x 128 x 8 even with 2 stages, d 128 128 x 64 x 8), like a bias
  // without its exception; a mask_mod with a bias spilled 12-32 bytes at estimate 160 (d 128 32 x 64 x 4 and
  // 32 x 128 x 8) and 12 bytes in the exception (d 128 128 x 64 x 8, 2 stages, sm_90a). So user code takes the
  // bias rules without the exception and at most 144: a score_mod always, a mask_mod beside a bias.
  if (c.s.has_bias || score_code) {
    const int s_tile = 2 * L.mt1 * L.nt1 * 4;  // S^T and dP^T floats per thread (the GEMM 1 part of the estimate)
    const int dkdv = fa_bwd_persistent_regs(L);
    const int budget = padded                    ? kBwdMmaBiasPaddedBudget
                       : causal                  ? kBwdMmaCausalBudget
                       : score_code || mask_code ? kBwdMmaUserCodeBudget
                                                 : kBwdMmaRegBudget;
    const char* what = score_code ? "a score_mod" : c.s.has_bias && mask_code ? "a bias and a mask_mod" : "a bias";
    if (regs > budget)
      return fail(
          fmt::format("registers: estimated {} float32 accumulators per thread with {}{}, expected <= {} "
                      "(no spills)",
                      regs, what,
                      padded   ? " and head dims padded to 16"
                      : causal ? " and a causal mask"
                               : "",
                      budget));
    const bool user_code = score_code || mask_code;  // no exception (a mask_mod beside a bias: 12 bytes at d 128
                                                     // 128 x 64 x 8 warps, 2 stages, sm_90a)
    if (s_tile >= kBwdMmaBiasSTile && dkdv >= kBwdMmaBiasPersistent &&
        (user_code || !(t[kWarps] == 8 && t[kStages] == 2 && dkdv == kBwdMmaBiasPersistent && !padded)))
      return fail(
          fmt::format("tile: a {} x {} tile with {} warps and {} stage(s) holds {} S/dP floats per thread; "
                      "with {} and {} dK/dV registers (>= {}) it needs {} to compile without spills",
                      t[kBlockM], t[kBlockN], t[kWarps], t[kStages], s_tile, what, dkdv, kBwdMmaBiasPersistent,
                      user_code ? "fewer S/dP floats or dK/dV registers"
                                : "8 warps, 2 stages, exactly 64 dK/dV registers and head dims that are "
                                  "multiples of 16"));
    // A score_mod beside a bias keeps no 64-float S/dP tile even with few dK/dV registers: the compile sweep's
    // relative-bias record (a float table with 2D strides, its clamp read from a scalar; --full --seed 31,
    // 2026-11-25) spilled 8 bytes at d 24 (sm_90a, causal) and 68 at d 16 (sm_80, with a mask_mod, varlen) in
    // 64 x 64 x 4 warps, 2 stages, bias + ALiBi.
    if (score_code && c.s.has_bias && s_tile >= kBwdMmaBiasSTile)
      return fail(
          fmt::format("tile: a {} x {} tile with {} warps holds {} S/dP floats per thread; with a score_mod "
                      "and a bias it needs fewer than {} to compile without spills",
                      t[kBlockM], t[kBlockN], t[kWarps], s_tile, kBwdMmaBiasSTile));
  }
  return true;
}

unsigned smem_bytes(const KernelConfig& c) {
  const int bm = c.t[kBlockM], bn = c.t[kBlockN], ns = std::max(1, c.t[kStages]);
  const int dp = (c.s.head_dim + 15) / 16 * 16, dvp = (c.s.head_dim_v + 15) / 16 * 16;
  const int pk = fa_smem_pitch(dp), pv = fa_smem_pitch(dvp);  // K / Q and V / dO row pitches (smem_layout.cuh)
  const int halves = bn * pk + bn * pv + ns * bm * pk + ns * bm * pv + 2 * bn * (bm + 8);
  const unsigned mailbox =
      fa_bwd_cta_order(c.s.mask, has_mask_mod(c.s.mods), bm, bn) ? 16 : 0;  // the CTA mailbox (bwd_mma.cuh: cta_coord)
  return static_cast<unsigned>(halves * 2 + ns * bm * 8) + mailbox;
}

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  l.grid[0] = static_cast<unsigned>((sh.max_seqlen_k + c.t[kBlockN] - 1) / c.t[kBlockN]);
  l.grid[1] = static_cast<unsigned>(sh.heads_kv);
  l.grid[2] = static_cast<unsigned>(sh.batch);
  l.block = static_cast<unsigned>(c.t[kWarps] * 32);
  l.smem = smem_bytes(c);
  return l;
}

// Whether the tensor-core backward serves p: fp16/bf16, 16-byte aligned, and a valid default tiling for its head
// dims and features.
bool covers(const ProblemDesc& p, int arch, std::string* why) {
  auto no = [&](std::string m) {
    if (why) *why = std::move(m);
    return false;
  };
  if (p.dtype != kFp16 && p.dtype != kBf16)
    return no(fmt::format("dtype: bwd_mma needs fp16 or bf16, got {}", dtype_name(p.dtype)));
  if (!p.aligned16) return no("alignment: bwd_mma needs 16-byte aligned pointers and strides");
  // Block skipping's list entries ((hl * query blocks + m) << 1 | full, int32) must fit at the smallest block_m.
  if (has_mask_mod(p.mods) && static_cast<long long>(p.heads_q / p.heads_kv) * ((p.seqlen_q + 15) / 16) >= (1ll << 30))
    return no("bwd_mma: too many (query head, query block) pairs per kv head for block skipping's lists");
  const Semantic s = semantic_for(*find_family("bwd_mma"), p, arch);
  std::string reason;
  if (!is_valid(KernelConfig{s, defaults(s)}, limits_for_arch(arch), &reason))
    return no("bwd_mma: no valid tiling for this head dim: " + reason);
  return true;
}

Plan plan(const KernelConfig& main, const ProblemDesc& p) {
  Plan out;
  size_t off = fam::backward_plan_start(p, main.s.arch, &out);
  const long long rows = fam::rows_q(p);
  off = fam::dq_accum_region(p, off, &out);
  if (p.deterministic) {
    out.off_dk_accum = off;
    off = fam::align256(off + static_cast<size_t>(rows) * static_cast<size_t>(p.heads_q) * sizeof(int));
  }
  // Block skipping (a mask_mod): the tile classes at this kernel's tile, transposed too, and the visiting lists.
  if (has_mask_mod(main.s.mods)) {
    const Family& f = *main.s.family;
    off = fam::plan_mask_blocks(main, p,
                                fam::BlockSkipping{main.t[kBlockM], main.t[kBlockN], f.knobs[kBlockM].values,
                                                   f.knobs[kBlockN].values, true, true},
                                off, &out);
  }
  fam::backward_plan_end(main, p, off, &out);
  return out;
}

// CTAs resident on one SM at launch l: shared memory (1 KB reserved per CTA), threads and, where ptxas reported
// them, registers (allocated per warp in units of 256).
int resident_ctas(const BindInput& in) {
  const int threads = static_cast<int>(in.launch.block);
  if (threads <= 0) return 1;
  int n = in.limits.max_threads_per_sm / threads;
  n = std::min<int>(n, (in.limits.max_smem_optin + 1024) / (static_cast<int>(in.launch.smem) + 1024));
  if (in.registers > 0) {
    const int per_warp = (in.registers * 32 + 255) / 256 * 256;
    n = std::min(n, 65536 / (per_warp * (threads / 32)));
  }
  return std::max(1, n);
}

// Causal or a mask_mod (fa_bwd_cta_order): the CTA order (bwd_cta_order.h), over the CTAs resident per SM.
bool bind(const KernelConfig& c, const BindInput& in, KernelParams* out, std::string* why) {
  FaBwdArgs a = *static_cast<const FaBwdArgs*>(in.args);
  const bool mask_mod = has_mask_mod(c.s.mods);
  if (fa_bwd_cta_order(c.s.mask, mask_mod, c.t[kBlockM], c.t[kBlockN]))
    fam::bind_bwd_cta_order(&a, in.launch.grid, in.limits.sm_count * resident_ctas(in), mask_mod);
  // (FaBwdArgs[, FaUser with user code]): the template's fa_kernel(args FA_USER_PARAM)
  if (c.s.mods != nullptr && in.user == nullptr)
    return fam::fail(why, "bwd_mma", "the user code's arguments (FaUser) are missing");
  if (out->add(&a, sizeof a, alignof(FaBwdArgs)) &&
      (c.s.mods == nullptr || out->add(in.user, sizeof(FaUser), alignof(FaUser))))
    return true;
  if (why) *why = "bwd_mma: kernel parameters do not fit";
  return false;
}

const Family kFamily{
    .name = "bwd_mma",
    .template_name = "bwd_mma.cuh",
    .role = Role::Backward,
    .priority = 10,
    .sinks = true,
    .knobs = {fam::block_m({16, 32, 64, 128}), fam::block_n({32, 64, 128}), fam::warps({4, 8}), fam::stages({1, 2})},
    .covers = &covers,
    .defaults = &defaults,
    .valid = &valid,
    .smem_bytes = &smem_bytes,
    .launch = &launch,
    .plan = &plan,
    .bind = &bind};

}  // namespace

FA_FAMILY_FOLDER(bwd_mma) { register_family(&kFamily); }

// Exposed for the sweep / tests.
int bwd_mma_reg_estimate(const KernelConfig& c);
int bwd_mma_reg_estimate(const KernelConfig& c) { return reg_estimate(c); }

}  // namespace fa::gen
