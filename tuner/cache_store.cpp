// cache_store.cpp -- CubinStore adapter over fa::cache::Db and the context's cache Env.
#include "tuner/cache_store.h"

#include "generator/config.h"
#include "runtime/nvrtc_compiler.h"

namespace fa::tune {

cache::Env context_env(fa_context c) {
  cache::Env e;
  e.gpu_name = c->has_device && !c->gpu_name.empty() ? c->gpu_name : "none";
  e.sm_count = c->has_device ? c->sm_count : 0;
  e.driver_version = c->drv != nullptr ? c->drv->version : 0;
  e.library_version = fa_version_string();
  e.nvrtc_version = rt::nvrtc_version();
  e.templates_hash = gen::shared_templates_hash();
  e.generator_version = gen::kGeneratorVersion;
  return e;
}

std::optional<std::vector<char>> CacheStore::load(uint64_t hash, const std::string& key, unsigned dynamic_smem,
                                                  rt::PtxasInfo* info) {
  std::optional<cache::CubinRow> row = db_->get_cubin(hash, key);
  if (!row || row->cubin.empty()) return std::nullopt;
  c_->debug("cache: cubin " + key + " from " + db_->path());
  if (info != nullptr) {
    *info = rt::PtxasInfo{};
    info->registers = row->registers;
    info->spill_stores = row->spill_bytes > 0 ? row->spill_bytes : 0;
    info->spill_loads = 0;
    const int dynamic = static_cast<int>(dynamic_smem);
    info->smem_static = row->smem_bytes > dynamic ? row->smem_bytes - dynamic : 0;
  }
  return std::vector<char>(row->cubin.begin(), row->cubin.end());
}

void CacheStore::save(uint64_t hash, const std::string& key, int arch, const std::vector<char>& cubin,
                      const rt::PtxasInfo& info, unsigned dynamic_smem) {
  cache::CubinRow row;
  row.compile_key = key;
  row.compile_hash = hash;
  row.arch = arch;
  row.cubin.assign(cubin.begin(), cubin.end());
  row.registers = info.registers;
  row.spill_bytes = info.registers < 0 ? -1 : info.spill_stores + info.spill_loads;
  // ptxas's "bytes smem" is the static part only, 0 for fa's kernels (their tiles are dynamic shared memory).
  row.smem_bytes = info.registers < 0 ? -1 : info.smem_static + static_cast<int>(dynamic_smem);
  if (db_->put_cubin(row)) c_->debug("cache: stored cubin " + key + " in " + db_->path());
  // else best effort: a failed write was warned about by the Db
}

std::unique_ptr<CacheStore> open_cache_store(fa_context c, const char* path) {
  cache::WarnFn warn = [c](const std::string& m) { c->warn("cache: " + m); };
  const cache::OpenMode mode = c->cache_read_only ? cache::OpenMode::kReadOnly : cache::OpenMode::kReadWrite;
  auto db = cache::Db::open(path != nullptr ? std::string(path) : std::string(), context_env(c), std::move(warn), mode);
  return std::make_unique<CacheStore>(std::move(db), c);
}

cache::Db* context_db(fa_context c) {
  auto* s = dynamic_cast<CacheStore*>(c->store.get());
  return s != nullptr ? s->db() : nullptr;
}

}  // namespace fa::tune
