// SQLite store for tuned kernels (DESIGN.md "The cache key", "Tables").
//
// kernels: one row per fingerprint key: the chosen config, cubin (+ SHA-256),
//          PTX, source, compile log, resource usage, timings, verification error.
// trials:  every candidate ever measured for a key, with its status, so tuning
//          is incremental and the leaderboard inspectable.
// devices: copy bandwidth measured once per device.
// imports: records brought in by `qjit import`, waiting to be recompiled and
//          re-verified on this machine before use.
//
// Concurrency: WAL mode, busy timeout, every write in one transaction, so
// several processes can tune into one file at once and nothing is lost or
// half-written. Schema versioned with PRAGMA user_version + migrations.
//
// Damage: a row whose cubin fails its checksum or whose JSON columns do not
// parse is removed when it is met and read as absent; every other row stays
// readable.
//
// Read-only: a file that cannot be written (file or folder not writable, the
// file marked immutable) or QJIT_CACHE_READ_ONLY=1 opens read-only: lookups,
// listing and export work, misses are not stored, and each write throws
// Error("cache") saying the cache is read-only.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "cache/fingerprint.h"

struct sqlite3;

namespace qjit::cache {

// unfinished: stored before a candidate runs on the GPU and replaced by its
// result; one left means the tuning run stopped on it (a fault, a hang, a
// killed process), and later runs skip it.
enum class TrialStatus { ok, compile_error, resource_error, wrong_result, unfinished };
std::string to_string(TrialStatus s);
TrialStatus trial_status_from_string(const std::string& s);  // throws qjit::Error

// An unfinished trial's message (what `qjit show` says of it).
inline constexpr const char* kUnfinishedTrialMessage =
    "the tuning run stopped while this candidate ran on the GPU (a fault, a hang or a kill); "
    "skipped from then on (qjit tune --retune tries it again)";

struct KernelRecord {
  Fingerprint fp;
  nlohmann::json config;           // the chosen tunables
  bool tuned = false;              // false: heuristic default compiled on a runtime miss
  std::string kernel_name;         // entry point in the cubin
  std::string cubin;               // binary blob
  std::string ptx, source, compile_log;
  int registers = -1, shared_bytes = -1, spill_bytes = -1;
  double median_us = 0, gbps = 0, pct_copy_bw = 0, verify_error = 0;
  std::string created, last_used;  // ISO-8601 UTC, filled by the store
  std::string key() const { return fp.key(); }
};

struct TrialRecord {
  std::string key;                 // fingerprint key the trial belongs to
  nlohmann::json config;           // candidate tunables (or {"baseline": "..."})
  TrialStatus status = TrialStatus::ok;
  double median_us = 0, gbps = 0, compile_ms = 0;
  double verify_error = 0;         // -1: not verified by design (a baseline timed only, Baseline::checked)
  int registers = -1, spill_bytes = -1;
  std::string message;             // compile error excerpt, mismatch summary...
  std::string created;             // filled by the store
  // Timed by the staged search's screen only (a few launches, not verified):
  // never a winner; a run that times it in full and verifies it replaces it.
  bool screened = false;
};

struct ImportRecord {
  int64_t id = 0;
  std::string op, spec_json;
  nlohmann::json config;
  nlohmann::json source_record;    // the whole exported line, for provenance
};

class Store {
 public:
  static std::string default_path();  // $QJIT_CACHE, else ~/.cache/qjit/kernels.db

  // Opens or creates the file (and its folder), sets WAL + busy timeout,
  // migrates the schema; or opens it read-only (above). Throws
  // qjit::Error("cache", ...) naming the path when it cannot be opened, is
  // not a qjit database, or is read-only with an older schema.
  explicit Store(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  bool read_only() const { return !read_only_.empty(); }

  // Verifies the cubin checksum; a corrupt row is deleted and nullopt returned
  // (corrupt_rows_removed() counts them). Touches last_used (unless read-only).
  std::optional<KernelRecord> lookup(const std::string& key);
  // Inserts or replaces the kernel row and appends/updates trials in ONE transaction.
  void put(const KernelRecord& rec, const std::vector<TrialRecord>& trials = {});
  void put_trials(const std::vector<TrialRecord>& trials);   // one transaction
  std::vector<TrialRecord> trials(const std::string& key);   // sorted: ok by median, then others
  std::vector<KernelRecord> list(bool with_blobs = false);   // newest first
  bool remove(const std::string& key);                       // kernel + its trials
  int64_t corrupt_rows_removed() const { return corrupt_removed_; }

  std::optional<double> copy_bandwidth_gbps(const std::string& device_key);
  void set_copy_bandwidth_gbps(const std::string& device_key, double gbps);

  int64_t add_import(const ImportRecord& rec);
  std::vector<ImportRecord> imports(const std::string& op, const std::string& spec_json);
  std::vector<ImportRecord> all_imports();
  void remove_import(int64_t id);

  int schema_version();
  int64_t file_bytes() const;  // db + wal

 private:
  void open_read_only(const std::string& reason);
  void require_writable(const char* what) const;
  std::vector<ImportRecord> read_imports(const std::string& where, const std::string* op, const std::string* spec_json);
  // Deletes a damaged row (delete_sql binds ?1 to id) unless read-only, and says so on stderr.
  template <typename Id>
  void drop_damaged(const char* delete_sql, const Id& id, const std::string& label, const std::string& why);

  std::string path_;
  sqlite3* db_ = nullptr;
  std::string read_only_;  // why the file is open read-only; "" when writable
  int version_ = 0;        // the file's schema: the current one unless an older file is open read-only
  int64_t corrupt_removed_ = 0;
};

}  // namespace qjit::cache
