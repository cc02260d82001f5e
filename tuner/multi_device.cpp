#include "tuner/multi_device.h"
#include <algorithm>
#include <atomic>
#include <exception>
#include <iostream>
#include <mutex>
#include <ostream>
#include <set>
#include <streambuf>
#include <thread>
#include "cache/store.h"
#include "codegen/error.h"
#include "runtime/device.h"
#include "runtime/driver.h"

namespace qjit::tuner {

std::vector<int> parse_device_list(const std::string& text, int count) {
  std::vector<int> out;
  if (text == "all") {
    if (count < 0) return out;
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  const auto bad = [&](const std::string& why) {
    return Error("argument", "--devices '" + text + "': " + why + " (expected all, or device numbers like 0,1)");
  };
  if (text.empty()) throw bad("empty");
  size_t pos = 0;
  for (;;) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const bool digits = std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (item.empty() || item.size() > 4 || !digits) throw bad("'" + item + "' is not a device number");
    const int d = std::stoi(item);
    if (std::find(out.begin(), out.end(), d) != out.end()) throw bad("device " + item + " is named twice");
    if (count >= 0 && d >= count)
      throw bad("there is no device " + item + "; " + std::to_string(count) + " visible (0 to " +
                std::to_string(count - 1) + ")");
    out.push_back(d);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void require_one_kind(const std::vector<runtime::VisibleDevice>& chosen) {
  for (const auto& d : chosen) {
    if (d.name == chosen.front().name && d.compute_capability == chosen.front().compute_capability) continue;
    std::string list;
    for (const auto& e : chosen)
      list += (list.empty() ? "" : ", ") + std::to_string(e.ordinal) + ": " + e.name + " (cc " + e.compute_capability +
              ")";
    throw Error("argument", "--devices mixes GPUs of different kinds (" + list +
                                "); a tune spreads its specs over GPUs of one kind: name those of one kind, "
                                "and tune the others in a second run");
  }
}

namespace {

// Whole lines, each with a prefix, onto a shared stream under one lock, so
// that the workers' lines do not interleave mid-line. A line ended by '\r'
// (an update in place) is dropped: only its final state, ended by '\n',
// is written.
class PrefixedLines : public std::streambuf {
 public:
  PrefixedLines(std::ostream& to, std::mutex& mu, std::string prefix) : to_(to), mu_(mu), prefix_(std::move(prefix)) {}
  ~PrefixedLines() override {
    if (!line_.empty()) emit();
  }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return 0;
    if (c == '\n') emit();
    else if (c == '\r') line_.clear();
    else line_ += static_cast<char>(c);
    return c;
  }

 private:
  void emit() {
    std::lock_guard<std::mutex> lock(mu_);
    to_ << prefix_ << line_ << '\n' << std::flush;
    line_.clear();
  }
  std::ostream& to_;
  std::mutex& mu_;
  std::string prefix_, line_;
};

// The per-context caches (the timer's spin kernel, the runtime's plans) are
// keyed by context handle. A primary context released to zero retains and
// retained again can come back under the same handle with nothing loaded:
// a second tune_on_devices in one process launched a stale spin kernel
// (CUDA_ERROR_INVALID_HANDLE, 2x H200). So each device's primary context,
// once a worker has used it, stays retained for the life of the process.
void keep_primary_context(int device) {
  static std::mutex mu;
  static std::set<int> kept;
  std::lock_guard<std::mutex> lock(mu);
  if (!kept.insert(device).second) return;
  CUdevice handle = 0;
  CUcontext context = nullptr;
  QJIT_CU(cuDeviceGet(&handle, device));
  QJIT_CU(cuDevicePrimaryCtxRetain(&context, handle));
}

}  // namespace

std::vector<TuneReport> tune_on_devices(const std::vector<codegen::OpSpec>& specs,
                                        const std::vector<std::vector<nlohmann::json>>& only,
                                        const TuneOptions& options, const std::vector<int>& devices,
                                        const std::string& cache_path, std::ostream* progress) {
  std::vector<TuneReport> reports(specs.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu, print_mu;
  std::exception_ptr first_error;
  const auto worker = [&](int device) {
    try {
      PrefixedLines lines(progress ? *progress : std::cerr, print_mu, "[gpu" + std::to_string(device) + "] ");
      std::ostream out(&lines);
      keep_primary_context(device);
      const runtime::DeviceScope scope(device);
      cache::Store store(cache_path);
      for (size_t i; !failed && (i = next++) < specs.size();) {
        TuneOptions opt = options;
        opt.progress = progress ? &out : nullptr;
        if (!only.empty()) opt.only_configs = only[i];
        reports[i] = tune(specs[i], store, opt);
      }
    } catch (...) {
      failed = true;
      std::lock_guard<std::mutex> lock(error_mu);
      if (!first_error) first_error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int d : devices) pool.emplace_back(worker, d);
  for (auto& t : pool) t.join();
  if (first_error) std::rethrow_exception(first_error);
  return reports;
}

}  // namespace qjit::tuner
