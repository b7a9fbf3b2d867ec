// compile_sweep.cpp -- compiles kernel variants through NVRTC for sm_80 and sm_90a (--arch N, repeatable: for those
// archs instead, e.g. --arch 100 --arch 120) and fails on any compile error or any ptxas spill. --sample: a fixed
// covering sample (every family, dtype, mask, feature flag, a spread of head dims, every valid tunable point of each
// family at head dim 128, and of fwd_mma at 64, and the heuristic defaults of fwd_mma and bwd_mma; user code:
// takes_user_code, sweep_mods; attention sinks: each semantic's sampled point also with sinks in the families that
// read them). --full: the whole product (each point also with user code where the family runs it, a quarter of the
// variants also with sinks). `--match .sinks` keeps the sink kernels alone.
// --full --limit N [--seed S]: a random sample of N points of the whole product (it has ~300k points).
// --family NAME: only that family's kernels. --match TEXT (repeatable): only the points whose canonical key holds one
// of the texts (before --limit): a predicate rule's neighbourhood, e.g. --full --match 'd248.dv248.none.b1a0s1'.
// --progress-file PATH: the latest progress line (one every 25 kernels) rewritten there, for scripts/test.sh.
// --sample --lite: the same coverage with fewer tunable points per semantic (the CI sample of sm_100 and sm_120).
// --count: how many kernels each family and arch would compile, nothing compiled (with $FA_SWEEP_VERBOSE: their keys).
// --dump-cubins DIR: each compiled kernel's cubin as DIR/<canonical key>.cubin, the key's '|' written '+' (for a SASS
// comparison of two builds: scripts/sass_diff.sh).
// Also checks that the predicate is the only rejection: a point it accepts must compile without spills.
#include <fmt/format.h>

#include "generator/user_mods.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/arch.h"
#include "runtime/nvrtc_compiler.h"

using namespace fa::gen;

namespace {

// The dtypes a family takes: fp32 only where the predicate admits it (the reference kernels and the steps).
std::vector<int> dtypes_for(const Family& f, int arch) {
  Semantic s;
  s.family = &f;
  s.arch = arch;
  s.dtype = kFp32;
  s.head_dim = s.head_dim_v = 64;
  if (valid_space(s, limits_for_arch(arch)).empty()) return {kFp16, kBf16};
  return {kFp16, kBf16, kFp32};
}

// The tensor-core families: their shape-class flag (even_k, Family::finalize) and their tuned defaults get extra
// coverage.
bool has_shape_class(const Family& f) { return f.finalize != nullptr; }
bool is_fast_backward(const Family& f) { return f.role == Role::Backward && !f.reference; }

// Whether family f serves paged problems of semantic s (a paged decode problem of s's dtype, dims and features).
bool reads_pages(const Family& f, const Semantic& s) {
  if (f.role != Role::Forward || s.varlen || s.has_bias) return false;
  ProblemDesc p;
  p.dtype = s.dtype;
  p.head_dim = s.head_dim;
  p.head_dim_v = s.head_dim_v;
  p.mask = s.mask;
  p.has_alibi = s.has_alibi;
  p.has_softcap = s.has_softcap;
  p.has_lse = s.has_lse;
  p.aligned16 = true;
  p.v_in_k = s.head_dim_v <= s.head_dim;  // MLA's latent cache where the dims allow it (fwd_mla needs it)
  p.paged = true;
  p.page_size = 16;
  return family_covers(f, p, s.arch, nullptr);
}

// --sample: points per semantic in the "every valid point" loop and per semantic and kind of user code, and the
// share of the defaults' mask / feature variants; --lite (the CI sample of the archs past sm_90) takes fewer of each,
// evenly spread too.
struct SampleCaps {
  size_t all = 96, mods = 32;
  int default_step = 1;  // the heuristic defaults of every 1st (2nd) of the six mask / feature variants
  size_t fp8 = 3;        // fp8 inputs: points per semantic besides the defaults
};
constexpr SampleCaps kSampleCaps{}, kLiteCaps{6, 1, 2, 1};

// The backward families that run user code (bwd_ref's second kernel, bwd_ref_dkdv, is a step of its plan).
bool backward_user_code(const Family& f) {
  for (const char* n : {"bwd_mma", "bwd_wgmma", "bwd_ref_dq", "bwd_ref_dkdv"})
    if (f.name == std::string(n)) return true;
  return false;
}

// Whether family f runs user code (fa_mods): the forwards that cover a problem with it, the backwards, and the
// plans' classification step.
bool takes_user_code(const Family& f, int arch) {
  if (f.name == std::string("mask_blocks") || backward_user_code(f)) return true;
  if (f.role != Role::Forward) return false;
  static const int dtypes[1] = {1}, ranks[1] = {1};
  ProblemDesc p;
  p.aligned16 = p.tma_ok = true;
  p.mods = intern_user_mods("return true;", "", 1, dtypes, ranks);
  return family_covers(f, p, arch, nullptr);
}

// The user code of the sweep, the heaviest of the ready mods (python/fa/mods.py): kind 0 the document mask over
// per-batch ids (two int32 [B, S] buffers, 64-bit strides: block skipping), 1 the relative-position bias (a float32
// table read per element), 2 both, 3 (backward families) a softcap-like score_mod alone (tanh). In the backward
// (`backward`) each score_mod comes with its derivative: 1 for the bias, 1 - tanh^2 for the softcap (the records
// bwd_mma's valid() was measured on).
const UserMods* sweep_mods(int kind, bool backward) {
  static const int dtypes[3] = {1, 1, 3}, ranks[3] = {2, 2, 2};
  const char* mask =
      "const fa_buf0_t* d0 = static_cast<const fa_buf0_t*>(u.buf[0]);\n"
      "const fa_buf1_t* d1 = static_cast<const fa_buf1_t*>(u.buf[1]);\n"
      "return d0[b * u.stride[0][0] + i * u.stride[0][1]] == d1[b * u.stride[1][0] + j * u.stride[1][1]] && j <= i;";
  const char* score =
      "const float* t = static_cast<const float*>(u.buf[2]);\n"
      "const int r = min(max(i - j, -u.iscalar[0]), u.iscalar[0]) + u.iscalar[0];\n"
      "return s + t[h * u.stride[2][0] + r * u.stride[2][1]];";
  if (kind == 3)
    return intern_user_mods("", "return u.scalar[0] * tanhf(s / u.scalar[0]);", 3, dtypes, ranks,
                            backward ? "const float t = tanhf(s / u.scalar[0]);\nreturn 1.0f - t * t;" : "");
  return intern_user_mods(kind == 1 ? "" : mask, kind == 0 ? "" : score, 3, dtypes, ranks,
                          backward && kind != 0 ? "return 1.0f;" : "");
}
// The kinds of user code family f is swept with (mask_blocks: those with a mask_mod, the rest never reaching its
// code).
std::vector<int> sweep_kinds(const Family& f) {
  if (backward_user_code(f)) return {0, 2, 1, 3};
  if (f.role != Role::Forward) return {0, 2};
  return {0, 2, 1};
}

// At most n of `points`, evenly spread.
std::vector<Tunables> spread(const std::vector<Tunables>& points, size_t n) {
  std::vector<Tunables> out;
  const size_t step = std::max<size_t>(1, (points.size() + n - 1) / n);
  for (size_t i = 0; i < points.size(); i += step) out.push_back(points[i]);
  return out;
}

struct Job {
  KernelConfig c;
};

// An fp8 KV cache (the families that read one, Family::fp8_kv_cache, on sm_89+): e4m3 and e5m2 under fp16 and bf16
// queries at head dims 64, 72 (a chunk half past the row: the copy's zero-fill), 128 and 256, contiguous and paged,
// masks and features rotating, at the family's defaults; every valid point at d 128 (bf16 over a paged e4m3 cache)
// under --sample, every point of every variant under --full.
template <class Push>
void add_fp8_cache_semantics(const Family& f, int arch, bool full, Push push) {
  if (!f.fp8_kv_cache || arch < 89) return;
  const DeviceLimits lim = limits_for_arch(arch);
  int rot = 0;
  for (int dt : {kFp16, kBf16})
    for (int kv : {kE4m3, kE5m2})
      for (int d : {64, 72, 128, 256})
        for (bool paged : {false, true}) {
          const int v = rot++;
          Semantic s;
          s.family = &f;
          s.arch = arch;
          s.dtype = dt;
          s.kv_dtype = kv;
          s.head_dim = s.head_dim_v = d;
          s.mask = v % 3;
          s.has_alibi = (v / 3) % 2;
          s.has_softcap = (v / 5) % 2;
          s.has_lse = v % 4 != 1;
          s.paged = paged;
          const std::vector<Tunables> points = all_valid_points(s, lim);
          if (points.empty()) continue;
          const bool every = full || (d == 128 && dt == kBf16 && kv == kE4m3 && paged);
          for (size_t i = 0; i < (every ? points.size() : 1); ++i)
            push(KernelConfig{s, every ? points[i] : f.defaults(s)});
        }
}

// FP8 inputs (the families that take them, Family::fp8_inputs, on sm_89+): e4m3 and e5m2 q / k / v under bf16 and
// fp16 o at head dims 64, 80 (rows padded past the dim: the copy's zero fill), 128, 192 / 128 and 256, masks and
// features (ALiBi, softcap, varlen, LSE) rotating, at the family's defaults (both shape classes) and at a few points
// spread over the valid space (caps.fp8 per semantic; the tuner's whole space at d 128, e4m3 under bf16, for
// --sample); every valid point of 24 variants under --full.
template <class Push>
void add_fp8_input_semantics(const Family& f, int arch, bool full, const SampleCaps& caps, Push push) {
  if (!f.fp8_inputs || arch < 89) return;
  const DeviceLimits lim = limits_for_arch(arch);
  int rot = 0;
  for (int dt : {kE4m3, kE5m2})
    for (int od : {kBf16, kFp16})
      for (const auto& [d, dv] :
           {std::pair{64, 64}, std::pair{80, 80}, std::pair{128, 128}, std::pair{192, 128}, std::pair{256, 256}})
        for (int variant = 0; variant < (full ? 24 : 1); ++variant) {
          const int v = full ? variant : rot++;
          Semantic s;
          s.family = &f;
          s.arch = arch;
          s.dtype = dt;
          s.o_dtype = od;
          s.head_dim = d;
          s.head_dim_v = dv;
          s.mask = v % 3;
          s.has_alibi = (v / 3) % 2;
          s.has_softcap = (v / 6) % 2;
          s.varlen = (v / 12) % 2;
          s.has_lse = v % 5 != 2;
          const std::vector<Tunables> points = all_valid_points(s, lim);
          if (points.empty()) continue;
          // --sample at d 128, e4m3 under bf16: the tuner's whole space (valid_space)
          const bool every = !full && d == 128 && dv == d && dt == kE4m3 && od == kBf16;
          const bool ek_too = !s.varlen && f.finalize != nullptr;
          for (const Tunables& t : full ? points : every ? valid_space(s, lim) : spread(points, caps.fp8)) {
            KernelConfig c{s, t};
            c.s.even_k = ek_too && (full || t[0] % 2 == 0);  // (--sample: by the first knob's parity)
            push(c);
            if (full && ek_too) {
              c.s.even_k = false;
              push(c);
            }
          }
          for (bool ek : {false, true}) {
            if (ek && !ek_too) continue;
            KernelConfig c{s, f.defaults(s)};
            c.s.even_k = ek;
            push(c);
          }
        }
}

void add_semantics(const Family& f, int arch, bool full, const SampleCaps& caps, std::vector<Job>* jobs) {
  const DeviceLimits lim = limits_for_arch(arch);
  const std::vector<int> dims_full = {8,  16,  24,  32,  40,  48,  56,  64,  72,  80,
                                      96, 112, 128, 136, 160, 192, 200, 224, 248, 256};
  const std::vector<int> dims_sample = {8, 40, 64, 96, 128, 200, 256};
  const auto& dims = full ? dims_full : dims_sample;
  int rot = 0;
  std::set<std::string> seen;
  auto push = [&](const KernelConfig& c) {
    if (!is_valid(c, lim, nullptr)) return;
    if (seen.insert(canonical_key(c)).second) jobs->push_back(Job{c});
  };
  // c and, for a family that reads attention sinks, its sink variant (it changes the epilogue only: every semantic
  // point of --sample, a quarter of --full's variants)
  auto push_sinks = [&](const KernelConfig& c, bool also) {
    push(c);
    if (!f.sinks || !also) return;
    KernelConfig sc = c;
    sc.s.has_sinks = true;
    push(sc);
  };
  for (int dt : dtypes_for(f, arch)) {
    for (int d : dims) {
      for (int variant = 0; variant < (full ? 48 : 1); ++variant) {
        const int v = full ? variant : rot++;
        Semantic s;
        s.family = &f;
        s.arch = arch;
        s.dtype = dt;
        s.head_dim = d;
        s.head_dim_v = (v % 5 == 4) ? std::max(8, 256 - d + 8 - (256 - d + 8) % 8) : d;
        s.mask = v % 3;
        s.has_bias = (v / 3) % 2;
        s.has_alibi = (v / 6) % 2;
        s.has_softcap = (v / 12) % 2;
        s.varlen = (v / 24) % 2;
        s.has_lse = f.role != Role::Forward ? true : (v % 7 != 3);
        std::vector<Tunables> space = valid_space(s, lim);
        if (space.empty()) continue;
        if (full) {
          // with user code too where the family runs it (its kind rotating with the variant)
          for (bool mods : {false, true}) {
            if (mods && !takes_user_code(f, arch)) continue;
            Semantic sv = s;
            if (mods) {
              const std::vector<int> kinds = sweep_kinds(f);
              sv.mods = sweep_mods(kinds[static_cast<size_t>(v) % kinds.size()], backward_user_code(f));
            }
            for (const Tunables& t : all_valid_points(sv, lim)) {
              KernelConfig c{sv, t};
              push_sinks(c, v % 4 == 1);
              if (!s.varlen && has_shape_class(f)) {
                c.s.even_k = true;
                push_sinks(c, v % 4 == 1);
              }
            }
          }
        } else {
          KernelConfig c{s, space[static_cast<size_t>(v) % space.size()]};
          c.s.even_k = !s.varlen && has_shape_class(f) && (v % 2 == 0);
          push_sinks(c, true);
          if (reads_pages(f, s)) {  // the paged variant of the families that read KV-cache pages
            KernelConfig pc = c;
            pc.s.paged = true;
            pc.t = space[static_cast<size_t>(v + 1) % space.size()];
            push_sinks(pc, true);
          }
          if (has_shape_class(f) && !s.varlen) {  // the heuristic defaults of both shape classes, every mask (--lite:
                                                  // every other mask / feature variant)
            for (int m = 0; m < 6; m += caps.default_step)
              for (bool ek : {false, true}) {
                Semantic sd = s;
                sd.mask = m % 3;
                if (m >= 3) sd.has_bias = sd.has_alibi = sd.has_softcap = false;
                sd.even_k = ek;
                KernelConfig dc{sd, f.defaults(sd)};
                dc.s.even_k = ek;
                push(dc);
              }
          }
          if (is_fast_backward(f)) {  // the heuristic defaults with every feature and with none
            for (bool feat : {false, true}) {
              Semantic sd = s;
              sd.has_bias = sd.has_alibi = sd.has_softcap = feat;
              push(KernelConfig{sd, f.defaults(sd)});
            }
          }
          if ((d == 64 || d == 128) && takes_user_code(f, arch) && !(f.reference && f.role == Role::Forward)) {
            // user code (fa_mods): a document mask (block skipping) alone and with a score_mod at every valid point
            // of the knobs (at most caps.mods, evenly spread: the register budgets for user code; mask_blocks'
            // tile shapes), a score_mod alone at the default in the forwards and at every point in the backwards
            // (whose budgets were measured on it)
            const bool bwd = backward_user_code(f);
            for (int kind : sweep_kinds(f)) {
              Semantic sm = s;
              sm.mods = sweep_mods(kind, bwd);
              // every valid point at d128 fp16, the default elsewhere; both shape classes
              std::vector<Tunables> pts = {f.defaults(sm)};
              if (d == 128 && dt == kFp16 && (kind != 1 || bwd)) pts = spread(all_valid_points(sm, lim), caps.mods);
              for (const Tunables& t : pts)
                for (bool ek : {false, true}) {
                  if (ek && (sm.varlen || !has_shape_class(f))) continue;
                  KernelConfig mc{sm, t};
                  mc.s.even_k = ek;
                  push(mc);
                }
            }
          }
          if ((d == 128 || (d == 64 && has_shape_class(f))) && dt == kFp16) {
            // every valid tunable point at the common head dims (the whole product runs under --full), at most
            // caps.all of them evenly spread where a family's knobs span more (fwd_wgmma)
            const std::vector<Tunables> points = all_valid_points(s, lim);
            const size_t step = std::max<size_t>(1, (points.size() + caps.all - 1) / caps.all);
            for (size_t i = 0; i < points.size(); i += step) {
              const Tunables& t = points[i];
              KernelConfig all{s, t};
              all.s.even_k = !s.varlen && has_shape_class(f);
              push(all);
            }
          }
        }
      }
    }
    // Wide heads (MLA's 576 / 512, and a wide q/k with a narrow v), for the families that take them (their valid()
    // refuses the others): --full: every valid point of every mask, with and without pages and LSE; --sample: the
    // first point, unpaged with LSE and paged without, masks rotating.
    for (const auto& [d, dv] : {std::pair{576, 512}, std::pair{288, 256}})
      for (int m = 0; m < 3; ++m)
        for (int v = 0; v < 4; ++v) {
          if (!full && (v % 3 != 0 || m != (d + v) % 3)) continue;
          Semantic s;
          s.family = &f;
          s.arch = arch;
          s.dtype = dt;
          s.head_dim = d;
          s.head_dim_v = dv;
          s.mask = m;
          s.has_lse = f.role != Role::Forward ? true : (v % 2 == 0);
          if (f.role != Role::Forward || valid_space(s, lim).empty()) continue;
          s.paged = v >= 2 && reads_pages(f, s);
          if (v >= 2 && !s.paged) continue;
          const std::vector<Tunables> points = all_valid_points(s, lim);
          for (size_t i = 0; i < (full ? points.size() : std::min<size_t>(1, points.size())); ++i)
            push_sinks(KernelConfig{s, points[i]}, !full || v % 2 == 1);
        }
  }
  add_fp8_cache_semantics(f, arch, full, [&](const KernelConfig& c) { push_sinks(c, c.s.has_lse); });
  add_fp8_input_semantics(f, arch, full, caps, push);
}

// Writes r's cubin as dir/<key>.cubin ('|' -> '+'); false (with a message) when the file cannot be written.
bool dump_cubin(const std::string& dir, const fa::rt::CompileResult& r) {
  std::string name = r.key;
  std::replace(name.begin(), name.end(), '|', '+');
  const std::string path = dir + "/" + name + ".cubin";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(r.cubin.data(), static_cast<std::streamsize>(r.cubin.size()));
  if (out.good()) return true;
  fmt::print("FAIL {}: cannot write {}\n", r.key, path);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bool full = false;
  size_t limit = 0;
  unsigned long long seed = std::random_device{}();
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> archs;   // --arch, else sm_80 and sm_90a
  bool count_only = false;  // --count: the kernels per family and arch, nothing compiled
  bool lite = false;        // --lite: the sample with fewer points per semantic (kLiteCaps)
  std::string only_family;
  std::vector<std::string> matches;  // --match: only the points whose canonical key holds one of these
  std::string progress_file;         // --progress-file: the latest progress line, rewritten as the sweep goes
  std::string dump_dir;              // --dump-cubins: where each compiled cubin is written
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--full")) full = true;
    else if (!std::strcmp(argv[i], "--sample")) full = false;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--limit") && i + 1 < argc) limit = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--family") && i + 1 < argc) only_family = argv[++i];
    else if (!std::strcmp(argv[i], "--match") && i + 1 < argc) matches.push_back(argv[++i]);
    else if (!std::strcmp(argv[i], "--progress-file") && i + 1 < argc) progress_file = argv[++i];
    else if (!std::strcmp(argv[i], "--count")) count_only = true;
    else if (!std::strcmp(argv[i], "--lite")) lite = true;
    else if (!std::strcmp(argv[i], "--arch") && i + 1 < argc) {
      int arch = 0;
      if (!fa::rt::parse_arch(argv[++i], &arch)) {
        fmt::print(stderr, "compile_sweep: --arch: expected {}, got '{}'\n", fa::rt::arch_expected(), argv[i]);
        return 2;
      }
      archs.push_back(arch);
    } else if (!std::strcmp(argv[i], "--dump-cubins") && i + 1 < argc) {
      dump_dir = argv[++i];
    } else {
      fmt::print(stderr,
                 "usage: {} [--sample [--lite]|--full] [--arch N]... [--count] [--threads N] [--limit N [--seed S]] "
                 "[--family NAME] [--match TEXT]... [--progress-file PATH] [--dump-cubins DIR]\n",
                 argv[0]);
      return 2;
    }
  }
  if (archs.empty()) archs = {80, 90};
  if (!dump_dir.empty() && !std::filesystem::is_directory(dump_dir)) {
    fmt::print(stderr, "compile_sweep: --dump-cubins expects an existing directory, got '{}'\n", dump_dir);
    return 2;
  }
  if (fa::rt::nvrtc_version().empty()) {
    fmt::print(stderr, "compile_sweep: NVRTC is not usable\n");
    return 1;
  }
  for (int arch : archs)
    if (!fa::rt::nvrtc_supports_arch(arch)) {
      fmt::print(stderr, "compile_sweep: NVRTC {} does not compile for sm_{}\n", fa::rt::nvrtc_version(), arch);
      return 1;
    }
  std::vector<Job> jobs;
  for (const Family* f : all_families())
    if (only_family.empty() || only_family == f->name)
      for (int arch : archs) add_semantics(*f, arch, full, lite ? kLiteCaps : kSampleCaps, &jobs);
  if (!matches.empty()) {  // e.g. --full --match 'd248.dv248.none.b1a0s1' --match 'c2.n64.s2.pp0': one rule's scan
    std::vector<Job> kept;
    for (Job& j : jobs) {
      const std::string key = canonical_key(j.c);
      auto holds = [&](const std::string& m) { return key.find(m) != std::string::npos; };
      if (std::any_of(matches.begin(), matches.end(), holds)) kept.push_back(std::move(j));
    }
    jobs = std::move(kept);
  }
  if (jobs.empty()) {
    fmt::print(stderr, "compile_sweep: no kernels (family '{}' unknown, or no key matches?)\n", only_family);
    return 2;
  }
  if (limit > 0 && limit < jobs.size()) {  // a random sample of the chosen space, reproducible by its seed
    std::mt19937_64 rng(seed);
    std::shuffle(jobs.begin(), jobs.end(), rng);
    jobs.resize(limit);
    fmt::print("compile_sweep: random sample of {} points, seed {}\n", limit, seed);
  }
  if (count_only) {
    std::map<std::string, int> per;  // "family sm_N" -> kernels
    for (const Job& j : jobs) {
      ++per[fmt::format("{} sm_{}", family_name(j.c.s), j.c.s.arch)];
      if (std::getenv("FA_SWEEP_VERBOSE")) fmt::print("{}\n", canonical_key(j.c));
    }
    for (const auto& [what, n] : per) fmt::print("{} {}\n", what, n);
    fmt::print("compile_sweep: {} kernels (nothing compiled)\n", jobs.size());
    return 0;
  }
  std::string arch_list;
  for (int arch : archs) arch_list += (arch_list.empty() ? "" : ", ") + fa::rt::arch_option(arch);
  fmt::print("compile_sweep: {} kernels ({} mode, {}), NVRTC {}, {} threads\n", jobs.size(), full ? "full" : "sample",
             arch_list, fa::rt::nvrtc_version(), threads);
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  // The latest progress line, also in --progress-file (scripts/test.sh shows it while ctest hides the output).
  auto progress = [&](const std::string& line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
    if (progress_file.empty()) return;
    if (std::FILE* f = std::fopen(progress_file.c_str(), "w")) {
      fmt::print(f, "{}\n", line);
      std::fclose(f);
    }
  };
  auto elapsed = [&] {
    const auto s = static_cast<long long>(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return fmt::format("{}:{:02}", s / 60, s % 60);
  };
  progress(fmt::format("  0/{} compiled", jobs.size()));
  std::atomic<size_t> next{0};
  std::atomic<int> failures{0};
  std::mutex out_mu;
  std::map<std::string, int> max_regs;        // per family
  std::map<std::string, double> family_secs;  // NVRTC seconds per family (what a sample costs, family by family)
  double slowest = 0;
  std::string slowest_key;
  auto worker = [&] {
    for (;;) {
      const size_t i = next++;
      if (i >= jobs.size()) return;
      const fa::rt::CompileResult r = fa::rt::compile(jobs[i].c);
      std::lock_guard<std::mutex> lock(out_mu);
      int& regs = max_regs[family_name(jobs[i].c.s)];
      regs = std::max(regs, r.ptxas.registers);
      family_secs[family_name(jobs[i].c.s)] += r.seconds;
      if (r.seconds > slowest) {
        slowest = r.seconds;
        slowest_key = r.key;
      }
      const bool spill = r.ptxas.spill_stores > 0 || r.ptxas.spill_loads > 0;
      if (r.ok && !dump_dir.empty() && !dump_cubin(dump_dir, r)) ++failures;
      if (!r.ok || spill || r.ptxas.registers < 0 || r.ptxas.wgmma_serialized) {
        ++failures;
        const char* why = !r.ok                   ? "compile error"
                          : spill                 ? "spills"
                          : r.ptxas.registers < 0 ? "no ptxas report"
                                                  : "wgmma serialized by ptxas";
        fmt::print("FAIL {} ({}): {}\n{}\n", r.key, why,
                   fmt::format("regs {} spill stores {} loads {}", r.ptxas.registers, r.ptxas.spill_stores,
                               r.ptxas.spill_loads),
                   r.log.substr(0, 4000));
      } else if (std::getenv("FA_SWEEP_VERBOSE")) {
        fmt::print("ok {} regs {} {:.1f}s\n", r.key, r.ptxas.registers, r.seconds);
      }
      if ((i + 1) % 25 == 0) progress(fmt::format("  {}/{} compiled ({} elapsed)", i + 1, jobs.size(), elapsed()));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("compile_sweep: max registers per family:");
  for (const auto& [name, regs] : max_regs) fmt::print(" {}={}", name, regs);
  fmt::print("\ncompile_sweep: NVRTC seconds per family:");
  for (const auto& [name, sec] : family_secs) fmt::print(" {}={:.0f}", name, sec);
  fmt::print("\ncompile_sweep: slowest {:.1f}s ({})\n", slowest, slowest_key);
  progress(fmt::format("compile_sweep: {} kernels, {} failures, {:.0f}s", jobs.size(), failures.load(), secs));
  return failures.load() == 0 ? 0 : 1;
}
