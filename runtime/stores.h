// stores.h -- factories for a context's persistent cubin store and its tunable chooser.
#pragma once

#include <memory>

#include "runtime/context.h"

namespace fa::rt {

// The cubin store over cache_db/ at `path` (NULL: the default location); never fails (degrades to none).
std::unique_ptr<CubinStore> make_cubin_store(fa_context c, const char* path);
// The chooser implementing the context's tune policy.
std::unique_ptr<TunableChooser> make_chooser(fa_context c);

// Heuristic defaults only (the family's constexpr table).
class DefaultChooser : public TunableChooser {
 public:
  Status choose(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const TuneRequest* tune,
                gen::Tunables* out) override;
};

}  // namespace fa::rt
