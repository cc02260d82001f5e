// gru_quant's tuning workload: random integer codes over each tensor's whole
// range (x, h0, W, R, bw, br), one copy (the recurrence is bound by latency,
// not by reading weights), bit-exact verification against
// gru_quant_reference. peers.py measures cuDNN's float GRU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "codegen/ops/gru_quant.h"
#include "runtime/driver.h"
#include "tuner/reference/gru_quant.h"
#include "tuner/timing.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {

class GruQuantWorkload final : public Workload {
 public:
  GruQuantWorkload(const codegen::OpSpec& spec, uint64_t seed)
      : p_(codegen::gru::params_of(spec)), t_(spec.get_int("t")), n_(spec.get_int("n")) {
    SplitMix64 rng{seed};
    const int64_t C = p_.input_size, H = p_.hidden_size;
    auto codes = [&](std::vector<int32_t>& v, int64_t count, int64_t lo, int64_t hi) {
      v.resize(static_cast<size_t>(count));
      for (auto& e : v) e = static_cast<int32_t>(lo + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(hi - lo + 1)));
    };
    codes(x_, t_ * n_ * C, p_.x.lo(), p_.x.hi());
    codes(h0_, n_ * H, p_.h.lo(), p_.h.hi());
    codes(w_.W, 3 * H * C, -p_.W.max_abs(), p_.W.max_abs() - 1);
    codes(w_.R, 3 * H * H, -p_.R.max_abs(), p_.R.max_abs() - 1);
    codes(w_.bw, 3 * H, -p_.bw.max_abs(), p_.bw.max_abs() - 1);
    codes(w_.br, 3 * H, -p_.br.max_abs(), p_.br.max_abs() - 1);
    auto bytes8 = [](const std::vector<int32_t>& v) {
      std::vector<int8_t> b(v.begin(), v.end());
      return b;
    };
    const auto W8 = bytes8(w_.W), R8 = bytes8(w_.R);
    x_d_ = upload(x_.data(), x_.size() * 4);
    h0_d_ = upload(h0_.data(), h0_.size() * 4);
    W_d_ = upload(W8.data(), W8.size());
    R_d_ = upload(R8.data(), R8.size());
    bw_d_ = upload(w_.bw.data(), w_.bw.size() * 4);
    br_d_ = upload(w_.br.data(), w_.br.size() * 4);
    y_d_ = DeviceBuffer(static_cast<size_t>(t_ * n_ * H) * 4);
    y_float_d_ = DeviceBuffer(static_cast<size_t>(t_ * n_ * H) * 4);
    add_copy(GruQuantArgs{dev(x_d_.ptr()), dev(h0_d_.ptr()), dev(W_d_.ptr()), dev(R_d_.ptr()), dev(bw_d_.ptr()),
                          dev(br_d_.ptr()), dev(y_d_.ptr()), dev(y_float_d_.ptr())}
                 .pack());
  }

  void poison_output(CUstream stream) override {
    QJIT_CU(cuMemsetD8Async(y_d_.ptr(), 0xff, y_d_.bytes(), stream));
    QJIT_CU(cuMemsetD8Async(y_float_d_.ptr(), 0xff, y_float_d_.bytes(), stream));
  }

  Verification verify(double) override {
    QJIT_CU(cuCtxSynchronize());
    std::vector<int32_t> got(static_cast<size_t>(t_ * n_ * p_.hidden_size));
    std::vector<float> got_float(got.size());
    y_d_.download(got.data(), got.size() * 4);
    y_float_d_.download(got_float.data(), got_float.size() * 4);
    if (want_.empty()) want_ = gru_quant_reference(p_, w_, x_, h0_, t_, n_);
    Verification v;
    int64_t bad = 0, first = -1, bad_float = 0;
    for (size_t i = 0; i < want_.size(); ++i) {
      if (got[i] != want_[i] && bad++ == 0) first = static_cast<int64_t>(i);
      // The dequantized state is exact: (q − zp)·2^−shift in fp32, bit for bit.
      const float want_float = static_cast<float>(std::ldexp(static_cast<double>(want_[i] - p_.h.zp), -p_.h.shift));
      if (std::memcmp(&got_float[i], &want_float, 4) != 0) ++bad_float;
    }
    v.ok = bad == 0 && bad_float == 0;
    v.rel_error = static_cast<double>(bad) / static_cast<double>(want_.size());  // fraction not bit-equal
    if (bad) {
      const int64_t H = p_.hidden_size;
      char buf[200];
      std::snprintf(buf, sizeof buf, "%lld of %zu states differ; first y[t=%lld][n=%lld][%lld] = %d, reference %d",
                    static_cast<long long>(bad), want_.size(), static_cast<long long>(first / (n_ * H)),
                    static_cast<long long>(first / H % n_), static_cast<long long>(first % H), got[first], want_[first]);
      v.message = buf;
    } else if (bad_float) {
      v.message = std::to_string(bad_float) + " dequantized states (y_float) differ from (y − zp)·2^−shift";
    }
    return v;
  }

  std::vector<Baseline> baselines(std::string* why_none) override {
    *why_none = "cuDNN's float GRU is the peer; peers.py measures it";
    return {};
  }

 private:
  static DeviceBuffer upload(const void* data, size_t bytes) {
    DeviceBuffer b(std::max<size_t>(bytes, 4));
    if (bytes) b.upload(data, bytes);
    return b;
  }

  codegen::gru::GruParams p_;
  int64_t t_, n_;
  GruWeights w_;
  std::vector<int32_t> x_, h0_, want_;
  DeviceBuffer x_d_, h0_d_, W_d_, R_d_, bw_d_, br_d_, y_d_, y_float_d_;
};

}  // namespace

std::unique_ptr<Workload> make_gru_quant_workload(const codegen::OpSpec& spec, uint64_t seed, size_t) {
  return std::make_unique<GruQuantWorkload>(spec, seed);
}

}  // namespace qjit::tuner
