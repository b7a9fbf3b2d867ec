// stores.cpp -- the context's persistent store (a CubinStore over cache_db/) and its chooser (the tune policy over
// the tuner); both live in tuner/ (cache_store.h, chooser.h).
#include "api/stores.h"

#include "tuner/cache_store.h"
#include "tuner/chooser.h"

namespace fa::rt {

std::unique_ptr<CubinStore> make_cubin_store(fa_context c, const char* path) {
  auto store = tune::open_cache_store(c, path);
  c->cache_path = store->db()->path();
  return store;
}

std::unique_ptr<TunableChooser> make_chooser(fa_context) { return std::make_unique<tune::TuningChooser>(); }

}  // namespace fa::rt
