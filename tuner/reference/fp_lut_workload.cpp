// fp_lut's tuning workload: random input bit patterns (NaN, ±inf and
// subnormals included for 16-bit inputs), input copies rotated beyond L2,
// bit-exact verification against lut_reference_bits. The PyTorch peer
// (native activations) is measured by peers.py, not here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include "codegen/numeric.h"
#include "codegen/ops/fp_lut.h"
#include "runtime/driver.h"
#include "tuner/reference/fp_lut.h"
#include "tuner/timing.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {

class FpLutWorkload final : public Workload {
 public:
  FpLutWorkload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes)
      : table_(codegen::lut_table_of(spec)), in_(spec.get_str("in")), out_(spec.get_str("out")) {
    n_ = spec.get_int("n");
    const size_t ib = in_ == "fp32" ? 4 : 2, ob = out_ == "fp32" ? 4 : 2;
    x_host_.resize(n_ * ib);
    SplitMix64 rng{seed};
    for (int64_t i = 0; i < n_; ++i) {
      const uint64_t r = rng.next();
      if (ib == 2) {
        const uint16_t b = static_cast<uint16_t>(r);  // every 16-bit pattern is a candidate
        std::memcpy(&x_host_[2 * i], &b, 2);
      } else {
        // Half random bit patterns, half values spread over the tables' ranges.
        float f = (r >> 63) ? bits_to_float(static_cast<uint32_t>(r))
                            : static_cast<float>(static_cast<int64_t>(r >> 32) - (int64_t{1} << 30)) / (1 << 26);
        std::memcpy(&x_host_[4 * i], &f, 4);
      }
    }
    const int copies = static_cast<int>(std::clamp<size_t>(3 * l2_bytes / std::max<size_t>(x_host_.size(), 1) + 1, 1, 16));
    for (int c = 0; c < copies; ++c) {
      x_.emplace_back(x_host_.size());
      x_[c].upload(x_host_.data(), x_host_.size());
    }
    y_ = DeviceBuffer(n_ * ob);
    for (int c = 0; c < copies; ++c) add_copy(FpLutArgs{dev(x_[c].ptr()), dev(y_.ptr())}.pack());
    // The reference once: per input pattern for 16-bit inputs (65536 of
    // them), else per element. Computed in each verify, it took about a
    // second at n = 2^27, and a winner is verified 17 times.
    if (ib == 2) {
      want_by_pattern_.resize(1 << 16);
      for (uint32_t b = 0; b < (1u << 16); ++b) want_by_pattern_[b] = lut_reference_bits(table_, in_, out_, b);
    } else {
      want_.resize(static_cast<size_t>(n_) * ob);
      parallel_ranges([&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          uint32_t xb = 0;
          std::memcpy(&xb, &x_host_[4 * i], 4);
          const uint32_t w = lut_reference_bits(table_, in_, out_, xb);
          std::memcpy(&want_[ob * i], &w, ob);
        }
      });
    }
    y_host_.resize(y_.bytes());
  }

  // On the candidate's stream (a legacy-stream memset is not ordered with it).
  void poison_output(CUstream stream) override { QJIT_CU(cuMemsetD8Async(y_.ptr(), 0xa5, y_.bytes(), stream)); }

  Verification verify(double) override {
    QJIT_CU(cuCtxSynchronize());
    std::vector<uint8_t>& y = y_host_;
    y_.download(y.data(), y.size());
    const size_t ib = in_ == "fp32" ? 4 : 2, ob = out_ == "fp32" ? 4 : 2;
    std::mutex mu;
    int64_t bad = 0, first = -1;
    parallel_ranges([&](int64_t lo, int64_t hi) {
      int64_t my_bad = 0, my_first = -1;
      for (int64_t i = lo; i < hi; ++i) {
        uint32_t yb = 0;
        std::memcpy(&yb, &y[ob * i], ob);
        const uint32_t want = want_bits(i);
        if (yb != want && !(is_nan(yb) && is_nan(want))) {
          if (my_first < 0) my_first = i;
          ++my_bad;
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      bad += my_bad;
      if (my_first >= 0 && (first < 0 || my_first < first)) first = my_first;
    });
    Verification v;
    v.ok = bad == 0;
    v.rel_error = static_cast<double>(bad) / static_cast<double>(n_);  // fraction of elements not bit-equal
    if (!v.ok) {
      uint32_t xb = 0, yb = 0;
      std::memcpy(&xb, &x_host_[ib * first], ib);
      std::memcpy(&yb, &y[ob * first], ob);
      char buf[256];
      std::snprintf(buf, sizeof buf, "%lld of %lld elements differ; first y[%lld]: input bits 0x%x -> 0x%x, reference 0x%x",
                    static_cast<long long>(bad), static_cast<long long>(n_), static_cast<long long>(first), xb, yb,
                    want_bits(first));
      v.message = buf;
    }
    return v;
  }

  std::vector<Baseline> baselines(std::string* why_none) override {
    *why_none = "PyTorch's native activations are the peer for fp_lut; peers.py measures them";
    return {};
  }

 private:
  // f(0, n_) split over the host's threads.
  void parallel_ranges(const std::function<void(int64_t, int64_t)>& f) const {
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(f, n_ * t / threads, n_ * (t + 1) / threads);
    for (auto& th : pool) th.join();
  }
  // The reference's output bits for element i.
  uint32_t want_bits(int64_t i) const {
    if (!want_by_pattern_.empty()) {
      uint16_t xb = 0;
      std::memcpy(&xb, &x_host_[2 * i], 2);
      return want_by_pattern_[xb];
    }
    const size_t ob = out_ == "fp32" ? 4 : 2;
    uint32_t w = 0;
    std::memcpy(&w, &want_[ob * i], ob);
    return w;
  }
  bool is_nan(uint32_t bits) const {
    if (out_ == "fp32") return std::isnan(bits_to_float(bits));
    if (out_ == "bf16") return (bits & 0x7f80) == 0x7f80 && (bits & 0x7f);
    return (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff);
  }

  codegen::lut::Table table_;
  std::string in_, out_;
  int64_t n_ = 0;
  std::vector<uint8_t> x_host_;
  std::vector<uint32_t> want_by_pattern_;  // 16-bit inputs: the reference of every input pattern
  std::vector<uint8_t> want_;              // fp32 inputs: the reference of every element
  std::vector<uint8_t> y_host_;            // the output, read back by verify
  std::vector<DeviceBuffer> x_;
  DeviceBuffer y_;
};

}  // namespace

std::unique_ptr<Workload> make_fp_lut_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  return std::make_unique<FpLutWorkload>(spec, seed, l2_bytes);
}

}  // namespace qjit::tuner
