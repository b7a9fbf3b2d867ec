// bwd_wgmma -- host side of the Hopper backward (templates/bwd_wgmma.cuh), sm_90a, fp16/bf16: a producer warp loads
// K / V once and Q / dO per query block by TMA into 128-byte-swizzled shared memory, consumer warpgroups of 64 keys
// each run the five GEMMs with wgmma (dK, dV in registers; dQ' added into the float32 accumulator). Chosen before
// bwd_mma on sm_90 where it covers the problem: head dims 64 or 128 (d == dv), fixed length, no bias / ALiBi /
// softcap (user code runs: a mask_mod with block skipping, a score_mod with its derivative), the non-deterministic
// mode, q / k / v / dO describable as TMA tensors; elsewhere bwd_mma serves.
// Knobs: consumers in {1, 2} (block_n = 64 * consumers keys per CTA; block_m is 64 queries), stages in {2, 3} (the
// Q / dO ring), dq_cols (dQ' split over the consumers by head-dim columns, else by keys).
// Plan: bwd_pre -> [mask_blocks ->] bwd_wgmma -> bwd_post over bwd_mma's workspace (Delta, the 8 x 8 tiled float32
// dq_accum: fam::dq_accum_region; with a mask_mod the tile classes at 64 x block_n, transposed too).
// Binding: FaBwdArgs (causal or a mask_mod: bwd_mma's CTA-order fields, bwd_cta_order.h), FaUser (user code only),
// then FaBwdTma (templates/fa_tma_args.cuh): four 4D tensor maps, box (64, rows, 1, 1) with 64 rows for Q / dO
// and block_n rows for K / V.
#include <fmt/format.h>

#include "../bwd_cta_order.h"
#include "../common.h"
#include "templates/bwd_mma_tiling.cuh"
#include "templates/fa_args.cuh"
#include "templates/fa_tma_args.cuh"

namespace fa::gen {

namespace {

enum { kConsumers, kStages, kDqCols };

constexpr int kSmemLimit = 232448;  // 227 KB, the sm_90 opt-in maximum (the template's static_assert)

bool fail(std::string* why, const std::string& msg) { return fam::fail(why, "bwd_wgmma", msg); }

bool head_dims_ok(int d, int dv) { return d == dv && (d == 64 || d == 128); }

// The template's shared-memory formula (bwd_wgmma.cuh): K, V, the Q / dO ring, two dS^T buffers, LSE / Delta per
// slot, barriers, 1 KB of alignment slack.
unsigned smem_bytes(const KernelConfig& c) {
  const int d = c.s.head_dim, bn = 64 * c.t[kConsumers], st = c.t[kStages];
  return static_cast<unsigned>(2 * bn * d * 2 + 2 * st * 64 * d * 2 + 2 * bn * 64 * 2 + 2 * st * 64 * 4 +
                               8 * (1 + 2 * st) + 1024);
}

bool valid(const KernelConfig& c, std::string* why) {
  const Semantic& s = c.s;
  if (s.dtype != kFp16 && s.dtype != kBf16) return fail(why, "dtype must be fp16 or bf16");
  if (!head_dims_ok(s.head_dim, s.head_dim_v))
    return fail(why, fmt::format("head dims: expected 64 / 64 or 128 / 128, got {} / {}", s.head_dim, s.head_dim_v));
  if (s.has_bias || s.has_alibi || s.has_softcap) return fail(why, "bias, ALiBi and softcap are bwd_mma's");
  if (s.varlen || s.paged) return fail(why, "fixed-length, contiguous problems only");
  // dq_cols: with one consumer every column is its own (one point: dq_cols 1); with two at head dim 128 the split by
  // keys gives each consumer 128 dQ' columns, which ptxas serializes like one consumer (below).
  if (c.t[kConsumers] == 1 && c.t[kDqCols] == 0) return fail(why, "1 consumer: dq_cols must be 1 (every column)");
  if (c.t[kConsumers] == 2 && c.t[kDqCols] == 0 && s.head_dim == 128)
    return fail(why,
                "2 consumers at head dim 128 split dQ' by columns (dq_cols 1): by keys ptxas serializes the wgmmas");
  // One consumer at head dim 128 computes dQ' over all 128 columns (64 more accumulators beside dK / dV): ptxas
  // serializes its wgmmas for want of registers (C7512, NVRTC 13, every mask and dtype; `fa_compile_sweep --full`).
  if (c.t[kConsumers] == 1 && s.head_dim == 128)
    return fail(why, "1 consumer at head dim 128: ptxas serializes the wgmmas (registers); use 2 consumers");
  if (smem_bytes(c) > static_cast<unsigned>(kSmemLimit))
    return fail(why, fmt::format("shared memory {} bytes, expected <= {}", smem_bytes(c), kSmemLimit));
  return true;
}

// Measured on an H200 (bf16, 16k tokens, hidden 2048, 2k-8k, causal and not; bench/results/h200_bwd_family_probe.json):
// 2 consumers, 2 stages; dQ' split by columns at head dim 128 (the only valid split there), by keys at 64 (the
// 32-column split ran 0.93x / 0.91x of it at 8k, full / causal; 3 stages no better).
Tunables defaults(const Semantic& s) { return Tunables{{2, 2, s.head_dim == 128 ? 1 : 0}}; }

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  const int bn = 64 * c.t[kConsumers];
  Launch l;
  l.grid[0] = static_cast<unsigned>((sh.max_seqlen_k + bn - 1) / bn);
  l.grid[1] = static_cast<unsigned>(sh.heads_kv);
  l.grid[2] = static_cast<unsigned>(sh.batch);
  l.block = static_cast<unsigned>(128 * (c.t[kConsumers] + 1));
  l.smem = smem_bytes(c);
  return l;
}

bool covers(const ProblemDesc& p, int, std::string* why) {
  if (p.dtype != kFp16 && p.dtype != kBf16) return fail(why, "dtype must be fp16 or bf16");
  if (!head_dims_ok(p.head_dim, p.head_dim_v))
    return fail(why, fmt::format("head dims 64 or 128 (d == dv), got {} / {}", p.head_dim, p.head_dim_v));
  if (p.has_bias || p.has_alibi || p.has_softcap) return fail(why, "bias, ALiBi and softcap run in bwd_mma");
  if (p.varlen) return fail(why, "fixed-length problems only (varlen runs in bwd_mma)");
  if (p.deterministic) return fail(why, "the deterministic mode runs in bwd_mma");
  if (!p.tma_ok)
    return fail(why, "q/k/v/dout are not TMA tensors (16-byte aligned pointers and strides, positive strides)");
  return fam::contiguous_kv_fast_dims(p, "bwd_wgmma", why);
}

Plan plan(const KernelConfig& main, const ProblemDesc& p) {
  Plan out;
  size_t off = fam::backward_plan_start(p, main.s.arch, &out);
  off = fam::dq_accum_region(p, off, &out);
  // A mask_mod: mask_blocks' classes at this kernel's 64 x block_n tile, transposed (the CTA walks its key block's
  // column; common/hopper_bwd_sched.cuh: FaBwdSched::for_each), no lists.
  if (has_mask_mod(main.s.mods)) {
    const Family& f = *main.s.family;
    std::vector<int> block_ns;
    for (int c : f.knobs[kConsumers].values) block_ns.push_back(64 * c);
    off = fam::plan_mask_blocks(main, p, fam::BlockSkipping{64, 64 * main.t[kConsumers], {64}, block_ns, true, false},
                                off, &out);
  }
  fam::backward_plan_end(main, p, off, &out);
  return out;
}

// Causal or a mask_mod: the CTA order of bwd_mma (bwd_cta_order.h), one CTA per SM.
bool bind(const KernelConfig& c, const BindInput& in, KernelParams* out, std::string* why) {
  FaBwdArgs a = *static_cast<const FaBwdArgs*>(in.args);
  const bool mask_mod = has_mask_mod(c.s.mods);
  if (c.s.mask == kMaskCausal || mask_mod) fam::bind_bwd_cta_order(&a, in.launch.grid, in.limits.sm_count, mask_mod);
  const FaFwdArgs& f = a.f;
  const int bn = 64 * c.t[kConsumers], d = c.s.head_dim;
  FaBwdTma tma{};
  const TensorMapDesc maps[4] = {
      fam::tma_map_4d(c.s.dtype, f.q, d, f.seqlen_q, f.heads_q, f.batch, f.q_ss, f.q_sh, f.q_sb, 64),
      fam::tma_map_4d(c.s.dtype, f.k, d, f.seqlen_k, f.heads_kv, f.batch, f.k_ss, f.k_sh, f.k_sb, bn),
      fam::tma_map_4d(c.s.dtype, f.v, d, f.seqlen_k, f.heads_kv, f.batch, f.v_ss, f.v_sh, f.v_sb, bn),
      fam::tma_map_4d(c.s.dtype, a.dout, d, f.seqlen_q, f.heads_q, f.batch, a.do_ss, a.do_sh, a.do_sb, 64)};
  void* const dst[4] = {&tma.q, &tma.k, &tma.v, &tma.dout};
  if (!fam::encode_tensor_maps(in, maps, dst, 4, "bwd_wgmma", why)) return false;
  // (FaBwdArgs[, FaUser with user code], FaBwdTma): the template's fa_kernel(args FA_USER_PARAM, tma)
  if (c.s.mods != nullptr && in.user == nullptr) return fail(why, "the user code's arguments (FaUser) are missing");
  if (out->add(&a, sizeof a, alignof(FaBwdArgs)) &&
      (c.s.mods == nullptr || out->add(in.user, sizeof(FaUser), alignof(FaUser))) &&
      out->add(&tma, sizeof tma, alignof(FaBwdTma)))
    return true;
  return fail(why, "kernel parameters do not fit");
}

const Family kFamily{.name = "bwd_wgmma",
                     .template_name = "bwd_wgmma.cuh",
                     .role = Role::Backward,
                     .arch_min = 90,
                     .arch_max = 90,
                     .priority = 20,
                     .sinks = true,
                     .knobs = {Knob{"consumers", "c", "kConsumers", {1, 2}}, fam::stages({2, 3}),
                               Knob{"dq_cols", "q", "kDqCols", {0, 1}, true}},
                     .covers = &covers,
                     .defaults = &defaults,
                     .valid = &valid,
                     .smem_bytes = &smem_bytes,
                     .launch = &launch,
                     .plan = &plan,
                     .bind = &bind};

}  // namespace

FA_FAMILY_FOLDER(bwd_wgmma) { register_family(&kFamily); }

}  // namespace fa::gen
