// bwd_mma.cpp -- host side of the tensor-core backward family (templates/bwd_mma.cuh): fp16/bf16 on sm_80+.
// Grid: (key blocks of block_n, kv heads, batch); each CTA loops over its GQA group's query heads and the query
// blocks (block_m) that meet the mask band. Tunables: block_m, block_n, warps, stages (1 or 2: Q/dO double
// buffering); q_in_regs and extra must be 0. `valid` mirrors the template's static tiling rules and bounds a
// register estimate (float32 accumulators per thread) so that every accepted point compiles without spills. The
// bound holds because the template pins ptxas's register policy (explicit minBlocksPerSM = 1, reduction loops
// unrolled by 2): ptxas then uses registers in proportion to the accumulator tiles, and the NVRTC sweep in
// scratch/h4b/sweep.cpp (sm_80 and sm_90a, all-features and no-features variants) found no spill at any point
// with an estimate <= kBwdMmaRegBudget. Head dims with no accepted point (above 192) use the reference pipeline.
#include <algorithm>

#include <fmt/format.h>

#include "generator/family.h"

namespace fa::gen {

namespace {

// Upper bound of reg_estimate() (calibrated against ptxas -v: see scratch/h4b/sweep.cpp and sweep_notes.md).
constexpr int kBwdMmaRegBudget = 110;

struct Tiling {
  int wk, wq1, mt1, nt1, wd2, ntk, ntv, wq3, mt3, nt3;
};

Tiling tiling(const KernelConfig& c) {
  const int bm = c.t.block_m, bn = c.t.block_n, w = std::max(1, c.t.warps);
  Tiling t{};
  t.wk = std::max(1, std::min(w, bn / 16));
  t.wq1 = w / t.wk;
  t.mt1 = bn / 16 / t.wk;
  t.nt1 = t.wq1 > 0 ? bm / t.wq1 / 8 : 0;
  t.wd2 = w / t.wk;
  t.ntk = t.wd2 > 0 ? (c.s.head_dim / 8 + t.wd2 - 1) / t.wd2 : 0;
  t.ntv = t.wd2 > 0 ? (c.s.head_dim_v / 8 + t.wd2 - 1) / t.wd2 : 0;
  t.wq3 = std::max(1, std::min(w, bm / 16));
  t.mt3 = bm / 16 / t.wq3;
  t.nt3 = (c.s.head_dim / 8 + (w / t.wq3) - 1) / std::max(1, w / t.wq3);
  return t;
}

// float32 registers live per thread: the dK/dV accumulators for the whole CTA life, plus the larger of the GEMM 1
// tile (S^T and dP^T) and the GEMM 3 tile (dQ').
int reg_estimate(const KernelConfig& c) {
  const Tiling t = tiling(c);
  const int persistent = t.mt1 * (t.ntk + t.ntv) * 4;
  const int g1 = t.mt1 * t.nt1 * 8 + t.mt1 * 4 + 4;
  const int g3 = t.mt3 * t.nt3 * 4 + t.mt3 * 4;
  return persistent + std::max(g1, g3);
}

std::vector<Tunables> space(const Semantic&) {
  std::vector<Tunables> v;
  for (int bm : {16, 32, 64, 128})
    for (int bn : {32, 64, 128})
      for (int w : {2, 4, 8})
        for (int st : {1, 2}) v.push_back(Tunables{bm, bn, w, st, 0, 0});
  return v;
}

bool valid(const KernelConfig& c, std::string* why);
unsigned smem_bytes(const KernelConfig& c);

Tunables defaults(const Semantic& s) {
  const int d = std::max(s.head_dim, s.head_dim_v);
  std::vector<Tunables> prefs;
  if (d <= 64) prefs = {{64, 128, 8, 2, 0, 0}, {64, 64, 4, 2, 0, 0}};
  else if (d <= 128) prefs = {{64, 128, 8, 2, 0, 0}, {64, 64, 8, 2, 0, 0}, {64, 64, 4, 2, 0, 0}};
  else prefs = {{64, 64, 8, 1, 0, 0}, {64, 32, 8, 1, 0, 0}, {32, 32, 4, 1, 0, 0}};
  // Then every point of the space, largest tiles first.
  std::vector<Tunables> rest = space(s);
  std::stable_sort(rest.begin(), rest.end(), [](const Tunables& x, const Tunables& y) {
    return x.block_m * x.block_n * x.warps > y.block_m * y.block_n * y.warps;
  });
  prefs.insert(prefs.end(), rest.begin(), rest.end());
  const DeviceLimits lim = limits_for_arch(s.arch);
  for (const Tunables& t : prefs) {
    KernelConfig c{s, t};
    if (valid(c, nullptr) && smem_bytes(c) <= static_cast<unsigned>(lim.max_smem_optin)) return t;
  }
  return Tunables{32, 32, 2, 1, 0, 0};  // est 2*(D+DV)/4 + ... : reached only if the budget is lowered
}

bool valid(const KernelConfig& c, std::string* why) {
  const Tunables& t = c.t;
  auto fail = [&](std::string m) {
    if (why) *why = std::move(m);
    return false;
  };
  if (c.s.dtype != kFp16 && c.s.dtype != kBf16)
    return fail(fmt::format("dtype: expected fp16 or bf16 for bwd_mma, got {}", dtype_name(c.s.dtype)));
  if (c.s.arch < 80) return fail(fmt::format("arch: expected >= 80 for bwd_mma, got {}", c.s.arch));
  if (t.block_m < 16 || t.block_m > 128 || t.block_m % 16 != 0)
    return fail(fmt::format("block_m: expected a multiple of 16 in [16, 128] for bwd_mma, got {}", t.block_m));
  if (t.block_n < 16 || t.block_n > 128 || t.block_n % 16 != 0)
    return fail(fmt::format("block_n: expected a multiple of 16 in [16, 128] for bwd_mma, got {}", t.block_n));
  if (t.warps != 2 && t.warps != 4 && t.warps != 8)
    return fail(fmt::format("warps: expected 2, 4 or 8 for bwd_mma, got {}", t.warps));
  if (t.stages != 1 && t.stages != 2) return fail(fmt::format("stages: expected 1 or 2 for bwd_mma, got {}", t.stages));
  if (t.q_in_regs != 0 || t.extra != 0)
    return fail(fmt::format("q_in_regs/extra: expected 0/0 for bwd_mma, got {}/{}", t.q_in_regs, t.extra));
  const Tiling tl = tiling(c);
  if (t.warps % tl.wk != 0)
    return fail(fmt::format("warps: {} not a multiple of the key strips {} (block_n {})", t.warps, tl.wk, t.block_n));
  if (t.block_m % (16 * tl.wq1) != 0)
    return fail(fmt::format("block_m: expected a multiple of {} (16 x query warps) for bwd_mma, got {}", 16 * tl.wq1,
                            t.block_m));
  if (t.warps % tl.wq3 != 0)
    return fail(fmt::format("warps: {} not a multiple of the dQ query strips {} (block_m {})", t.warps, tl.wq3, t.block_m));
  const int regs = reg_estimate(c);
  if (regs > kBwdMmaRegBudget)
    return fail(fmt::format("registers: estimated {} float32 accumulators per thread, expected <= {} (no spills)", regs,
                            kBwdMmaRegBudget));
  return true;
}

unsigned smem_bytes(const KernelConfig& c) {
  const int bm = c.t.block_m, bn = c.t.block_n, ns = std::max(1, c.t.stages);
  const int dp = (c.s.head_dim + 15) / 16 * 16, dvp = (c.s.head_dim_v + 15) / 16 * 16;
  const int halves = bn * (dp + 8) + bn * (dvp + 8) + ns * bm * (dp + 8) + ns * bm * (dvp + 8) + 2 * bn * (bm + 8);
  return static_cast<unsigned>(halves * 2 + ns * bm * 8);
}

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  l.grid[0] = static_cast<unsigned>((sh.max_seqlen_k + c.t.block_n - 1) / c.t.block_n);
  l.grid[1] = static_cast<unsigned>(sh.heads_kv);
  l.grid[2] = static_cast<unsigned>(sh.batch);
  l.block = static_cast<unsigned>(c.t.warps * 32);
  l.smem = smem_bytes(c);
  return l;
}

}  // namespace

extern const Family kBwdMmaFamily;
const Family kBwdMmaFamily = {Kind::BwdMma, "bwd_mma.cuh", &space, &defaults, &valid, &smem_bytes, &launch};

// Exposed for the sweep / tests.
int bwd_mma_reg_estimate(const KernelConfig& c);
int bwd_mma_reg_estimate(const KernelConfig& c) { return reg_estimate(c); }

}  // namespace fa::gen
