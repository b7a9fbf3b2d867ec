// cache_db_transfer.cpp -- listing, pruning, export and import of fa::cache::Db (see cache_db.h).
//
// Listing and export read every source (a read-only Db's file, then its overlay). Export opens (or creates) the target
// through Db::open, so it gets the same health check, schema and locking, and streams every valid row into it in one
// transaction. Import opens the source with read_only.h (no migration, never modified) and streams its valid rows
// into this Db (a read-only Db's overlay) in one transaction. Export and import report their failures through the
// return value and last_error() only: the caller says what failed, once.
#include <sqlite3.h>

#include <filesystem>
#include <functional>

#include "cache_db/cache_db.h"
#include "cache_db/read_only.h"
#include "cache_db/row_io.h"
#include "cache_db/schema.h"
#include "cache_db/sqlite_util.h"

namespace fa::cache {

using detail::describe;
using detail::Stmt;
using detail::Txn;

std::vector<TuneRecord> Db::list_tune_rows(bool include_stale) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TuneRecord> out;
  if (db_ == nullptr) return out;
  try {
    for (sqlite3* conn : sources()) {
      const int rc = detail::for_each_tune(conn, [&](const TuneRecord& r) {
        TuneRecord c = r;
        c.stale = detail::tune_stale(r, env_);
        if (include_stale || !c.stale) out.push_back(std::move(c));
        return true;
      });
      if (rc != SQLITE_OK) fail(describe(conn, rc, "list_tune_rows"));
    }
  } catch (...) { fail("list_tune_rows: unexpected exception"); }
  return out;
}

std::vector<CubinSummary> Db::list_cubins(bool include_stale) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CubinSummary> out;
  if (db_ == nullptr) return out;
  try {
    for (sqlite3* conn : sources()) {
      const int rc = detail::for_each_cubin(conn, false, [&](const detail::StoredCubin& c) {
        CubinSummary s = c.info;
        s.stale = detail::cubin_stale(s.nvrtc_version, s.generator_version, s.templates_hash, env_);
        if (include_stale || !s.stale) out.push_back(std::move(s));
        return true;
      });
      if (rc != SQLITE_OK) fail(describe(conn, rc, "list_cubins"));
    }
  } catch (...) { fail("list_cubins: unexpected exception"); }
  return out;
}

int Db::prune_stale() {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return -1;
  if (ro_ != nullptr) {
    report("prune: " + path_ + " is open read-only; nothing was deleted");
    return -1;
  }
  try {
    Txn txn(db_);
    if (!txn.ok()) {
      report(describe(db_, txn.begin_rc(), "prune_stale: BEGIN IMMEDIATE"));
      return -1;
    }
    int64_t removed = 0;
    {
      Stmt st(db_,
              "DELETE FROM cubins WHERE NOT (nvrtc_version = ?1 AND generator_version = ?2 AND templates_hash = ?3)");
      st.bind_text(1, env_.nvrtc_version);
      st.bind_int(2, env_.generator_version);
      st.bind_u64(3, env_.templates_hash);
      const int rc = st.step();
      if (rc != SQLITE_DONE) {
        report(describe(db_, rc, "prune_stale (cubins)"));
        return -1;
      }
      removed += sqlite3_changes64(db_);
    }
    {
      Stmt st(db_,
              "DELETE FROM tune_results WHERE NOT (driver_version = ?1 AND library_version = ?2 AND "
              "nvrtc_version = ?3 AND templates_hash = ?4 AND generator_version = ?5)");
      st.bind_int(1, env_.driver_version);
      st.bind_text(2, env_.library_version);
      st.bind_text(3, env_.nvrtc_version);
      st.bind_u64(4, env_.templates_hash);
      st.bind_int(5, env_.generator_version);
      const int rc = st.step();
      if (rc != SQLITE_DONE) {
        report(describe(db_, rc, "prune_stale (tune_results)"));
        return -1;
      }
      removed += sqlite3_changes64(db_);
    }
    const int rc = txn.commit();
    if (rc != SQLITE_OK) {
      report(describe(db_, rc, "prune_stale: COMMIT"));
      return -1;
    }
    return static_cast<int>(removed);
  } catch (...) {
    report("prune_stale: unexpected exception");
    return -1;
  }
}

namespace {

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

// Whether `overlay` holds tuning rows of r's environment and key (they shadow r: cache_db.h).
bool shadowed(sqlite3* overlay, const TuneRecord& r) {
  return detail::has_tune_rows(overlay, detail::env_of(r), r.row.semantic_key, r.row.bucket);
}

// Streams every valid row of `src` (valid for `env`; tuning rows shadowed by `overlay` left out when it is
// non-null) into `dst` inside the caller's transaction; a row `dst` holds already, the same, is not rewritten.
// Adds to *counts; false with *err set on failure.
bool copy_valid_rows(sqlite3* src, sqlite3* dst, const Env& env, TransferCounts* counts, std::string* err,
                     sqlite3* overlay = nullptr) {
  Stmt ins_cubin(dst, detail::kInsertCubinSql);
  Stmt ins_tune(dst, detail::kInsertTuneSql);
  Stmt find_cubin(dst, detail::kFindCubinSql);
  Stmt find_tune(dst, detail::kFindTuneSql);
  for (const Stmt* st : {&ins_cubin, &ins_tune, &find_cubin, &find_tune}) {
    if (!st->ok()) {
      *err = describe(dst, st->prepare_rc(), "preparing the statements");
      return false;
    }
  }
  int write_rc = SQLITE_OK;
  // Counts the row's fate and writes it unless it is there already; false (write_rc set) stops the walk.
  auto take = [&](int fate_rc, detail::RowFate fate, const std::function<int()>& write) {
    write_rc = fate_rc;
    if (write_rc != SQLITE_OK) return false;
    if (fate == detail::RowFate::kPresent) {
      ++counts->unchanged;
      return true;
    }
    write_rc = write();
    if (write_rc != SQLITE_OK) return false;
    ++(fate == detail::RowFate::kNew ? counts->added : counts->updated);
    return true;
  };
  int rc = detail::for_each_cubin(src, true, [&](const detail::StoredCubin& c) {
    if (!c.checksum_ok ||
        detail::cubin_stale(c.info.nvrtc_version, c.info.generator_version, c.info.templates_hash, env)) {
      return true;
    }
    detail::RowFate fate{};
    const int fate_rc = detail::cubin_fate(find_cubin, c, &fate);
    return take(fate_rc, fate, [&] {
      return detail::insert_cubin(ins_cubin, c.row, c.info.nvrtc_version, c.info.generator_version,
                                  c.info.templates_hash, c.info.created_unix);
    });
  });
  if (rc == SQLITE_OK && write_rc == SQLITE_OK) {
    rc = detail::for_each_tune(src, [&](const TuneRecord& r) {
      if (detail::tune_stale(r, env) || (overlay != nullptr && shadowed(overlay, r))) return true;
      detail::RowFate fate{};
      const int fate_rc = detail::tune_fate(find_tune, r, &fate);
      return take(fate_rc, fate, [&] { return detail::insert_tune(ins_tune, r); });
    });
  }
  if (write_rc != SQLITE_OK) {
    *err = describe(dst, write_rc, "writing rows");
    return false;
  }
  if (rc != SQLITE_OK) {
    *err = describe(src, rc, "reading rows");
    return false;
  }
  return true;
}

}  // namespace

bool Db::export_to(const std::string& path, TransferCounts* counts) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string what = "export to " + path + ": ";
  if (db_ == nullptr) return report(what + "no database");
  try {
    if (path.empty() || path == ":memory:") return report("export: a file path is needed, got '" + path + "'");
    if (!in_memory_ && same_file(path, path_)) return report(what + "it is this cache itself");
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {  // never moved aside as corrupt, nor migrated, by the open below
      if (const std::string why = cache_file_problem(path); !why.empty()) {
        return report(what + "it exists and is not a valid fa cache (" + why + "); it is left as it is");
      }
    }
    std::string target_warning;
    std::unique_ptr<Db> target = Db::open(path, env_, [&](const std::string& m) { target_warning = m; });
    if (!target || target->db_ == nullptr || target->in_memory() || target->read_only()) {
      return report(what + (target_warning.empty() ? "cannot use it" : target_warning));
    }
    Txn txn(target->db_);
    if (!txn.ok()) return report(describe(target->db_, txn.begin_rc(), what + "BEGIN IMMEDIATE"));
    std::string err;
    TransferCounts n;
    // A read-only Db's file first, without the tuning keys its overlay shadows; then the overlay (or the one db_).
    if (ro_ != nullptr && !copy_valid_rows(ro_, target->db_, env_, &n, &err, db_)) return report(what + err);
    if (!copy_valid_rows(db_, target->db_, env_, &n, &err)) return report(what + err);
    const int rc = txn.commit();
    if (rc != SQLITE_OK) return report(describe(target->db_, rc, what + "COMMIT"));
    if (counts != nullptr) *counts = n;
    return true;
  } catch (...) { return report(what + "unexpected exception"); }
}

int Db::import_from(const std::string& path, TransferCounts* counts) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string what = "import from " + path + ": ";
  if (db_ == nullptr) {
    report(what + "no database");
    return -1;
  }
  sqlite3* src = nullptr;
  try {
    if (!in_memory_ && same_file(path, path_)) {
      report(what + "it is this cache itself");
      return -1;
    }
    detail::ReadOnlyFile f = detail::open_read_only(path);
    if (f.db == nullptr) {
      report(what + f.error);
      return -1;
    }
    src = f.db;
    int64_t n = -1;
    TransferCounts taken;
    {
      Txn txn(db_);
      std::string err;
      int rc = SQLITE_OK;
      if (!txn.ok()) {
        report(describe(db_, txn.begin_rc(), what + "BEGIN IMMEDIATE"));
      } else if (!copy_valid_rows(src, db_, env_, &taken, &err)) {
        report(what + err);
      } else if ((rc = txn.commit()) != SQLITE_OK) {
        report(describe(db_, rc, what + "COMMIT"));
      } else {
        n = taken.total();
      }
    }
    sqlite3_close_v2(src);
    if (n >= 0 && counts != nullptr) *counts = taken;
    return static_cast<int>(n);
  } catch (...) {
    sqlite3_close_v2(src);
    report(what + "unexpected exception");
    return -1;
  }
}

}  // namespace fa::cache
