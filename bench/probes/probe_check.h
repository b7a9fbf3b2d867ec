// probe_check.h -- CK(x): the bench probes' (decode_probe.cpp, bwd_family_probe.cpp) check of a driver call through
// the dlopen'ed table: on failure print file, line, the call and its CUresult, and exit (a measurement tool, never
// the library).
#pragma once

#include <cstdlib>

#include <fmt/format.h>

#define CK(x)                                                                         \
  do {                                                                                \
    CUresult r_ = (x);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                         \
      fmt::print(stderr, "{}:{}: {} failed ({})\n", __FILE__, __LINE__, #x, (int)r_); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
