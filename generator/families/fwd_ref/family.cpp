// fwd_ref -- host side of the reference forward (templates/fwd_ref.cuh): one warp per query row, 32 keys per step,
// any dtype, any head dim the API takes; the always-correct fallback of the forward. Knob: warps (= query rows per
// CTA) in {2, 4, 8}.
#include "../common.h"

namespace fa::gen {

namespace {

enum { kWarps };

Tunables defaults(const Semantic&) { return Tunables{{8}}; }

unsigned smem_bytes(const KernelConfig& c) { return static_cast<unsigned>(c.t[kWarps] * c.s.head_dim * 4); }

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  const int w = c.t[kWarps];
  return fam::rows_launch(sh.max_seqlen_q, w, sh.heads_q, sh.batch, w, smem_bytes(c));
}

const Family kFamily{.name = "fwd_ref",
                     .template_name = "fwd_ref.cuh",
                     .role = Role::Forward,
                     .priority = 0,
                     .reference = true,
                     .sinks = true,
                     .knobs = {fam::warps({2, 4, 8})},
                     .defaults = &defaults,
                     .smem_bytes = &smem_bytes,
                     .launch = &launch};

}  // namespace

FA_FAMILY_FOLDER(fwd_ref) { register_family(&kFamily); }

}  // namespace fa::gen
