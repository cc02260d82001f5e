#include "cache/compile_cache.h"

#include <sqlite3.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "cache/sha256.h"
#include "cache/store.h"

namespace fs = std::filesystem;

namespace qjit::cache {
namespace {

constexpr int kFormat = 1;  // PRAGMA user_version of the file; another value turns the cache off

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS compiled(
  key TEXT PRIMARY KEY,
  arch TEXT NOT NULL,
  cubin BLOB NOT NULL,
  cubin_sha256 TEXT NOT NULL,
  ptx TEXT NOT NULL,
  log TEXT NOT NULL,
  compile_ms REAL NOT NULL,
  registers INTEGER NOT NULL,
  spill_bytes INTEGER NOT NULL,
  shared_bytes INTEGER NOT NULL,
  stack_bytes INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  last_used INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS compiled_last_used ON compiled(last_used);
)sql";

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One prepared statement, finalized on every path.
struct Statement {
  sqlite3_stmt* s = nullptr;
  Statement(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &s, nullptr); }
  ~Statement() { sqlite3_finalize(s); }
  bool ok() const { return s != nullptr; }
  std::string text(int i) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s, i))) : std::string();
  }
  std::string blob(int i) const {
    const auto* p = static_cast<const char*>(sqlite3_column_blob(s, i));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s, i))) : std::string();
  }
};

}  // namespace

std::string CompileCache::default_path() {
  if (const char* env = std::getenv("QJIT_COMPILE_CACHE")) return env;
  return (fs::path(Store::default_path()).parent_path() / "compiled.db").string();
}

CompileCache::CompileCache(const std::string& path, int64_t cap_bytes) : path_(path), cap_bytes_(cap_bytes) {
  if (path.empty()) {
    why_ = "no compile cache file (QJIT_COMPILE_CACHE is empty)";
    return;
  }
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    disable("cannot open it");
    return;
  }
  sqlite3_busy_timeout(db_, 10000);
  if (sqlite3_db_readonly(db_, "main") == 1) {
    disable("it is read-only");
    return;
  }
  // A fresh file's switch to WAL can meet SQLITE_BUSY at once while another process creates it too (store.cpp).
  int rc = SQLITE_BUSY;
  for (int attempt = 0; attempt < 2000; ++attempt) {
    rc = sqlite3_exec(db_, "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr);
    if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) break;
    sqlite3_sleep(5);
  }
  if (rc != SQLITE_OK) {
    disable(sqlite3_errmsg(db_));
    return;
  }
  int version = -1;
  {
    Statement v(db_, "PRAGMA user_version");
    if (v.ok() && sqlite3_step(v.s) == SQLITE_ROW) version = sqlite3_column_int(v.s, 0);
  }
  if (version != 0 && version != kFormat) {
    disable("it has format " + std::to_string(version) + ", not " + std::to_string(kFormat));
    return;
  }
  const std::string init = "PRAGMA synchronous = NORMAL;" + std::string(kSchema) +
                           "PRAGMA user_version = " + std::to_string(kFormat) + ";";
  if (sqlite3_exec(db_, init.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) disable(sqlite3_errmsg(db_));
}

CompileCache::~CompileCache() {
  if (db_) sqlite3_close_v2(db_);
}

void CompileCache::disable(const std::string& why) {
  why_ = "compile cache '" + path_ + "' is off: " + why;
  if (db_) sqlite3_close_v2(db_);
  db_ = nullptr;
}

std::optional<codegen::CompileResult> CompileCache::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!db_) return std::nullopt;
  codegen::CompileResult r;
  std::string sha;
  {
    Statement q(db_,
                "SELECT arch, cubin, cubin_sha256, ptx, log, compile_ms, registers, spill_bytes, shared_bytes, "
                "stack_bytes FROM compiled WHERE key = ?");
    if (!q.ok()) return std::nullopt;
    sqlite3_bind_text(q.s, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(q.s) != SQLITE_ROW) return std::nullopt;
    r.arch = q.text(0);
    r.cubin = q.blob(1);
    sha = q.text(2);
    r.ptx = q.text(3);
    r.log = q.text(4);
    r.compile_ms = sqlite3_column_double(q.s, 5);
    r.registers = sqlite3_column_int(q.s, 6);
    r.spill_bytes = sqlite3_column_int(q.s, 7);
    r.shared_bytes = sqlite3_column_int(q.s, 8);
    r.stack_bytes = sqlite3_column_int(q.s, 9);
  }
  const bool intact = !r.cubin.empty() && sha256_hex(r.cubin) == sha;
  Statement u(db_, intact ? "UPDATE compiled SET last_used = ? WHERE key = ?" : "DELETE FROM compiled WHERE key = ?2");
  if (u.ok()) {
    sqlite3_bind_int64(u.s, 1, now_ms());
    sqlite3_bind_text(u.s, 2, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
    sqlite3_step(u.s);
  }
  if (!intact) return std::nullopt;
  r.ok = true;
  ++hits_;
  return r;
}

void CompileCache::put(const std::string& key, const codegen::CompileResult& r) {
  if (!r.ok || r.cubin.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!db_) return;
  {
    Statement q(db_,
                "INSERT OR REPLACE INTO compiled(key, arch, cubin, cubin_sha256, ptx, log, compile_ms, registers, "
                "spill_bytes, shared_bytes, stack_bytes, bytes, last_used) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
    const std::string sha = sha256_hex(r.cubin);
    const auto bytes = static_cast<int64_t>(r.cubin.size() + r.ptx.size() + r.log.size());
    if (q.ok()) {
      sqlite3_bind_text(q.s, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
      sqlite3_bind_text(q.s, 2, r.arch.data(), static_cast<int>(r.arch.size()), SQLITE_TRANSIENT);
      sqlite3_bind_blob(q.s, 3, r.cubin.data(), static_cast<int>(r.cubin.size()), SQLITE_TRANSIENT);
      sqlite3_bind_text(q.s, 4, sha.data(), static_cast<int>(sha.size()), SQLITE_TRANSIENT);
      sqlite3_bind_text(q.s, 5, r.ptx.data(), static_cast<int>(r.ptx.size()), SQLITE_TRANSIENT);
      sqlite3_bind_text(q.s, 6, r.log.data(), static_cast<int>(r.log.size()), SQLITE_TRANSIENT);
      sqlite3_bind_double(q.s, 7, r.compile_ms);
      sqlite3_bind_int(q.s, 8, r.registers);
      sqlite3_bind_int(q.s, 9, r.spill_bytes);
      sqlite3_bind_int(q.s, 10, r.shared_bytes);
      sqlite3_bind_int(q.s, 11, r.stack_bytes);
      sqlite3_bind_int64(q.s, 12, bytes);
      sqlite3_bind_int64(q.s, 13, now_ms());
    }
    if (!q.ok() || sqlite3_step(q.s) != SQLITE_DONE) {
      disable(std::string("a write failed: ") + sqlite3_errmsg(db_));
      return;
    }
  }
  // (Summing every row's size costs a scan: once every 16 writes.)
  if (++puts_since_check_ >= 16) {
    puts_since_check_ = 0;
    evict_if_over();
  }
}

// Least recently used rows go until the rest fill at most 90% of the cap.
void CompileCache::evict_if_over() {
  int64_t total = 0;
  {
    Statement q(db_, "SELECT COALESCE(SUM(bytes), 0) FROM compiled");
    if (!q.ok() || sqlite3_step(q.s) != SQLITE_ROW) return;
    total = sqlite3_column_int64(q.s, 0);
  }
  if (total <= cap_bytes_) return;
  std::vector<std::string> gone;
  {
    Statement q(db_, "SELECT key, bytes FROM compiled ORDER BY last_used");
    while (q.ok() && total > cap_bytes_ / 10 * 9 && sqlite3_step(q.s) == SQLITE_ROW) {
      gone.push_back(q.text(0));
      total -= sqlite3_column_int64(q.s, 1);
    }
  }
  sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr);
  for (const auto& key : gone) {
    Statement d(db_, "DELETE FROM compiled WHERE key = ?");
    if (!d.ok()) break;
    sqlite3_bind_text(d.s, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
    sqlite3_step(d.s);
  }
  sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
}

int64_t CompileCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t CompileCache::rows() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!db_) return 0;
  Statement q(db_, "SELECT COUNT(*) FROM compiled");
  return q.ok() && sqlite3_step(q.s) == SQLITE_ROW ? sqlite3_column_int64(q.s, 0) : 0;
}

std::string compile_cache_key(const std::string& compile_key) {
  static const std::string identity = sha256_hex(codegen::compile_identity());
  return sha256_hex(identity + '\0' + compile_key);
}

}  // namespace qjit::cache
