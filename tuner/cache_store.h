// cache_store.h -- the context's persistent store: a CubinStore over fa::cache::Db, and the Env a context's rows
// are written under (GPU name, SM count, driver, library, NVRTC, templates hash, generator version).
#pragma once

#include <memory>
#include <string>

#include "cache_db/cache_db.h"
#include "runtime/context.h"

namespace fa::tune {

// The environment of a context ("none" / 0 SMs without a device; driver version 0 without a driver).
cache::Env context_env(fa_context c);

// CubinStore over a Db. ptxas info is kept as registers / spill bytes (stores + loads) / the CTA's shared memory
// (static + dynamic_smem; the static part is recovered on load by subtracting dynamic_smem).
// Hits and stores are logged at debug level through the context (which outlives its store).
class CacheStore : public rt::CubinStore {
 public:
  CacheStore(std::unique_ptr<cache::Db> db, fa_context c) : db_(std::move(db)), c_(c) {}
  std::optional<std::vector<char>> load(uint64_t hash, const std::string& key, unsigned dynamic_smem,
                                        rt::PtxasInfo* info) override;
  void save(uint64_t hash, const std::string& key, int arch, const std::vector<char>& cubin, const rt::PtxasInfo& info,
            unsigned dynamic_smem) override;
  cache::Db* db() const { return db_.get(); }

 private:
  std::unique_ptr<cache::Db> db_;
  fa_context c_;
};

// Opens the Db at `path` (nullptr or "": cache_db's default, which honours $FA_CACHE_PATH) under the context's Env,
// read-only when c->cache_read_only ($FA_CACHE_READONLY=1) or when the file may not be written; warnings go through
// c->warn. Never fails (cache_db degrades to memory).
std::unique_ptr<CacheStore> open_cache_store(fa_context c, const char* path);

// The Db behind a context's store, or nullptr when the context has none.
cache::Db* context_db(fa_context c);

}  // namespace fa::tune
