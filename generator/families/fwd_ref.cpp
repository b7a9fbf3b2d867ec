// fwd_ref.cpp -- host side of the reference forward family (templates/fwd_ref.cuh): one warp per query row,
// 32 keys per step. Its only tunable is the number of warps (= query rows) per CTA.
#include <fmt/format.h>

#include "generator/family.h"

namespace fa::gen {

namespace {

std::vector<Tunables> space(const Semantic&) {
  std::vector<Tunables> v;
  for (int w : {2, 4, 8}) v.push_back(Tunables{w, 32, w, 1, 0, 0});
  return v;
}

Tunables defaults(const Semantic&) { return Tunables{8, 32, 8, 1, 0, 0}; }

bool valid(const KernelConfig& c, std::string* why) {
  const Tunables& t = c.t;
  auto fail = [&](std::string m) {
    if (why) *why = std::move(m);
    return false;
  };
  if (t.block_m != t.warps) return fail(fmt::format("block_m: expected warps ({}) for fwd_ref, got {}", t.warps, t.block_m));
  if (t.block_n != 32) return fail(fmt::format("block_n: expected 32 for fwd_ref, got {}", t.block_n));
  if (t.warps != 2 && t.warps != 4 && t.warps != 8) return fail(fmt::format("warps: expected 2, 4 or 8 for fwd_ref, got {}", t.warps));
  if (t.stages != 1 || t.q_in_regs != 0 || t.extra != 0)
    return fail(fmt::format("stages/q_in_regs/extra: expected 1/0/0 for fwd_ref, got {}/{}/{}", t.stages, t.q_in_regs, t.extra));
  return true;
}

unsigned smem_bytes(const KernelConfig& c) { return static_cast<unsigned>(c.t.warps * c.s.head_dim * 4); }

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  l.grid[0] = static_cast<unsigned>((sh.max_seqlen_q + c.t.warps - 1) / c.t.warps);
  l.grid[1] = static_cast<unsigned>(sh.heads_q);
  l.grid[2] = static_cast<unsigned>(sh.batch);
  l.block = static_cast<unsigned>(c.t.warps * 32);
  l.smem = smem_bytes(c);
  return l;
}

}  // namespace

extern const Family kFwdRefFamily;
const Family kFwdRefFamily = {Kind::FwdRef, "fwd_ref.cuh", &space, &defaults, &valid, &smem_bytes, &launch};

}  // namespace fa::gen
