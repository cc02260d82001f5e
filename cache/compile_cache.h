// Compiles kept across runs: NVRTC's results (cubin, PTX, log, resource
// figures) by a key that holds everything a compile depends on, so that a
// tune run again (--retune, --exhaustive after the staged search, a tune
// stopped and started again, every kernel after a driver update changed the
// cache key) does not compile the same source twice. One SQLite file, shared
// by every kernel cache; WAL, so several processes may use it at once.
//
// It is only ever a shortcut: a row whose cubin fails its SHA-256 is removed
// and read as a miss, a file that cannot be opened or written turns the cache
// off for the process (compiles simply run), and rows beyond the size cap go,
// least recently used first.
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include "codegen/nvrtc.h"

struct sqlite3;

namespace qjit::cache {

class CompileCache {
 public:
  // $QJIT_COMPILE_CACHE when set (set but empty: "", no cache), else
  // compiled.db in the folder of Store::default_path().
  static std::string default_path();

  // Opens or creates `path` ("" or a file that cannot be opened: off; why()
  // says why). cap_bytes: the rows' cubin + PTX + log bytes kept at most.
  explicit CompileCache(const std::string& path, int64_t cap_bytes = int64_t{1} << 30);
  ~CompileCache();
  CompileCache(const CompileCache&) = delete;
  CompileCache& operator=(const CompileCache&) = delete;

  bool enabled() const { return db_ != nullptr; }
  const std::string& why() const { return why_; }

  // Successful compiles only; a write that fails turns the cache off.
  std::optional<codegen::CompileResult> get(const std::string& key);
  void put(const std::string& key, const codegen::CompileResult& r);

  int64_t hits() const;
  int64_t rows();  // for tests and `qjit doctor`

 private:
  void disable(const std::string& why);
  void evict_if_over();

  sqlite3* db_ = nullptr;
  std::string path_, why_;
  int64_t cap_bytes_;
  int64_t hits_ = 0, puts_since_check_ = 0;
  mutable std::mutex mu_;
};

// The key of compiling `compile_key` (tuner/compile_queue.h: the source
// without its comment header, the arch) under this build's NVRTC, options
// and embedded headers (codegen::compile_identity()).
std::string compile_cache_key(const std::string& compile_key);

}  // namespace qjit::cache
