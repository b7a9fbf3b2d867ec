// row_io.h -- reading and writing whole rows of the two cache tables (internal to cache_db).
//
// Shared by the Db methods, prune, export and import so that the column lists live in one place. Writers take a
// statement prepared from kInsertCubinSql / kInsertTuneSql (prepare once, bind per row); readers visit every row.
#pragma once

#include <functional>
#include <string>

#include "cache_db/cache_db.h"
#include "cache_db/sqlite_util.h"

namespace fa::cache::detail {

extern const char* const kInsertCubinSql;
extern const char* const kInsertTuneSql;

// Staleness rules (see cache_db.h).
bool cubin_stale(const std::string& nvrtc_version, int generator_version, uint64_t templates_hash, const Env& env);
bool tune_stale(const TuneRecord& r, const Env& env);

// WHERE clause of one environment's tuning rows, parameters ?1..?7, bound by bind_tune_env.
extern const char* const kTuneEnvWhere;
void bind_tune_env(Stmt& st, const Env& env);
// The environment a tuning row was written under.
Env env_of(const TuneRecord& r);
// Whether `db` holds tuning rows of (env, semantic_key, bucket).
bool has_tune_rows(sqlite3* db, const Env& env, const std::string& semantic_key, const std::string& bucket);

// Insert-or-replace one row through `ins` (prepared from the matching SQL). Returns the SQLite result code.
int insert_cubin(Stmt& ins, const CubinRow& row, const std::string& nvrtc_version, int generator_version,
                 uint64_t templates_hash, int64_t created_unix);
int insert_tune(Stmt& ins, const TuneRecord& rec);

// What writing a row into a database would do: add it, replace another row under the same key, or nothing (the
// same row is there already; created_unix is not compared).
enum class RowFate { kNew, kUpdated, kPresent };

// A full cubin row as stored.
struct StoredCubin {
  int64_t rowid = 0;
  CubinRow row;  // cubin left empty when read without blobs
  CubinSummary info;
  uint64_t checksum = 0;
  bool checksum_ok = false;  // only computed when read with blobs
};

// Visit every row; the visitor returns false to stop early. Return the SQLite result code (SQLITE_OK at the end).
int for_each_cubin(sqlite3* db, bool with_blob, const std::function<bool(const StoredCubin&)>& visit);
int for_each_tune(sqlite3* db, const std::function<bool(const TuneRecord&)>& visit);

// The fate of writing c / r into the database `find` was prepared on (from kFindCubinSql / kFindTuneSql). Returns
// the SQLite result code.
extern const char* const kFindCubinSql;
extern const std::string kFindTuneSql;
int cubin_fate(Stmt& find, const StoredCubin& c, RowFate* fate);
int tune_fate(Stmt& find, const TuneRecord& r, RowFate* fate);

int64_t now_unix();

}  // namespace fa::cache::detail
