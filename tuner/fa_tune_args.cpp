// fa_tune_args.cpp -- fa-tune flag parsing, presets and grid expansion (see fa_tune_args.h).
#include "tuner/fa_tune_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>

#include "runtime/arch.h"

namespace fa::tune {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

struct Preset {
  const char* name;
  const char* what;
  std::vector<int> dtypes, head_dims, heads, kv_heads;
  const char* seqlens;
  long long batch_tokens;
  const char* masks;
  const char* features;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"ci",
       "tiny grid for CI: fp16 d64 hq4 kv4, none+causal, seqlen 256",
       {gen::kFp16},
       {64},
       {4},
       {4},
       "256",
       1024,
       "none,causal",
       "none"},
      {"gpt2", "GPT-2: fp16 d64 hq12 kv12 causal", {gen::kFp16}, {64}, {12}, {12}, "256:1024", 16384, "causal", "none"},
      {"llama3-8b",
       "Llama 3 8B: bf16 d128 hq32 kv8 causal",
       {gen::kBf16},
       {128},
       {32},
       {8},
       "1024:8192",
       16384,
       "causal",
       "none"},
      {"mistral-7b",
       "Mistral 7B: bf16 d128 hq32 kv8, sliding window 4096",
       {gen::kBf16},
       {128},
       {32},
       {8},
       "1024:16384",
       16384,
       "window:4095:0",
       "none"},
      {"gemma2-9b",
       "Gemma 2 9B: bf16 d256 hq16 kv8 causal, softcap 50",
       {gen::kBf16},
       {256},
       {16},
       {8},
       "1024:8192",
       16384,
       "causal",
       "softcap:50"},
  };
  return p;
}

bool parse_list_int(const std::string& flag, const std::string& text, long long lo, long long hi, std::vector<int>* out,
                    std::string* error) {
  out->clear();
  for (const std::string& item : split(text, ',')) {
    long long v = 0;
    if (!parse_int(item, lo, hi, &v)) {
      *error = fmt::format("{}: expected integers in [{}, {}] separated by commas, got '{}'", flag, lo, hi, item);
      return false;
    }
    out->push_back(static_cast<int>(v));
  }
  return true;
}

bool parse_dtypes(const std::string& text, std::vector<int>* out, std::string* error) {
  out->clear();
  for (const std::string& item : split(text, ',')) {
    if (item == "fp16" || item == "f16" || item == "half") out->push_back(gen::kFp16);
    else if (item == "bf16") out->push_back(gen::kBf16);
    else if (item == "fp32" || item == "f32") out->push_back(gen::kFp32);
    else {
      *error = fmt::format("--dtypes: expected fp16, bf16 or fp32, got '{}'", item);
      return false;
    }
  }
  return true;
}

bool parse_masks(const std::string& text, std::vector<MaskSpec>* out, std::string* error) {
  out->clear();
  for (const std::string& item : split(text, ',')) {
    MaskSpec m;
    m.name = item;
    if (item == "none") {
      m.mask = gen::kMaskNone;
    } else if (item == "causal") {
      m.mask = gen::kMaskCausal;
    } else if (item.rfind("window:", 0) == 0) {
      const std::vector<std::string> f = split(item, ':');
      long long l = 0, r = 0;
      if (f.size() != 3 || !parse_int(f[1], -1, 1 << 30, &l) || !parse_int(f[2], -1, 1 << 30, &r)) {
        *error = fmt::format("--masks: expected window:LEFT:RIGHT with integers >= -1, got '{}'", item);
        return false;
      }
      m.mask = gen::kMaskWindow;
      m.left = static_cast<int>(l);
      m.right = static_cast<int>(r);
    } else {
      *error = fmt::format("--masks: expected none, causal or window:LEFT:RIGHT, got '{}'", item);
      return false;
    }
    out->push_back(m);
  }
  return true;
}

bool parse_features(const std::string& text, std::vector<FeatureSpec>* out, std::string* error) {
  out->clear();
  for (const std::string& item : split(text, ',')) {
    FeatureSpec f;
    f.name = item;
    if (item != "none") {
      for (const std::string& part : split(item, '+')) {
        if (part == "bias") f.bias = true;
        else if (part == "alibi") f.alibi = true;
        else if (part == "sinks") f.sinks = true;
        else if (part == "softcap") f.softcap = 30.0f;
        else if (part.rfind("softcap:", 0) == 0) {
          char* end = nullptr;
          const std::string v = part.substr(8);
          const double x = std::strtod(v.c_str(), &end);
          if (v.empty() || *end != '\0' || !(x > 0) || x > 1e6) {
            *error = fmt::format("--features: expected softcap:VALUE with VALUE > 0, got '{}'", part);
            return false;
          }
          f.softcap = static_cast<float>(x);
        } else {
          *error = fmt::format(
              "--features: expected none or a '+'-joined combination of bias, alibi, sinks, softcap[:V], "
              "got '{}'",
              part);
          return false;
        }
      }
    }
    out->push_back(f);
  }
  return true;
}

// What a valued flag takes, as its line of --help names it ("FILE" for --export); "a value" when not found.
std::string value_name(const std::string& flag) {
  const std::string u = usage_text();
  const size_t at = u.find("\n  " + flag + " ");
  if (at == std::string::npos) return "value";
  const size_t start = at + 4 + flag.size();
  return u.substr(start, u.find(' ', start) - start);
}

}  // namespace

bool parse_int(const std::string& text, long long lo, long long hi, long long* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool parse_seqlens(const std::string& text, std::vector<int>* out, std::string* why) {
  out->clear();
  constexpr long long kMax = 1 << 20;
  for (const std::string& item : split(text, ',')) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      long long v = 0;
      if (!parse_int(item, 1, kMax, &v)) {
        *why = fmt::format("expected a length in [1, {}] or a range A:B, got '{}'", kMax, item);
        return false;
      }
      out->push_back(static_cast<int>(v));
      continue;
    }
    long long a = 0, b = 0;
    if (!parse_int(item.substr(0, colon), 1, kMax, &a) || !parse_int(item.substr(colon + 1), 1, kMax, &b)) {
      *why = fmt::format("expected a range A:B of lengths in [1, {}], got '{}'", kMax, item);
      return false;
    }
    if (a > b) {
      *why = fmt::format("range '{}' is empty: A must be <= B", item);
      return false;
    }
    for (long long v = a; v <= b; v *= 2) out->push_back(static_cast<int>(v));
  }
  return true;
}

bool parse_devices(const std::string& text, bool* all, std::vector<int>* out, std::string* why) {
  *all = false;
  out->clear();
  if (text == "all") {
    *all = true;
    return true;
  }
  for (const std::string& item : split(text, ',')) {
    long long v = 0;
    if (!parse_int(item, 0, 1023, &v)) {
      *why = fmt::format("expected 'all' or device ordinals in [0, 1023] separated by commas, got '{}'", item);
      return false;
    }
    if (std::find(out->begin(), out->end(), static_cast<int>(v)) != out->end()) {
      *why = fmt::format("device {} is listed twice", v);
      return false;
    }
    out->push_back(static_cast<int>(v));
  }
  return true;
}

bool resolve_devices(const TuneArgs& a, int count, int fallback, std::vector<int>* out, std::string* why) {
  out->clear();
  if (!a.devices_given()) {
    out->push_back(fallback);
    return true;
  }
  if (count < 1) {
    *why = "no GPU is present";
    return false;
  }
  if (a.all_devices) {
    for (int d = 0; d < count; ++d) out->push_back(d);
    return true;
  }
  for (int d : a.devices) {
    if (d >= count) {
      *why = fmt::format("device {} does not exist (this host has {} GPU{}: 0..{})", d, count, count == 1 ? "" : "s",
                         count - 1);
      return false;
    }
    out->push_back(d);
  }
  return true;
}

std::string preset_names() {
  std::string s;
  for (const Preset& p : presets()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

std::string usage_text() {
  std::string u =
      "usage: fa-tune [grid flags | --preset NAME] [options]\n"
      "       fa-tune --list | --prune | --export FILE | --import FILE [--cache PATH]\n"
      "\n"
      "Tunes fa's kernels for a grid of problems on this GPU and stores every candidate's time in the cache.\n"
      "\n"
      "grid:\n"
      "  --dtypes LIST          fp16,bf16,fp32 (default bf16)\n"
      "  --head-dims LIST       multiples of 8 in [8, 256] (default 128)\n"
      "  --heads LIST           query heads (default 16)\n"
      "  --kv-heads LIST        key/value heads, each dividing every --heads value (GQA; default = heads)\n"
      "  --seqlens LIST         lengths or ranges A:B (powers of two from A to B), e.g. 512:16384 (default 1024:8192)\n"
      "  --batch-tokens N       batch = max(1, N / seqlen) (default 16384)\n"
      "  --masks LIST           none, causal, window:LEFT:RIGHT (default none,causal)\n"
      "  --features LIST        none or '+'-joined bias, alibi, sinks, softcap[:V] (default none)\n"
      "  --preset NAME          a model's grid; explicit grid flags override its fields. Presets:\n";
  for (const Preset& p : presets()) u += fmt::format("                           {:<11} {}\n", p.name, p.what);
  u += "options:\n"
       "  --dry-run              compile the whole candidate space (no GPU needed) and report counts and spills\n"
       "  --arch N               SM version to compile for with --dry-run: 80, 86, 89, 90, 100, 103, 120 or\n"
       "                         121 (also sm_120, sm120; 90 and later also 90a, sm_100a); default: the\n"
       "                         device's, else $FA_ARCH, else 90\n"
       "  --budget-ms MS         timing budget per tuning key (default $FA_TUNE_BUDGET_MS or 2000)\n"
       "  --idle-ratio R         idle time after each timed run, in units of its time, so that the GPU is timed\n"
       "                         at boost clocks and not at its power cap (default 1; 0: runs back to back)\n"
       "  --threads N            compile threads (default min(cores, 8 per GPU, free RAM / 1 GiB))\n"
       "  --max-candidates N     try at most N candidates per kernel besides the default\n"
       "  --force                re-tune keys that already have results\n"
       "  --no-verify            skip the reference check of winners\n"
       "  --devices all|LIST     tune on these GPUs at once (all, or ordinals such as 0,1,3): the grid's tuning keys\n"
       "                         are shared out among them, one thread and context per GPU, all writing one cache,\n"
       "                         after one compile of the grid's candidates on every GPU's threads; the GPUs must\n"
       "                         be of one model (default: device 0)\n"
       "  --json FILE            write the results as JSON\n"
       "  --cache PATH           the cache file (default $FA_CACHE_PATH or ~/.cache/fa/cache.sqlite)\n"
       "  --list                 list tuning rows and cubins (stale ones marked); --list and --export open the\n"
       "                         cache read-only and leave nothing beside it\n"
       "  --prune                delete stale rows (the cache file must exist)\n"
       "  --export FILE          copy the cache's valid rows into FILE: a new file, or an existing fa cache they\n"
       "                         are merged into (its other rows are kept; the report counts the rows that were\n"
       "                         new, updated or already there); a FILE that is not an fa cache is refused\n"
       "  --import FILE          copy the valid rows of the fa cache FILE into this one (the report counts the\n"
       "                         rows that were new, updated or already there)\n"
       "  --progress[=bar|lines|final]  the progress bar, a line per item, or only a final line (and a line a\n"
       "                         minute while it runs); default: the bar when stderr is a terminal, else final\n"
       "  --no-progress          no progress output\n"
       "  -h, --help\n"
       "exit codes: 0 ok, 1 failure, 2 bad command line, 3 no usable GPU\n";
  return u;
}

bool parse_tune_args(const std::vector<std::string>& argv, TuneArgs* out, std::string* error) {
  TuneArgs a;
  bool set_dtypes = false, set_dims = false, set_heads = false, set_kv = false, set_seq = false, set_bt = false,
       set_masks = false, set_features = false;
  // Flags that take a value; the handler parses it.
  using Handler = std::function<bool(const std::string& flag, const std::string& v)>;
  const std::map<std::string, Handler> valued = {
      {"--dtypes",
       [&](const std::string&, const std::string& v) {
         set_dtypes = true;
         return parse_dtypes(v, &a.dtypes, error);
       }},
      {"--head-dims",
       [&](const std::string& f, const std::string& v) {
         set_dims = true;
         if (!parse_list_int(f, v, 8, 256, &a.head_dims, error)) return false;
         for (int d : a.head_dims)
           if (d % 8 != 0) {
             *error = fmt::format("{}: expected multiples of 8 in [8, 256], got {}", f, d);
             return false;
           }
         return true;
       }},
      {"--heads",
       [&](const std::string& f, const std::string& v) {
         set_heads = true;
         return parse_list_int(f, v, 1, 1024, &a.heads, error);
       }},
      {"--kv-heads",
       [&](const std::string& f, const std::string& v) {
         set_kv = true;
         return parse_list_int(f, v, 1, 1024, &a.kv_heads, error);
       }},
      {"--seqlens",
       [&](const std::string& f, const std::string& v) {
         set_seq = true;
         std::string why;
         if (parse_seqlens(v, &a.seqlens, &why)) return true;
         *error = f + ": " + why;
         return false;
       }},
      {"--batch-tokens",
       [&](const std::string& f, const std::string& v) {
         set_bt = true;
         if (parse_int(v, 1, 1LL << 32, &a.batch_tokens)) return true;
         *error = fmt::format("{}: expected an integer in [1, 2^32], got '{}'", f, v);
         return false;
       }},
      {"--masks",
       [&](const std::string&, const std::string& v) {
         set_masks = true;
         return parse_masks(v, &a.masks, error);
       }},
      {"--features",
       [&](const std::string&, const std::string& v) {
         set_features = true;
         return parse_features(v, &a.features, error);
       }},
      {"--preset",
       [&](const std::string& f, const std::string& v) {
         for (const Preset& p : presets())
           if (v == p.name) {
             a.preset = v;
             return true;
           }
         *error = fmt::format("{}: unknown preset '{}' (known: {})", f, v, preset_names());
         return false;
       }},
      {"--json",
       [&](const std::string&, const std::string& v) {
         a.json_path = v;
         return true;
       }},
      {"--devices",
       [&](const std::string& f, const std::string& v) {
         std::string why;
         if (parse_devices(v, &a.all_devices, &a.devices, &why)) return true;
         *error = f + ": " + why;
         return false;
       }},
      {"--export",
       [&](const std::string&, const std::string& v) {
         a.export_path = v;
         return true;
       }},
      {"--import",
       [&](const std::string&, const std::string& v) {
         a.import_path = v;
         return true;
       }},
      {"--cache",
       [&](const std::string&, const std::string& v) {
         a.cache_path = v;
         return true;
       }},
      {"--arch",
       [&](const std::string& f, const std::string& v) {
         if (rt::parse_arch(v, &a.arch)) return true;
         *error = fmt::format("{}: expected {}, got '{}'", f, rt::arch_expected(), v);
         return false;
       }},
      {"--budget-ms",
       [&](const std::string& f, const std::string& v) {
         char* end = nullptr;
         const double x = std::strtod(v.c_str(), &end);
         if (!v.empty() && *end == '\0' && x > 0 && x <= 3.6e6) {
           a.budget_ms = x;
           return true;
         }
         *error = fmt::format("{}: expected milliseconds in (0, 3600000], got '{}'", f, v);
         return false;
       }},
      {"--idle-ratio",
       [&](const std::string& f, const std::string& v) {
         char* end = nullptr;
         const double x = std::strtod(v.c_str(), &end);
         if (!v.empty() && *end == '\0' && x >= 0 && x <= 100) {
           a.idle_ratio = x;
           return true;
         }
         *error = fmt::format("{}: expected a ratio in [0, 100], got '{}'", f, v);
         return false;
       }},
      {"--threads",
       [&](const std::string& f, const std::string& v) {
         long long x = 0;
         if (parse_int(v, 1, 256, &x)) {
           a.threads = static_cast<int>(x);
           return true;
         }
         *error = fmt::format("{}: expected an integer in [1, 256], got '{}'", f, v);
         return false;
       }},
      {"--max-candidates",
       [&](const std::string& f, const std::string& v) {
         long long x = 0;
         if (parse_int(v, 1, 100000, &x)) {
           a.max_candidates = static_cast<int>(x);
           return true;
         }
         *error = fmt::format("{}: expected an integer >= 1, got '{}'", f, v);
         return false;
       }},
  };
  const std::map<std::string, bool*> switches = {
      {"--list", &a.list}, {"--prune", &a.prune}, {"--dry-run", &a.dry_run},    {"--help", &a.help},
      {"-h", &a.help},     {"--force", &a.force}, {"--no-verify", &a.no_verify}};

  for (size_t i = 0; i < argv.size(); ++i) {
    std::string flag = argv[i], value;
    bool has_value = false;
    if (flag.rfind("--", 0) == 0) {
      const size_t eq = flag.find('=');
      if (eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
        has_value = true;
      }
    }
    if (flag == "--no-progress") {
      if (has_value) {
        *error = flag + ": takes no value";
        return false;
      }
      a.progress = 0;
      continue;
    }
    if (flag == "--progress") {
      const std::vector<std::string> kinds = {"bar", "lines", "final"};  // a.progress 1, 2, 3
      const auto k = std::find(kinds.begin(), kinds.end(), has_value ? value : "bar");
      if (k == kinds.end()) {
        *error = fmt::format("--progress: expected bar, lines or final (as --progress=lines), got '{}'", value);
        return false;
      }
      a.progress = 1 + static_cast<int>(k - kinds.begin());
      continue;
    }
    if (auto s = switches.find(flag); s != switches.end()) {
      if (has_value) {
        *error = flag + ": takes no value";
        return false;
      }
      *s->second = true;
      continue;
    }
    auto h = valued.find(flag);
    if (h == valued.end()) {
      *error = flag.rfind("-", 0) == 0
                   ? fmt::format("{}: unknown flag (see --help)", flag)
                   : fmt::format("'{}': unexpected argument (flags start with --; see --help)", flag);
      return false;
    }
    if (!has_value) {
      // The next argument is the value, unless it is a flag: `--export --list` names no file (an option's value
      // that starts with -- is given as --flag=VALUE).
      if (i + 1 >= argv.size()) {
        *error = fmt::format("{}: missing {}", flag, value_name(flag));
        return false;
      }
      if (argv[i + 1].rfind("--", 0) == 0) {
        *error = fmt::format(
            "{}: missing {}: the next argument '{}' is a flag (write {}={} for a value that starts "
            "with --)",
            flag, value_name(flag), argv[i + 1], flag, value_name(flag));
        return false;
      }
      value = argv[++i];
    }
    if (value.empty()) {
      *error = flag + ": empty value";
      return false;
    }
    if (!h->second(flag, value)) return false;
  }

  a.grid_given = set_dtypes || set_dims || set_heads || set_kv || set_seq || set_bt || set_masks || set_features ||
                 !a.preset.empty();
  // Preset fields, then the defaults, for everything not given explicitly.
  const Preset* p = nullptr;
  for (const Preset& q : presets())
    if (a.preset == q.name) p = &q;
  std::string ignored;
  if (!set_dtypes) a.dtypes = p ? p->dtypes : std::vector<int>{gen::kBf16};
  if (!set_dims) a.head_dims = p ? p->head_dims : std::vector<int>{128};
  if (!set_heads) a.heads = p ? p->heads : std::vector<int>{16};
  if (!set_kv && !set_heads && p) a.kv_heads = p->kv_heads;
  if (!set_seq) parse_seqlens(p ? p->seqlens : "1024:8192", &a.seqlens, &ignored);
  if (!set_bt && p) a.batch_tokens = p->batch_tokens;
  if (!set_masks) parse_masks(p ? p->masks : "none,causal", &a.masks, &ignored);
  if (!set_features) parse_features(p ? p->features : "none", &a.features, &ignored);
  if (a.devices_given() && (!a.grid_given || a.dry_run)) {
    *error = "--devices: applies to tuning a grid on GPUs (give a grid or --preset; not with --dry-run)";
    return false;
  }
  for (int hq : a.heads)
    for (int hk : a.kv_heads)
      if (hq % hk != 0) {
        *error = fmt::format("--kv-heads: {} does not divide --heads {}", hk, hq);
        return false;
      }
  *out = a;
  return true;
}

std::vector<GridPoint> expand_grid(const TuneArgs& a) {
  std::vector<GridPoint> out;
  for (int dt : a.dtypes)
    for (int d : a.head_dims)
      for (int hq : a.heads)
        for (int hk : (a.kv_heads.empty() ? std::vector<int>{hq} : a.kv_heads))
          for (const MaskSpec& m : a.masks)
            for (const FeatureSpec& f : a.features)
              for (int s : a.seqlens) {
                GridPoint g;
                gen::ProblemDesc& p = g.desc;
                p.dtype = dt;
                p.head_dim = p.head_dim_v = d;
                p.heads_q = hq;
                p.heads_kv = hk;
                p.seqlen_q = p.seqlen_k = s;
                p.batch = static_cast<int>(std::max(1LL, a.batch_tokens / s));
                p.total_q = p.total_k = p.batch * s;
                p.mask = m.mask;
                p.win_left = m.mask == gen::kMaskWindow ? m.left : -1;
                p.win_right = m.mask == gen::kMaskWindow ? m.right : -1;
                p.has_bias = f.bias;
                p.has_alibi = f.alibi;
                p.has_sinks = f.sinks;
                p.has_softcap = f.softcap > 0;
                p.has_lse = true;
                p.aligned16 = true;
                p.tma_ok = true;  // fa-tune's own contiguous BSHD buffers
                g.softcap = f.softcap;
                g.label = fmt::format("{} d{} hq{}/kv{} {} {} s{} b{}", gen::dtype_name(dt), d, hq, hk, m.name, f.name,
                                      s, p.batch);
                out.push_back(g);
              }
  return out;
}

}  // namespace fa::tune
