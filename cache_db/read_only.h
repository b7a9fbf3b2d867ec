// read_only.h -- opening an fa cache file for reading only (internal to cache_db): the read-only Db (a cache
// shipped in a read-only image, FA_CACHE_READONLY=1, fa-tune --list) and import_from share it.
#pragma once

#include <string>

struct sqlite3;

namespace fa::cache::detail {

struct ReadOnlyFile {
  sqlite3* db = nullptr;  // owned by the caller (sqlite3_close_v2); null on failure
  std::string error;      // why the file cannot be used (db == null)
};

// Opens `path` with SQLITE_OPEN_READONLY and checks it without writing anything: user_version must equal
// kSchemaVersion (an older file cannot be migrated read-only, a newer one is never mis-read), the layout must
// verify and PRAGMA quick_check must pass. A WAL-mode file whose -shm cannot be created (a read-only directory, a
// file size limit) is opened again as immutable=1, which reads the main file without locks or -shm. Never creates,
// moves or modifies the file (SQLite may leave the -wal / -shm companions of a WAL file, as any reader does).
ReadOnlyFile open_read_only(const std::string& path);

}  // namespace fa::cache::detail
