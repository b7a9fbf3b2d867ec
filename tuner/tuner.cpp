// tuner.cpp -- candidate generation, parallel compilation with ptxas pruning, timing, verification, storage.
#include "tuner/tuner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <map>

#include "cache_db/cache_db.h"
#include "generator/family.h"
#include "tuner/bucket.h"
#include "tuner/cache_store.h"
#include "tuner/thread_pool.h"
#include "tuner/tune_env.h"

namespace fa::tune {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Visible (i, j) pairs of one (batch, head) under the bottom-right aligned mask.
double visible_pairs(const gen::ProblemDesc& p) {
  const long long sq = p.seqlen_q, sk = p.seqlen_k;
  if (p.mask == gen::kMaskNone) return static_cast<double>(sq) * static_cast<double>(sk);
  long long wl = -1, wr = -1;
  if (p.mask == gen::kMaskCausal) wr = 0;
  else {
    wl = p.win_left;
    wr = p.win_right;
  }
  double total = 0;
  for (long long i = 0; i < sq; ++i) {
    const long long diag = i + sk - sq;
    const long long lo = wl < 0 ? 0 : std::max(0LL, diag - wl);
    const long long hi = wr < 0 ? sk - 1 : std::min(sk - 1, diag + wr);
    if (hi >= lo) total += static_cast<double>(hi - lo + 1);
  }
  return total;
}

double default_tolerance(int dtype) {
  if (dtype == gen::kFp32) return 1e-4;
  if (dtype == gen::kBf16) return 2e-2;
  return 5e-3;
}

}  // namespace

double default_budget_ms() {
  if (double v = 0; parse_tune_budget_ms(std::getenv("FA_TUNE_BUDGET_MS"), &v) && v > 0) return v;
  return 2000.0;
}

double attention_flops(const gen::ProblemDesc& p) {
  const double per_pair = 2.0 * (p.head_dim + p.head_dim_v);
  const double f = per_pair * visible_pairs(p) * static_cast<double>(p.batch) * static_cast<double>(p.heads_q);
  return p.backward ? 2.5 * f : f;
}

std::vector<gen::KernelConfig> candidate_configs(const gen::Semantic& s, const gen::ProblemDesc& p,
                                                 const gen::DeviceLimits& lim, int max_candidates) {
  std::vector<gen::KernelConfig> out;
  if (s.family == nullptr) return out;
  const gen::Tunables def = s.family->defaults(s);
  const gen::KernelConfig dc = gen::finalize(s, def, p);
  if (gen::is_valid(dc, lim, nullptr)) out.push_back(dc);
  int taken = 0;
  for (const gen::Tunables& t : gen::valid_space(s, lim)) {
    if (t == def) continue;
    if (max_candidates > 0 && taken >= max_candidates) break;
    const gen::KernelConfig c = gen::finalize(s, t, p);
    if (!gen::is_valid(c, lim, nullptr)) continue;  // even_k may change validity
    out.push_back(c);
    ++taken;
  }
  return out;
}

std::vector<gen::KernelConfig> order_by_prior_winners(const std::vector<gen::KernelConfig>& configs,
                                                      const std::vector<std::string>& winners) {
  if (configs.empty() || winners.empty()) return configs;
  std::vector<gen::KernelConfig> out{configs[0]};
  std::vector<bool> taken(configs.size(), false);
  taken[0] = true;
  for (const std::string& w : winners) {
    for (size_t i = 1; i < configs.size(); ++i) {
      if (!taken[i] && gen::tunables_key(configs[i].s, configs[i].t) == w) {
        out.push_back(configs[i]);
        taken[i] = true;
      }
    }
  }
  for (size_t i = 1; i < configs.size(); ++i)
    if (!taken[i]) out.push_back(configs[i]);
  return out;
}

std::vector<std::string> prior_winners(fa_context c, const std::string& semantic_key) {
  cache::Db* db = context_db(c);
  if (db == nullptr) return {};
  // Per bucket: the fastest "ok" row; then per tunables key: buckets won and the best time.
  std::map<std::string, std::pair<std::string, double>> best_of_bucket;
  for (const cache::TuneRecord& r : db->list_tune_rows(false)) {
    if (r.row.semantic_key != semantic_key || r.row.status != "ok" || !std::isfinite(r.row.median_ms)) continue;
    auto it = best_of_bucket.find(r.row.bucket);
    if (it == best_of_bucket.end() || r.row.median_ms < it->second.second)
      best_of_bucket[r.row.bucket] = {r.row.tunables, r.row.median_ms};
  }
  std::map<std::string, std::pair<int, double>> wins;
  for (const auto& [bucket, w] : best_of_bucket) {
    auto& e = wins[w.first];
    e.first += 1;
    e.second = e.first == 1 ? w.second : std::min(e.second, w.second);
  }
  std::vector<std::pair<std::string, std::pair<int, double>>> v(wins.begin(), wins.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second.first != b.second.first ? a.second.first > b.second.first : a.second.second < b.second.second;
  });
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.first);
  return out;
}

std::string ptxas_verdict(const rt::PtxasInfo& info, const gen::KernelConfig& cfg, const gen::DeviceLimits& lim,
                          std::string* why) {
  if (info.spill_stores > 0 || info.spill_loads > 0) {
    if (why)
      *why = fmt::format("ptxas: {} bytes spill stores, {} bytes spill loads", info.spill_stores, info.spill_loads);
    return "spill";
  }
  if (info.registers > lim.max_regs_per_thread) {
    if (why) *why = fmt::format("ptxas: {} registers per thread > {}", info.registers, lim.max_regs_per_thread);
    return "registers";
  }
  const long long threads = static_cast<long long>(cfg.s.family->launch(cfg, gen::LaunchShape{}).block);
  if (info.registers > 0 && info.registers * threads > 65536) {
    if (why) *why = fmt::format("ptxas: {} registers x {} threads > 65536 per block", info.registers, threads);
    return "registers";
  }
  return "";
}

std::vector<CandidateResult> compile_candidates(fa_context c, const std::vector<gen::KernelConfig>& configs,
                                                const TuneOptions& o, double* wall_seconds) {
  std::vector<CandidateResult> out(configs.size());
  CompileFn compile = o.compile;
  if (!compile) {
    compile = [c](const gen::KernelConfig& cfg, rt::PtxasInfo* info) -> rt::Status {
      std::shared_ptr<rt::Kernel> k;
      rt::Status st = c->kernels->get(cfg, true, &k);
      if (st.ok()) *info = k->ptxas;
      return st;
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  parallel_for(configs.size(), o.threads > 0 ? o.threads : default_compile_threads(), [&](size_t i) {
    CandidateResult& r = out[i];
    r.t = configs[i].t;
    r.key = gen::tunables_key(configs[i].s, configs[i].t);
    if (o.cancelled && o.cancelled()) {
      r.status = "not_timed";
      r.detail = "tuning cancelled";
      return;
    }
    rt::Status st;
    try {
      st = compile(configs[i], &r.ptxas);
    } catch (const std::exception& e) { st = rt::error(FA_ERROR_INTERNAL, e.what()); }
    if (!st.ok()) {
      r.status = "compile_error";
      r.detail = st.message.substr(0, 2000);
    } else {
      std::string why;
      r.status = ptxas_verdict(r.ptxas, configs[i], c->limits, &why);
      if (!r.status.empty()) r.detail = why;
      else r.status = "ok";
    }
    if (o.on_compiled) o.on_compiled(i, r);
  });
  if (wall_seconds) *wall_seconds = seconds_since(t0);
  return out;
}

namespace {

// One timing of one candidate: false (with `detail`) when the launch fails, throws or reads a non-finite time.
bool time_candidate(Timer& timer, const gen::KernelConfig& cfg, const rt::TuneRequest& req, const TimingPlan& plan,
                    double* ms, std::string* detail) {
  *ms = std::nan("");
  rt::Status st;
  try {
    st = timer.time(cfg, req, plan, ms);
  } catch (const std::exception& e) { st = rt::error(FA_ERROR_INTERNAL, e.what()); }
  if (st.ok() && std::isfinite(*ms) && *ms >= 0) return true;
  *detail = st.ok() ? "non-finite time" : st.message.substr(0, 2000);
  return false;
}

// Finals. The first pass times one candidate after another in a fixed order, so drift in between (clocks, power,
// temperature, a co-tenant) can decide a close race. On H100 (d 128 forward, 16k, 2026-11-23) the first pass put the
// top eight tiles within 2% for fp16 and picked 128 x 128 x 8 warps, which then ran 7% behind FA2 in the benchmark,
// while bf16 picked 128 x 64 x 4. So the fastest few of the first pass and the default are re-timed in rounds that
// visit each in turn (the order rotating, so drift reaches all of them alike), and a finalist's figure becomes the
// median of its round times. The others become "eliminated" (their first-pass time kept): best() reads only "ok" rows,
// so it returns the finals' winner. A finals run is a burst of launches back to back (timer.h), as models and
// benchmarks run them, without an L2 flush: on the H200 (bf16 causal d 64 / 128, 512-4k;
// bench/probes/tune_timing_probe.cpp) flushed bursts read non-persistent points 2-3% slower than unflushed calls back
// to back or fa_run calls, and persistent ones as fast or faster, enough to flip the close races the finals decide. The
// first pass keeps single flushed launches (cheaper over the whole space).
void run_finals(const std::vector<gen::KernelConfig>& configs, const TuneOptions& o, const TimingPlan& first,
                double budget, Timer& timer, const rt::TuneRequest& req, TuneOutcome* out) {
  const int rounds = o.final_rounds < 0 ? 3 : o.final_rounds;
  const size_t top = static_cast<size_t>(std::max(1, o.finalists < 0 ? 3 : o.finalists));
  std::vector<size_t> ok;
  for (size_t i = 0; i < configs.size(); ++i)
    if (out->candidates[i].status == "ok" && std::isfinite(out->candidates[i].median_ms)) ok.push_back(i);
  std::stable_sort(ok.begin(), ok.end(),
                   [&](size_t a, size_t b) { return out->candidates[a].median_ms < out->candidates[b].median_ms; });
  if (rounds <= 0 || ok.size() < 2) return;
  std::vector<size_t> fin(ok.begin(), ok.begin() + std::min(ok.size(), top));
  for (size_t i : ok)
    if (out->candidates[i].is_default && std::find(fin.begin(), fin.end(), i) == fin.end()) fin.push_back(i);
  if (fin.size() < 2) return;
  TimingPlan plan = first;
  plan.warmup = 0;  // every finalist ran in the first pass
  plan.burst = o.final_burst < 0 ? 8 : std::max(1, o.final_burst);
  plan.flush_l2 = false;  // back to back after the round's previous runs, as a benchmark's repeated calls run
  plan.budget_ms = 0.5 * budget / static_cast<double>(fin.size() * static_cast<size_t>(rounds));
  std::vector<std::vector<double>> times(fin.size());
  std::vector<bool> dead(fin.size(), false);
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < fin.size(); ++k) {
      const size_t j = (k + static_cast<size_t>(r)) % fin.size();
      if (dead[j]) continue;
      double t;
      std::string why;
      if (!time_candidate(timer, configs[fin[j]], req, plan, &t, &why)) {
        dead[j] = true;
        out->candidates[fin[j]].status = "launch_error";
        out->candidates[fin[j]].detail = "in the finals: " + why;
        continue;
      }
      times[j].push_back(t);
    }
  }
  for (size_t j = 0; j < fin.size(); ++j)
    if (!dead[j]) out->candidates[fin[j]].median_ms = median_of(times[j]);
  for (size_t i : ok) {
    if (std::find(fin.begin(), fin.end(), i) != fin.end()) continue;
    out->candidates[i].status = "eliminated";
    out->candidates[i].detail = fmt::format("first pass {:.4f} ms: not among the {} fastest re-timed in the finals",
                                            out->candidates[i].median_ms, top);
  }
  out->finalists = static_cast<int>(fin.size());
  out->final_rounds = rounds;
}

}  // namespace

rt::Status tune(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const rt::TuneRequest& req,
                const TuneOptions& o, TuneOutcome* out) {
  *out = TuneOutcome{};
  out->semantic_key = tuning_semantic_key(s);
  out->bucket = shape_bucket(p);
  out->semantic = s;
  out->defaults = s.family->defaults(s);
  out->flops = attention_flops(p);
  const std::string def_key = gen::tunables_key(s, out->defaults);
  auto tflops = [&](double ms) { return ms > 0 ? out->flops / (ms * 1e-3) / 1e12 : std::nan(""); };
  cache::Db* db = context_db(c);

  if (o.use_cache && db != nullptr) {
    if (auto best = db->best(out->semantic_key, out->bucket)) {
      gen::Tunables t;
      if (gen::parse_tunables_key(s, best->tunables, &t) && gen::is_valid(gen::finalize(s, t, p), c->limits, nullptr)) {
        out->from_cache = true;
        out->has_winner = true;
        out->winner = t;
        out->winner_ms = best->median_ms;
        for (const cache::TuneRow& row : db->tune_rows(out->semantic_key, out->bucket)) {
          CandidateResult r;
          if (!gen::parse_tunables_key(s, row.tunables, &r.t)) continue;
          r.key = row.tunables;
          r.status = row.status;
          r.median_ms = row.median_ms;
          r.is_default = row.tunables == def_key;
          if (r.is_default && r.status == "ok") out->default_ms = r.median_ms;
          out->candidates.push_back(r);
        }
        out->winner_tflops = tflops(out->winner_ms);
        out->default_tflops = tflops(out->default_ms);
        return rt::Status::Ok();
      }
    }
  }

  std::vector<gen::KernelConfig> configs = candidate_configs(s, p, c->limits);
  if (o.prior_winners_first) configs = order_by_prior_winners(configs, prior_winners(c, out->semantic_key));
  if (o.max_candidates > 0 && configs.size() > static_cast<size_t>(o.max_candidates) + 1)
    configs.resize(static_cast<size_t>(o.max_candidates) + 1);
  auto cancelled = [&] { return o.cancelled && o.cancelled(); };
  if (configs.empty()) return rt::error(FA_ERROR_NOT_SUPPORTED, "tuner: no valid candidate for " + out->semantic_key);
  out->candidates = compile_candidates(c, configs, o, &out->compile_seconds);
  for (CandidateResult& r : out->candidates) {
    r.is_default = r.key == def_key;
    if (r.status == "ok") ++out->compiled;
    else if (r.status == "spill" || r.status == "registers") ++out->compiled, ++out->rejected;
    else ++out->rejected;
  }

  std::unique_ptr<Timer> own_timer;
  Timer* timer = o.timer;
  if (timer == nullptr) {
    if (!c->has_device) return rt::error(FA_ERROR_NO_DEVICE, c->no_device_reason);
    own_timer = make_device_timer(c);
    timer = own_timer.get();
  }
  size_t n_ok = 0;
  for (const CandidateResult& r : out->candidates) n_ok += r.status == "ok";
  TimingPlan plan;
  plan.idle_ratio = o.idle_ratio < 0 ? 1.0 : o.idle_ratio;  // the finals' plan copies it
  const double budget = o.budget_ms > 0 ? o.budget_ms : default_budget_ms();
  plan.budget_ms = n_ok > 0 ? budget / static_cast<double>(n_ok) : budget;
  const auto t0 = std::chrono::steady_clock::now();
  std::string first_failure;
  for (size_t i = 0; i < configs.size(); ++i) {
    CandidateResult& r = out->candidates[i];
    if (r.status != "ok") continue;
    if (cancelled()) break;
    double ms;
    if (!time_candidate(*timer, configs[i], req, plan, &ms, &r.detail)) {
      r.status = "launch_error";
      if (first_failure.empty()) first_failure = gen::canonical_key(configs[i]) + ": " + r.detail;
      continue;
    }
    r.median_ms = ms;
  }
  if (!cancelled()) run_finals(configs, o, plan, budget, *timer, req, out);
  out->timing_seconds = seconds_since(t0);
  if (cancelled()) return rt::error(FA_ERROR_INTERNAL, "tuning cancelled");

  // Winner: the minimum median among "ok"; checked against the reference once, next best when it fails.
  const double tol = o.verify_tolerance >= 0 ? o.verify_tolerance : default_tolerance(s.dtype);
  for (;;) {
    size_t best = configs.size();
    for (size_t i = 0; i < configs.size(); ++i) {
      const CandidateResult& r = out->candidates[i];
      if (r.status == "ok" && std::isfinite(r.median_ms) &&
          (best == configs.size() || r.median_ms < out->candidates[best].median_ms))
        best = i;
    }
    if (best == configs.size()) {
      // Every finalist failed the reference check: the candidates the first pass eliminated are next in line.
      bool revived = false;
      for (CandidateResult& r : out->candidates)
        if (r.status == "eliminated") r.status = "ok", r.detail.clear(), revived = true;
      if (revived) continue;
      break;
    }
    CandidateResult& w = out->candidates[best];
    if (req.verify) {
      double err = std::nan("");
      rt::Status st = req.verify(configs[best], &err);
      if (!st.ok()) {
        out->verify_note = "reference check failed to run: " + st.message;
      } else if (!(err <= tol)) {  // NaN fails
        w.status = "verify_failed";
        w.detail = fmt::format("relative error {} > {}", err, tol);
        continue;
      } else {
        out->verified = true;
        out->verify_error = err;
      }
    } else {
      out->verify_note = "no reference check available (TuneRequest::verify is empty)";
    }
    out->has_winner = true;
    out->winner = w.t;
    out->winner_ms = w.median_ms;
    break;
  }
  for (const CandidateResult& r : out->candidates)
    if (r.is_default && r.status == "ok") out->default_ms = r.median_ms;
  out->winner_tflops = tflops(out->winner_ms);
  out->default_tflops = tflops(out->default_ms);

  if (!out->has_winner) {
    return rt::error(FA_ERROR_LAUNCH,
                     fmt::format("tuner: no candidate of {} ({}) could be timed{}{}", out->semantic_key, out->bucket,
                                 first_failure.empty() ? "" : "; first: ", first_failure));
  }
  if (o.store && db != nullptr) {
    std::vector<cache::TuneRow> rows;
    for (const CandidateResult& r : out->candidates) {
      cache::TuneRow row;
      row.semantic_key = out->semantic_key;
      row.bucket = out->bucket;
      row.tunables = r.key;
      row.median_ms = r.median_ms;
      row.status = r.status;
      rows.push_back(row);
    }
    if (!db->put_tune_results(rows, true)) c->warn("tuner: could not store tuning results: " + db->last_error());
  }
  return rt::Status::Ok();
}

}  // namespace fa::tune
