// fa_tune_main.cpp -- the fa-tune executable: tunes a grid of problems, or compiles it (--dry-run), and manages the
// cache (--list, --prune, --export, --import). See fa_tune_cli.h and `fa-tune --help`.
#include <cstdio>
#include <string>
#include <vector>

#include "tuner/fa_tune_cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  fa::tune::CliHooks hooks;
  hooks.context_create = &fa_context_create;
  hooks.context_destroy = &fa_context_destroy;
  return fa::tune::run_fa_tune(args, hooks, stdout, stderr);
}
