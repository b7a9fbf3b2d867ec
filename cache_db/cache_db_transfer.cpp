// cache_db_transfer.cpp -- listing, pruning, export and import of fa::cache::Db (see cache_db.h).
//
// Export opens (or creates) the target through Db::open, so it gets the same health check, schema and locking, and
// streams every valid row into it in one transaction. Import opens the source read-only with no migration (its
// user_version must equal kSchemaVersion) and streams its valid rows into this Db in one transaction.
#include <sqlite3.h>

#include <filesystem>

#include "cache_db/cache_db.h"
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
    const int rc = detail::for_each_tune(db_, [&](const TuneRecord& r) {
      TuneRecord c = r;
      c.stale = detail::tune_stale(r, env_);
      if (include_stale || !c.stale) out.push_back(std::move(c));
      return true;
    });
    if (rc != SQLITE_OK) fail(describe(db_, rc, "list_tune_rows"));
  } catch (...) {
    fail("list_tune_rows: unexpected exception");
  }
  return out;
}

std::vector<CubinSummary> Db::list_cubins(bool include_stale) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CubinSummary> out;
  if (db_ == nullptr) return out;
  try {
    const int rc = detail::for_each_cubin(db_, false, [&](const detail::StoredCubin& c) {
      CubinSummary s = c.info;
      s.stale = detail::cubin_stale(s.nvrtc_version, s.generator_version, s.templates_hash, env_);
      if (include_stale || !s.stale) out.push_back(std::move(s));
      return true;
    });
    if (rc != SQLITE_OK) fail(describe(db_, rc, "list_cubins"));
  } catch (...) {
    fail("list_cubins: unexpected exception");
  }
  return out;
}

int Db::prune_stale() {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return -1;
  try {
    Txn txn(db_);
    if (!txn.ok()) {
      fail(describe(db_, txn.begin_rc(), "prune_stale: BEGIN IMMEDIATE"));
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
        fail(describe(db_, rc, "prune_stale (cubins)"));
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
        fail(describe(db_, rc, "prune_stale (tune_results)"));
        return -1;
      }
      removed += sqlite3_changes64(db_);
    }
    const int rc = txn.commit();
    if (rc != SQLITE_OK) {
      fail(describe(db_, rc, "prune_stale: COMMIT"));
      return -1;
    }
    return static_cast<int>(removed);
  } catch (...) {
    fail("prune_stale: unexpected exception");
    return -1;
  }
}

namespace {

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

// Streams every valid row of `src` (valid for `env`) into `dst` inside the caller's transaction. Returns the
// number of rows written, or -1 with *err set.
int64_t copy_valid_rows(sqlite3* src, sqlite3* dst, const Env& env, std::string* err) {
  int64_t copied = 0;
  Stmt ins_cubin(dst, detail::kInsertCubinSql);
  Stmt ins_tune(dst, detail::kInsertTuneSql);
  if (!ins_cubin.ok() || !ins_tune.ok()) {
    *err = describe(dst, ins_cubin.ok() ? ins_tune.prepare_rc() : ins_cubin.prepare_rc(), "preparing inserts");
    return -1;
  }
  int write_rc = SQLITE_OK;
  int rc = detail::for_each_cubin(src, true, [&](const detail::StoredCubin& c) {
    if (!c.checksum_ok ||
        detail::cubin_stale(c.info.nvrtc_version, c.info.generator_version, c.info.templates_hash, env)) {
      return true;
    }
    write_rc = detail::insert_cubin(ins_cubin, c.row, c.info.nvrtc_version, c.info.generator_version,
                                    c.info.templates_hash, c.info.created_unix);
    if (write_rc != SQLITE_OK) return false;
    ++copied;
    return true;
  });
  if (rc == SQLITE_OK) {
    rc = detail::for_each_tune(src, [&](const TuneRecord& r) {
      if (detail::tune_stale(r, env)) return true;
      write_rc = detail::insert_tune(ins_tune, r);
      if (write_rc != SQLITE_OK) return false;
      ++copied;
      return true;
    });
  }
  if (write_rc != SQLITE_OK) {
    *err = describe(dst, write_rc, "writing rows");
    return -1;
  }
  if (rc != SQLITE_OK) {
    *err = describe(src, rc, "reading rows");
    return -1;
  }
  return copied;
}

}  // namespace

bool Db::export_to(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) return fail("export: no database");
  try {
    if (path.empty() || path == ":memory:") return fail("export: a file path is needed");
    if (!in_memory_ && same_file(path, path_)) return fail("export: " + path + " is this cache itself");
    bool target_warned = false;
    std::string target_warning;
    std::unique_ptr<Db> target = Db::open(path, env_, [&](const std::string& m) {
      target_warned = true;
      target_warning = m;
    });
    if (!target || target->db_ == nullptr || target->in_memory()) {
      return fail("export: cannot use " + path + (target_warned ? ": " + target_warning : std::string()));
    }
    Txn txn(target->db_);
    if (!txn.ok()) return fail(describe(target->db_, txn.begin_rc(), "export: BEGIN IMMEDIATE on " + path));
    std::string err;
    const int64_t n = copy_valid_rows(db_, target->db_, env_, &err);
    if (n < 0) return fail("export to " + path + ": " + err);
    const int rc = txn.commit();
    if (rc != SQLITE_OK) return fail(describe(target->db_, rc, "export: COMMIT on " + path));
    return true;
  } catch (...) {
    return fail("export: unexpected exception");
  }
}

int Db::import_from(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ == nullptr) {
    fail("import: no database");
    return -1;
  }
  sqlite3* src = nullptr;
  try {
    if (!in_memory_ && same_file(path, path_)) {
      fail("import: " + path + " is this cache itself");
      return -1;
    }
    int rc = sqlite3_open_v2(path.c_str(), &src, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      fail(describe(src, rc, "import: cannot open " + path));
      sqlite3_close_v2(src);
      return -1;
    }
    sqlite3_busy_timeout(src, 15000);
    int version = -1;
    rc = detail::read_user_version(src, &version);
    if (rc != SQLITE_OK || version != kSchemaVersion) {
      fail(rc != SQLITE_OK ? describe(src, rc, "import: " + path + " is not readable as a database")
                           : "import: " + path + " has cache schema version " + std::to_string(version) +
                                 ", expected " + std::to_string(kSchemaVersion));
      sqlite3_close_v2(src);
      return -1;
    }
    std::string err;
    rc = detail::verify_schema(src, &err);
    if (rc != SQLITE_OK) {
      fail("import: " + err);
      sqlite3_close_v2(src);
      return -1;
    }
    int64_t n = -1;
    {
      Txn txn(db_);
      if (!txn.ok()) {
        fail(describe(db_, txn.begin_rc(), "import: BEGIN IMMEDIATE"));
      } else {
        n = copy_valid_rows(src, db_, env_, &err);
        if (n < 0) {
          fail("import from " + path + ": " + err);
        } else if ((rc = txn.commit()) != SQLITE_OK) {
          fail(describe(db_, rc, "import: COMMIT"));
          n = -1;
        }
      }
    }
    sqlite3_close_v2(src);
    return static_cast<int>(n);
  } catch (...) {
    sqlite3_close_v2(src);
    fail("import: unexpected exception");
    return -1;
  }
}

}  // namespace fa::cache
