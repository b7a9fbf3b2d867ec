// bwd_pre.cpp -- host side of the backward preprocessing family (templates/bwd_pre.cuh): Delta = rowsum(O * dO)
// and clearing of the float32 dQ accumulators / deterministic semaphores. The CTA owns block_m rows of one (batch,
// query head); eight lanes per row (fp16/bf16, aligned rows), else a warp per row. Tunables: block_m in {32, 64,
// 128}, warps in {4, 8}; block_n unused (0).
#include <fmt/format.h>

#include "generator/family.h"

namespace fa::gen {

namespace {

std::vector<Tunables> space(const Semantic&) {
  std::vector<Tunables> v;
  for (int m : {32, 64, 128})
    for (int w : {4, 8}) v.push_back(Tunables{m, 0, w, 1, 0, 0});
  return v;
}

// 32 rows x 8 warps: one row group of four per warp, twice the CTAs of 64 x 4. H100, bf16, 16k tokens x hidden
// 2048, per call: d 128 115 -> 93 us, d 64 102 -> 93 us, d 256 122 -> 96 us (FA2's dot_do_o: 95 / 99.5 us at d 128
// / 64); the fastest of the 32/64/128 x 4/8 points at all three (64 x 8: 100 / 95 / 109 us).
Tunables defaults(const Semantic&) { return Tunables{32, 0, 8, 1, 0, 0}; }

bool valid(const KernelConfig& c, std::string* why) {
  const Tunables& t = c.t;
  auto fail = [&](std::string m) {
    if (why) *why = std::move(m);
    return false;
  };
  if (t.block_m != 32 && t.block_m != 64 && t.block_m != 128)
    return fail(fmt::format("block_m: expected 32, 64 or 128 for bwd_pre, got {}", t.block_m));
  if (t.block_n != 0) return fail(fmt::format("block_n: expected 0 (unused) for bwd_pre, got {}", t.block_n));
  if (t.warps != 4 && t.warps != 8) return fail(fmt::format("warps: expected 4 or 8 for bwd_pre, got {}", t.warps));
  if (t.stages != 1 || t.q_in_regs != 0 || t.extra != 0)
    return fail(fmt::format("stages/q_in_regs/extra: expected 1/0/0 for bwd_pre, got {}/{}/{}", t.stages,
                            t.q_in_regs, t.extra));
  return true;
}

unsigned smem_bytes(const KernelConfig&) { return 0; }

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  l.grid[0] = static_cast<unsigned>((sh.max_seqlen_q + c.t.block_m - 1) / c.t.block_m);
  l.grid[1] = static_cast<unsigned>(sh.heads_q);
  l.grid[2] = static_cast<unsigned>(sh.batch);
  l.block = static_cast<unsigned>(c.t.warps * 32);
  l.smem = 0;
  return l;
}

}  // namespace

extern const Family kBwdPreFamily;
const Family kBwdPreFamily = {Kind::BwdPre, "bwd_pre.cuh", &space, &defaults, &valid, &smem_bytes, &launch};

}  // namespace fa::gen
