// bwd_ref -- host side of the reference backward (templates/bwd_ref.cuh), the always-correct fallback of the
// backward (any dtype, any alignment). Two kernels of one template: bwd_ref_dq (one warp per query row, grid over
// query heads) and bwd_ref_dkdv (one warp per key row, grid over kv heads, summing the GQA group); kDkDv tells them
// apart. Knob: warps (= rows per CTA) in {2, 4, 8}. Plan: bwd_pre -> bwd_ref_dq -> bwd_ref_dkdv, workspace Delta.
#include "../common.h"

namespace fa::gen {

namespace {

enum { kWarps };

Tunables defaults(const Semantic&) { return Tunables{{4}}; }

bool is_dkdv(const KernelConfig& c) {
  return c.s.family != nullptr && std::string_view(c.s.family->name) == "bwd_ref_dkdv";
}

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  const bool dkdv = is_dkdv(c);
  return fam::rows_launch(dkdv ? sh.max_seqlen_k : sh.max_seqlen_q, c.t[kWarps], dkdv ? sh.heads_kv : sh.heads_q,
                          sh.batch, c.t[kWarps], 0);
}

void render_constants(const KernelConfig& c, std::string* src) {
  *src += is_dkdv(c) ? "constexpr bool kDkDv = true;\n" : "constexpr bool kDkDv = false;\n";
}

Plan plan(const KernelConfig& main, const ProblemDesc& p) {
  Plan out;
  out.workspace_bytes = std::max<size_t>(fam::backward_plan_start(p, main.s.arch, &out), 256);
  out.tuned_step = static_cast<int>(out.steps.size());
  out.steps.push_back(main);
  out.steps.push_back(fam::default_step("bwd_ref_dkdv", p, main.s.arch));
  return out;
}

// The fallback runs at its defaults (not tuned on first use).
Family make(const char* name, Role role) {
  return Family{.name = name,
                .template_name = "bwd_ref.cuh",
                .role = role,
                .priority = 0,
                .reference = true,
                .tuned_on_first_use = false,
                .sinks = true,  // the LSE holds the sink: P and dS of the keys are unchanged
                .knobs = {fam::warps({2, 4, 8})},
                .defaults = &defaults,
                .launch = &launch,
                .render_constants = &render_constants,
                .plan = role == Role::Backward ? &plan : nullptr};
}

const Family kDq = make("bwd_ref_dq", Role::Backward);
const Family kDkDv = make("bwd_ref_dkdv", Role::Step);

}  // namespace

FA_FAMILY_FOLDER(bwd_ref) {
  register_family(&kDq);
  register_family(&kDkDv);
}

}  // namespace fa::gen
