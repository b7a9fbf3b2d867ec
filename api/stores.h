// stores.h -- where the runtime core meets the tuner: factories for a context's cubin store and its chooser.
#pragma once

#include <memory>

#include "runtime/context.h"

namespace fa::rt {

// The cubin store over cache_db/ at `path` (NULL: the default location); never fails (degrades to none).
std::unique_ptr<CubinStore> make_cubin_store(fa_context c, const char* path);
// The chooser implementing the context's tune policy.
std::unique_ptr<TunableChooser> make_chooser(fa_context c);

}  // namespace fa::rt
