// fa_tune_cli.cpp -- fa-tune: argument handling, the dry-run compile report, GPU tuning of a grid, the winners'
// table, JSON output and the cache maintenance actions.
#include "tuner/fa_tune_cli.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "cache_db/cache_db.h"
#include "generator/family.h"
#include "runtime/context.h"
#include "runtime/validate.h"
#include "tuner/bucket.h"
#include "tuner/cache_store.h"
#include "tuner/device_problem.h"
#include "tuner/fa_tune_args.h"
#include "tuner/progress.h"
#include "tuner/thread_pool.h"
#include "tuner/tuner.h"

namespace fa::tune {

namespace {

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') o += '\\', o += ch;
    else if (c == '\n') o += "\\n";
    else if (c < 0x20) o += fmt::format("\\u{:04x}", c);
    else o += ch;
  }
  return o + "\"";
}

std::string json_num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "null"; }

std::string fmt_ms(double v) { return std::isfinite(v) ? fmt::format("{:.4f}", v) : "-"; }
std::string fmt_tf(double v) { return std::isfinite(v) ? fmt::format("{:.1f}", v) : "-"; }

bool write_file(const std::string& path, const std::string& text, std::FILE* err) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    fmt::print(err, "fa-tune: --json: cannot write '{}'\n", path);
    return false;
  }
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return true;
}

struct ContextHolder {
  const CliHooks& hooks;
  fa_context c = nullptr;
  ~ContextHolder() {
    if (c) hooks.context_destroy(c);
  }
};

// Why the cache file asked for is not in use ("" when it is, or when none was asked for): "no such file", or
// "cannot be read" (its Db warned why).
std::string unusable_file(const cache::Db* db) {
  if (!db->in_memory() || db->requested_path() == ":memory:") return "";
  std::error_code ec;
  return std::filesystem::exists(db->requested_path(), ec) ? "cannot be read" : "no such file";
}

int do_list(cache::Db* db, std::FILE* out) {
  if (const std::string why = unusable_file(db); !why.empty()) {
    fmt::print(out, "cache {}: {}; nothing listed\n", db->requested_path(), why);
    return why == "no such file" ? 0 : 1;  // no cache yet is not a failure
  }
  const auto rows = db->list_tune_rows(true);
  const auto cubins = db->list_cubins(true);
  fmt::print(out, "cache {}{}\n", db->path(), db->in_memory() ? " (in memory)" : db->read_only() ? " (read-only)" : "");
  fmt::print(out, "tuning rows: {}\n", rows.size());
  for (const cache::TuneRecord& r : rows) {
    fmt::print(out, "  {:<5} {} sm{} | {} | {} | {} | {} ms | {}\n", r.stale ? "STALE" : "", r.gpu_name, r.sm_count,
               r.row.semantic_key, r.row.bucket, r.row.tunables, fmt_ms(r.row.median_ms), r.row.status);
  }
  fmt::print(out, "cubins: {}\n", cubins.size());
  for (const cache::CubinSummary& s : cubins) {
    fmt::print(out, "  {:<5} sm_{} {} | {} bytes | regs {} spill {} smem {} | nvrtc {} gen v{}\n",
               s.stale ? "STALE" : "", s.arch, s.compile_key, s.size_bytes, s.registers, s.spill_bytes, s.smem_bytes,
               s.nvrtc_version, s.generator_version);
  }
  return 0;
}

std::string plural_rows(int64_t n) { return counted(static_cast<size_t>(n), "row"); }

// "3 new, 1 updated, 250 already present".
std::string fates(const cache::TransferCounts& n) {
  return fmt::format("{} new, {} updated, {} already present", n.added, n.updated, n.unchanged);
}

// --import FILE into db: how many rows were new, replaced a row, or were there already.
int do_import(cache::Db* db, const std::string& from, std::FILE* out, std::FILE* err) {
  cache::TransferCounts n;
  if (db->import_from(from, &n) < 0) {
    fmt::print(err, "fa-tune: {}\n", db->last_error());
    return 1;
  }
  fmt::print(out, "imported {} from {} into {}: {}\n", plural_rows(n.total()), from, db->path(), fates(n));
  return 0;
}

// --export FILE from db: into a new file, or merged into an existing fa cache (said so, with what it changed).
int do_export(cache::Db* db, const std::string& to, std::FILE* out, std::FILE* err) {
  if (const std::string why = unusable_file(db); !why.empty()) {
    fmt::print(err, "fa-tune: export from {}: {}\n", db->requested_path(), why);
    return 1;
  }
  std::error_code ec;
  const bool existed = std::filesystem::exists(to, ec);
  cache::TransferCounts n;
  if (!db->export_to(to, &n)) {
    fmt::print(err, "fa-tune: {}\n", db->last_error());
    return 1;
  }
  if (existed) {
    fmt::print(out, "merged {} of {} into the existing cache {} (its other rows are kept): {}\n",
               plural_rows(n.total()), db->path(), to, fates(n));
  } else {
    fmt::print(out, "exported {} of {} into the new file {}\n", plural_rows(n.total()), db->path(), to);
  }
  return 0;
}

// The checks made before anything is opened or created: --import's file must be an fa cache, --prune's cache must
// exist (unless the same command creates it). Returns 0, or the exit code after printing why.
int check_files_first(const TuneArgs& a, const std::string& cache_file, std::FILE* err) {
  if (!a.import_path.empty()) {
    if (const std::string why = cache::cache_file_problem(a.import_path); !why.empty()) {
      fmt::print(err, "fa-tune: --import: {} is not a valid fa cache: {}; nothing was imported or created\n",
                 a.import_path, why);
      return 1;
    }
  }
  std::error_code ec;
  const bool creates = a.grid_given || a.dry_run || !a.import_path.empty();
  if (a.prune && !creates && cache_file != ":memory:" && !std::filesystem::exists(cache_file, ec)) {
    fmt::print(err, "fa-tune: --prune: there is no cache file at {}; nothing to prune, nothing created\n", cache_file);
    return 1;
  }
  return 0;
}

// --list and --export of a cache opened read-only: a missing file lists nothing (exit 0) and exports nothing (exit
// 1); a file that is not an fa cache is said to be so (exit 1).
int do_read_only_actions(fa_context c, const TuneArgs& a, const std::string& cache_file, std::FILE* out,
                         std::FILE* err) {
  std::error_code ec;
  if (!std::filesystem::exists(cache_file, ec)) {
    if (a.list) fmt::print(out, "cache {}: no such file; nothing listed\n", cache_file);
    if (a.export_path.empty()) return 0;
    fmt::print(err, "fa-tune: export from {}: no such file; nothing exported\n", cache_file);
    return 1;
  }
  if (const std::string why = cache::cache_file_problem(cache_file); !why.empty()) {
    fmt::print(err, "fa-tune: {} is not a valid fa cache: {}\n", cache_file, why);
    return 1;
  }
  const cache::WarnFn warn = [err](const std::string& m) { fmt::print(err, "fa-tune: cache: {}\n", m); };
  const std::unique_ptr<cache::Db> db = cache::Db::open(cache_file, context_env(c), warn, cache::OpenMode::kReadOnly);
  int rc = 0;
  if (a.list && do_list(db.get(), out) != 0) rc = 1;
  if (!a.export_path.empty()) rc = std::max(rc, do_export(db.get(), a.export_path, out, err));
  return rc;
}

// Where a compile or tuning run kept what it made, so that no file is written unnamed: "" for a file written (its
// size is known once the cache is closed: print_cache_note), else the note itself.
std::string cache_note_now(const cache::Db* db) {
  if (db == nullptr || db->in_memory()) return "cache: in memory: nothing made here is kept after this run\n";
  if (db->read_only()) return fmt::format("cache: {} is read-only: nothing made here was kept\n", db->path());
  return "";
}

// The cache file a run wrote, once closed (SQLite has moved its -wal into it), its size and what it keeps.
void print_cache_note(const std::string& path, const char* keeps, std::FILE* out) {
  std::error_code ec;
  const double bytes = static_cast<double>(std::filesystem::file_size(path, ec));
  fmt::print(out, "cache: {} ({}) keeps {}\n", path,
             ec            ? "size unknown"
             : bytes < 1e6 ? fmt::format("{:.0f} kB", bytes / 1e3)
                           : fmt::format("{:.1f} MB", bytes / 1e6),
             keeps);
}

// The grid's distinct candidate kernels (each config once, in grid order); per_semantic counts them per tuning
// semantic key (the kernel semantics the grid needs, those with no candidate too).
std::vector<gen::KernelConfig> grid_candidates(const std::vector<GridPoint>& grid, int arch,
                                               const gen::DeviceLimits& lim, int max_candidates,
                                               std::map<std::string, int>* per_semantic) {
  std::vector<gen::KernelConfig> configs;
  std::set<std::string> seen;
  for (const GridPoint& g : grid) {
    const gen::Semantic s = gen::select_forward(g.desc, arch);
    int& n = (*per_semantic)[tuning_semantic_key(s)];
    for (const gen::KernelConfig& cfg : candidate_configs(s, g.desc, lim, max_candidates)) {
      if (seen.insert(gen::canonical_key(cfg)).second) {
        configs.push_back(cfg);
        ++n;
      }
    }
  }
  return configs;
}

// --dry-run: every candidate config of the grid compiled once (deduplicated), pruned by ptxas.
int do_dry_run(fa_context c, const TuneArgs& a, ProgressMode mode, std::FILE* out, std::FILE* err) {
  const int arch = a.arch > 0 ? a.arch : c->arch;  // the context's: the device's, else $FA_ARCH, else the default
  const gen::DeviceLimits lim = c->has_device && arch == c->arch ? c->limits : gen::limits_for_arch(arch);
  const std::vector<GridPoint> grid = expand_grid(a);
  std::map<std::string, int> per_semantic;
  const std::vector<gen::KernelConfig> configs = grid_candidates(grid, arch, lim, a.max_candidates, &per_semantic);
  fmt::print(out, "dry run for sm_{}: {}, {}, {}\n", arch, counted(grid.size(), "grid point"),
             counted(per_semantic.size(), "kernel semantic"), counted(configs.size(), "distinct candidate kernel"));
  std::fflush(out);
  Progress progress(err, mode, configs.size(), "compile");
  TuneOptions o;
  o.threads = a.threads;
  std::atomic<long long> cpu_ms{0}, from_store{0};
  o.compile = [c, &cpu_ms, &from_store](const gen::KernelConfig& cfg, rt::PtxasInfo* info) -> rt::Status {
    std::shared_ptr<rt::Kernel> k;
    rt::Status st = c->kernels->get(cfg, true, &k);
    if (!st.ok()) return st;
    *info = k->ptxas;
    cpu_ms += static_cast<long long>(k->compile_seconds * 1000.0);
    from_store += k->from_store ? 1 : 0;
    return st;
  };
  o.on_compiled = [&](size_t i, const CandidateResult& r) {
    progress.step(gen::canonical_key(configs[i]) + " " + r.status);
  };
  double wall = 0;
  const std::vector<CandidateResult> res = compile_candidates(c, configs, o, &wall);
  progress.finish();
  std::map<std::string, int> by_status;
  for (const CandidateResult& r : res) ++by_status[r.status];
  const int threads = a.threads > 0 ? a.threads : default_compile_threads();
  const size_t loaded = static_cast<size_t>(from_store.load());
  fmt::print(out,
             "{} in {:.1f} s wall on {}: {} compiled by NVRTC ({:.1f} s of NVRTC time), {} loaded from the "
             "cache\n",
             counted(res.size(), "kernel"), wall, counted(static_cast<size_t>(threads), "thread"), res.size() - loaded,
             static_cast<double>(cpu_ms.load()) / 1000.0, loaded);
  for (const auto& [st, n] : by_status) fmt::print(out, "  {:<14} {}\n", st, n);
  for (const auto& [sem, n] : per_semantic) fmt::print(out, "  semantic {}: {} candidates\n", sem, n);
  int shown = 0;
  for (size_t i = 0; i < res.size(); ++i) {
    if (res[i].status == "ok") continue;
    if (shown++ < 10)
      fmt::print(out, "  rejected {}: {} {}\n", gen::canonical_key(configs[i]), res[i].status,
                 res[i].detail.substr(0, 300));
  }
  if (!a.json_path.empty()) {
    std::string j = fmt::format(
        "{{\"mode\":\"dry-run\",\"arch\":{},\"grid_points\":{},\"kernels\":{},\"wall_s\":{},\"candidates\":[", arch,
        grid.size(), res.size(), json_num(wall));
    for (size_t i = 0; i < res.size(); ++i) {
      j += fmt::format("{}{{\"key\":{},\"status\":{},\"registers\":{},\"spill_bytes\":{},\"detail\":{}}}", i ? "," : "",
                       json_str(gen::canonical_key(configs[i])), json_str(res[i].status), res[i].ptxas.registers,
                       res[i].ptxas.spill_stores + res[i].ptxas.spill_loads, json_str(res[i].detail.substr(0, 500)));
    }
    j += "]}\n";
    if (!write_file(a.json_path, j, err)) return 1;
  }
  return by_status.count("compile_error") ? 1 : 0;
}

struct Row {
  GridPoint g;
  TuneOutcome o;
  std::string error;
  int device = 0;  // the GPU that tuned it
};

// One grid point tuned (or found in the cache) on context c.
void tune_point(fa_context c, const TuneArgs& a, const TuneOptions& o, Row* row) {
  std::unique_ptr<DeviceProblem> dp;
  rt::Status st = DeviceProblem::create(c, row->g, &dp);
  fa_params vp;
  gen::ProblemDesc vd;
  if (st.ok()) st = rt::validate_forward(&dp->params(), &vp, &vd);
  if (st.ok()) {
    const gen::Semantic s = gen::select_forward(vd, c->arch);
    rt::TuneRequest req = dp->request(vp, vd);
    if (a.no_verify) req.verify = nullptr;
    st = tune(c, s, vd, req, o, &row->o);
  }
  if (!st.ok()) row->error = st.message;
  row->device = c->device_ordinal;
}

int do_tune(const std::vector<fa_context>& devices, const TuneArgs& a, ProgressMode mode, std::FILE* out,
            std::FILE* err) {
  fa_context c = devices.front();
  const std::vector<GridPoint> grid = expand_grid(a);
  TuneOptions o;
  o.budget_ms = a.budget_ms;
  o.idle_ratio = a.idle_ratio;
  o.threads = a.threads;
  const int gpus = static_cast<int>(devices.size());
  const int host_threads = a.threads > 0 ? a.threads : multi_device_compile_threads(gpus);  // every GPU's share
  if (o.threads == 0 && gpus > 1) o.threads = std::max(1, host_threads / gpus);             // each GPU's own compiles
  o.use_cache = !a.force;
  o.max_candidates = a.max_candidates;
  std::vector<Row> rows;
  for (const GridPoint& g : grid) rows.push_back(Row{g, {}, {}, c->device_ordinal});
  const auto t0 = std::chrono::steady_clock::now();
  // Several GPUs: the grid's candidates compiled once, on every compile thread the GPUs bring, into the shared cache
  // (the first context's store), before the GPUs' threads start; each GPU's context then loads their cubins from the
  // cache instead of compiling the same candidates on its share of the threads. Not with --max-candidates (which
  // candidates make the cut depends on winners found during the sweep).
  if (devices.size() > 1 && a.max_candidates == 0) {
    std::map<std::string, int> per_semantic;
    const std::vector<gen::KernelConfig> configs = grid_candidates(grid, c->arch, c->limits, 0, &per_semantic);
    TuneOptions co;
    co.threads = host_threads;
    Progress compiling(err, mode, configs.size(), "compile");
    co.on_compiled = [&](size_t i, const CandidateResult& r) {
      compiling.step(gen::canonical_key(configs[i]) + " " + r.status);
    };
    double compile_wall = 0;
    compile_candidates(c, configs, co, &compile_wall);
    compiling.finish();
    fmt::print(out, "compiled the grid's {} once, on {}, in {:.1f} s\n", counted(configs.size(), "candidate kernel"),
               counted(static_cast<size_t>(co.threads), "thread"), compile_wall);
  }
  Progress progress(err, mode, grid.size(), "tune");
  if (!a.devices_given()) {  // the plain sweep: this thread, grid order
    for (Row& r : rows) {
      tune_point(c, a, o, &r);
      progress.step(r.g.label);
    }
  } else {  // --devices (one GPU too): a thread per GPU over the shared list of units
    const std::vector<std::vector<size_t>> units = shard_units(grid, c->arch, a.max_candidates > 0);
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (fa_context dc : devices) {
      threads.emplace_back([&, dc] {
        for (size_t u = next++; u < units.size(); u = next++) {
          for (size_t i : units[u]) {
            tune_point(dc, a, o, &rows[i]);
            progress.step(fmt::format("{} [gpu {}]", rows[i].g.label, dc->device_ordinal));
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  progress.finish();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  fmt::print(out, "{:<44} {:<24} {:>9} {:>8} {:>9} {:>8} {:>7} {:>7}  {}\n", "problem", "winner", "ms", "TFLOP/s",
             "default", "TFLOP/s", "speedup", "tried", "source");
  int failures = 0;
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      ++failures;
      fmt::print(out, "{:<44} FAILED: {}\n", r.g.label, r.error.substr(0, 400));
      continue;
    }
    int timed = 0;
    for (const CandidateResult& cr : r.o.candidates) timed += std::isfinite(cr.median_ms) ? 1 : 0;
    const double speedup = r.o.default_ms / r.o.winner_ms;
    fmt::print(out, "{:<44} {:<24} {:>9} {:>8} {:>9} {:>8} {:>7} {:>3}/{:<3}  {}{}\n", r.g.label,
               gen::tunables_key(r.o.semantic, r.o.winner), fmt_ms(r.o.winner_ms), fmt_tf(r.o.winner_tflops),
               fmt_ms(r.o.default_ms), fmt_tf(r.o.default_tflops),
               std::isfinite(speedup) ? fmt::format("{:.2f}x", speedup) : "-", timed, r.o.candidates.size(),
               fmt::format("{}{}", r.o.from_cache ? "cache" : "tuned",
                           devices.size() > 1 ? fmt::format(" gpu{}", r.device) : ""),
               r.o.verified ? fmt::format(" (verified, err {:.1e})", r.o.verify_error)
                            : (r.o.from_cache ? "" : " (" + r.o.verify_note + ")"));
  }
  std::string ordinals;
  for (fa_context dc : devices) ordinals += fmt::format("{}{}", ordinals.empty() ? "" : ",", dc->device_ordinal);
  fmt::print(out, "{} on {} ({}) in {:.1f} s\n", counted(rows.size(), "problem"), counted(devices.size(), "GPU"),
             ordinals, wall);
  if (!a.json_path.empty()) {
    std::string j = fmt::format(
        "{{\"mode\":\"tune\",\"gpu\":{},\"sm_count\":{},\"arch\":{},\"devices\":[{}],"
        "\"wall_s\":{},\"results\":[",
        json_str(c->gpu_name), c->sm_count, c->arch, ordinals, json_num(wall));
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      j += fmt::format(
          "{}{{\"problem\":{},\"device\":{},\"semantic_key\":{},\"bucket\":{},\"error\":{},\"from_cache\":{},"
          "\"winner\":{},\"winner_ms\":{},\"winner_tflops\":{},\"default\":{},\"default_ms\":{},"
          "\"default_tflops\":{},\"verified\":{},\"verify_error\":{},\"candidates\":[",
          i ? "," : "", json_str(r.g.label), r.device, json_str(r.o.semantic_key), json_str(r.o.bucket),
          json_str(r.error), r.o.from_cache ? "true" : "false", json_str(gen::tunables_key(r.o.semantic, r.o.winner)),
          json_num(r.o.winner_ms), json_num(r.o.winner_tflops), json_str(gen::tunables_key(r.o.semantic, r.o.defaults)),
          json_num(r.o.default_ms), json_num(r.o.default_tflops), r.o.verified ? "true" : "false",
          json_num(r.o.verify_error));
      for (size_t k = 0; k < r.o.candidates.size(); ++k) {
        const CandidateResult& cr = r.o.candidates[k];
        j += fmt::format("{}{{\"tunables\":{},\"status\":{},\"median_ms\":{},\"registers\":{}}}", k ? "," : "",
                         json_str(cr.key), json_str(cr.status), json_num(cr.median_ms), cr.ptxas.registers);
      }
      j += "]}";
    }
    j += "]}\n";
    if (!write_file(a.json_path, j, err)) return 1;
  }
  return failures ? 1 : 0;
}

// The contexts of the GPUs --devices names (c itself for c's device; others created with c's options on their
// ordinal). Returns 0, or the exit code after printing why: 2 for a device that does not exist or GPUs of different
// models (each model's rows are keyed apart in the cache: tune them in separate runs), 1 when a context fails.
int open_devices(fa_context c, const TuneArgs& a, const fa_context_options& opt, const CliHooks& hooks,
                 std::vector<fa_context>* devices, std::vector<std::unique_ptr<ContextHolder>>* more, std::FILE* err) {
  int count = 0;
  if (c->drv == nullptr || c->drv->cuDeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
  std::vector<int> ordinals;
  std::string why;
  if (!resolve_devices(a, count, c->device_ordinal, &ordinals, &why)) {
    fmt::print(err, "fa-tune: --devices: {}\n", why);
    return 2;
  }
  for (int d : ordinals) {
    if (d == c->device_ordinal) {
      devices->push_back(c);
      continue;
    }
    fa_context_options o = opt;
    o.device_ordinal = d;
    more->push_back(std::unique_ptr<ContextHolder>(new ContextHolder{hooks}));
    if (hooks.context_create(&o, &more->back()->c) != FA_OK) {
      fmt::print(err, "fa-tune: --devices: cannot create an fa context on device {}: {}\n", d, fa_last_error());
      return 1;
    }
    fa_context dc = more->back()->c;
    if (!dc->has_device) {
      fmt::print(err, "fa-tune: --devices: device {} is not usable: {}\n", d, dc->no_device_reason);
      return 1;
    }
    devices->push_back(dc);
  }
  for (fa_context dc : *devices) {
    const fa_context first = devices->front();
    if (dc->gpu_name != first->gpu_name || dc->sm_count != first->sm_count || dc->arch != first->arch) {
      fmt::print(err,
                 "fa-tune: --devices: device {} is a {} ({} SMs, sm_{}) and device {} a {} ({} SMs, sm_{}): tune "
                 "one GPU model per run (the cache keeps each model's results apart)\n",
                 first->device_ordinal, first->gpu_name, first->sm_count, first->arch, dc->device_ordinal, dc->gpu_name,
                 dc->sm_count, dc->arch);
      return 2;
    }
  }
  return 0;
}

}  // namespace

std::vector<std::vector<size_t>> shard_units(const std::vector<GridPoint>& grid, int arch, bool by_semantic) {
  std::vector<std::vector<size_t>> units;
  std::map<std::string, size_t> unit_of;
  for (size_t i = 0; i < grid.size(); ++i) {
    const gen::Semantic s = gen::select_forward(grid[i].desc, arch);
    const std::string key = by_semantic ? tuning_semantic_key(s) : tuning_key(s, grid[i].desc);
    auto [it, fresh] = unit_of.emplace(key, units.size());
    if (fresh) units.emplace_back();
    units[it->second].push_back(i);
  }
  return units;
}

int run_fa_tune(const std::vector<std::string>& argv, const CliHooks& hooks, std::FILE* out, std::FILE* err) {
  TuneArgs a;
  std::string error;
  if (!parse_tune_args(argv, &a, &error)) {
    fmt::print(err, "fa-tune: {}\n", error);
    return 2;
  }
  if (a.help) {
    fmt::print(out, "{}", usage_text());
    return 0;
  }
  const bool maintenance = a.list || a.prune || !a.export_path.empty() || !a.import_path.empty();
  if (!a.grid_given && !a.dry_run && !maintenance) {
    fmt::print(err,
               "fa-tune: nothing to do: give a grid (e.g. --preset llama3-8b), --dry-run, --list, --prune, "
               "--export or --import (see --help)\n");
    return 2;
  }
  if (hooks.context_create == nullptr || hooks.context_destroy == nullptr) {
    fmt::print(err, "fa-tune: internal error: no context hooks\n");
    return 1;
  }
  const std::string cache_file = a.cache_path.empty() ? cache::default_cache_path() : a.cache_path;
  if (const int code = check_files_first(a, cache_file, err); code != 0) return code;
  fa_context_options opt;
  fa_context_options_init(&opt);
  opt.tune_policy = FA_TUNE_DEFAULTS_ONLY;  // fa-tune times explicitly; nothing implicit
  // Messages follow $FA_LOG (warn by default), as for any program using fa.
  // --list and --export only read the cache: the file is opened read-only (never written, migrated or moved aside,
  // even when corrupt) and the context gets a private in-memory cache. Everything else uses the context's cache.
  const bool writes = a.grid_given || a.dry_run || a.prune || !a.import_path.empty();
  opt.cache_path = !writes ? ":memory:" : a.cache_path.empty() ? nullptr : a.cache_path.c_str();
  ContextHolder holder{hooks};
  if (hooks.context_create(&opt, &holder.c) != FA_OK) {
    fmt::print(err, "fa-tune: cannot create an fa context: {}\n", fa_last_error());
    return 1;
  }
  fa_context c = holder.c;
  if (!writes) return do_read_only_actions(c, a, cache_file, out, err);
  const ProgressMode progress = progress_mode(a.progress, isatty(fileno(err)) != 0);
  cache::Db* db = context_db(c);
  if (db == nullptr) {
    fmt::print(err, "fa-tune: internal error: the context has no cache\n");
    return 1;
  }
  int rc = 0;

  // The Db's messages name the action and the file ("import from F: ..."): printed once, as they are.
  if (!a.import_path.empty() && do_import(db, a.import_path, out, err) != 0) return 1;
  if (a.dry_run) {
    rc = std::max(rc, do_dry_run(c, a, progress, out, err));
  } else if (a.grid_given) {
    if (!c->has_device) {
      fmt::print(err,
                 "fa-tune: no usable GPU: {}\nfa-tune: use --dry-run (with --arch, e.g. 90 or 120) to compile "
                 "the candidate space without a GPU\n",
                 c->no_device_reason);
      return 3;
    }
    if (a.arch > 0 && a.arch != c->arch) {
      fmt::print(err, "fa-tune: --arch: {} differs from the device's sm_{}; --arch only applies to --dry-run\n", a.arch,
                 c->arch);
      return 2;
    }
    std::vector<std::unique_ptr<ContextHolder>> more;  // the other GPUs' contexts (on the same cache file)
    std::vector<fa_context> devices;
    if (const int code = open_devices(c, a, opt, hooks, &devices, &more, err); code != 0) return code;
    rc = std::max(rc, do_tune(devices, a, progress, out, err));
  }
  if (a.prune) {
    const int n = db->prune_stale();
    if (n < 0) {
      fmt::print(err, "fa-tune: --prune failed: {}\n", db->last_error());
      rc = 1;
    } else {
      fmt::print(out, "pruned {} from {}\n", counted(static_cast<size_t>(n), "stale row"), db->path());
    }
  }
  if (a.list && do_list(db, out) != 0) rc = 1;
  if (!a.export_path.empty()) rc = std::max(rc, do_export(db, a.export_path, out, err));
  if (a.dry_run || a.grid_given) {
    const std::string note = cache_note_now(db), path = db->path();
    hooks.context_destroy(holder.c);  // closes the cache
    holder.c = nullptr;
    if (!note.empty()) fmt::print(out, "{}", note);
    else
      print_cache_note(path,
                       a.dry_run ? "the compiled kernels: later runs load them instead of compiling them"
                                 : "the tuning results and their kernels: later runs use them",
                       out);
  }
  return rc;
}

}  // namespace fa::tune
