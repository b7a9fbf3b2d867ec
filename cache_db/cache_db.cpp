// cache_db.cpp -- cubin and tuning-result lookups and writes of fa::cache::Db (see cache_db.h).
//
// Every method takes the Db mutex and turns every failure (including an exception such as std::bad_alloc) into a
// miss / false with last_error() set and a warning. Writes go to db_; a read-only Db (ro_ set) reads the overlay db_
// first and then the file (cache_db.h).
#include <sqlite3.h>

#include <cmath>
#include <set>
#include <utility>

#include "cache_db/cache_db.h"
#include "cache_db/checksum.h"
#include "cache_db/row_io.h"
#include "cache_db/sqlite_util.h"

namespace fa::cache {

using detail::bind_tune_env;
using detail::describe;
using detail::kTuneEnvWhere;
using detail::Stmt;
using detail::Txn;

namespace {

TuneRow read_tune_row(const Stmt& st) {
  TuneRow r;
  r.semantic_key = st.col_text(0);
  r.bucket = st.col_text(1);
  r.tunables = st.col_text(2);
  r.median_ms = st.col_real(3);
  r.status = st.col_text(4);
  return r;
}

}  // namespace

std::optional<CubinRow> Db::get_cubin(uint64_t compile_hash, const std::string& compile_key) {
  return get_cubin(compile_hash, compile_key, -1);
}

std::optional<CubinRow> Db::get_cubin(uint64_t compile_hash, const std::string& compile_key, int arch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return std::nullopt;
  std::optional<CubinRow> found = lookup_cubin(db_, true, compile_hash, compile_key, arch);
  if (!found && ro_ != nullptr) found = lookup_cubin(ro_, false, compile_hash, compile_key, arch);
  return found;
}

std::optional<CubinRow> Db::lookup_cubin(sqlite3* conn, bool may_delete, uint64_t compile_hash,
                                         const std::string& compile_key, int arch) {
  try {
    std::vector<std::pair<int64_t, uint64_t>> bad;  // (rowid, stored checksum)
    std::optional<CubinRow> found;
    {
      Stmt st(conn, std::string("SELECT rowid, arch, cubin, cubin_size, checksum, registers, spill_bytes, smem_bytes "
                                "FROM cubins WHERE compile_hash = ?1 AND compile_key = ?2 AND nvrtc_version = ?3 AND "
                                "generator_version = ?4 AND templates_hash = ?5") +
                        (arch >= 0 ? " AND arch = ?6" : "") + " ORDER BY created_unix DESC");
      if (!st.ok()) {
        fail(describe(conn, st.prepare_rc(), "cubin lookup"));
        return std::nullopt;
      }
      st.bind_u64(1, compile_hash);
      st.bind_text(2, compile_key);
      st.bind_text(3, env_.nvrtc_version);
      st.bind_int(4, env_.generator_version);
      st.bind_u64(5, env_.templates_hash);
      if (arch >= 0) st.bind_int(6, arch);
      int rc;
      while ((rc = st.step()) == SQLITE_ROW) {
        std::vector<uint8_t> blob = st.col_blob(2);
        const uint64_t stored = st.col_u64(4);
        if (static_cast<int64_t>(blob.size()) != st.col_int(3) || blob_checksum(blob.data(), blob.size()) != stored) {
          bad.emplace_back(st.col_int(0), stored);
          continue;
        }
        CubinRow row;
        row.compile_key = compile_key;
        row.compile_hash = compile_hash;
        row.arch = static_cast<int>(st.col_int(1));
        row.cubin = std::move(blob);
        row.registers = static_cast<int>(st.col_int(5));
        row.spill_bytes = static_cast<int>(st.col_int(6));
        row.smem_bytes = static_cast<int>(st.col_int(7));
        found = std::move(row);
        break;
      }
      if (!found && rc != SQLITE_DONE && rc != SQLITE_ROW) { fail(describe(conn, rc, "cubin lookup")); }
    }
    for (const auto& [rowid, stored] : bad) {
      if (!may_delete) {
        warn("cubin " + compile_key + " of " + path_ + " failed its checksum; it is a miss (the file is read-only)");
        continue;
      }
      warn("cubin " + compile_key + " failed its checksum; the row is deleted");
      Stmt del(conn, "DELETE FROM cubins WHERE rowid = ?1 AND checksum = ?2");
      del.bind_int(1, rowid);
      del.bind_u64(2, stored);
      const int rc = del.step();
      if (rc != SQLITE_DONE) warn(describe(conn, rc, "deleting a damaged cubin row"));
    }
    return found;
  } catch (...) {
    fail("cubin lookup: unexpected exception");
    return std::nullopt;
  }
}

bool Db::put_cubin(const CubinRow& row) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return fail("no database");
  try {
    Txn txn(db_);
    if (!txn.ok()) return fail(describe(db_, txn.begin_rc(), "put_cubin: BEGIN IMMEDIATE"));
    Stmt ins(db_, detail::kInsertCubinSql);
    if (!ins.ok()) return fail(describe(db_, ins.prepare_rc(), "put_cubin"));
    int rc = detail::insert_cubin(ins, row, env_.nvrtc_version, env_.generator_version, env_.templates_hash,
                                  detail::now_unix());
    if (rc == SQLITE_OK) rc = txn.commit();
    if (rc != SQLITE_OK) return fail(describe(db_, rc, "put_cubin " + row.compile_key));
    return true;
  } catch (...) { return fail("put_cubin: unexpected exception"); }
}

bool Db::put_tune_results(const std::vector<TuneRow>& rows, bool replace_existing) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return fail("no database");
  try {
    Txn txn(db_);
    if (!txn.ok()) return fail(describe(db_, txn.begin_rc(), "put_tune_results: BEGIN IMMEDIATE"));
    if (replace_existing) {
      std::set<std::pair<std::string, std::string>> keys;
      for (const TuneRow& r : rows) keys.emplace(r.semantic_key, r.bucket);
      Stmt del(db_, std::string("DELETE FROM tune_results WHERE ") + kTuneEnvWhere +
                        " AND semantic_key = ?8 AND bucket = ?9");
      if (!del.ok()) return fail(describe(db_, del.prepare_rc(), "put_tune_results"));
      for (const auto& [sem, bucket] : keys) {
        del.reset();
        bind_tune_env(del, env_);
        del.bind_text(8, sem);
        del.bind_text(9, bucket);
        const int rc = del.step();
        if (rc != SQLITE_DONE) return fail(describe(db_, rc, "put_tune_results: deleting old rows"));
      }
    }
    Stmt ins(db_, detail::kInsertTuneSql);
    if (!ins.ok()) return fail(describe(db_, ins.prepare_rc(), "put_tune_results"));
    const int64_t now = detail::now_unix();
    for (const TuneRow& r : rows) {
      TuneRecord rec;
      rec.row = r;
      rec.gpu_name = env_.gpu_name;
      rec.sm_count = env_.sm_count;
      rec.driver_version = env_.driver_version;
      rec.library_version = env_.library_version;
      rec.nvrtc_version = env_.nvrtc_version;
      rec.templates_hash = env_.templates_hash;
      rec.generator_version = env_.generator_version;
      rec.created_unix = now;
      const int rc = detail::insert_tune(ins, rec);
      if (rc != SQLITE_OK) return fail(describe(db_, rc, "put_tune_results " + r.semantic_key));
    }
    const int rc = txn.commit();
    if (rc != SQLITE_OK) return fail(describe(db_, rc, "put_tune_results: COMMIT"));
    return true;
  } catch (...) { return fail("put_tune_results: unexpected exception"); }
}

std::optional<TuneRow> Db::best(const std::string& semantic_key, const std::string& bucket) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return std::nullopt;
  try {
    sqlite3* const conn = tune_source(semantic_key, bucket);
    Stmt st(conn, std::string("SELECT semantic_key, bucket, tunables, median_ms, status FROM tune_results WHERE ") +
                      kTuneEnvWhere +
                      " AND semantic_key = ?8 AND bucket = ?9 AND status = 'ok' AND median_ms IS NOT NULL "
                      "ORDER BY median_ms ASC, tunables ASC LIMIT 1");
    if (!st.ok()) {
      fail(describe(conn, st.prepare_rc(), "best"));
      return std::nullopt;
    }
    bind_tune_env(st, env_);
    st.bind_text(8, semantic_key);
    st.bind_text(9, bucket);
    const int rc = st.step();
    if (rc == SQLITE_ROW) return read_tune_row(st);
    if (rc != SQLITE_DONE) fail(describe(conn, rc, "best"));
    return std::nullopt;
  } catch (...) {
    fail("best: unexpected exception");
    return std::nullopt;
  }
}

std::vector<TuneRow> Db::tune_rows(const std::string& semantic_key, const std::string& bucket) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TuneRow> out;
  if (db_ == nullptr) return out;
  try {
    sqlite3* const conn = tune_source(semantic_key, bucket);
    Stmt st(conn, std::string("SELECT semantic_key, bucket, tunables, median_ms, status FROM tune_results WHERE ") +
                      kTuneEnvWhere +
                      " AND semantic_key = ?8 AND bucket = ?9 ORDER BY median_ms IS NULL, median_ms, tunables");
    if (!st.ok()) {
      fail(describe(conn, st.prepare_rc(), "tune_rows"));
      return out;
    }
    bind_tune_env(st, env_);
    st.bind_text(8, semantic_key);
    st.bind_text(9, bucket);
    int rc;
    while ((rc = st.step()) == SQLITE_ROW) out.push_back(read_tune_row(st));
    if (rc != SQLITE_DONE) fail(describe(conn, rc, "tune_rows"));
  } catch (...) { fail("tune_rows: unexpected exception"); }
  return out;
}

std::vector<sqlite3*> Db::sources() const {
  std::vector<sqlite3*> out;
  if (ro_ != nullptr) out.push_back(ro_);
  if (db_ != nullptr) out.push_back(db_);
  return out;
}

sqlite3* Db::tune_source(const std::string& semantic_key, const std::string& bucket) {
  if (ro_ == nullptr) return db_;
  // The overlay shadows the file key by key, so that put_tune_results(replace_existing) replaces what lookups see.
  return detail::has_tune_rows(db_, env_, semantic_key, bucket) ? db_ : ro_;
}

}  // namespace fa::cache
