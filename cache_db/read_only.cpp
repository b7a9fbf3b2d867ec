// read_only.cpp -- opening an fa cache file for reading only (see read_only.h).
#include "cache_db/read_only.h"

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "cache_db/cache_db.h"
#include "cache_db/schema.h"
#include "cache_db/sqlite_util.h"

namespace fa::cache::detail {
namespace {

constexpr int kBusyTimeoutMs = 15000;

// "file:" URI of `path` with `query` (percent-escaping what a URI path must not hold raw).
std::string file_uri(const std::string& path, const char* query) {
  std::string uri = "file:";
  for (const char ch : path) {
    if (ch == '%' || ch == '?' || ch == '#') {
      static const char* const kHex = "0123456789ABCDEF";
      const auto u = static_cast<unsigned char>(ch);
      uri += '%';
      uri += kHex[u >> 4];
      uri += kHex[u & 0xf];
    } else {
      uri += ch;
    }
  }
  return uri + "?" + query;
}

// One open with `flags` / `name`; the checks of open_read_only. *retry_immutable is set when the failure is the
// kind an immutable open avoids (the -shm / -wal of a WAL file cannot be created or locked).
ReadOnlyFile try_open(const std::string& name, int flags, const std::string& path, bool* retry_immutable) {
  ReadOnlyFile f;
  *retry_immutable = false;
  auto give_up = [&f](std::string why) {
    f.error = std::move(why);
    sqlite3_close_v2(f.db);
    f.db = nullptr;
    return f;
  };
  const bool writable = (flags & SQLITE_OPEN_READWRITE) != 0;
  int rc = sqlite3_open_v2(name.c_str(), &f.db, flags | (writable ? 0 : SQLITE_OPEN_READONLY) | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) return give_up(describe(f.db, rc, "cannot open " + path + " read-only"));
  sqlite3_extended_result_codes(f.db, 1);
  sqlite3_busy_timeout(f.db, kBusyTimeoutMs);
  if (writable) {  // a connection that may clean up after itself, and that no statement can write through
    rc = exec(f.db, "PRAGMA query_only = 1", nullptr);
    if (rc != SQLITE_OK) return give_up(describe(f.db, rc, "PRAGMA query_only on " + path));
  }
  int version = -1;
  rc = read_user_version(f.db, &version);
  if (rc != SQLITE_OK) {
    const int primary = rc & 0xff;
    // The -shm / -wal of a WAL file cannot be created, grown or locked (read-only directory, file size limit).
    *retry_immutable =
        primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY || primary == SQLITE_BUSY || primary == SQLITE_IOERR;
    return give_up(describe(f.db, rc, path + " cannot be read as a database"));
  }
  if (version != kSchemaVersion) {
    return give_up(path + " has cache schema version " + std::to_string(version) + ", expected " +
                   std::to_string(kSchemaVersion) +
                   (version < kSchemaVersion ? " (a file opened read-only is not migrated)" : " (a newer fa's)"));
  }
  std::string err;
  if (verify_schema(f.db, &err) != SQLITE_OK) return give_up(path + ": " + err);
  Stmt qc(f.db, "PRAGMA quick_check");
  rc = qc.ok() ? qc.step() : qc.prepare_rc();
  if (rc != SQLITE_ROW) return give_up(describe(f.db, rc, "PRAGMA quick_check of " + path));
  if (const std::string first = qc.col_text(0); first != "ok") {
    return give_up(path + " fails PRAGMA quick_check: " + first);
  }
  return f;
}

// Whether this process may write `path` and its directory (where SQLite keeps a WAL file's -wal and -shm).
bool may_write(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return ::access(path.c_str(), W_OK) == 0 && ::access(parent.empty() ? "." : parent.c_str(), W_OK) == 0;
}

}  // namespace

ReadOnlyFile open_read_only(const std::string& path) {
  bool retry_immutable = false;
  if (may_write(path)) {
    // Read-write without SQLITE_OPEN_CREATE, under query_only: the last connection to close removes the -wal and
    // -shm files (a read-only connection cannot, and leaves them beside the file).
    ReadOnlyFile w = try_open(path, SQLITE_OPEN_READWRITE, path, &retry_immutable);
    if (w.db != nullptr || !retry_immutable) return w;
  }
  ReadOnlyFile f = try_open(path, 0, path, &retry_immutable);
  if (f.db != nullptr || !retry_immutable) return f;
  bool unused = false;
  ReadOnlyFile g = try_open(file_uri(path, "immutable=1"), SQLITE_OPEN_URI, path, &unused);
  if (g.db == nullptr) g.error = f.error + "; as immutable: " + g.error;
  return g;
}

}  // namespace fa::cache::detail

namespace fa::cache {

std::string cache_file_problem(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "no such file";
  if (std::filesystem::is_directory(path, ec)) return "it is a directory";
  detail::ReadOnlyFile f = detail::open_read_only(path);
  sqlite3_close_v2(f.db);
  if (f.db != nullptr) return "";
  std::string why = f.error;  // without the path where it leads ("F cannot be read as a database: ...")
  if (why.rfind(path, 0) == 0) { why = why.substr(path.size() + (why.compare(path.size(), 2, ": ") == 0 ? 2 : 1)); }
  return why;
}

}  // namespace fa::cache
