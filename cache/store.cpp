// SQLite store for tuned kernels. See store.h for the tables and the
// concurrency story; the notes here explain the less obvious choices.
#include "cache/store.h"

#include <pwd.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <set>

#include "cache/sha256.h"
#include "codegen/error.h"
#include "codegen/json_input.h"

namespace fs = std::filesystem;

namespace qjit::cache {
namespace {

// The message with which stores before TrialStatus::unfinished marked such a trial (as wrong_result).
constexpr const char* kLegacyUnfinishedMessage =
    "unfinished: the tuning run stopped while this candidate ran on the GPU (a fault, a hang or a kill); "
    "skipped from then on (qjit tune --retune tries it again)";

// ---- schema -----------------------------------------------------------------

// migrations[v] takes a database from user_version v to v + 1. Append new
// steps; never edit a step that has shipped, since files in the wild already
// ran it.
const std::vector<std::string> kMigrations = {
    // 0 -> 1: the initial schema.
    R"sql(
CREATE TABLE kernels(
  key TEXT PRIMARY KEY,
  op TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  device_name TEXT NOT NULL,
  compute_capability TEXT NOT NULL,
  sm_count INTEGER NOT NULL,
  driver_version INTEGER NOT NULL,
  nvrtc_version TEXT NOT NULL,
  templates_hash TEXT NOT NULL,
  qjit_version TEXT NOT NULL,
  codegen_version INTEGER NOT NULL,
  config_json TEXT NOT NULL,
  tuned INTEGER NOT NULL,
  kernel_name TEXT NOT NULL,
  cubin BLOB NOT NULL,
  cubin_sha256 TEXT NOT NULL,
  ptx TEXT,
  source TEXT,
  compile_log TEXT,
  registers INTEGER,
  shared_bytes INTEGER,
  spill_bytes INTEGER,
  median_us REAL,
  gbps REAL,
  pct_copy_bw REAL,
  verify_error REAL,
  created TEXT NOT NULL,
  last_used TEXT NOT NULL
);
CREATE TABLE trials(
  key TEXT NOT NULL,
  config_json TEXT NOT NULL,
  status TEXT NOT NULL,
  median_us REAL,
  gbps REAL,
  verify_error REAL,
  compile_ms REAL,
  registers INTEGER,
  spill_bytes INTEGER,
  message TEXT,
  created TEXT NOT NULL,
  PRIMARY KEY(key, config_json)
);
CREATE INDEX trials_by_key ON trials(key);
CREATE TABLE devices(
  device_key TEXT PRIMARY KEY,
  copy_gbps REAL NOT NULL,
  measured TEXT NOT NULL
);
CREATE TABLE imports(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  op TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  config_json TEXT NOT NULL,
  source_record TEXT NOT NULL,
  created TEXT NOT NULL
);
)sql",
    // 1 -> 2: trials timed by the staged search's screen only (few launches,
    // not verified): kept, so a later run need not screen them again, and
    // never chosen as a winner. Rows from before read as full trials.
    R"sql(
ALTER TABLE trials ADD COLUMN screened INTEGER NOT NULL DEFAULT 0;
)sql",
};
const int kSchemaVersion = static_cast<int>(kMigrations.size());
// The oldest schema a read-only file may have: its kernels are read as they
// are, its trials as full trials (the screened column came in version 2).
const int kOldestReadOnly = 1;

// Every table the current schema owns. Any other (non-sqlite_) table means the
// file belongs to someone else, and we refuse to write into it.
const std::set<std::string> kOurTables = {"kernels", "trials", "devices", "imports"};

// ---- small helpers ------------------------------------------------------------

std::string now_utc() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

// Error carrying the path and SQLite's own explanation.
Error sql_error(sqlite3* db, const std::string& path, const std::string& what,
                const std::string& sql = {}) {
  return Error("cache", what + " in '" + path + "': " + (db ? sqlite3_errmsg(db) : "out of memory"),
               sql);
}

std::string dump(const nlohmann::json& j, const char* what) {
  try {
    return j.dump();  // object keys come out sorted: canonical, so equal configs match
  } catch (const nlohmann::json::exception& e) {
    throw Error("cache", std::string("cannot serialise ") + what + ": " + e.what());
  }
}

// A row that cannot be read back (a JSON column that does not parse, an
// unknown status): the caller removes it and reads it as absent.
struct DamagedRow {
  std::string why;
};

// Text columns end up in JSON (the fingerprint key, export lines, --json
// output), which must be valid UTF-8: a row with one that is not is damaged.
void require_utf8(std::initializer_list<const std::string*> texts) {
  for (const std::string* t : texts) {
    try {
      (void)nlohmann::json(*t).dump();
    } catch (const nlohmann::json::exception&) {
      throw DamagedRow{"a text column is not valid UTF-8: '" + excerpt(std::string_view(*t), 40) + "'"};
    }
  }
}

nlohmann::json parse_column(const std::string& s, const char* column) {
  try {
    return s.empty() ? nlohmann::json() : parse_json_input(s, column, "cache");
  } catch (const Error& e) {
    throw DamagedRow{e.what()};
  }
}

// A prepared statement that finalizes itself. bind() takes 1-based indexes as
// SQLite does; the column getters take 0-based ones, also as SQLite does.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& path, const std::string& sql)
      : db_(db), path_(path), sql_(sql) {
    if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr) !=
        SQLITE_OK)
      throw sql_error(db_, path_, "cannot prepare statement", sql_);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, const std::string& s) {
    return check(sqlite3_bind_text64(stmt_, i, s.data(), s.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  Stmt& bind(int i, const char* s) { return bind(i, std::string(s)); }
  Stmt& bind_blob(int i, const std::string& s) {
    // A non-null pointer keeps an empty blob a zero-length blob rather than NULL.
    return check(sqlite3_bind_blob64(stmt_, i, s.empty() ? "" : s.data(), s.size(),
                                     SQLITE_TRANSIENT));
  }
  Stmt& bind(int i, int64_t v) { return check(sqlite3_bind_int64(stmt_, i, v)); }
  Stmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind(int i, double v) { return check(sqlite3_bind_double(stmt_, i, v)); }

  // True while there is a row to read, false when done; throws on errors.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw sql_error(db_, path_, "statement failed", sql_);
  }
  void run() {
    while (step()) {
    }
  }
  // Like step() but returns the raw code, for callers that tolerate failure.
  int try_step() { return sqlite3_step(stmt_); }

  std::string text(int c) const {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, c));
    return p ? std::string(p, sqlite3_column_bytes(stmt_, c)) : std::string();
  }
  std::string blob(int c) const {
    auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, c));
    return p ? std::string(p, sqlite3_column_bytes(stmt_, c)) : std::string();
  }
  int64_t int64(int c) const { return sqlite3_column_int64(stmt_, c); }
  int integer(int c) const { return sqlite3_column_int(stmt_, c); }
  double real(int c) const { return sqlite3_column_double(stmt_, c); }
  bool is_null(int c) const { return sqlite3_column_type(stmt_, c) == SQLITE_NULL; }

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) throw sql_error(db_, path_, "cannot bind parameter", sql_);
    return *this;
  }
  sqlite3* db_;
  const std::string& path_;
  std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

void exec(sqlite3* db, const std::string& path, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    throw Error("cache", "'" + sql.substr(0, sql.find('\n', 1)) + "' failed in '" + path + "': " + msg,
                sql);
  }
}

// A write transaction, rolled back unless commit() is reached.
//
// BEGIN IMMEDIATE takes the write lock up front (waiting up to the busy
// timeout). With a plain BEGIN the lock would only be requested at the first
// write, and if another process committed since our first read SQLite must
// fail with SQLITE_BUSY at once instead of waiting; IMMEDIATE avoids that.
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) {
    exec(db_, path_, "BEGIN IMMEDIATE");
  }
  ~Transaction() {
    // Some errors (SQLITE_FULL, IOERR, ...) already rolled back on their own.
    if (!done_ && !sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    exec(db_, path_, "COMMIT");
    done_ = true;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  bool done_ = false;
};

int user_version(sqlite3* db, const std::string& path) {
  Stmt s(db, path, "PRAGMA user_version");
  return s.step() ? s.integer(0) : 0;
}

// Refuses files that are SQLite databases but not ours: a schema newer than
// this build knows, a foreign table, or (once migrated) a missing table.
void validate(sqlite3* db, const std::string& path, int version) {
  // One flipped header byte makes the version negative or huge.
  if (version < 0)
    throw Error("cache", "cache database '" + path + "' is damaged: its schema version is " + std::to_string(version) +
                             "; delete the file to start a fresh cache");
  if (version > kSchemaVersion)
    throw Error("cache", "cache database '" + path + "' has schema version " +
                             std::to_string(version) + " but this qjit only knows up to " +
                             std::to_string(kSchemaVersion) +
                             "; it was written by a newer qjit (upgrade qjit or point "
                             "QJIT_CACHE at another file)");
  std::set<std::string> tables;
  Stmt s(db, path,
         "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' "
         "ESCAPE '\\'");
  while (s.step()) tables.insert(s.text(0));
  for (const auto& t : tables)
    if (!kOurTables.count(t))
      throw Error("cache", "'" + path + "' is an SQLite database but not a qjit cache (it has table '" +
                               t + "'); point QJIT_CACHE at another file");
  if (version == kSchemaVersion)
    for (const auto& t : kOurTables)
      if (!tables.count(t))
        throw Error("cache", "cache database '" + path + "' is damaged: table '" + t +
                                 "' is missing; delete the file to start a fresh cache");
}

// Brings the schema up to kSchemaVersion, one step per transaction. The
// version is re-read under the write lock, so when two processes open a fresh
// file at once the second simply finds the work done.
void migrate(sqlite3* db, const std::string& path) {
  int version = user_version(db, path);
  validate(db, path, version);
  while (version < kSchemaVersion) {
    Transaction tx(db, path);
    version = user_version(db, path);
    validate(db, path, version);
    if (version < kSchemaVersion) {
      exec(db, path, kMigrations[version]);
      exec(db, path, "PRAGMA user_version = " + std::to_string(version + 1));
      ++version;
    }
    tx.commit();
  }
  validate(db, path, version);
}

// ---- row <-> record -------------------------------------------------------------

// Column list shared by lookup() and list(); read_kernel() depends on its order.
// The three large text/blob columns can be swapped for NULLs.
std::string kernel_select(bool with_blobs) {
  return std::string(
             "SELECT op, spec_json, device_name, compute_capability, sm_count, driver_version, "
             "nvrtc_version, templates_hash, qjit_version, codegen_version, config_json, tuned, "
             "kernel_name, cubin_sha256, compile_log, registers, shared_bytes, spill_bytes, "
             "median_us, gbps, pct_copy_bw, verify_error, created, last_used, ") +
         (with_blobs ? "cubin, ptx, source" : "NULL, NULL, NULL") + ", key FROM kernels";
}
constexpr int kKeyColumn = 27;  // the stored key, last of kernel_select()

KernelRecord read_kernel(const Stmt& s, std::string* cubin_sha256) {
  KernelRecord r;
  int c = 0;
  r.fp.op = s.text(c++);
  r.fp.spec_json = s.text(c++);
  if (!parse_column(r.fp.spec_json, "spec_json").is_object()) throw DamagedRow{"spec_json is not a JSON object"};
  r.fp.device.name = s.text(c++);
  r.fp.device.compute_capability = s.text(c++);
  r.fp.device.sm_count = s.integer(c++);
  r.fp.device.driver_version = s.integer(c++);
  r.fp.nvrtc_version = s.text(c++);
  r.fp.templates_hash = s.text(c++);
  r.fp.qjit_version = s.text(c++);
  r.fp.codegen_version = s.integer(c++);
  r.config = parse_column(s.text(c++), "config_json");
  r.tuned = s.integer(c++) != 0;
  r.kernel_name = s.text(c++);
  if (cubin_sha256) *cubin_sha256 = s.text(c);
  ++c;
  r.compile_log = s.text(c++);
  r.registers = s.integer(c++);
  r.shared_bytes = s.integer(c++);
  r.spill_bytes = s.integer(c++);
  r.median_us = s.real(c++);
  r.gbps = s.real(c++);
  r.pct_copy_bw = s.real(c++);
  r.verify_error = s.real(c++);
  r.created = s.text(c++);
  r.last_used = s.text(c++);
  r.cubin = s.blob(c++);
  r.ptx = s.text(c++);
  r.source = s.text(c++);
  require_utf8({&r.fp.op, &r.fp.device.name, &r.fp.device.compute_capability, &r.fp.nvrtc_version,
                &r.fp.templates_hash, &r.fp.qjit_version, &r.kernel_name, &r.compile_log, &r.created, &r.last_used,
                &r.ptx, &r.source});
  if (cubin_sha256) require_utf8({cubin_sha256});
  return r;
}

void insert_trial(sqlite3* db, const std::string& path, const TrialRecord& t,
                  const std::string& now) {
  // (key, config_json) is the primary key, so a re-measured candidate replaces
  // its earlier row instead of piling up duplicates.
  Stmt s(db, path,
         "INSERT OR REPLACE INTO trials(key, config_json, status, median_us, gbps, verify_error, "
         "compile_ms, registers, spill_bytes, message, created, screened) "
         "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
  s.bind(1, t.key)
      .bind(2, dump(t.config, "trial config"))
      .bind(3, to_string(t.status))
      .bind(4, t.median_us)
      .bind(5, t.gbps)
      .bind(6, t.verify_error)
      .bind(7, t.compile_ms)
      .bind(8, t.registers)
      .bind(9, t.spill_bytes)
      .bind(10, t.message)
      .bind(11, now)
      .bind(12, t.screened ? 1 : 0);
  s.run();
}

ImportRecord read_import(const Stmt& s) {
  ImportRecord r;
  r.id = s.int64(0);
  r.op = s.text(1);
  r.spec_json = s.text(2);
  r.config = parse_column(s.text(3), "import config_json");
  r.source_record = parse_column(s.text(4), "import source_record");
  require_utf8({&r.op, &r.spec_json});
  return r;
}

}  // namespace

// ---- TrialStatus ---------------------------------------------------------------

std::string to_string(TrialStatus s) {
  switch (s) {
    case TrialStatus::ok: return "ok";
    case TrialStatus::compile_error: return "compile_error";
    case TrialStatus::resource_error: return "resource_error";
    case TrialStatus::wrong_result: return "wrong_result";
    case TrialStatus::unfinished: return "unfinished";
  }
  return "unknown";
}

TrialStatus trial_status_from_string(const std::string& s) {
  for (auto st : {TrialStatus::ok, TrialStatus::compile_error, TrialStatus::resource_error,
                  TrialStatus::wrong_result, TrialStatus::unfinished})
    if (to_string(st) == s) return st;
  throw Error("cache", "unknown trial status '" + s + "'");
}

// ---- Store -----------------------------------------------------------------------

std::string Store::default_path() {
  if (const char* env = std::getenv("QJIT_CACHE"); env && *env) return env;
  std::string home;
  if (const char* h = std::getenv("HOME"); h && *h) {
    home = h;
  } else if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) {
    home = pw->pw_dir;
  } else {
    home = ".";
  }
  return (fs::path(home) / ".cache" / "qjit" / "kernels.db").string();
}

namespace {

bool read_only_requested() {
  const char* e = std::getenv("QJIT_CACHE_READ_ONLY");
  return e && *e && std::string(e) != "0";
}

// An SQLite URI for a file path: "file:" and the absolute path with every
// byte other than unreserved ones and '/' percent-encoded.
std::string file_uri(const std::string& path) {
  std::error_code ec;
  const std::string abs = fs::absolute(path, ec).string();
  std::string out = "file:";
  for (unsigned char c : ec ? path : abs) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// Open failures that mean "this process may not write here", after which the
// file is opened read-only instead.
bool is_write_denied(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN || primary == SQLITE_PERM ||
         primary == SQLITE_AUTH || rc == SQLITE_IOERR_SHMOPEN;
}

}  // namespace

Store::Store(const std::string& path) : path_(path) {
  if (read_only_requested()) {
    open_read_only("QJIT_CACHE_READ_ONLY is set");
    return;
  }
  const bool existed = fs::exists(path_);
  fs::path parent = fs::path(path_).parent_path();
  if (!parent.empty() && !existed) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec)
      throw Error("cache", "cannot create the folder for cache database '" + path_ +
                               "': " + ec.message());
  }

  int rc = sqlite3_open_v2(path_.c_str(), &db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  bool denied = false;
  try {
    if (rc != SQLITE_OK) {
      if (!existed) throw sql_error(db_, path_, "cannot create cache database");
      throw sql_error(db_, path_, "cannot open cache database");
    }
    sqlite3_extended_result_codes(db_, 1);
    if (sqlite3_busy_timeout(db_, 10000) != SQLITE_OK)
      throw sql_error(db_, path_, "cannot set busy timeout");
    // sqlite3_open_v2 silently falls back to read-only when the file is
    // write-protected (or immutable); then it is opened read-only on purpose.
    denied = sqlite3_db_readonly(db_, "main") == 1;

    // The first statement that reads the file, so a file that is not a
    // database fails here with SQLITE_NOTADB ("file is not a database"). On
    // filesystems without shared memory SQLite keeps the rollback journal;
    // that is still correct, only less concurrent, so it is not an error.
    // Switching a fresh file to WAL needs an exclusive lock, and SQLite returns
    // SQLITE_BUSY for it at once, without the busy handler, when another
    // process is opening the same new file: retry for up to the busy timeout.
    // A folder that is not writable fails here too (no -wal, -shm, journal).
    rc = SQLITE_BUSY;
    for (int attempt = 0; !denied && attempt < 2000; ++attempt) {
      rc = sqlite3_exec(db_, "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr);
      if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) break;
      sqlite3_sleep(5);
    }
    if (!denied && rc != SQLITE_OK) {
      if (existed && is_write_denied(sqlite3_extended_errcode(db_))) {
        denied = true;
      } else {
        std::string msg = sqlite3_errmsg(db_);
        if (sqlite3_errcode(db_) == SQLITE_NOTADB)
          msg += " (is QJIT_CACHE pointing at the wrong file?)";
        throw Error("cache", "cannot open cache database '" + path_ + "': " + msg);
      }
    }
    if (!denied) {
      // NORMAL is safe with WAL: a power loss may drop the last commits but
      // never corrupts the file (and every blob is checksummed anyway).
      exec(db_, path_, "PRAGMA synchronous = NORMAL");
      // No foreign keys yet; enforced so later migrations can rely on them.
      exec(db_, path_, "PRAGMA foreign_keys = ON");
      migrate(db_, path_);
      version_ = kSchemaVersion;
    }
  } catch (...) {
    // The destructor does not run for a constructor that throws.
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
  if (denied) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    open_read_only("the file or its folder is not writable");
  }
}

// Read-only: mode=ro first (it still reads a WAL the writer left behind, and
// needs the -shm file to exist or be creatable); where that cannot read,
// immutable=1, which reads the main file alone without any lock (the file is
// then assumed not to change while open).
void Store::open_read_only(const std::string& reason) {
  read_only_ = reason;
  if (!fs::exists(path_))
    throw Error("cache", "cache database '" + path_ + "' does not exist and cannot be created (" + reason + ")");
  int version = -1;
  std::string failure;
  for (const char* mode : {"?mode=ro", "?immutable=1"}) {
    const std::string uri = file_uri(path_) + mode;
    int rc = sqlite3_open_v2(uri.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX, nullptr);
    try {
      if (rc != SQLITE_OK) throw sql_error(db_, path_, "cannot open cache database read-only");
      sqlite3_extended_result_codes(db_, 1);
      sqlite3_busy_timeout(db_, 10000);
      version = user_version(db_, path_);
      break;
    } catch (const Error& e) {
      failure = e.what();
      sqlite3_close_v2(db_);
      db_ = nullptr;
    }
  }
  if (!db_) throw Error("cache", failure);
  try {
    validate(db_, path_, version);
    if (version < kOldestReadOnly)
      throw Error("cache", "cache database '" + path_ + "' is read-only (" + reason + ") and has schema version " +
                               std::to_string(version) + "; this qjit needs " + std::to_string(kSchemaVersion) +
                               " (open it once where it can be written, to upgrade it)");
    version_ = version;
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
}

void Store::require_writable(const char* what) const {
  if (!read_only_.empty())
    throw Error("cache", "cache database '" + path_ + "' is open read-only (" + read_only_ + "); cannot " + what +
                             " (point QJIT_CACHE at a writable file)");
}

template <typename Id>
void Store::drop_damaged(const char* delete_sql, const Id& id, const std::string& label, const std::string& why) {
  if (!read_only_.empty()) {
    std::cerr << "qjit: " << label << " " << why << "; skipped (the cache is read-only)\n";
    return;
  }
  Stmt del(db_, path_, delete_sql);
  del.bind(1, id);
  if (del.try_step() == SQLITE_DONE) {
    ++corrupt_removed_;
    std::cerr << "qjit: " << label << " " << why << "; removed\n";
  } else {
    std::cerr << "qjit: " << label << " " << why << "; could not remove it: " << sqlite3_errmsg(db_) << "\n";
  }
}

Store::~Store() { sqlite3_close_v2(db_); }

std::optional<KernelRecord> Store::lookup(const std::string& key) {
  std::string stored_sha, damaged;
  std::optional<KernelRecord> rec;
  {
    Stmt s(db_, path_, kernel_select(true) + " WHERE key = ?1");
    s.bind(1, key);
    if (!s.step()) return std::nullopt;
    try {
      rec = read_kernel(s, &stored_sha);
    } catch (const DamagedRow& d) {
      damaged = "is damaged (" + d.why + ")";
    }
  }
  // Never hand out a blob that is not byte-for-byte what was stored: loading a
  // damaged cubin could crash the process or, worse, compute wrong results.
  if (damaged.empty() && (rec->cubin.empty() || sha256_hex(rec->cubin) != stored_sha)) damaged = "failed its checksum";
  if (!damaged.empty()) {
    drop_damaged("DELETE FROM kernels WHERE key = ?1", key, "cache row " + key.substr(0, 12), damaged);
    return std::nullopt;
  }
  if (!read_only_.empty()) return rec;

  // Touch last_used. This is bookkeeping only: if the database is busy at
  // this moment the lookup still succeeds.
  std::string now = now_utc();
  Stmt touch(db_, path_, "UPDATE kernels SET last_used = ?1 WHERE key = ?2");
  touch.bind(1, now).bind(2, key);
  if (touch.try_step() == SQLITE_DONE) rec->last_used = now;
  return rec;
}

void Store::put(const KernelRecord& rec, const std::vector<TrialRecord>& trials) {
  const std::string key = rec.key();
  const std::string now = now_utc();
  require_writable("store a kernel");
  const std::string config = dump(rec.config, "kernel config");
  Transaction tx(db_, path_);
  {
    // created survives a replace, so it records when the key was first cached.
    Stmt s(db_, path_,
           "INSERT OR REPLACE INTO kernels(key, op, spec_json, device_name, compute_capability, "
           "sm_count, driver_version, nvrtc_version, templates_hash, qjit_version, "
           "codegen_version, config_json, tuned, kernel_name, cubin, cubin_sha256, ptx, source, "
           "compile_log, registers, shared_bytes, spill_bytes, median_us, gbps, pct_copy_bw, "
           "verify_error, created, last_used) "
           "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
           "?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, "
           "COALESCE((SELECT created FROM kernels WHERE key = ?1), ?27), ?27)");
    s.bind(1, key)
        .bind(2, rec.fp.op)
        .bind(3, rec.fp.spec_json)
        .bind(4, rec.fp.device.name)
        .bind(5, rec.fp.device.compute_capability)
        .bind(6, rec.fp.device.sm_count)
        .bind(7, rec.fp.device.driver_version)
        .bind(8, rec.fp.nvrtc_version)
        .bind(9, rec.fp.templates_hash)
        .bind(10, rec.fp.qjit_version)
        .bind(11, rec.fp.codegen_version)
        .bind(12, config)
        .bind(13, rec.tuned ? 1 : 0)
        .bind(14, rec.kernel_name)
        .bind_blob(15, rec.cubin)
        .bind(16, sha256_hex(rec.cubin))
        .bind(17, rec.ptx)
        .bind(18, rec.source)
        .bind(19, rec.compile_log)
        .bind(20, rec.registers)
        .bind(21, rec.shared_bytes)
        .bind(22, rec.spill_bytes)
        .bind(23, rec.median_us)
        .bind(24, rec.gbps)
        .bind(25, rec.pct_copy_bw)
        .bind(26, rec.verify_error)
        .bind(27, now);
    s.run();
  }
  for (const auto& t : trials) insert_trial(db_, path_, t, now);
  tx.commit();
}

void Store::put_trials(const std::vector<TrialRecord>& trials) {
  if (trials.empty()) return;
  require_writable("store trials");
  const std::string now = now_utc();
  Transaction tx(db_, path_);
  for (const auto& t : trials) insert_trial(db_, path_, t, now);
  tx.commit();
}

std::vector<TrialRecord> Store::trials(const std::string& key) {
  // Working candidates fastest first (those timed in full and verified,
  // then those only screened), then failures grouped by kind.
  Stmt s(db_, path_,
         "SELECT key, config_json, status, median_us, gbps, verify_error, compile_ms, registers, "
         "spill_bytes, message, created, rowid, " +
             std::string(version_ >= 2 ? "screened" : "0 AS screened") +
             " FROM trials WHERE key = ?1 "
         "ORDER BY status <> 'ok', screened, CASE WHEN status = 'ok' THEN median_us END, status, created");
  s.bind(1, key);
  std::vector<TrialRecord> out;
  std::vector<std::pair<int64_t, std::string>> damaged;
  while (s.step()) {
    TrialRecord t;
    t.key = s.text(0);
    try {
      t.config = parse_column(s.text(1), "trial config_json");
      t.status = trial_status_from_string(s.text(2));
      t.message = s.text(9);
      // Stores written before the status existed marked an unfinished trial as wrong_result with this message.
      if (t.status == TrialStatus::wrong_result && t.message == kLegacyUnfinishedMessage) t.status = TrialStatus::unfinished;
      t.created = s.text(10);
      require_utf8({&t.message, &t.created});
    } catch (const DamagedRow& d) {
      damaged.push_back({s.int64(11), d.why});
      continue;
    } catch (const Error& e) {
      damaged.push_back({s.int64(11), e.what()});
      continue;
    }
    t.median_us = s.real(3);
    t.gbps = s.real(4);
    t.verify_error = s.real(5);
    t.compile_ms = s.real(6);
    t.registers = s.integer(7);
    t.spill_bytes = s.integer(8);
    t.screened = s.integer(12) != 0;
    out.push_back(std::move(t));
  }
  for (const auto& [rowid, why] : damaged)
    drop_damaged("DELETE FROM trials WHERE rowid = ?1", rowid, "trial of cache row " + key.substr(0, 12),
                 "is damaged (" + why + ")");
  return out;
}

std::vector<KernelRecord> Store::list(bool with_blobs) {
  // rowid breaks ties between rows created within the same millisecond.
  std::vector<KernelRecord> out;
  std::vector<std::pair<std::string, std::string>> damaged;  // key, why
  {
    Stmt s(db_, path_, kernel_select(with_blobs) + " ORDER BY created DESC, rowid DESC");
    while (s.step()) {
      try {
        out.push_back(read_kernel(s, nullptr));
      } catch (const DamagedRow& d) {
        damaged.push_back({s.text(kKeyColumn), d.why});
      }
    }
  }
  for (const auto& [key, why] : damaged)
    drop_damaged("DELETE FROM kernels WHERE key = ?1", key, "cache row " + key.substr(0, 12), "is damaged (" + why + ")");
  return out;
}

bool Store::remove(const std::string& key) {
  require_writable("remove a kernel");
  Transaction tx(db_, path_);
  Stmt k(db_, path_, "DELETE FROM kernels WHERE key = ?1");
  k.bind(1, key).run();
  int removed = sqlite3_changes(db_);
  Stmt t(db_, path_, "DELETE FROM trials WHERE key = ?1");
  t.bind(1, key).run();
  removed += sqlite3_changes(db_);
  tx.commit();
  return removed > 0;
}

std::optional<double> Store::copy_bandwidth_gbps(const std::string& device_key) {
  Stmt s(db_, path_, "SELECT copy_gbps FROM devices WHERE device_key = ?1");
  s.bind(1, device_key);
  if (!s.step()) return std::nullopt;
  return s.real(0);
}

void Store::set_copy_bandwidth_gbps(const std::string& device_key, double gbps) {
  require_writable("store the copy bandwidth");
  Transaction tx(db_, path_);
  Stmt s(db_, path_,
         "INSERT OR REPLACE INTO devices(device_key, copy_gbps, measured) VALUES(?1, ?2, ?3)");
  s.bind(1, device_key).bind(2, gbps).bind(3, now_utc()).run();
  tx.commit();
}

int64_t Store::add_import(const ImportRecord& rec) {
  require_writable("import records");
  Transaction tx(db_, path_);
  Stmt s(db_, path_,
         "INSERT INTO imports(op, spec_json, config_json, source_record, created) "
         "VALUES(?1, ?2, ?3, ?4, ?5)");
  s.bind(1, rec.op)
      .bind(2, rec.spec_json)
      .bind(3, dump(rec.config, "import config"))
      .bind(4, dump(rec.source_record, "import source record"))
      .bind(5, now_utc())
      .run();
  // Read inside the transaction: no other write on this connection can
  // interleave while we hold the write lock's transaction open.
  int64_t id = sqlite3_last_insert_rowid(db_);
  tx.commit();
  return id;
}

std::vector<ImportRecord> Store::imports(const std::string& op, const std::string& spec_json) {
  return read_imports("WHERE op = ?1 AND spec_json = ?2", &op, &spec_json);
}

std::vector<ImportRecord> Store::all_imports() { return read_imports("", nullptr, nullptr); }

std::vector<ImportRecord> Store::read_imports(const std::string& where, const std::string* op,
                                              const std::string* spec_json) {
  std::vector<ImportRecord> out;
  std::vector<std::pair<int64_t, std::string>> damaged;
  {
    Stmt s(db_, path_, "SELECT id, op, spec_json, config_json, source_record FROM imports " + where + " ORDER BY id");
    if (op) s.bind(1, *op).bind(2, *spec_json);
    while (s.step()) {
      try {
        out.push_back(read_import(s));
      } catch (const DamagedRow& d) {
        damaged.push_back({s.int64(0), d.why});
      }
    }
  }
  for (const auto& [id, why] : damaged)
    drop_damaged("DELETE FROM imports WHERE id = ?1", id, "import " + std::to_string(id), "is damaged (" + why + ")");
  return out;
}

void Store::remove_import(int64_t id) {
  require_writable("remove an import");
  Transaction tx(db_, path_);
  Stmt s(db_, path_, "DELETE FROM imports WHERE id = ?1");
  s.bind(1, id).run();
  tx.commit();
}

int Store::schema_version() { return user_version(db_, path_); }

int64_t Store::file_bytes() const {
  int64_t total = 0;
  std::error_code ec;
  for (const std::string& p : {path_, path_ + "-wal"}) {
    auto n = fs::file_size(p, ec);
    if (!ec) total += static_cast<int64_t>(n);
  }
  return total;
}

}  // namespace qjit::cache
