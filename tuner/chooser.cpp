// chooser.cpp -- the tune policy (see chooser.h).
#include "tuner/chooser.h"

#include "cache_db/cache_db.h"
#include "generator/family.h"
#include "runtime/launch.h"
#include "tuner/background_device.h"
#include "tuner/bucket.h"
#include "tuner/cache_store.h"

namespace fa::tune {

namespace {

rt::Status defaults_for(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, gen::Tunables* out) {
  const gen::Tunables t = s.family->defaults(s);
  std::string why;
  const gen::KernelConfig cfg = gen::finalize(s, t, p);
  if (!gen::is_valid(cfg, c->limits, &why))
    return rt::error(FA_ERROR_INTERNAL, "the default tunables of " + gen::canonical_key(cfg) + " are invalid: " + why);
  *out = t;
  return rt::Status::Ok();
}

void record_untuned(fa_context c, const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->untuned.insert(key);
  }
  c->info("tuner: no tuned entry for " + key + "; it runs at its heuristic defaults (fa-tune tunes it ahead of time)");
}

// Whether t is valid for some problem of p's tuning key: p itself, or p at a length of another shape class.
bool any_class_valid(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const gen::Tunables& t) {
  if (gen::is_valid(gen::finalize(s, t, p), c->limits, nullptr)) return true;
  gen::ProblemDesc q = p;
  for (int sk : bucket_class_lengths(p)) {
    q.seqlen_k = sk;
    if (gen::is_valid(gen::finalize(s, t, q), c->limits, nullptr)) return true;
  }
  return false;
}

// Whether tunables t serve the call at hand: a winner is tuned at one length and valid there; another length of
// the same tuning key may fall in another shape class (seqlen_k a multiple of block_n or not) where the predicate
// rejects it.
bool serves(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const gen::Tunables& t) {
  return gen::is_valid(gen::finalize(s, t, p), c->limits, nullptr);
}

}  // namespace

bool TuningChooser::fallback(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const std::string& key,
                             gen::Tunables* out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = alternates_.find(key);
    if (it != alternates_.end() && serves(c, s, p, it->second)) {
      *out = it->second;
      return true;
    }
  }
  gen::Tunables pick;
  if (!pick_fallback(c, s, p, &pick)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  alternates_[key] = pick;
  *out = pick;
  return true;
}

bool TuningChooser::pick_fallback(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, gen::Tunables* out) {
  // The fastest stored candidate of this key that serves the call, else the family's default for it.
  if (cache::Db* db = context_db(c)) {
    for (const cache::TuneRow& row : db->tune_rows(tuning_semantic_key(s), shape_bucket(p))) {
      gen::Tunables t;
      if (row.status == "ok" && gen::parse_tunables_key(s, row.tunables, &t) && serves(c, s, p, t)) {
        *out = t;
        return true;
      }
    }
  }
  return defaults_for(c, s, p, out).ok();
}

bool TuningChooser::lookup(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const std::string& key,
                           gen::Tunables* out) {
  bool hit = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memory_.find(key);
    if (it != memory_.end()) {
      if (serves(c, s, p, it->second)) {
        *out = it->second;
        return true;
      }
      hit = true;
    }
  }
  if (hit) return fallback(c, s, p, key, out);
  cache::Db* db = context_db(c);
  if (db == nullptr) return false;
  auto best = db->best(tuning_semantic_key(s), shape_bucket(p));
  if (!best) return false;
  gen::Tunables t;
  if (!gen::parse_tunables_key(s, best->tunables, &t) || !gen::is_valid(gen::finalize(s, t, p), c->limits, nullptr)) {
    // Unparsable, or a point no shape class of this key admits now (the predicate changed): a clean miss. A winner
    // that serves another shape class of the key is kept, and this call falls back (fallback()).
    if (!gen::parse_tunables_key(s, best->tunables, &t) || !any_class_valid(c, s, p, t)) {
      c->warn("tuner: ignoring an unusable cached entry " + best->tunables + " for " + key);
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      memory_[key] = t;
    }
    return fallback(c, s, p, key, out);
  }
  c->debug("tuner: " + key + " uses its cached winner " + best->tunables);
  std::lock_guard<std::mutex> lock(mu_);
  memory_[key] = t;
  *out = t;
  return true;
}

rt::Status TuningChooser::choose(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p,
                                 const rt::TuneRequest* tune, gen::Tunables* out) {
  if (!c->pinned.empty()) {  // $FA_PIN_TUNABLES: before memory, SQLite and tuning; an invalid pin fails the call
    bool pinned = false;
    rt::Status st = rt::pinned_for_call(c->pinned, s, p, c->limits, &pinned, out);
    if (!st.ok() || pinned) return st;
    c->info(std::string("tuner: FA_PIN_TUNABLES pins no tunables of ") + s.family->name + ", which runs this call",
            std::string("pin-miss:") + s.family->name);
  }
  const std::string key = tuning_key(s, p);
  if (lookup(c, s, p, key, out)) return rt::Status::Ok();
  if (c->tune_policy == FA_TUNE_REQUIRE_TUNED) {
    return rt::error(FA_ERROR_NOT_TUNED, "no tuned entry for " + key +
                                             " (policy FA_TUNE_REQUIRE_TUNED): run fa-tune for this problem, or import "
                                             "a cache with fa-tune --import");
  }
  const bool first_use = rt::tunes_on_first_use(c->tune_policy);
  bool runner_injected = false;
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    runner_injected = static_cast<bool>(runner_);
  }
  const bool in_background = first_use && tune != nullptr && c->tune_policy == FA_TUNE_ON_FIRST_USE &&
                             !tune->synchronous && !p.backward && (c->has_device || runner_injected);
  // What the background tuner cannot stand in for with buffers of its own: varlen (it times fixed lengths) and
  // user code (its buffers are the caller's, which may be gone by the time the job runs).
  const bool no_private_buffers = p.varlen || p.mods != nullptr;
  if (in_background && no_private_buffers) {
    c->info("tuner: " + key +
                (p.varlen ? " is a varlen problem: the background tuner times fixed lengths only"
                          : " reads user code's buffers, which the background tuner does not have") +
                ", so it runs at its defaults (fa_prepare tunes it with the call's buffers)",
            key);
    tune = nullptr;
  }
  // An fp8 problem (an fp8 KV cache) is never timed: the tuner's buffers and its winner's check against fwd_ref are
  // 16-bit. It runs at the family's defaults (or a FA_PIN_TUNABLES pin, above) until the tuner lays out fp8 buffers.
  const bool fp8 = gen::is_fp8(p.kv_dtype) || gen::is_fp8(p.dtype);
  if (fp8 && tune != nullptr) {
    c->info("tuner: " + key + " reads fp8, which the tuner does not time yet, so it runs at its defaults", key);
    tune = nullptr;
  }
  if (c->tune_policy == FA_TUNE_DEFAULTS_ONLY || tune == nullptr) {
    record_untuned(c, key);
    rt::Status st = defaults_for(c, s, p, out);
    // DEFAULTS_ONLY never tunes: remember the defaults, so later calls skip the database query (a cache miss cost
    // a SQLite query on every call). Capture under ON_FIRST_USE does not: the next call outside capture tunes.
    if (st.ok() && (c->tune_policy == FA_TUNE_DEFAULTS_ONLY || fp8 || (in_background && no_private_buffers))) {
      std::lock_guard<std::mutex> lock(mu_);
      memory_[key] = *out;
    }
    return st;
  }
  if (in_background) {
    // The defaults now, remembered until the worker swaps the winner in (publish()).
    rt::Status st = defaults_for(c, s, p, out);
    if (!st.ok()) return st;
    {
      std::lock_guard<std::mutex> lock(mu_);
      memory_[key] = *out;
    }
    if (auto bg = background(c)) {
      if (bg->submit(BackgroundJob{key, s, p}))
        c->info("tuner: " + key + " runs at its defaults while the background worker tunes it");
    }
    return rt::Status::Ok();
  }
  std::lock_guard<std::mutex> serial(tune_mu_);
  if (lookup(c, s, p, key, out)) return rt::Status::Ok();  // another thread tuned it meanwhile
  TuneOutcome outcome;
  rt::Status st = fa::tune::tune(c, s, p, *tune, options_, &outcome);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = outcome;
  }
  if (!st.ok() || !outcome.has_winner) {
    c->warn("tuner: tuning " + key + " failed, using the defaults: " + st.message);
    record_untuned(c, key);
    return defaults_for(c, s, p, out);
  }
  c->info("tuner: tuned " + key + ": " + gen::tunables_key(s, outcome.winner));
  std::lock_guard<std::mutex> lock(mu_);
  memory_[key] = outcome.winner;
  *out = outcome.winner;
  return rt::Status::Ok();
}

std::shared_ptr<BackgroundTuner> TuningChooser::background(fa_context c) {
  std::lock_guard<std::mutex> lock(bg_mu_);
  if (stopped_) return nullptr;
  if (!background_) {
    JobRunner run = runner_;
    if (!run) {
      const TuneOptions base = options_;
      run = [c, base](const BackgroundJob& job, const std::function<bool()>& cancelled, TuneOutcome* out) {
        return run_job_on_device(c, job, base, cancelled, out);
      };
    }
    background_ = std::make_shared<BackgroundTuner>(
        std::move(run), [this, c](const BackgroundJob& job, const rt::Status& st, const TuneOutcome& out) {
          if (!st.ok() || !out.has_winner) {
            c->warn("tuner: background tuning of " + job.key + " failed; it keeps its defaults: " + st.message);
            std::lock_guard<std::mutex> l(mu_);
            last_ = out;
            return;
          }
          publish(c, job, out);
        });
  }
  return background_;
}

void TuningChooser::publish(fa_context c, const BackgroundJob& job, const TuneOutcome& outcome) {
  // Load first what the bucket's shape classes will run, so that a call under capture finds it ready.
  if (c->has_device) {
    std::vector<int> lengths{job.p.seqlen_k};
    for (int sk : bucket_class_lengths(job.p)) lengths.push_back(sk);
    for (int sk : lengths) {
      gen::ProblemDesc q = job.p;
      q.seqlen_k = sk;
      gen::Tunables t = outcome.winner;
      if (!serves(c, job.s, q, t) && !pick_fallback(c, job.s, q, &t)) continue;
      std::vector<std::shared_ptr<rt::Kernel>> kernels;
      rt::Status st = rt::resolve_kernels(c, gen::make_plan(job.s, t, q), true, &kernels);
      if (!st.ok()) {
        c->warn("tuner: background winner of " + job.key + " not swapped in: " + st.message);
        return;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    memory_[job.key] = outcome.winner;
    alternates_.erase(job.key);
    last_ = outcome;
  }
  c->plans.bump();
  c->info("tuner: tuned " + job.key + " in the background: " + gen::tunables_key(job.s, outcome.winner));
}

void TuningChooser::set_background_runner(JobRunner run) {
  std::lock_guard<std::mutex> lock(bg_mu_);
  runner_ = std::move(run);
}

bool TuningChooser::wait_background(double timeout_s) {
  std::shared_ptr<BackgroundTuner> bg;
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    bg = background_;
  }
  return bg == nullptr || bg->wait_idle(timeout_s);
}

BackgroundStats TuningChooser::background_stats() {
  std::lock_guard<std::mutex> lock(bg_mu_);
  return background_ ? background_->stats() : BackgroundStats{};
}

void TuningChooser::stop_background() {
  std::shared_ptr<BackgroundTuner> bg;
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    stopped_ = true;
    bg = std::move(background_);
  }
  if (bg) bg->stop();
}

}  // namespace fa::tune
