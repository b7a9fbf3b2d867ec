// sqlite_util.cpp -- RAII statement / transaction helpers over the SQLite C API (see sqlite_util.h).
#include "cache_db/sqlite_util.h"

#include <sqlite3.h>

#include <cmath>
#include <limits>

namespace fa::cache::detail {

std::string describe(sqlite3* db, int rc, const std::string& what) {
  std::string msg = what + ": ";
  // sqlite3_errmsg describes the most recent failure on the connection; fall back to the code's generic text.
  const char* m = db != nullptr ? sqlite3_errmsg(db) : nullptr;
  msg += (m != nullptr && *m != '\0') ? m : sqlite3_errstr(rc);
  msg += " (code " + std::to_string(rc) + ")";
  return msg;
}

int exec(sqlite3* db, const std::string& sql, std::string* err) {
  char* raw = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &raw);
  if (rc != SQLITE_OK && err != nullptr) {
    *err = (raw != nullptr ? std::string(raw) : std::string(sqlite3_errstr(rc))) + " (code " + std::to_string(rc) + ")";
  }
  sqlite3_free(raw);
  return rc;
}

bool is_unwritable(int rc) {
  switch (rc & 0xff) {
    case SQLITE_READONLY:
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_NOLFS: return true;
    default: return false;
  }
}

bool is_corrupt(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

Stmt::Stmt(sqlite3* db, const std::string& sql) {
  prepare_rc_ = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr);
  if (prepare_rc_ != SQLITE_OK) {
    sqlite3_finalize(stmt_);
    stmt_ = nullptr;
  }
}

Stmt::~Stmt() { sqlite3_finalize(stmt_); }

void Stmt::bind_int(int idx, int64_t v) { sqlite3_bind_int64(stmt_, idx, static_cast<sqlite3_int64>(v)); }

void Stmt::bind_real(int idx, double v) {
  if (std::isnan(v)) {
    sqlite3_bind_null(stmt_, idx);
  } else {
    sqlite3_bind_double(stmt_, idx, v);
  }
}

void Stmt::bind_text(int idx, const std::string& v) {
  sqlite3_bind_text64(stmt_, idx, v.data(), static_cast<sqlite3_uint64>(v.size()), SQLITE_TRANSIENT, SQLITE_UTF8);
}

void Stmt::bind_blob(int idx, const std::vector<uint8_t>& v) {
  // A zero-length blob must still be a BLOB, not NULL: sqlite3_bind_zeroblob gives an empty blob.
  if (v.empty()) {
    sqlite3_bind_zeroblob(stmt_, idx, 0);
  } else {
    sqlite3_bind_blob64(stmt_, idx, v.data(), static_cast<sqlite3_uint64>(v.size()), SQLITE_TRANSIENT);
  }
}

int Stmt::step() { return stmt_ != nullptr ? sqlite3_step(stmt_) : prepare_rc_; }

void Stmt::reset() {
  if (stmt_ != nullptr) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

int64_t Stmt::col_int(int i) const { return static_cast<int64_t>(sqlite3_column_int64(stmt_, i)); }

double Stmt::col_real(int i) const {
  if (sqlite3_column_type(stmt_, i) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, i);
}

std::string Stmt::col_text(int i) const {
  const unsigned char* p = sqlite3_column_text(stmt_, i);
  const int n = sqlite3_column_bytes(stmt_, i);
  return p != nullptr ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
}

std::vector<uint8_t> Stmt::col_blob(int i) const {
  const void* p = sqlite3_column_blob(stmt_, i);
  const int n = sqlite3_column_bytes(stmt_, i);
  if (p == nullptr || n <= 0) return {};
  const auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

Txn::Txn(sqlite3* db) : db_(db) {
  begin_rc_ = exec(db_, "BEGIN IMMEDIATE", nullptr);
  open_ = begin_rc_ == SQLITE_OK;
}

Txn::~Txn() {
  if (open_) exec(db_, "ROLLBACK", nullptr);
}

int Txn::commit() {
  if (!open_) return begin_rc_ != SQLITE_OK ? begin_rc_ : SQLITE_MISUSE;
  const int rc = exec(db_, "COMMIT", nullptr);
  // A failed COMMIT (e.g. SQLITE_FULL) may leave the transaction open; the destructor then rolls it back.
  if (rc == SQLITE_OK || sqlite3_get_autocommit(db_) != 0) open_ = false;
  return rc;
}

}  // namespace fa::cache::detail
