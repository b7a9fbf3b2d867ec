// schema.cpp -- table layout v1 and the migration steps (see schema.h).
#include "cache_db/schema.h"

#include <sqlite3.h>

#include <set>

#include "cache_db/cache_db.h"
#include "cache_db/sqlite_util.h"

namespace fa::cache::detail {
namespace {

struct Column {
  const char* name;
  const char* decl;  // type and constraints for CREATE TABLE / ALTER TABLE ADD COLUMN
  bool required;     // key or data without which a row is useless: its absence rebuilds the table
};

struct Table {
  const char* name;
  std::vector<Column> columns;
  const char* unique;  // the UNIQUE key column list
};

const std::vector<Table>& tables_v1() {
  static const std::vector<Table> t = {
      {"cubins",
       {
           {"compile_hash", "INTEGER NOT NULL", true},
           {"compile_key", "TEXT NOT NULL", true},
           {"arch", "INTEGER NOT NULL", true},
           {"nvrtc_version", "TEXT NOT NULL", true},
           {"generator_version", "INTEGER NOT NULL", true},
           {"templates_hash", "INTEGER NOT NULL", true},
           {"cubin", "BLOB NOT NULL", true},
           {"cubin_size", "INTEGER NOT NULL", true},
           {"checksum", "INTEGER NOT NULL", true},
           {"registers", "INTEGER NOT NULL DEFAULT -1", false},
           {"spill_bytes", "INTEGER NOT NULL DEFAULT -1", false},
           {"smem_bytes", "INTEGER NOT NULL DEFAULT -1", false},
           {"created_unix", "INTEGER NOT NULL DEFAULT 0", false},
       },
       "compile_hash, compile_key, arch, nvrtc_version, generator_version, templates_hash"},
      {"tune_results",
       {
           {"gpu_name", "TEXT NOT NULL", true},
           {"sm_count", "INTEGER NOT NULL", true},
           {"driver_version", "INTEGER NOT NULL", true},
           {"library_version", "TEXT NOT NULL", true},
           {"nvrtc_version", "TEXT NOT NULL", true},
           {"templates_hash", "INTEGER NOT NULL", true},
           {"generator_version", "INTEGER NOT NULL", true},
           {"semantic_key", "TEXT NOT NULL", true},
           {"bucket", "TEXT NOT NULL", true},
           {"tunables", "TEXT NOT NULL", true},
           {"median_ms", "REAL", false},
           {"status", "TEXT NOT NULL", true},
           {"created_unix", "INTEGER NOT NULL DEFAULT 0", false},
       },
       "gpu_name, sm_count, driver_version, library_version, nvrtc_version, templates_hash, generator_version, "
       "semantic_key, bucket, tunables"},
  };
  return t;
}

std::string create_sql(const Table& t) {
  std::string sql = std::string("CREATE TABLE IF NOT EXISTS ") + t.name + " (";
  for (const Column& c : t.columns) sql += std::string(c.name) + " " + c.decl + ", ";
  sql += std::string("UNIQUE (") + t.unique + "))";
  return sql;
}

// Column names of an existing table (empty set: no such table). Returns the SQLite result code.
int table_columns(sqlite3* db, const char* table, std::set<std::string>* cols) {
  Stmt st(db, std::string("SELECT name FROM pragma_table_info('") + table + "')");
  if (!st.ok()) return st.prepare_rc();
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) cols->insert(st.col_text(0));
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int migrate_0_to_1(sqlite3* db, std::string* err) {
  for (const Table& t : tables_v1()) {
    std::set<std::string> have;
    int rc = table_columns(db, t.name, &have);
    if (rc != SQLITE_OK) {
      *err = describe(db, rc, std::string("reading the layout of ") + t.name);
      return rc;
    }
    if (!have.empty()) {
      bool rebuild = false;
      std::vector<const Column*> add;
      for (const Column& c : t.columns) {
        if (have.count(c.name) != 0) continue;
        if (c.required) rebuild = true;
        add.push_back(&c);
      }
      if (rebuild) {
        rc = exec(db, std::string("DROP TABLE ") + t.name, err);
        if (rc != SQLITE_OK) return rc;
      } else {
        for (const Column* c : add) {
          rc = exec(db, std::string("ALTER TABLE ") + t.name + " ADD COLUMN " + c->name + " " + c->decl, err);
          if (rc != SQLITE_OK) return rc;
        }
        continue;
      }
    }
    rc = exec(db, create_sql(t), err);
    if (rc != SQLITE_OK) return rc;
  }
  return SQLITE_OK;
}

}  // namespace

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> steps = {
      {0, "create the cubins and tune_results tables (v1)", migrate_0_to_1},
  };
  static_assert(kSchemaVersion == 1, "add a Migration step for every schema version");
  return steps;
}

int read_user_version(sqlite3* db, int* version) {
  Stmt st(db, "PRAGMA user_version");
  if (!st.ok()) return st.prepare_rc();
  const int rc = st.step();
  if (rc != SQLITE_ROW) return rc;
  *version = static_cast<int>(st.col_int(0));
  return SQLITE_OK;
}

MigrateOutcome migrate(sqlite3* db, const std::vector<Migration>& steps, int target) {
  MigrateOutcome out;
  // Cheap read first: an up-to-date (or newer) file needs no write lock at all.
  int v = 0;
  out.rc = read_user_version(db, &v);
  if (out.rc != SQLITE_OK) {
    out.error = describe(db, out.rc, "reading user_version");
    return out;
  }
  out.found_version = out.version = v;
  if (v > target) {
    out.newer = true;
    return out;
  }
  if (v == target) return out;

  Txn txn(db);
  if (!txn.ok()) {
    out.rc = txn.begin_rc();
    out.error = describe(db, out.rc, "BEGIN IMMEDIATE for the schema migration");
    return out;
  }
  out.rc = read_user_version(db, &v);  // again, under the write lock: another process may have migrated meanwhile
  if (out.rc != SQLITE_OK) {
    out.error = describe(db, out.rc, "reading user_version");
    return out;
  }
  out.found_version = out.version = v;
  if (v > target) {
    out.newer = true;
    return out;
  }
  for (int from = v; from < target; ++from) {
    const Migration* step = nullptr;
    for (const Migration& m : steps) {
      if (m.from == from) step = &m;
    }
    if (step == nullptr) {
      out.rc = SQLITE_ERROR;
      out.error = "no migration step from schema version " + std::to_string(from);
      return out;
    }
    std::string err;
    out.rc = step->apply(db, &err);
    if (out.rc != SQLITE_OK) {
      out.error =
          "migration " + std::to_string(from) + " -> " + std::to_string(from + 1) + " (" + step->what + "): " + err;
      return out;
    }
  }
  std::string err;
  out.rc = exec(db, "PRAGMA user_version = " + std::to_string(target), &err);
  if (out.rc == SQLITE_OK) out.rc = txn.commit();
  if (out.rc != SQLITE_OK) {
    out.error = err.empty() ? describe(db, out.rc, "committing the schema migration") : err;
    return out;
  }
  out.version = target;
  return out;
}

int verify_schema(sqlite3* db, std::string* err) {
  for (const Table& t : tables_v1()) {
    std::string sql = "SELECT ";
    for (size_t i = 0; i < t.columns.size(); ++i) sql += (i ? ", " : "") + std::string(t.columns[i].name);
    sql += std::string(" FROM ") + t.name + " LIMIT 0";
    Stmt st(db, sql);
    if (!st.ok()) {
      *err = describe(db, st.prepare_rc(), std::string("table ") + t.name + " does not have the v1 layout");
      return st.prepare_rc();
    }
  }
  return SQLITE_OK;
}

}  // namespace fa::cache::detail
