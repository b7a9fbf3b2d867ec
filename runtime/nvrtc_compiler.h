// nvrtc_compiler.h -- renders a KernelConfig, compiles it with NVRTC into a cubin, and reads ptxas's report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generator/config.h"

namespace fa::rt {

struct PtxasInfo {
  int registers = -1;
  int spill_stores = 0;  // bytes
  int spill_loads = 0;   // bytes
  int stack_bytes = 0;
  int smem_static = 0;
  // ptxas "(C75xx) Potential Performance Loss: wgmma.mma_async instructions are serialized ...": the Hopper kernel
  // compiled, but its wgmma pipeline waits after every instruction (the compile sweep fails on it).
  bool wgmma_serialized = false;
};

struct CompileResult {
  bool ok = false;
  std::vector<char> cubin;
  std::string log;     // NVRTC + ptxas log
  std::string source;  // the rendered translation unit
  std::string key;     // canonical key
  uint64_t hash = 0;   // compile hash (source, templates, generator version, NVRTC version, options)
  PtxasInfo ptxas;
  double seconds = 0.0;
};

// NVRTC's target for an arch: "sm_90a" for 90 (the Hopper families need its wgmma, TMA and setmaxnreg), else the
// plain "sm_<arch>" ("sm_80", "sm_100", "sm_120": the mma.sync families need nothing arch-specific).
std::string arch_option(int arch);
// Whether this NVRTC can compile for arch (nvrtcGetSupportedArchs; CUDA 12.8 added sm_100 / 120, 12.9 sm_103 / 121).
bool nvrtc_supports_arch(int arch);
// NVRTC version "13.0", or "" when NVRTC cannot be used.
std::string nvrtc_version();
// The options passed to NVRTC (part of the compile hash).
std::vector<std::string> nvrtc_options(int arch);
// The compile hash of a config under this NVRTC (what the persistent cache is keyed by).
uint64_t compile_hash_for(const gen::KernelConfig& c);

// Thread-safe (NVRTC is). Never throws.
CompileResult compile(const gen::KernelConfig& c);

// Parses ptxas -v output for the fa_kernel entry.
PtxasInfo parse_ptxas(const std::string& log);

}  // namespace fa::rt
