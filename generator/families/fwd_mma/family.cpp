// fwd_mma -- host side of the tensor-core forward family (templates/fwd_mma.cuh), fp16/bf16 on sm_80+: knobs,
// per-arch defaults, the family's validity rules (tile shape, register pressure), shared-memory need and launch
// geometry.
//
// Knobs: block_m in {64, 128} query rows per CTA; block_n in {32, 64, 128} keys per iteration; warps in {4, 8}
// (each warp owns block_m / warps = 16 or 32 query rows); stages in {2, 3} K/V pipeline depth (1 is in the space
// but rejected: no prefetch, and ptxas spills in it); q_in_regs 1 keeps the Q fragments in registers for the whole
// CTA; kv_joint 0: K and V of a block are waited for separately (two barriers per block, Q K^T overlaps the V
// copy), 1: together (one barrier per block).
// Plan: with a mask_mod (fa_mods), [mask_blocks, fwd_mma] (block skipping; see plan() below), else the kernel alone.
#include <algorithm>
#include <string>
#include <vector>

#include "../common.h"
#include "generator/user_mods.h"
#include "templates/smem_layout.cuh"

namespace fa::gen {

namespace {

enum { kBlockM, kBlockN, kWarps, kStages, kQInRegs, kKvJoint };

int round16(int d) { return (d + 15) / 16 * 16; }

bool fail(std::string* why, const std::string& msg) { return fam::fail(why, "fwd_mma", msg); }

// Per-thread accumulator registers of a point: S tile + O tile (+ Q fragments when held in registers).
int live_regs(const KernelConfig& c) {
  const int mt = c.t[kBlockM] / (16 * c.t[kWarps]);
  const int s_regs = mt * (c.t[kBlockN] / 8) * 4;
  const int o_regs = mt * (round16(c.s.head_dim_v) / 8) * 4;
  const int q_regs = c.t[kQInRegs] != 0 ? mt * (round16(c.s.head_dim) / 16) * 4 : 0;
  return s_regs + o_regs + q_regs;
}

bool valid(const KernelConfig& c, std::string* why);

constexpr int kBlackwellBiasBudget = 96;  // live registers with a bias on sm_100 and later (valid())

// Default tiles per (shared memory per block, head-dim bucket). Sources: FA2's published tiles (shared/anchors.md:
// D32/64 128x128 4 warps; D96/128 128x64 4 warps; D192 128x64 8 warps; D256 64x64 4 warps on H100, 128x64 8 warps on
// A100) moved to points this kernel compiles without spills (valid()), then chosen by measurement on an H200
// (fp16, 16k tokens, hidden 2048; scratch/h2/NOTES.md): d64 128x64x4w s2 joint: 294-307 TFLOP/s (SDPA flash 288-300);
// d128 128x32x4w s3 joint: 328-338 (SDPA 333-349); d256 128x64x8w s2 joint: 277-293 (SDPA 304-309).
// Shared memory per block (registry.cpp: limits_for_arch): 227 KB on sm_90 and sm_100 / 103 (which take the H200's
// tiles, not measured there), 163 KB on sm_80, 99 KB on sm_86 / 89 and sm_120 / 121, so larger dims shrink below.
struct DefaultEntry {
  int smem_kb;  // applies where the arch's shared memory per block is at least this
  int dim_max;  // max(head_dim, head_dim_v) <= dim_max
  Tunables t;   // block_m, block_n, warps, stages, q_in_regs, extra
};
constexpr DefaultEntry kDefaults[] = {
    {227, 64, {128, 64, 4, 2, 0, 1}},   // measured H200: best of 128x64x4w / 128x{64,128}x8w
    {227, 128, {128, 32, 4, 3, 0, 1}},  // measured H200: best of 128x32x4w s2/s3, 128x{64,128}x8w
    {227, 192, {128, 64, 8, 2, 0, 1}},  // FA2 D192 tile (not measured here)
    {227, 256, {128, 64, 8, 2, 0, 1}},  // measured H200: beats 64x64x4w (FA2 H100 tile) by 30%
    {163, 64, {128, 64, 4, 2, 0, 1}},  {163, 128, {128, 32, 4, 3, 0, 1}}, {163, 192, {128, 64, 8, 2, 0, 1}},  // 154 KB
    {163, 256, {128, 32, 8, 2, 0, 1}},                                    // 135 KB (128x64x8w needs 203 KB)
    {99, 64, {128, 64, 4, 2, 0, 1}},   {99, 128, {128, 32, 4, 3, 0, 1}},  // 87 KB
    {99, 192, {64, 32, 4, 2, 0, 1}},                                      // 77 KB
    {99, 256, {64, 32, 4, 2, 0, 1}},                                      // 99 KB exactly
};

// FA2's own d128 tile, 128x64 / 4 warps / 2 stages, preferred for causal d128 on sm_90 where valid() admits it
// (where valid() rejects it, the table below applies). The template's kBigTile path (early P packing, conditional
// O rescale) fits it in 255 registers; valid() admits it on sm_90a with seqlen_k a multiple of 64 outside varlen
// (the variants ptxas compiles without spills, 2026-11-23); ragged keys and varlen fall back to the table.
// Measured H200 bf16, hidden 2048, 16k tokens, seqlen 2k..16k (scratch/h2c/NOTES.md), TFLOP/s: causal 280/303/316/327
// vs SDPA flash 267/294/312/316 (128x32x4w s3 in the same run: 258/279/294/304); non-causal (even keys) 338/347/354/354
// vs SDPA 319/337/342/347. FA2's d128 tile on sm_90a (measured H200 2026-11-22, scratch/h2c/NOTES.md: 1.01-1.05x SDPA
// flash causal, 1.02-1.06x without a mask when seqlen_k is a multiple of 64, against 0.90-0.95x for 128x32).
bool prefer_fa2_d128(const Semantic& s) {
  return s.arch == 90 && s.head_dim == 128 && s.head_dim_v == 128 &&
         (s.mask == kMaskCausal || (s.mask == kMaskNone && s.even_k)) && !s.has_bias && !s.has_alibi &&
         !s.has_softcap && !s.varlen && s.mods == nullptr;
}

Tunables defaults(const Semantic& s) {
  if (prefer_fa2_d128(s)) {
    const KernelConfig fa2{s, Tunables{{128, 64, 4, 2, 0, 1}}};
    if (valid(fa2, nullptr)) return fa2.t;
  }
  const int dim = std::max(s.head_dim, s.head_dim_v);
  const int smem = limits_for_arch(s.arch).max_smem_optin;
  Tunables t{{64, 32, 4, 2, 0, 1}};  // fits everywhere (<= 99 KB)
  for (const DefaultEntry& e : kDefaults) {
    if (smem >= e.smem_kb * 1024 && dim <= e.dim_max) {
      t = e.t;
      break;
    }
  }
  // Feature / varlen kernels have a smaller register budget (valid()): 16 rows per warp, then 32-key blocks.
  KernelConfig c{s, t};
  if (!valid(c, nullptr)) { c.t[kWarps] = c.t[kBlockM] / 16; }
  if (!valid(c, nullptr)) { c.t[kBlockN] = 32; }
  if (!valid(c, nullptr)) { c.t = Tunables{{64, 32, 4, 2, 0, 1}}; }
  return c.t;
}

bool valid(const KernelConfig& c, std::string* why) {
  const Semantic& s = c.s;
  const Tunables& t = c.t;
  if (s.dtype != kFp16 && s.dtype != kBf16) return fail(why, "dtype must be fp16 or bf16");
  if (s.head_dim > kMaxHeadDimFast || s.head_dim_v > kMaxHeadDimFast)
    return fail(why, "head dims up to " + std::to_string(kMaxHeadDimFast));
  const int rows_per_warp = t[kBlockM] / t[kWarps];
  if (rows_per_warp != 16 && rows_per_warp != 32)
    return fail(why, "block_m / warps must be 16 or 32, got " + std::to_string(rows_per_warp));
  // One stage gains nothing over two and ptxas spills a few bytes in it at some points (compile sweep).
  if (t[kStages] == 1) return fail(why, "stages 1 is not supported (spills); use 2 or 3");
  // Register pressure, measured with ptxas -v over the space (scratch/h2/compile_sweep.sh): the S tile costs more
  // than its size (masking, exp2 and K fragments live beside it), so it is capped on its own; the feature path
  // (bias / alibi / softcap), varlen indexing and user code (fa_mods: the sampled points past this budget spilled
  // 16-136 bytes with a document mask and a score_mod, 2026-11-25) need a little more room.
  const int mt = t[kBlockM] / (16 * t[kWarps]);
  const int s_regs = mt * (t[kBlockN] / 8) * 4;
  // A mask_mod alone runs in the masking step (as the built-in masks do; full blocks skip it): it keeps the plain
  // accumulator budget, its S tile held to 32 registers (ptxas -v over the sweep's document mask, 2026-11-25).
  const bool score_code = has_score_mod(s.mods);
  const bool mask_only = s.mods != nullptr && !score_code;
  const bool feat = s.has_bias || s.has_alibi || s.has_softcap || s.varlen || score_code;
  // An additive bias is loaded beside every S element: with 64-key blocks the bias path exceeds 255 registers at
  // large head dims (compile sweep with explicit occupancy, 2026-11-22), so it is held to 32-key blocks per 16 rows.
  const int s_budget = s.has_bias ? 16 : feat || mask_only ? 32 : 64;
  if (s_regs > s_budget) {
    return fail(why,
                "register pressure: S tile of " + std::to_string(s_regs) + " registers > " + std::to_string(s_budget));
  }
  const int budget = feat ? 144 : 160;
  const int live = live_regs(c);
  // Blackwell (sm_100 and later): ptxas holds the bias path in 30-50 more registers than for sm_90a (the smallest
  // tile at d 136: 202 against 168). ptxas -v over the bias points (16 rows per warp, 32 keys; fp16 and bf16, masks
  // none / causal / window, stages 2-3, kv_joint 0-1, Q in registers or not, varlen; alone and beside ALiBi; sm_100
  // and sm_120, NVRTC 13.0, 2026-11-29): spill-free up to 96 live registers (head_dim_v 160); from 104 (head_dim_v
  // 168, causal with 3 stages or varlen) 4-88 bytes of spills at most points up to head_dim_v 240. ALiBi and softcap
  // without a bias stayed clean. Past it, bias problems run the reference kernel there (covers()).
  if (s.has_bias && s.arch >= 100 && live > kBlackwellBiasBudget) {
    return fail(why, "register pressure with a bias on sm_" + std::to_string(s.arch) + ": " + std::to_string(live) +
                         " accumulator registers per thread > " + std::to_string(kBlackwellBiasBudget) +
                         " (Blackwell's ptxas spills past it)");
  }
  // FA2's own d128 tile (128x64, 4 warps, Q in shared memory) runs on the template's big-tile path (early P
  // packing, conditional rescale) in 254-255 registers. ptxas -v over its variants (2026-11-23, swizzled rows;
  // masks none / causal / window, stages 2-3, kv_joint 0-1, fp16 / bf16, with and without LSE): spill-free on sm_90a
  // when seqlen_k is a multiple of 64 and the problem is not varlen. Ragged keys and varlen spill 4-56 bytes there,
  // and sm_80 spills 8-48 bytes with a mask (the rule of 2026-11-22 admitted masked ragged / varlen variants that
  // spilled 12-100 bytes), so everywhere else it stays outside the budget. sm_100 / 103 (2026-11-29, even keys, fp16)
  // spill 12 bytes with a causal or window mask at 2 stages: the tile is sm_90's alone.
  const bool fa2_d128_tile = s.head_dim == 128 && s.head_dim_v == 128 && t[kBlockM] == 128 && t[kBlockN] == 64 &&
                             t[kWarps] == 4 && t[kQInRegs] == 0 && !feat && !mask_only && s.arch == 90 && s.even_k &&
                             !s.varlen;
  if (live > budget && !fa2_d128_tile) {
    return fail(why, "register pressure: " + std::to_string(live) + " accumulator registers per thread > " +
                         std::to_string(budget));
  }
  // A score_mod (user code on every S element) spills well inside that budget. ptxas -v over every valid point with
  // the sweep's relative-bias score_mod, alone and beside its document mask (sm_80 and sm_90a, bf16, causal, head
  // dims 64-256, with and without varlen and ALiBi; 4192 kernels, 2026-11-25): with Q in shared memory 9-99% of the
  // points at 88-144 live registers spilled and none at <= 80; with Q in registers none at <= 116 and 20-88% above.
  // The smallest tile (16 rows per warp, 32 keys, Q in shared memory) stays, so that head dims past 128 keep a
  // tensor-core kernel: spill-free with a score_mod alone, it spills at head dims >= 136 beside a mask_mod (still
  // far ahead of the reference kernel).
  if (score_code) {
    const bool smallest = mt == 1 && t[kBlockN] == 32 && t[kQInRegs] == 0;
    const int score_budget = t[kQInRegs] != 0 ? 116 : 80;
    if (live > score_budget && !smallest)
      return fail(why, "register pressure with a score_mod: " + std::to_string(live) +
                           " accumulator registers per thread > " + std::to_string(score_budget) +
                           (t[kQInRegs] != 0 ? " (Q in registers)" : " (Q in shared memory)") +
                           "; the smallest tile (16 rows per warp, 32 keys) is always allowed");
  }
  return true;
}

unsigned smem_bytes(const KernelConfig& c) {
  const int dp = round16(c.s.head_dim), dvp = round16(c.s.head_dim_v);
  const int bm = c.t[kBlockM], bn = c.t[kBlockN];
  // Q / O staging region, then the K and V slots (row pitches: templates/smem_layout.cuh; O staging is padded)
  const int region0 = std::max(bm * fa_smem_pitch(dp), bm * (dvp + 8)) * 2;
  const int kv = c.t[kStages] * bn * (fa_smem_pitch(dp) + fa_smem_pitch(dvp)) * 2;
  return static_cast<unsigned>(region0 + kv);
}

Launch launch(const KernelConfig& c, const LaunchShape& shape) {
  return fam::rows_launch(shape.max_seqlen_q, c.t[kBlockM], shape.heads_q, shape.batch, c.t[kWarps], smem_bytes(c));
}

bool covers(const ProblemDesc& p, int arch, std::string* why) {
  if (p.dtype != kFp16 && p.dtype != kBf16) return fail(why, "dtype must be fp16 or bf16");
  if (arch < 80) return fail(why, "needs sm_80 or newer, device is sm_" + std::to_string(arch));
  if (!p.aligned16) return fail(why, "pointers or strides not 16-byte aligned");
  if (!fam::contiguous_kv_fast_dims(p, "fwd_mma", why)) return false;
  // A tile that compiles without spills (defaults() ends at the smallest; a bias past Blackwell's budget has none)
  const Semantic s = semantic_for(*find_family("fwd_mma"), p, arch);
  std::string reason;
  if (!valid(KernelConfig{s, defaults(s)}, why ? &reason : nullptr))
    return fail(why, "no tile for these head dims and features: " + reason);
  return true;
}

// With a mask_mod (fa_mods): [mask_blocks at this block_m x block_n, fwd_mma] over the classes and the per-CTA
// visiting lists (common.h: block_sparse_plan); without: the plan of one.
Plan plan(const KernelConfig& main, const ProblemDesc& p) {
  const Family& f = *main.s.family;
  return fam::block_sparse_plan(main, p,
                                fam::BlockSkipping{main.t[kBlockM], main.t[kBlockN], f.knobs[kBlockM].values,
                                                   f.knobs[kBlockN].values, false, true});
}

// even_k: fixed-length and seqlen_k a multiple of block_n (no key-boundary predicates).
void finalize(KernelConfig* c, const ProblemDesc& p) {
  c->s.even_k = !p.varlen && c->t[kBlockN] > 0 && p.seqlen_k % c->t[kBlockN] == 0;
}

const Family kFamily{
    .name = "fwd_mma",
    .template_name = "fwd_mma.cuh",
    .role = Role::Forward,
    .priority = 10,
    .sinks = true,
    .knobs = {fam::block_m({64, 128}), fam::block_n({32, 64, 128}), fam::warps({4, 8}), fam::stages({1, 2, 3}),
              Knob{"q_in_regs", "qr", "kQInRegs", {0, 1}, true}, Knob{"kv_joint", "kj", "kKvJoint", {0, 1}, true}},
    .legacy_x = "kv_joint",
    .covers = &covers,
    .defaults = &defaults,
    .valid = &valid,
    .smem_bytes = &smem_bytes,
    .launch = &launch,
    .finalize = &finalize,
    .plan = &plan};

}  // namespace

FA_FAMILY_FOLDER(fwd_mma) { register_family(&kFamily); }

}  // namespace fa::gen
