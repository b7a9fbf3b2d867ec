// nvrtc_compiler.cpp -- NVRTC compilation of rendered kernels; templates are handed to NVRTC as named headers.
#include "runtime/nvrtc_compiler.h"

#include <map>
#include <mutex>

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <regex>

#include "templates/embedded.h"

namespace fa::rt {

std::string arch_option(int arch) { return arch == 90 ? "sm_90a" : fmt::format("sm_{}", arch); }

bool nvrtc_supports_arch(int arch) {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return false;
  std::vector<int> archs(static_cast<size_t>(n));
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return false;
  return std::find(archs.begin(), archs.end(), arch) != archs.end();
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "";
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> nvrtc_options(int arch) {
  return {"--gpu-architecture=" + arch_option(arch),
          "--std=c++17",
          "--device-as-default-execution-space",
          "--ptxas-options=-v",
          "--extra-device-vectorization",
          "--diag-suppress=177"};
}

uint64_t compile_hash_for(const gen::KernelConfig& c) {
  // Computed once per config in this process: rendering and hashing the source costs microseconds, a map lookup
  // does not (every fa_run asks). The templates cannot change while the process runs.
  static std::mutex mu;
  static std::map<gen::KernelConfig, uint64_t, gen::ConfigLess> memo;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = memo.find(c);
    if (it != memo.end()) return it->second;
  }
  std::string extra = "nvrtc " + nvrtc_version();
  for (const auto& o : nvrtc_options(c.s.arch)) extra += " " + o;
  const uint64_t h = gen::compile_hash(c, extra);
  std::lock_guard<std::mutex> lock(mu);
  memo.emplace(c, h);
  return h;
}

PtxasInfo parse_ptxas(const std::string& log) {
  PtxasInfo p;
  std::smatch m;
  static const std::regex regs(R"(Used (\d+) registers)");
  static const std::regex spill(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex stack(R"((\d+) bytes stack frame)");
  static const std::regex smem(R"((\d+) bytes smem)");
  if (std::regex_search(log, m, regs)) p.registers = std::stoi(m[1]);
  if (std::regex_search(log, m, spill)) {
    p.spill_stores = std::stoi(m[1]);
    p.spill_loads = std::stoi(m[2]);
  }
  if (std::regex_search(log, m, stack)) p.stack_bytes = std::stoi(m[1]);
  if (std::regex_search(log, m, smem)) p.smem_static = std::stoi(m[1]);
  p.wgmma_serialized = log.find("wgmma.mma_async instructions are serialized") != std::string::npos;
  return p;
}

CompileResult compile(const gen::KernelConfig& c) {
  CompileResult R;
  const auto t0 = std::chrono::steady_clock::now();
  R.key = gen::canonical_key(c);
  R.source = gen::render_source(c);
  R.hash = compile_hash_for(c);
  std::vector<const char*> names, sources;
  for (int i = 0; i < templates::kCount; ++i) {
    names.push_back(templates::kAll[i].name);
    sources.push_back(templates::kAll[i].source);
  }
  nvrtcProgram prog = nullptr;
  const std::string prog_name = "fa_" + gen::hex64(R.hash) + ".cu";
  nvrtcResult r = nvrtcCreateProgram(&prog, R.source.c_str(), prog_name.c_str(), static_cast<int>(names.size()),
                                     sources.data(), names.data());
  if (r != NVRTC_SUCCESS) {
    R.log = fmt::format("nvrtcCreateProgram failed: {}", nvrtcGetErrorString(r));
    return R;
  }
  const std::vector<std::string> opts = nvrtc_options(c.s.arch);
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  r = nvrtcCompileProgram(prog, static_cast<int>(copts.size()), copts.data());
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    R.log.resize(log_size);
    nvrtcGetProgramLog(prog, R.log.data());
    while (!R.log.empty() && R.log.back() == '\0') R.log.pop_back();
  }
  if (r == NVRTC_SUCCESS) {
    size_t n = 0;
    if (nvrtcGetCUBINSize(prog, &n) == NVRTC_SUCCESS && n > 0) {
      R.cubin.resize(n);
      if (nvrtcGetCUBIN(prog, R.cubin.data()) == NVRTC_SUCCESS) R.ok = true;
    }
    if (!R.ok) R.log += "\nnvrtcGetCUBIN failed";
  } else {
    R.log = fmt::format("{}\n{}", nvrtcGetErrorString(r), R.log);
    if (!nvrtc_supports_arch(c.s.arch))
      R.log = fmt::format(
          "NVRTC {} does not compile for sm_{} (sm_100 / sm_120 need CUDA 12.8 or newer, sm_103 / "
          "sm_121 CUDA 12.9)\n{}",
          nvrtc_version(), c.s.arch, R.log);
  }
  nvrtcDestroyProgram(&prog);
  R.ptxas = parse_ptxas(R.log);
  R.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return R;
}

}  // namespace fa::rt
