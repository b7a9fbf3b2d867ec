// bwd_post.cpp -- host side of the backward epilogue family (templates/bwd_post.cuh): dq = scale * dq_accum
// converted to the dtype. The CTA owns block_m rows of one (batch, query head): 16-byte items of 8 columns
// (aligned dq rows), else one warp per row.
// Tunables: block_m in {32, 64, 128}, warps in {4, 8}; block_n unused (0).
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

// 32 rows x 8 warps. H100, bf16, 16k tokens x hidden 2048, per call, with the 16-byte path: d 128 82 -> 70 us,
// d 64 79 -> 69 us, d 256 87 -> 78 us against the old scalar path at 64 x 4 (FA2's convert_dq: 77.5 / 79.6 us at
// d 128 / 64); 64 x 8 and 32 x 4 read within 3 us of it, 64 x 4 and 128 x 4 7 and 20 us slower at d 256.
Tunables defaults(const Semantic&) { return Tunables{32, 0, 8, 1, 0, 0}; }

bool valid(const KernelConfig& c, std::string* why) {
  const Tunables& t = c.t;
  auto fail = [&](std::string m) {
    if (why) *why = std::move(m);
    return false;
  };
  if (t.block_m != 32 && t.block_m != 64 && t.block_m != 128)
    return fail(fmt::format("block_m: expected 32, 64 or 128 for bwd_post, got {}", t.block_m));
  if (t.block_n != 0) return fail(fmt::format("block_n: expected 0 (unused) for bwd_post, got {}", t.block_n));
  if (t.warps != 4 && t.warps != 8) return fail(fmt::format("warps: expected 4 or 8 for bwd_post, got {}", t.warps));
  if (t.stages != 1 || t.q_in_regs != 0 || t.extra != 0)
    return fail(fmt::format("stages/q_in_regs/extra: expected 1/0/0 for bwd_post, got {}/{}/{}", t.stages,
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

extern const Family kBwdPostFamily;
const Family kBwdPostFamily = {Kind::BwdPost, "bwd_post.cuh", &space, &defaults, &valid, &smem_bytes, &launch};

}  // namespace fa::gen
