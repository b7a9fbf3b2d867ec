// row_io.cpp -- whole-row readers and writers of the cache tables (see row_io.h).
#include "cache_db/row_io.h"

#include <sqlite3.h>

#include <cmath>
#include <ctime>

#include "cache_db/checksum.h"

namespace fa::cache::detail {

const char* const kInsertCubinSql =
    "INSERT OR REPLACE INTO cubins (compile_hash, compile_key, arch, nvrtc_version, generator_version, "
    "templates_hash, cubin, cubin_size, checksum, registers, spill_bytes, smem_bytes, created_unix) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

const char* const kInsertTuneSql =
    "INSERT OR REPLACE INTO tune_results (gpu_name, sm_count, driver_version, library_version, nvrtc_version, "
    "templates_hash, generator_version, semantic_key, bucket, tunables, median_ms, status, created_unix) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

const char* const kTuneEnvWhere =
    "gpu_name = ?1 AND sm_count = ?2 AND driver_version = ?3 AND library_version = ?4 AND nvrtc_version = ?5 AND "
    "templates_hash = ?6 AND generator_version = ?7";

void bind_tune_env(Stmt& st, const Env& env) {
  st.bind_text(1, env.gpu_name);
  st.bind_int(2, env.sm_count);
  st.bind_int(3, env.driver_version);
  st.bind_text(4, env.library_version);
  st.bind_text(5, env.nvrtc_version);
  st.bind_u64(6, env.templates_hash);
  st.bind_int(7, env.generator_version);
}

Env env_of(const TuneRecord& r) {
  return Env{r.gpu_name,      r.sm_count,       r.driver_version,   r.library_version,
             r.nvrtc_version, r.templates_hash, r.generator_version};
}

bool has_tune_rows(sqlite3* db, const Env& env, const std::string& semantic_key, const std::string& bucket) {
  Stmt st(db, std::string("SELECT 1 FROM tune_results WHERE ") + kTuneEnvWhere +
                  " AND semantic_key = ?8 AND bucket = ?9 LIMIT 1");
  if (!st.ok()) return false;
  bind_tune_env(st, env);
  st.bind_text(8, semantic_key);
  st.bind_text(9, bucket);
  return st.step() == SQLITE_ROW;
}

bool cubin_stale(const std::string& nvrtc_version, int generator_version, uint64_t templates_hash, const Env& env) {
  return nvrtc_version != env.nvrtc_version || generator_version != env.generator_version ||
         templates_hash != env.templates_hash;
}

bool tune_stale(const TuneRecord& r, const Env& env) {
  return r.driver_version != env.driver_version || r.library_version != env.library_version ||
         r.nvrtc_version != env.nvrtc_version || r.templates_hash != env.templates_hash ||
         r.generator_version != env.generator_version;
}

int insert_cubin(Stmt& ins, const CubinRow& row, const std::string& nvrtc_version, int generator_version,
                 uint64_t templates_hash, int64_t created_unix) {
  ins.reset();
  ins.bind_u64(1, row.compile_hash);
  ins.bind_text(2, row.compile_key);
  ins.bind_int(3, row.arch);
  ins.bind_text(4, nvrtc_version);
  ins.bind_int(5, generator_version);
  ins.bind_u64(6, templates_hash);
  ins.bind_blob(7, row.cubin);
  ins.bind_int(8, static_cast<int64_t>(row.cubin.size()));
  ins.bind_u64(9, blob_checksum(row.cubin.data(), row.cubin.size()));
  ins.bind_int(10, row.registers);
  ins.bind_int(11, row.spill_bytes);
  ins.bind_int(12, row.smem_bytes);
  ins.bind_int(13, created_unix);
  const int rc = ins.step();
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int insert_tune(Stmt& ins, const TuneRecord& rec) {
  ins.reset();
  bind_tune_env(ins, env_of(rec));  // ?1..?7: the insert's first seven columns are the environment's
  ins.bind_text(8, rec.row.semantic_key);
  ins.bind_text(9, rec.row.bucket);
  ins.bind_text(10, rec.row.tunables);
  ins.bind_real(11, rec.row.median_ms);
  ins.bind_text(12, rec.row.status);
  ins.bind_int(13, rec.created_unix);
  const int rc = ins.step();
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int for_each_cubin(sqlite3* db, bool with_blob, const std::function<bool(const StoredCubin&)>& visit) {
  Stmt st(db, std::string("SELECT rowid, compile_hash, compile_key, arch, nvrtc_version, generator_version, "
                          "templates_hash, cubin_size, checksum, registers, spill_bytes, smem_bytes, created_unix") +
                  (with_blob ? ", cubin" : "") + " FROM cubins ORDER BY compile_key, arch, created_unix");
  if (!st.ok()) return st.prepare_rc();
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    StoredCubin c;
    c.rowid = st.col_int(0);
    c.row.compile_hash = c.info.compile_hash = st.col_u64(1);
    c.row.compile_key = c.info.compile_key = st.col_text(2);
    c.row.arch = c.info.arch = static_cast<int>(st.col_int(3));
    c.info.nvrtc_version = st.col_text(4);
    c.info.generator_version = static_cast<int>(st.col_int(5));
    c.info.templates_hash = st.col_u64(6);
    c.info.size_bytes = st.col_int(7);
    c.checksum = st.col_u64(8);
    c.row.registers = c.info.registers = static_cast<int>(st.col_int(9));
    c.row.spill_bytes = c.info.spill_bytes = static_cast<int>(st.col_int(10));
    c.row.smem_bytes = c.info.smem_bytes = static_cast<int>(st.col_int(11));
    c.info.created_unix = st.col_int(12);
    if (with_blob) {
      c.row.cubin = st.col_blob(13);
      c.checksum_ok = static_cast<int64_t>(c.row.cubin.size()) == c.info.size_bytes &&
                      blob_checksum(c.row.cubin.data(), c.row.cubin.size()) == c.checksum;
    }
    if (!visit(c)) return SQLITE_OK;
  }
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int for_each_tune(sqlite3* db, const std::function<bool(const TuneRecord&)>& visit) {
  Stmt st(db,
          "SELECT gpu_name, sm_count, driver_version, library_version, nvrtc_version, templates_hash, "
          "generator_version, semantic_key, bucket, tunables, median_ms, status, created_unix FROM tune_results "
          "ORDER BY gpu_name, semantic_key, bucket, median_ms IS NULL, median_ms, tunables");
  if (!st.ok()) return st.prepare_rc();
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    TuneRecord r;
    r.gpu_name = st.col_text(0);
    r.sm_count = static_cast<int>(st.col_int(1));
    r.driver_version = static_cast<int>(st.col_int(2));
    r.library_version = st.col_text(3);
    r.nvrtc_version = st.col_text(4);
    r.templates_hash = st.col_u64(5);
    r.generator_version = static_cast<int>(st.col_int(6));
    r.row.semantic_key = st.col_text(7);
    r.row.bucket = st.col_text(8);
    r.row.tunables = st.col_text(9);
    r.row.median_ms = st.col_real(10);
    r.row.status = st.col_text(11);
    r.created_unix = st.col_int(12);
    if (!visit(r)) return SQLITE_OK;
  }
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

const char* const kFindCubinSql =
    "SELECT checksum, cubin_size, registers, spill_bytes, smem_bytes FROM cubins WHERE compile_hash = ?1 AND "
    "compile_key = ?2 AND arch = ?3 AND nvrtc_version = ?4 AND generator_version = ?5 AND templates_hash = ?6";

const std::string kFindTuneSql = std::string("SELECT median_ms, status FROM tune_results WHERE ") + kTuneEnvWhere +
                                 " AND semantic_key = ?8 AND bucket = ?9 AND tunables = ?10";

namespace {
// The fate of a row whose key `find` was bound to: kNew when no row has it, else kPresent when same(find's row).
int fate_of(Stmt& find, const std::function<bool()>& same, RowFate* fate) {
  const int rc = find.step();
  if (rc == SQLITE_DONE) *fate = RowFate::kNew;
  else if (rc == SQLITE_ROW) *fate = same() ? RowFate::kPresent : RowFate::kUpdated;
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}
}  // namespace

int cubin_fate(Stmt& find, const StoredCubin& c, RowFate* fate) {
  find.reset();
  find.bind_u64(1, c.row.compile_hash);
  find.bind_text(2, c.row.compile_key);
  find.bind_int(3, c.row.arch);
  find.bind_text(4, c.info.nvrtc_version);
  find.bind_int(5, c.info.generator_version);
  find.bind_u64(6, c.info.templates_hash);
  return fate_of(
      find,
      [&] {
        return find.col_u64(0) == c.checksum && find.col_int(1) == c.info.size_bytes &&
               find.col_int(2) == c.row.registers && find.col_int(3) == c.row.spill_bytes &&
               find.col_int(4) == c.row.smem_bytes;
      },
      fate);
}

int tune_fate(Stmt& find, const TuneRecord& r, RowFate* fate) {
  find.reset();
  bind_tune_env(find, env_of(r));
  find.bind_text(8, r.row.semantic_key);
  find.bind_text(9, r.row.bucket);
  find.bind_text(10, r.row.tunables);
  return fate_of(
      find,
      [&] {
        const double ms = find.col_real(0);
        const bool same_ms = (std::isnan(ms) && std::isnan(r.row.median_ms)) || ms == r.row.median_ms;
        return same_ms && find.col_text(1) == r.row.status;
      },
      fate);
}

int64_t now_unix() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace fa::cache::detail
