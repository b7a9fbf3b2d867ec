// bwd_ref.cpp -- host side of the reference backward families (templates/bwd_ref.cuh): BwdRefDq (one warp per
// query row, grid over query heads) and BwdRefDkDv (one warp per key row, grid over kv heads, summing the GQA
// group). Their only tunable is the number of warps (= rows) per CTA; block_m == warps, block_n == 1.
#include <fmt/format.h>

#include "generator/family.h"

namespace fa::gen {

namespace {

std::vector<Tunables> space(const Semantic&) {
  std::vector<Tunables> v;
  for (int w : {2, 4, 8}) v.push_back(Tunables{w, 1, w, 1, 0, 0});
  return v;
}

Tunables defaults(const Semantic&) { return Tunables{4, 1, 4, 1, 0, 0}; }

bool valid(const KernelConfig& c, std::string* why) {
  const Tunables& t = c.t;
  auto fail = [&](std::string m) {
    if (why) *why = std::move(m);
    return false;
  };
  if (t.warps != 2 && t.warps != 4 && t.warps != 8)
    return fail(fmt::format("warps: expected 2, 4 or 8 for bwd_ref, got {}", t.warps));
  if (t.block_m != t.warps) return fail(fmt::format("block_m: expected warps ({}) for bwd_ref, got {}", t.warps, t.block_m));
  if (t.block_n != 1) return fail(fmt::format("block_n: expected 1 for bwd_ref, got {}", t.block_n));
  if (t.stages != 1 || t.q_in_regs != 0 || t.extra != 0)
    return fail(fmt::format("stages/q_in_regs/extra: expected 1/0/0 for bwd_ref, got {}/{}/{}", t.stages,
                            t.q_in_regs, t.extra));
  return true;
}

unsigned smem_bytes(const KernelConfig&) { return 0; }

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  const bool dq = c.s.kind == Kind::BwdRefDq;
  const int rows = dq ? sh.max_seqlen_q : sh.max_seqlen_k;
  l.grid[0] = static_cast<unsigned>((rows + c.t.warps - 1) / c.t.warps);
  l.grid[1] = static_cast<unsigned>(dq ? sh.heads_q : sh.heads_kv);
  l.grid[2] = static_cast<unsigned>(sh.batch);
  l.block = static_cast<unsigned>(c.t.warps * 32);
  l.smem = 0;
  return l;
}

}  // namespace

extern const Family kBwdRefDqFamily;
extern const Family kBwdRefDkDvFamily;
const Family kBwdRefDqFamily = {Kind::BwdRefDq, "bwd_ref.cuh", &space, &defaults, &valid, &smem_bytes, &launch};
const Family kBwdRefDkDvFamily = {Kind::BwdRefDkDv, "bwd_ref.cuh", &space, &defaults, &valid, &smem_bytes, &launch};

}  // namespace fa::gen
