// fa_tune_main.cpp -- the fa-tune executable: tunes a grid of problems, or compiles it (--dry-run), and manages the
// cache (--list, --prune, --export, --import). See fa_tune_cli.h and `fa-tune --help`.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <string>
#include <system_error>
#include <vector>

#include "tuner/fa_tune_cli.h"

int main(int argc, char** argv) {
  // A reader that goes away (`fa-tune --list | head`) makes the next write fail (fmt throws) rather than killing the
  // process with SIGPIPE: the cache is then closed as on any exit, and SQLite removes its -wal and -shm.
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  fa::tune::CliHooks hooks;
  hooks.context_create = &fa_context_create;
  hooks.context_destroy = &fa_context_destroy;
  try {
    return fa::tune::run_fa_tune(args, hooks, stdout, stderr);
  } catch (const std::system_error& e) {
    if (e.code().value() == EPIPE) return 128 + SIGPIPE;  // what a shell reports for a reader gone away
    std::fprintf(stderr, "fa-tune: %s\n", e.what());
    return 1;
  }
}
