// Compiles the tuner's candidates on a pool of host threads (NVRTC is
// thread-safe), each distinct source once, and hands them back in the order
// they finish, so that the GPU can screen one while the others compile.
//
// Sources are the same when they differ only in their leading comment block:
// the generated header names the config and its launch plan, which a config
// that changes only launch geometry changes while the code stays the same.
// The comment lines are blanked, not removed, so line numbers (the
// -lineinfo tables, the log's template lines) are those of either source.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include "cache/compile_cache.h"
#include "codegen/nvrtc.h"
#include "codegen/source.h"

namespace qjit::tuner {

// What decides a compile's result: the arch, the sm_90a switch and the text
// with its leading comment lines blanked (a SHA-256).
std::string compile_key(const codegen::GeneratedSource& src, const std::string& arch);

using CompileFn = std::function<codegen::CompileResult(const codegen::GeneratedSource&, const std::string& arch)>;

// `compile`, answered from `cache` where an earlier run (of any process)
// compiled the same source for the same arch with this NVRTC, options and
// headers; a successful compile is stored for the next. The cache must
// outlive the function.
CompileFn cached_compile(cache::CompileCache& cache, CompileFn compile = codegen::compile);

class CompileQueue {
 public:
  // `stop` (optional) is asked before each compile starts: once it says
  // true and one compile has finished, the rest are not started and come
  // back unstarted (started() false). Throwing compiles come back !ok with
  // the error as their log.
  CompileQueue(std::string arch, int threads, CompileFn compile = codegen::compile, std::function<bool()> stop = {});
  ~CompileQueue();
  CompileQueue(const CompileQueue&) = delete;
  CompileQueue& operator=(const CompileQueue&) = delete;

  // Queues item `id` (any number the caller chooses) compiling `src`, which
  // must stay alive until its id comes back. One whose key was queued before
  // shares that compile.
  void add(size_t id, const codegen::GeneratedSource& src);
  // The next item finished (or left unstarted), in the order they finish;
  // nullopt when every item added so far has come back.
  std::optional<size_t> next();

  const codegen::CompileResult& result(size_t id) const;
  bool started(size_t id) const;  // false: left unstarted by `stop`
  bool reused(size_t id) const;   // true: shared an earlier item's compile
  size_t compiles() const;        // compiles run (or running)
  int threads() const { return threads_; }

 private:
  struct Entry {
    std::string key;
    const codegen::GeneratedSource* src = nullptr;
    codegen::CompileResult result;
    bool done = false, started = false;
    std::vector<size_t> ids;  // items waiting on this compile (the first queued it)
  };
  void worker();

  const std::string arch_;
  const int threads_;
  const CompileFn compile_;
  const std::function<bool()> stop_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::map<std::string, std::shared_ptr<Entry>> by_key_;
  std::map<size_t, std::shared_ptr<Entry>> by_id_;
  std::map<size_t, bool> reused_;
  std::deque<std::shared_ptr<Entry>> todo_;
  std::deque<size_t> finished_;
  size_t outstanding_ = 0;  // ids added, not yet returned by next()
  size_t finished_compiles_ = 0, compiles_ = 0;
  bool closing_ = false;
  std::vector<std::thread> pool_;
};

}  // namespace qjit::tuner
