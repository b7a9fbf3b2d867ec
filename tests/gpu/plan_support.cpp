// plan_support.cpp -- see plan_support.h.
#include "tests/gpu/plan_support.h"

#include <cmath>
#include <cstdio>
#include <memory>

#include "generator/problem.h"
#include "runtime/launch.h"
#include "runtime/validate.h"

namespace fa::test {

std::vector<const gen::Family*> fast_families(const Case& c) {
  Gpu& g = gpu();
  fa_params p;
  gen::ProblemDesc pd;
  std::vector<const gen::Family*> out;
  if (!rt::validate_forward(&c.params, &p, &pd).ok()) return out;
  for (const gen::Family* f : gen::ranked_families(gen::Role::Forward, g.ctx->arch))
    if (!f->reference && gen::family_covers(*f, pd, g.ctx->arch, nullptr)) out.push_back(f);
  return out;
}

namespace {

// The plan of family f for the case at tunables t (null: the family's defaults), with the validated params.
gen::Plan plan_of(const Case& c, const gen::Family& f, const gen::Tunables* t, fa_params* p, gen::ProblemDesc* pd) {
  rt::validate_forward(&c.params, p, pd);
  const gen::Semantic sem = gen::semantic_for(f, *pd, gpu().ctx->arch);
  return gen::make_plan(sem, t != nullptr ? *t : f.defaults(sem), *pd);
}

}  // namespace

void compile_plan(const Case& c, const gen::Family& f, const gen::Tunables* t) {
  fa_params p;
  gen::ProblemDesc pd;
  for (const gen::KernelConfig& k : plan_of(c, f, t, &p, &pd).steps) {
    std::shared_ptr<rt::Kernel> kk;
    rt::kernel_for(gpu().ctx, k, true, &kk);
  }
}

CaseResult run_plan(Case& c, const gen::Family& f, const gen::Tunables* t) {
  Gpu& g = gpu();
  fa_params p;
  gen::ProblemDesc pd;
  const gen::Plan plan = plan_of(c, f, t, &p, &pd);
  std::vector<uint8_t> poison(c.o_n * (c.dtype == FA_DTYPE_FP32 ? 4 : 2), 0xff);
  c.d_o.upload(poison.data(), poison.size());
  std::vector<float> nan_lse(c.lse_n, std::nanf(""));
  if (c.lse_n) c.d_lse.upload(nan_lse.data(), c.lse_n * 4);
  FaFwdArgs args = rt::make_fwd_args(p, pd);
  const FaUser user = rt::make_user_args(p);
  const rt::Status st = rt::enqueue_plan(g.ctx, plan, gen::launch_shape(pd), rt::forward_plan_args(plan, &args, &user),
                                         true, g.stream, nullptr, 0);
  g.d->cuStreamSynchronize(g.stream);
  return st.ok() ? compare_outputs(c) : CaseResult{0, 0, true, st.message};
}

int check_every_family(const std::vector<Case*>& cases) {
  std::vector<std::pair<Case*, const gen::Family*>> plans;
  for (Case* c : cases)
    for (const gen::Family* f : fast_families(*c)) plans.emplace_back(c, f);
  parallel_for(plans.size(), [&](size_t n) { compile_plan(*plans[n].first, *plans[n].second, nullptr); });
  int failures = 0;
  auto report = [&](const Case& c, const char* path, const CaseResult& r) {
    const bool ok = r.failure.empty() && r.err_o <= tolerance(c.dtype) && r.err_lse <= 1e-3 && r.padding_intact;
    if (!ok) ++failures;
    std::printf("  %-34s %-9s %s err_o %.2e err_lse %.2e %s\n", c.desc.c_str(), path, ok ? "ok  " : "FAIL", r.err_o,
                r.err_lse, r.failure.c_str());
  };
  for (Case* c : cases) {
    report(*c, "fa_run", check_case(*c));
    for (const gen::Family* f : fast_families(*c)) report(*c, f->name, run_plan(*c, *f, nullptr));
  }
  return failures;
}

}  // namespace fa::test
