// plan_support.h -- a forward family's plan on a test case, outside fa_run's selection: which tensor-core forwards
// cover the case on this GPU, compiling a plan's kernels, and running it on the case's buffers against the oracle.
// The tests of user code run every covering family this way (fwd_wgmma and fwd_mma on sm_90).
#pragma once

#include <vector>

#include "generator/family.h"
#include "tests/gpu/gpu_support.h"

namespace fa::test {

// The tensor-core forwards (not the reference) that cover the case's problem on this GPU, highest priority first.
std::vector<const gen::Family*> fast_families(const Case& c);
// Compiles every kernel of family f's plan for the case at tunables t (null: the family's defaults); parallel_for
// callers compile many at once before their serial launches.
void compile_plan(const Case& c, const gen::Family& f, const gen::Tunables* t);
// Runs that plan on the case's buffers (o and LSE poisoned first, user code's values from c.params.mods) and
// compares with the oracle.
CaseResult run_plan(Case& c, const gen::Family& f, const gen::Tunables* t);
// Runs every case through fa_run (the selected family) and through the default plan of every family fast_families
// names (all of them compiled in parallel first), one line per run; returns how many runs failed (an error, O off
// the oracle by more than the dtype's tolerance, LSE by more than 1e-3, or padding written).
int check_every_family(const std::vector<Case*>& cases);

}  // namespace fa::test
