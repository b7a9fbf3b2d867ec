// fa_tune_cli.h -- the fa-tune command as a function (fa_tune_main.cpp is a thin wrapper; tests call it directly).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "fa/fa.h"

namespace fa::tune {

// The C API entry points the command needs (they live in the fa library proper, which links this one).
struct CliHooks {
  fa_status (*context_create)(const fa_context_options*, fa_context*) = nullptr;
  void (*context_destroy)(fa_context) = nullptr;
};

// Runs fa-tune with argv (without the program name); tables and reports go to `out`, progress and errors to `err`.
// Returns the exit code: 0 ok, 1 failure, 2 bad command line, 3 no usable GPU.
int run_fa_tune(const std::vector<std::string>& argv, const CliHooks& hooks, std::FILE* out, std::FILE* err);

}  // namespace fa::tune
