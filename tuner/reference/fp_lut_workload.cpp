// fp_lut's tuning workload: random input bit patterns (NaN, ±inf and
// subnormals included for 16-bit inputs), input copies rotated beyond L2,
// bit-exact verification against lut_reference_bits. The PyTorch peer
// (native activations) is measured by peers.py, not here.
#include <algorithm>
#include <cmath>
#include <cstring>
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
  }

  // On the candidate's stream (a legacy-stream memset is not ordered with it).
  void poison_output(CUstream stream) override { QJIT_CU(cuMemsetD8Async(y_.ptr(), 0xa5, y_.bytes(), stream)); }

  Verification verify(double) override {
    QJIT_CU(cuCtxSynchronize());
    std::vector<uint8_t> y(y_.bytes());
    y_.download(y.data(), y.size());
    const size_t ib = in_ == "fp32" ? 4 : 2, ob = out_ == "fp32" ? 4 : 2;
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::vector<int64_t> first_bad(threads, -1);
    std::vector<int64_t> bad_count(threads, 0);
    auto work = [&](int t) {
      for (int64_t i = n_ * t / threads; i < n_ * (t + 1) / threads; ++i) {
        uint32_t xb = 0, yb = 0;
        std::memcpy(&xb, &x_host_[ib * i], ib);
        std::memcpy(&yb, &y[ob * i], ob);
        const uint32_t want = lut_reference_bits(table_, in_, out_, xb);
        if (yb != want && !(is_nan(yb) && is_nan(want))) {
          if (first_bad[t] < 0) first_bad[t] = i;
          ++bad_count[t];
        }
      }
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
    for (auto& th : pool) th.join();
    Verification v;
    int64_t bad = 0, first = -1;
    for (int t = 0; t < threads; ++t) {
      bad += bad_count[t];
      if (first < 0) first = first_bad[t];
    }
    v.ok = bad == 0;
    v.rel_error = static_cast<double>(bad) / static_cast<double>(n_);  // fraction of elements not bit-equal
    if (!v.ok) {
      uint32_t xb = 0, yb = 0;
      std::memcpy(&xb, &x_host_[ib * first], ib);
      std::memcpy(&yb, &y[ob * first], ob);
      char buf[256];
      std::snprintf(buf, sizeof buf, "%lld of %lld elements differ; first y[%lld]: input bits 0x%x -> 0x%x, reference 0x%x",
                    static_cast<long long>(bad), static_cast<long long>(n_), static_cast<long long>(first), xb, yb,
                    lut_reference_bits(table_, in_, out_, xb));
      v.message = buf;
    }
    return v;
  }

  std::vector<Baseline> baselines(std::string* why_none) override {
    *why_none = "PyTorch's native activations are the peer for fp_lut; peers.py measures them";
    return {};
  }

 private:
  bool is_nan(uint32_t bits) const {
    if (out_ == "fp32") return std::isnan(bits_to_float(bits));
    if (out_ == "bf16") return (bits & 0x7f80) == 0x7f80 && (bits & 0x7f);
    return (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff);
  }

  codegen::lut::Table table_;
  std::string in_, out_;
  int64_t n_ = 0;
  std::vector<uint8_t> x_host_;
  std::vector<DeviceBuffer> x_;
  DeviceBuffer y_;
};

}  // namespace

std::unique_ptr<Workload> make_fp_lut_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  return std::make_unique<FpLutWorkload>(spec, seed, l2_bytes);
}

}  // namespace qjit::tuner
