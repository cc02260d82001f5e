#include "tuner/compile_queue.h"
#include "cache/sha256.h"
#include "codegen/error.h"

namespace qjit::tuner {

std::string compile_key(const codegen::GeneratedSource& src, const std::string& arch) {
  std::string text;
  text.reserve(src.text.size());
  size_t pos = 0;
  bool header = true;
  while (pos < src.text.size()) {
    size_t end = src.text.find('\n', pos);
    if (end == std::string::npos) end = src.text.size();
    if (header && src.text.compare(pos, 2, "//") != 0) header = false;
    if (!header) text.append(src.text, pos, end - pos);
    text += '\n';
    pos = end + 1;
  }
  return cache::sha256_hex(arch + '\0' + (src.needs_sm90a ? "sm90a" : "") + '\0' + src.file_name + '\0' + text);
}

CompileFn cached_compile(cache::CompileCache& cache, CompileFn compile) {
  return [&cache, compile = std::move(compile)](const codegen::GeneratedSource& src, const std::string& arch) {
    if (!cache.enabled()) return compile(src, arch);
    const std::string key = cache::compile_cache_key(compile_key(src, arch));
    if (auto hit = cache.get(key)) return *hit;
    auto r = compile(src, arch);
    cache.put(key, r);
    return r;
  };
}

CompileQueue::CompileQueue(std::string arch, int threads, CompileFn compile, std::function<bool()> stop)
    : arch_(std::move(arch)), threads_(std::max(1, threads)), compile_(std::move(compile)), stop_(std::move(stop)) {
  for (int t = 0; t < threads_; ++t) pool_.emplace_back([this] { worker(); });
}

CompileQueue::~CompileQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : pool_) t.join();
}

void CompileQueue::add(size_t id, const codegen::GeneratedSource& src) {
  const std::string key = compile_key(src, arch_);
  std::lock_guard<std::mutex> lock(mu_);
  if (by_id_.count(id)) throw Error("tuner", "compile queue: item " + std::to_string(id) + " added twice");
  ++outstanding_;
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    by_id_[id] = it->second;
    reused_[id] = true;
    if (it->second->done) finished_.push_back(id);
    else it->second->ids.push_back(id);
    done_cv_.notify_all();
    return;
  }
  auto e = std::make_shared<Entry>();
  e->key = key;
  e->src = &src;
  e->ids.push_back(id);
  by_key_[key] = e;
  by_id_[id] = e;
  reused_[id] = false;
  todo_.push_back(e);
  work_cv_.notify_one();
}

void CompileQueue::worker() {
  for (;;) {
    std::shared_ptr<Entry> e;
    bool skip = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return closing_ || !todo_.empty(); });
      if (closing_) return;
      e = todo_.front();
      todo_.pop_front();
      // (the first compile always runs: something to measure)
      skip = stop_ && finished_compiles_ > 0 && stop_();
      if (!skip) ++compiles_;
    }
    codegen::CompileResult r;
    if (!skip) {
      try {
        r = compile_(*e->src, arch_);
      } catch (const std::exception& ex) {
        r.ok = false;
        r.log = ex.what();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      e->result = std::move(r);
      e->started = !skip;
      e->done = true;
      if (!skip) ++finished_compiles_;
      // An entry left unstarted is forgotten, so that a later add compiles it.
      if (skip) by_key_.erase(e->key);
      for (size_t id : e->ids) finished_.push_back(id);
      e->ids.clear();
    }
    done_cv_.notify_all();
  }
}

std::optional<size_t> CompileQueue::next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (outstanding_ == 0) return std::nullopt;
  done_cv_.wait(lock, [&] { return !finished_.empty(); });
  const size_t id = finished_.front();
  finished_.pop_front();
  --outstanding_;
  return id;
}

const codegen::CompileResult& CompileQueue::result(size_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_id_.at(id)->result;
}

bool CompileQueue::started(size_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_id_.at(id)->started;
}

bool CompileQueue::reused(size_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return reused_.at(id);
}

size_t CompileQueue::compiles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compiles_;
}

}  // namespace qjit::tuner
