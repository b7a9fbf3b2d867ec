// cache_db_open.cpp -- opening the cache file: health check, corruption handling, migration, in-memory fallback.
//
// Db::open tries the file up to three times. Each try: sqlite3_open_v2 (read-write, create), busy_timeout, read
// user_version (fails with SQLITE_NOTADB on a file that is not a database), PRAGMA quick_check, WAL journal (kept
// as the rollback journal where WAL cannot be set), migrate() to kSchemaVersion, verify the layout, and a write
// probe (rewrites user_version in a BEGIN IMMEDIATE transaction) so that a read-only location or a full disk is
// found now rather than on the first put. Verdicts: usable; corrupt (moved aside, try again); newer schema (in-memory
// database, file untouched); unwritable (an existing file is served read-only when it passes read_only.h's checks,
// else an in-memory database; the file is untouched). A file this process may not write, or any file in
// OpenMode::kReadOnly, skips the read-write tries and is served read-only from the start.
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "cache_db/cache_db.h"
#include "cache_db/read_only.h"
#include "cache_db/row_io.h"
#include "cache_db/schema.h"
#include "cache_db/sqlite_util.h"

namespace fa::cache {
namespace {

using detail::describe;

constexpr int kBusyTimeoutMs = 15000;

enum class Verdict { kOk, kCorrupt, kUnwritable, kNewer };

struct Attempt {
  sqlite3* db = nullptr;
  Verdict verdict = Verdict::kOk;
  int rc = 0;  // the SQLite result code of the failure
  std::string message;
  bool have_id = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

Verdict classify(int rc) {
  if (detail::is_corrupt(rc)) return Verdict::kCorrupt;
  return Verdict::kUnwritable;  // read-only, full, I/O error, a lock that never cleared, anything else
}

Attempt failed(Attempt a, int rc, const std::string& message) {
  a.verdict = classify(rc);
  a.rc = rc;
  a.message = message;
  return a;
}

// PRAGMA journal_mode=WAL; retried while another connection holds the lock. Not fatal when WAL is refused.
int set_wal(sqlite3* db) {
  int rc = SQLITE_OK;
  for (int i = 0; i < 50; ++i) {
    detail::Stmt st(db, "PRAGMA journal_mode=WAL");
    rc = st.ok() ? st.step() : st.prepare_rc();
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) return SQLITE_OK;
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) return rc;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return rc;
}

Attempt try_open_file(const std::string& path) {
  Attempt a;
  int rc =
      sqlite3_open_v2(path.c_str(), &a.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    a.have_id = true;
    a.dev = st.st_dev;
    a.ino = st.st_ino;
  }
  if (rc != SQLITE_OK) return failed(a, rc, describe(a.db, rc, "cannot open " + path));
  sqlite3_extended_result_codes(a.db, 1);
  sqlite3_busy_timeout(a.db, kBusyTimeoutMs);

  int version = 0;
  rc = detail::read_user_version(a.db, &version);
  if (rc != SQLITE_OK) return failed(a, rc, describe(a.db, rc, path + " cannot be read as a database"));
  if (version > kSchemaVersion) {
    a.verdict = Verdict::kNewer;
    a.message = path + " has cache schema version " + std::to_string(version) + ", newer than this library's " +
                std::to_string(kSchemaVersion) + "; it is left untouched";
    return a;
  }

  {
    detail::Stmt qc(a.db, "PRAGMA quick_check");
    rc = qc.ok() ? qc.step() : qc.prepare_rc();
    if (rc != SQLITE_ROW) return failed(a, rc, describe(a.db, rc, "PRAGMA quick_check of " + path));
    const std::string first = qc.col_text(0);
    if (first != "ok") {
      a.verdict = Verdict::kCorrupt;
      a.message = path + " fails PRAGMA quick_check: " + first;
      return a;
    }
  }

  rc = set_wal(a.db);
  if (detail::is_corrupt(rc)) return failed(a, rc, describe(a.db, rc, "setting the journal mode of " + path));
  // Anything else (e.g. a filesystem without shared memory) keeps the rollback journal; the probe below decides.
  std::string err;
  detail::exec(a.db, "PRAGMA synchronous=NORMAL", nullptr);

  const detail::MigrateOutcome m = detail::migrate(a.db, detail::migrations(), kSchemaVersion);
  if (m.newer) {
    a.verdict = Verdict::kNewer;
    a.message = path + " has cache schema version " + std::to_string(m.found_version) + ", newer than this library's " +
                std::to_string(kSchemaVersion) + "; it is left untouched";
    return a;
  }
  if (m.rc != SQLITE_OK) return failed(a, m.rc, "schema migration of " + path + " failed: " + m.error);

  rc = detail::verify_schema(a.db, &err);
  if (rc != SQLITE_OK) {
    a.verdict = Verdict::kCorrupt;  // user_version says current, yet the tables are not ours
    a.message = path + ": " + err;
    return a;
  }

  // Write probe: a read-only location or a full disk shows up here, not on the first put.
  {
    detail::Txn txn(a.db);
    if (!txn.ok()) return failed(a, txn.begin_rc(), describe(a.db, txn.begin_rc(), "cannot write " + path));
    rc = detail::exec(a.db, "PRAGMA user_version = " + std::to_string(kSchemaVersion), &err);
    if (rc == SQLITE_OK) rc = txn.commit();
    if (rc != SQLITE_OK) return failed(a, rc, describe(a.db, rc, "cannot write " + path));
  }
  return a;
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

// Why this process may not write the existing cache `file` (it, or its directory where the journal lives); "" when
// it may, or when there is no such file.
std::string unwritable_reason(const std::string& file) {
  if (!exists(file)) return "";
  if (::access(file.c_str(), W_OK) != 0) return file + " is not writable by this process";
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  if (::access(dir.c_str(), W_OK) != 0) return "its directory " + dir + " is not writable by this process";
  return "";
}

// A lock that never cleared: a read-only open would wait on it again.
bool busy(int rc) { return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED; }

// Renames path (and its -wal/-shm/-journal files) to <path>.corrupt-<unix seconds>[-<pid>-<n>]. Returns the new
// name, or "" when nothing was moved; *replaced is set when path is no longer the file we examined (another
// process moved it aside first).
std::string move_aside(const std::string& path, const Attempt& a, bool* replaced, std::string* err) {
  *replaced = false;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    *replaced = true;  // gone already
    return "";
  }
  if (a.have_id && (st.st_dev != a.dev || st.st_ino != a.ino)) {
    *replaced = true;
    return "";
  }
  std::string target = path + ".corrupt-" + std::to_string(detail::now_unix());
  for (int n = 1; exists(target); ++n) {
    target = path + ".corrupt-" + std::to_string(detail::now_unix()) + "-" + std::to_string(::getpid()) + "-" +
             std::to_string(n);
  }
  if (std::rename(path.c_str(), target.c_str()) != 0) {
    *err = "cannot rename " + path + " to " + target + ": " + std::strerror(errno);
    return "";
  }
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    const std::string from = path + suffix;
    if (exists(from)) std::rename(from.c_str(), (target + suffix).c_str());
  }
  return target;
}

}  // namespace

Db::~Db() {
  sqlite3_close_v2(db_);
  sqlite3_close_v2(ro_);
}

void Db::warn(const std::string& message) {
  if (warn_) {
    try {
      warn_(message);
    } catch (...) {
      // A throwing callback must not break the cache.
    }
  }
}

bool Db::fail(const std::string& message) {
  last_error_ = message;
  warn(message);
  return false;
}

bool Db::report(const std::string& message) {
  last_error_ = message;
  return false;
}

bool Db::setup_memory(const std::string& why) {
  if (db_ != nullptr) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }
  in_memory_ = true;
  path_ = ":memory:";
  if (!why.empty()) warn(why + "; using an in-memory cache (nothing persists)");
  int rc = sqlite3_open_v2(":memory:", &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    last_error_ = "cannot open an in-memory database";
    return false;
  }
  sqlite3_extended_result_codes(db_, 1);
  const detail::MigrateOutcome m = detail::migrate(db_, detail::migrations(), kSchemaVersion);
  if (m.rc != SQLITE_OK) {
    last_error_ = "in-memory schema: " + m.error;
    sqlite3_close_v2(db_);
    db_ = nullptr;
    return false;
  }
  return true;
}

void Db::setup_read_only(const std::string& file, const std::string& why) {
  detail::ReadOnlyFile f = detail::open_read_only(file);
  if (f.db == nullptr) {
    setup_memory(why.empty() ? f.error : why + "; reading it read-only failed too: " + f.error);
    return;
  }
  if (!setup_memory("")) {  // the overlay
    sqlite3_close_v2(f.db);
    return;
  }
  ro_ = f.db;
  path_ = file;
  in_memory_ = false;
  // Asked for (why empty): no news. Found out: worth one warning, since nothing this process adds will persist.
  if (!why.empty()) warn(file + " is used read-only (" + why + "): its entries are served, new ones stay in memory");
}

std::unique_ptr<Db> Db::open(const std::string& path, const Env& env, WarnFn warn, OpenMode mode) {
  std::unique_ptr<Db> self(new (std::nothrow) Db());
  if (!self) return self;
  try {
    self->env_ = env;
    self->warn_ = std::move(warn);
    self->requested_path_ = path.empty() ? default_cache_path() : path;
    const std::string& file = self->requested_path_;
    if (file == ":memory:") {
      self->setup_memory("");
      return self;
    }

    if (mode == OpenMode::kReadOnly) {
      self->setup_read_only(file, "");
      return self;
    }
    if (const std::string why = unwritable_reason(file); !why.empty()) {
      self->setup_read_only(file, why);
      return self;
    }

    const std::filesystem::path parent = std::filesystem::path(file).parent_path();
    if (!parent.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(parent, ec);
      if (ec) {
        self->setup_memory("cannot create the directory " + parent.string() + ": " + ec.message());
        return self;
      }
    }

    for (int attempt = 0; attempt < 3; ++attempt) {
      const bool existed = exists(file);  // a file made by this try is never served read-only
      Attempt a = try_open_file(file);
      if (a.verdict == Verdict::kOk) {
        self->db_ = a.db;
        self->path_ = file;
        self->in_memory_ = false;
        return self;
      }
      sqlite3_close_v2(a.db);
      if (a.verdict == Verdict::kUnwritable && existed && !busy(a.rc)) {
        self->setup_read_only(file, a.message);
        return self;
      }
      if (a.verdict == Verdict::kNewer || a.verdict == Verdict::kUnwritable) {
        self->setup_memory(a.message);
        return self;
      }
      // Corrupt: move it aside and try a fresh file.
      bool replaced = false;
      std::string err;
      const std::string moved = move_aside(file, a, &replaced, &err);
      if (!moved.empty()) {
        self->warn(a.message + "; moved aside to " + moved + " and rebuilt");
      } else if (!replaced) {
        self->setup_memory(a.message + "; " + err);
        return self;
      }
    }
    self->setup_memory(file + " stays unusable after being moved aside");
  } catch (...) {
    try {
      self->setup_memory("unexpected failure while opening the cache");
    } catch (...) {}
  }
  return self;
}

std::string Db::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

}  // namespace fa::cache
