// fa_tune_args.h -- fa-tune's command line: flags, presets and the grid of problems they describe.
// Parsing never prints or exits: errors come back as text naming the flag (the caller exits with code 2).
#pragma once

#include <string>
#include <vector>

#include "generator/problem.h"

namespace fa::tune {

struct MaskSpec {
  int mask = gen::kMaskNone;
  int left = -1, right = -1;  // window only
  std::string name;           // "none", "causal", "window:4095:0"
};

struct FeatureSpec {
  bool bias = false, alibi = false, sinks = false;
  float softcap = 0.0f;  // > 0: enabled
  std::string name;      // "none", "bias", "softcap:50", "bias+alibi", "sinks"
};

struct TuneArgs {
  // grid
  std::vector<int> dtypes;  // gen::Dtype values
  std::vector<int> head_dims;
  std::vector<int> heads;
  std::vector<int> kv_heads;  // empty: = heads
  std::vector<int> seqlens;
  long long batch_tokens = 16384;  // batch = max(1, batch_tokens / seqlen)
  std::vector<MaskSpec> masks;
  std::vector<FeatureSpec> features;
  std::string preset;
  bool grid_given = false;  // a grid flag or a preset was given
  // actions and options
  std::string json_path, export_path, import_path, cache_path;
  bool list = false, prune = false, dry_run = false, help = false, force = false, no_verify = false;
  int arch = 0;              // 0: the context's (the device's, else $FA_ARCH, else 90: runtime/arch.h)
  double budget_ms = -1.0;   // per tuning key; < 0: $FA_TUNE_BUDGET_MS / 2000
  double idle_ratio = -1.0;  // idle after each timed run, per unit of its time; < 0: the tuner's (1.0)
  int threads = 0;           // compile threads; 0: automatic
  int max_candidates = 0;    // > 0: cap per semantic (quick runs)
  int progress = -1;         // progress_mode's flag (progress.h): -1 not given, 0 none, 1 bar, 2 lines, 3 final
  // --devices: the GPUs the grid's tuning keys are sharded over (a thread and a context per GPU, one database).
  bool all_devices = false;  // --devices all
  std::vector<int> devices;  // --devices 0,2,...: distinct ordinals in the order given; empty: not given
  bool devices_given() const { return all_devices || !devices.empty(); }
};

struct GridPoint {
  gen::ProblemDesc desc;  // fixed-length, aligned16, has_lse
  float softcap = 0.0f;
  std::string label;  // "bf16 d128 hq32/kv8 causal none s4096 b4"
};

// Parses argv (without the program name). false with *error = "--flag: what is wrong" on any bad input.
bool parse_tune_args(const std::vector<std::string>& argv, TuneArgs* out, std::string* error);
// The grid in a stable order (dtype, head dim, heads, kv heads, mask, features, seqlen).
std::vector<GridPoint> expand_grid(const TuneArgs& a);
// Names of the presets ("ci, gemma2-9b, ...") and the usage text.
std::string preset_names();
std::string usage_text();

// Parsing helpers (exposed for tests).
bool parse_int(const std::string& text, long long lo, long long hi, long long* out);
// "512:16384" -> 512, 1024, ..., 16384; "1000" -> 1000; lists are comma-separated.
bool parse_seqlens(const std::string& text, std::vector<int>* out, std::string* why);
// "all" -> *all = true; "0,2,3" -> distinct ordinals in [0, 1023]. false with *why on anything else.
bool parse_devices(const std::string& text, bool* all, std::vector<int>* out, std::string* why);
// The GPUs a sweep uses: --devices all (every one of `count`), the ordinals given (each < count), or `fallback` (the
// context's device) when --devices was not given. false with *why naming the bad ordinal and the count.
bool resolve_devices(const TuneArgs& a, int count, int fallback, std::vector<int>* out, std::string* why);

}  // namespace fa::tune
