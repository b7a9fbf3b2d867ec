// fa_tune_cli.h -- the fa-tune command as a function (fa_tune_main.cpp is a thin wrapper; tests call it directly).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "fa/fa.h"
#include "tuner/fa_tune_args.h"

namespace fa::tune {

// The C API entry points the command needs (they live in the fa library proper, which links this one).
struct CliHooks {
  fa_status (*context_create)(const fa_context_options*, fa_context*) = nullptr;
  void (*context_destroy)(fa_context) = nullptr;
};

// Runs fa-tune with argv (without the program name); tables and reports go to `out`, progress and errors to `err`.
// Returns the exit code: 0 ok, 1 failure, 2 bad command line, 3 no usable GPU.
int run_fa_tune(const std::vector<std::string>& argv, const CliHooks& hooks, std::FILE* out, std::FILE* err);

// The units a --devices sweep hands out to its GPUs' threads, each a list of grid indices, in grid order: the grid
// points of one tuning key (semantic and shape bucket) stay together and in order, so each key is tuned once, by one
// GPU, as a one-GPU sweep tunes it. by_semantic (--max-candidates): the unit is a whole tuning semantic key, since
// which candidates make the cut depends on the winners of that key's earlier buckets (prior_winners_first), so its
// buckets go in grid order through one GPU.
std::vector<std::vector<size_t>> shard_units(const std::vector<GridPoint>& grid, int arch, bool by_semantic);

}  // namespace fa::tune
