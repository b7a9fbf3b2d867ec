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
// verify and PRAGMA quick_check must pass. Where this process may write the file and its directory, the connection
// is read-write (never creating the file) under PRAGMA query_only, so that no statement writes through it and, the
// last connection to close, it removes a WAL file's -wal and -shm as a writer does (a read-only connection leaves
// them behind); its close checkpoints into the file only what a crashed writer left committed in the -wal.
// Otherwise it is read-only, and a WAL-mode file whose -shm cannot be created (a read-only directory, a file size
// limit) is opened again as immutable=1, which reads the main file without locks or -shm. Never creates, moves or
// migrates the file.
ReadOnlyFile open_read_only(const std::string& path);

}  // namespace fa::cache::detail
