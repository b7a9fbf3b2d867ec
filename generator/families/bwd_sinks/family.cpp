// bwd_sinks -- host side of the attention sinks' gradient step (templates/bwd_sinks.cuh): dsinks[h] = -(the sum of
// bwd_pre's per-CTA partial sums of exp(sink_h - lse_i) * Delta_i), one CTA per query head, in a fixed order (the
// same bits run to run). A step of every backward plan of a problem with sinks (fam::backward_plan_start). Knob:
// warps in {4, 8}; the step reads batch x ceil(seqlen_q / 32) floats per head, a few microseconds at most.
#include "../common.h"

namespace fa::gen {

namespace {

Tunables defaults(const Semantic&) { return Tunables{{8}}; }

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  l.grid[0] = static_cast<unsigned>(sh.heads_q);
  l.block = static_cast<unsigned>(c.t[0] * 32);
  return l;
}

const Family kFamily{.name = "bwd_sinks",
                     .template_name = "bwd_sinks.cuh",
                     .role = Role::Step,
                     .sinks = true,
                     .knobs = {fam::warps({4, 8})},
                     .defaults = &defaults,
                     .launch = &launch};

}  // namespace

FA_FAMILY_FOLDER(bwd_sinks) { register_family(&kFamily); }

}  // namespace fa::gen
