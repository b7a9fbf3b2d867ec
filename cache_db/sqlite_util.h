// sqlite_util.h -- thin RAII helpers over the SQLite C API used by cache_db (internal to this module).
//
// Stmt owns a prepared statement (bind by 1-based index, step, read columns); Txn is a BEGIN IMMEDIATE transaction
// that rolls back unless committed. u64 values are stored in INTEGER columns as their two's-complement int64 bit
// pattern (to_i64 / to_u64).
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace fa::cache::detail {

inline int64_t to_i64(uint64_t v) { return std::bit_cast<int64_t>(v); }
inline uint64_t to_u64(int64_t v) { return std::bit_cast<uint64_t>(v); }

// "<what>: <sqlite message> (code N)".
std::string describe(sqlite3* db, int rc, const std::string& what);

// Runs one or more statements without results. Returns the SQLite result code; *err gets a message on failure.
int exec(sqlite3* db, const std::string& sql, std::string* err);

// True for result codes that mean "this location cannot be written" (read-only, full, I/O, permission, lock).
bool is_unwritable(int rc);
// True for result codes that mean "this file is damaged or is not a database".
bool is_corrupt(int rc);

class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool ok() const { return stmt_ != nullptr; }
  int prepare_rc() const { return prepare_rc_; }

  void bind_int(int idx, int64_t v);
  void bind_u64(int idx, uint64_t v) { bind_int(idx, to_i64(v)); }
  void bind_real(int idx, double v);  // NaN binds NULL
  void bind_text(int idx, const std::string& v);
  void bind_blob(int idx, const std::vector<uint8_t>& v);

  int step();  // SQLITE_ROW, SQLITE_DONE or an error code
  void reset();

  int64_t col_int(int i) const;
  uint64_t col_u64(int i) const { return to_u64(col_int(i)); }
  double col_real(int i) const;  // NULL reads NaN
  std::string col_text(int i) const;
  std::vector<uint8_t> col_blob(int i) const;

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int prepare_rc_ = 0;
};

class Txn {
 public:
  explicit Txn(sqlite3* db);  // BEGIN IMMEDIATE (waits up to the busy timeout)
  ~Txn();                     // ROLLBACK unless committed
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  int begin_rc() const { return begin_rc_; }
  bool ok() const { return begin_rc_ == 0; }
  int commit();  // SQLite result code

 private:
  sqlite3* db_;
  int begin_rc_ = 0;
  bool open_ = false;
};

}  // namespace fa::cache::detail
