// schema.h -- the cache's table layout (version kSchemaVersion) and the migration machinery.
//
// PRAGMA user_version holds the schema version of a file: 0 = fresh or pre-versioned, 1 = current. A Migration step
// takes a database from version `from` to `from + 1`; migrate() runs every step between the file's version and the
// target inside ONE BEGIN IMMEDIATE transaction (reading user_version inside it, so concurrent openers migrate
// once), then sets user_version. Step 0 -> 1 creates the tables; for a table that already exists in an older layout
// it adds missing non-key columns (ALTER TABLE ADD COLUMN with their defaults) and rebuilds the table (dropping its
// rows -- it is a cache) when a key or required column is missing.
#pragma once

#include <functional>
#include <string>
#include <vector>

struct sqlite3;

namespace fa::cache::detail {

struct Migration {
  int from;                                                 // migrates from `from` to `from + 1`
  std::string what;                                         // for messages
  std::function<int(sqlite3* db, std::string* err)> apply;  // SQLite result code; runs inside the transaction
};

// The library's steps: steps[i].from == i, steps.size() == kSchemaVersion.
const std::vector<Migration>& migrations();

struct MigrateOutcome {
  int rc = 0;             // SQLite result code of the failing operation (0 = SQLITE_OK)
  int found_version = 0;  // user_version seen inside the transaction
  int version = 0;        // user_version afterwards
  bool newer = false;     // found_version > target: nothing was touched
  std::string error;
};

// Brings `db` to `target` with `steps` (steps[i].from must equal i for the versions needed).
MigrateOutcome migrate(sqlite3* db, const std::vector<Migration>& steps, int target);

// Reads PRAGMA user_version; returns the SQLite result code.
int read_user_version(sqlite3* db, int* version);

// Checks that both tables exist with every column of the current layout. Returns the SQLite result code of the
// check (a prepare failure on a missing table or column), *err describes it.
int verify_schema(sqlite3* db, std::string* err);

}  // namespace fa::cache::detail
