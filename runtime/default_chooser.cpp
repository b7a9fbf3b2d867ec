// default_chooser.cpp -- the heuristic default: the family's table entry, checked by the validity predicate.
#include "runtime/stores.h"

namespace fa::rt {

Status DefaultChooser::choose(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const TuneRequest*,
                              gen::Tunables* out) {
  gen::Tunables t = gen::family(s.kind).defaults(s);
  gen::KernelConfig cfg = gen::finalize(s, t, p);
  std::string why;
  if (!gen::is_valid(cfg, c->limits, &why))
    return error(FA_ERROR_INTERNAL, "the default tunables of " + gen::canonical_key(cfg) + " are invalid: " + why);
  *out = t;
  return Status::Ok();
}

}  // namespace fa::rt
