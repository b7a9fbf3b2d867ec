// cache_db.h -- the persistent cache of fa: compiled cubins and autotuning results in one SQLite file.
//
// Two tables (schema v1, PRAGMA user_version = 1, see schema.cpp):
//   cubins        one row per (compile_hash, compile_key, arch, nvrtc_version, generator_version, templates_hash):
//                 the cubin blob, its byte size and a 64-bit checksum (checksum.h), ptxas info (registers, spill
//                 bytes, shared memory per CTA: ptxas's static part plus the dynamic size it is launched with;
//                 -1 = unknown). A row whose checksum does not match its blob is a miss and is
//                 deleted when found.
//   tune_results  one row per candidate per tuning key (gpu_name, sm_count, driver_version, library_version,
//                 nvrtc_version, templates_hash, generator_version, semantic_key, bucket, tunables): median ms
//                 (NULL = not measured) and a status text ("ok", "compile_error", "spill", "invalid", ...). Every
//                 candidate is kept; best() is the minimum median among "ok" rows.
//
// Staleness. Every lookup filters on the Env given to open(); rows written under another environment are never
// returned and prune_stale() deletes them. A cubin is stale when its nvrtc_version, templates_hash or
// generator_version differ (cubins do not depend on the driver); a tuning row is stale when its driver_version,
// library_version, nvrtc_version, templates_hash or generator_version differ (any of them changes the code that was
// timed or the timing). gpu_name / sm_count (and a cubin's arch) are lookup keys, not staleness: rows of another GPU
// in the same file stay.
//
// Robustness (nothing here throws or aborts for expected failures; a broken cache is a miss):
//   * Several processes may write one file at once: WAL journal where the filesystem allows it (else the rollback
//     journal), busy_timeout, every write in a BEGIN IMMEDIATE transaction, UNIQUE keys with INSERT OR REPLACE.
//   * A process killed mid-write leaves the last committed state (SQLite's journal / WAL recovery).
//   * A file that is not a database or fails PRAGMA quick_check is renamed to <file>.corrupt-<unix seconds>
//     (its -wal/-shm/-journal companions likewise) with a warning, and a fresh database is created in its place.
//   * A file that this process may not write (access(W_OK) fails for it or its directory: a pre-tuned cache shipped
//     in a read-only image), or any file when opened with OpenMode::kReadOnly ($FA_CACHE_READONLY=1, fa-tune
//     --list), is opened read-only (read_only.h) and served: lookups read it, and new rows go to a private in-memory
//     overlay that shadows it (one warning at open says so). It is never written, moved aside or migrated; a read-only
//     file that fails its checks is not used (in-memory database, warning). A writable file whose writes fail at open
//     (full disk, I/O error) is served read-only the same way when it passes those checks.
//   * A location that cannot be created or written otherwise (read-only directory without a cache file, a busy lock
//     that never clears) degrades to an in-memory database with a warning; the file is left untouched.
//   * A file whose user_version is NEWER than kSchemaVersion (written by a newer fa) is left untouched and this
//     process uses an in-memory database with a warning: a newer library's cache is never destroyed or mis-read.
//   * Older files (user_version < kSchemaVersion) are migrated in place, in one BEGIN IMMEDIATE transaction.
//   * Warnings go only to the callback given to open() (none by default), without a prefix (the caller adds its
//     own). The callback is called with the Db's mutex held: it must not call back into the same Db. Failures of
//     export_to / import_from / prune_stale are returned (last_error()), not warned: their caller reports them.
// Thread safety: one Db may be shared by threads (a mutex serialises the connection). Do not use a Db across
// fork(): a child opens its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace fa::cache {

inline constexpr int kSchemaVersion = 1;

using WarnFn = std::function<void(const std::string&)>;

// kReadWrite: read-write when the file (and its directory) may be written, else read-only as above.
// kReadOnly: always read-only; the file is never created, written, moved aside or migrated.
enum class OpenMode { kReadWrite, kReadOnly };

// The environment rows are written under and looked up for.
struct Env {
  std::string gpu_name;  // e.g. "NVIDIA H100 80GB HBM3"
  int sm_count = 0;
  int driver_version = 0;       // cuDriverGetVersion()
  std::string library_version;  // fa_version_string()
  std::string nvrtc_version;    // e.g. "13.0"
  uint64_t templates_hash = 0;  // hash of the templates every kernel includes (gen::shared_templates_hash)
  int generator_version = 0;    // fa::gen::kGeneratorVersion
};

struct CubinRow {
  std::string compile_key;
  uint64_t compile_hash = 0;
  int arch = 0;  // e.g. 90 for sm_90
  std::vector<uint8_t> cubin;
  int registers = -1;  // ptxas info; -1 = unknown
  int spill_bytes = -1;
  int smem_bytes = -1;
};

struct TuneRow {
  std::string semantic_key;
  std::string bucket;      // shape bucket text
  std::string tunables;    // tunables key text
  double median_ms = 0.0;  // NaN = not measured (stored as NULL)
  std::string status;      // "ok", "compile_error", "spill", "invalid", ...
};

// Listing rows (fa-tune --list): the row plus the environment it was written under.
struct CubinSummary {
  std::string compile_key;
  uint64_t compile_hash = 0;
  int arch = 0;
  std::string nvrtc_version;
  int generator_version = 0;
  uint64_t templates_hash = 0;
  int64_t size_bytes = 0;
  int registers = -1, spill_bytes = -1, smem_bytes = -1;
  int64_t created_unix = 0;
  bool stale = false;  // relative to this Db's Env
};

struct TuneRecord {
  TuneRow row;
  std::string gpu_name;
  int sm_count = 0;
  int driver_version = 0;
  std::string library_version;
  std::string nvrtc_version;
  uint64_t templates_hash = 0;
  int generator_version = 0;
  int64_t created_unix = 0;
  bool stale = false;  // relative to this Db's Env
};

// What an export or import did with the valid rows it copied (cubins and tuning rows together).
struct TransferCounts {
  int64_t added = 0;      // rows the target did not hold
  int64_t updated = 0;    // rows that replaced a different row under the same key (another time, status or cubin)
  int64_t unchanged = 0;  // rows the target held already, the same (left as they were)
  int64_t total() const { return added + updated + unchanged; }
};

// "" when `path` is an fa cache file this process can read (opened as a read-only Db opens it: schema version,
// layout and PRAGMA quick_check), else why not, without the path ("no such file", "cannot be read as a database:
// file is not a database (code 26)", ...). Creates and changes nothing.
std::string cache_file_problem(const std::string& path);

// $FA_CACHE_PATH if set and non-empty, else $XDG_CACHE_HOME/fa/cache.sqlite (XDG_CACHE_HOME absolute), else
// $HOME/.cache/fa/cache.sqlite (HOME, else the passwd entry), else ":memory:". Creates nothing; open() creates the
// parent directories.
std::string default_cache_path();

class Db {
 public:
  // Never returns null. path "" means default_cache_path(); ":memory:" is a private in-memory database. Any failure
  // to use the file gives an in-memory database (in_memory() == true) and a warning.
  static std::unique_ptr<Db> open(const std::string& path, const Env& env, WarnFn warn = {},
                                  OpenMode mode = OpenMode::kReadWrite);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  bool in_memory() const { return in_memory_; }
  bool read_only() const { return ro_ != nullptr; }                      // path() served read-only + overlay
  const std::string& path() const { return path_; }                      // file in use, or ":memory:"
  const std::string& requested_path() const { return requested_path_; }  // what open() was asked for
  const Env& env() const { return env_; }
  std::string last_error() const;  // message of the last failed call on this Db ("" if none yet)

  // Cubins. The lookup matches compile_hash, compile_key, the Env's nvrtc/templates/generator versions and, in the
  // second form, arch. A checksum mismatch deletes the row, warns and is a miss.
  std::optional<CubinRow> get_cubin(uint64_t compile_hash, const std::string& compile_key);
  std::optional<CubinRow> get_cubin(uint64_t compile_hash, const std::string& compile_key, int arch);
  bool put_cubin(const CubinRow& row);  // insert or replace under the current Env

  // Tuning results, all under the Env's GPU / versions. put_tune_results writes all rows in one transaction
  // (insert or replace per candidate); replace_existing first deletes every current-Env row of each
  // (semantic_key, bucket) present in `rows`, so the stored candidate set equals the new one.
  bool put_tune_results(const std::vector<TuneRow>& rows, bool replace_existing = false);
  std::optional<TuneRow> best(const std::string& semantic_key, const std::string& bucket);
  std::vector<TuneRow> tune_rows(const std::string& semantic_key, const std::string& bucket);  // by median ms

  // Listing (fa-tune --list), every row of the file, stale ones flagged (or left out).
  std::vector<TuneRecord> list_tune_rows(bool include_stale = true);
  std::vector<CubinSummary> list_cubins(bool include_stale = true);

  // Deletes stale rows of both tables; returns how many, or -1 on failure (always when read_only()).
  int prune_stale();
  // Copies every valid (non-stale, checksum-correct) row into the fa cache at `path` (created or merged; an
  // existing file that is not an fa cache of this schema (cache_file_problem) is a failure and left untouched). Returns
  // false on failure; *counts (optional) says how many rows were new to the target, replaced one of its rows, or were
  // there already.
  bool export_to(const std::string& path, TransferCounts* counts = nullptr);
  // Copies every valid row of the fa cache at `path` (opened read-only, never modified; its user_version must equal
  // kSchemaVersion) into this Db in one transaction. Rows stale for this Db's Env or with a bad checksum are
  // skipped; rows this Db holds already, the same, are left as they are. Returns the number of valid rows (new,
  // updated and already present: *counts, optional, splits them), or -1 on failure.
  int import_from(const std::string& path, TransferCounts* counts = nullptr);

 private:
  Db() = default;
  void warn(const std::string& message);      // mu_ held
  bool fail(const std::string& message);      // sets last_error_, warns, returns false; mu_ held
  bool report(const std::string& message);    // sets last_error_ only (the caller reports it), returns false
  bool setup_memory(const std::string& why);  // (re)opens ":memory:"; mu_ not needed (open only)
  // Serves `file` read-only (`why`: the reason, for the warning) over an in-memory overlay; on failure an in-memory
  // database with a warning. open only.
  void setup_read_only(const std::string& file, const std::string& why);
  // The connections rows are read from: the read-only file (if any) first, then db_. mu_ held.
  std::vector<sqlite3*> sources() const;
  // Where the tuning rows of (semantic_key, bucket) live: db_, or ro_ when the overlay holds none of them. mu_ held.
  sqlite3* tune_source(const std::string& semantic_key, const std::string& bucket);
  // get_cubin on one connection; a row failing its checksum is deleted when may_delete. mu_ held.
  std::optional<CubinRow> lookup_cubin(sqlite3* conn, bool may_delete, uint64_t compile_hash,
                                       const std::string& compile_key, int arch);

  mutable std::mutex mu_;
  sqlite3* db_ = nullptr;  // the file, or ":memory:" (the overlay when ro_ is set)
  sqlite3* ro_ = nullptr;  // the file opened read-only, or null
  Env env_;
  WarnFn warn_;
  std::string path_;
  std::string requested_path_;
  bool in_memory_ = false;
  std::string last_error_;
};

}  // namespace fa::cache
