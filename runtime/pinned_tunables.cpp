// pinned_tunables.cpp -- $FA_PIN_TUNABLES parsed and checked (see pinned_tunables.h).
#include "runtime/pinned_tunables.h"

#include <algorithm>

namespace fa::rt {

namespace {

bool pinnable(const gen::Family& f) { return f.role != gen::Role::Step && f.tuned_on_first_use; }

std::string pinnable_names() {
  std::string out;
  for (const gen::Family* f : gen::all_families()) {
    if (!pinnable(*f)) continue;
    if (!out.empty()) out += ", ";
    out += f->name;
  }
  return out;
}

// "c<int>.n<int>.s<int>...": the shape of f's tunables key.
std::string key_shape(const gen::Family& f) {
  std::string out;
  for (const gen::Knob& k : f.knobs) {
    if (!out.empty()) out += '.';
    out += k.tag;
    out += "<int>";
  }
  return out;
}

std::string values_text(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return "{" + out + "}";
}

Status bad(const std::string& expected, const std::string& actual) {
  return invalid(kPinTunablesVar, expected, "'" + actual + "'");
}

// One "FAMILY:TUNABLES" entry.
Status parse_entry(const std::string& entry, std::pair<const gen::Family*, gen::Tunables>* out) {
  const size_t colon = entry.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == entry.size())
    return bad("FAMILY:TUNABLES[,FAMILY:TUNABLES...] (e.g. fwd_wgmma:c2.n128.s2.pp1.ov1.p1; FAMILY one of " +
                   pinnable_names() + ")",
               entry);
  const std::string name = entry.substr(0, colon), key = entry.substr(colon + 1);
  const gen::Family* f = gen::find_family(name);
  if (f == nullptr || !pinnable(*f))
    return bad("a family whose tunables the chooser picks, one of " + pinnable_names(), name);
  gen::Semantic s;
  s.family = f;
  gen::Tunables t;
  if (!gen::parse_tunables_key(s, key, &t))
    return bad(std::string(f->name) + "'s tunables key, " + key_shape(*f), entry);
  for (size_t i = 0; i < f->knobs.size(); ++i) {
    const gen::Knob& k = f->knobs[i];
    const int v = t[static_cast<int>(i)];
    if (std::find(k.values.begin(), k.values.end(), v) == k.values.end())
      return bad(std::string(f->name) + " knob " + k.name + " (" + k.tag + ") in " + values_text(k.values), entry);
  }
  *out = {f, t};
  return Status::Ok();
}

}  // namespace

const gen::Tunables* PinnedTunables::find(const gen::Family* f) const {
  for (const auto& [family, t] : pins)
    if (family == f) return &t;
  return nullptr;
}

Status parse_pinned_tunables(const char* text, PinnedTunables* out) {
  PinnedTunables parsed;
  parsed.text = text != nullptr ? text : "";
  size_t pos = 0;
  while (pos < parsed.text.size()) {
    size_t end = parsed.text.find(',', pos);
    if (end == std::string::npos) end = parsed.text.size();
    std::pair<const gen::Family*, gen::Tunables> pin;
    Status st = parse_entry(parsed.text.substr(pos, end - pos), &pin);
    if (!st.ok()) return st;
    if (parsed.find(pin.first) != nullptr) return bad("each family pinned once", parsed.text);
    parsed.pins.push_back(pin);
    pos = end + 1;
    if (end + 1 == parsed.text.size()) return bad("no empty entry after the last ','", parsed.text);
  }
  *out = std::move(parsed);
  return Status::Ok();
}

Status pinned_for_call(const PinnedTunables& pins, const gen::Semantic& s, const gen::ProblemDesc& p,
                       const gen::DeviceLimits& lim, bool* pinned, gen::Tunables* out) {
  const gen::Tunables* pin = pins.find(s.family);
  *pinned = pin != nullptr;
  if (pin == nullptr) return Status::Ok();
  std::string why;
  const gen::KernelConfig cfg = gen::finalize(s, *pin, p);
  if (!gen::is_valid(cfg, lim, &why))
    return invalid(kPinTunablesVar,
                   "tunables valid for this call, " + gen::semantic_key(cfg.s) + " (the predicate: " + why + ")",
                   std::string("'") + s.family->name + ":" + gen::tunables_key(s, *pin) + "' (of '" + pins.text + "')");
  *out = *pin;
  return Status::Ok();
}

}  // namespace fa::rt
