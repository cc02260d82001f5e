// awq_dequant's tuning workload: random q, zero points and scales, packed in
// the spec's layout, packed copies rotated beyond L2, bit-exact verification
// against dequant_reference. peers.py measures PyTorch's elementwise version.
#include <algorithm>
#include <array>
#include <cstring>
#include "codegen/numeric.h"
#include "runtime/driver.h"
#include "tuner/reference/awq_dequant.h"
#include "tuner/timing.h"
#include "tuner/workload.h"

namespace qjit::tuner {
namespace {

class AwqDequantWorkload final : public Workload {
 public:
  AwqDequantWorkload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
    p_.k = spec.get_int("k"), p_.n = spec.get_int("n"), p_.g = spec.get_int("g");
    awq_ = spec.get_str("layout") == "awq";
    sym_ = spec.get_str("zero") == "sym";
    stype_ = spec.get_str("scales");
    otype_ = spec.get_str("out");
    SplitMix64 rng{seed};
    auto next = [&] { return rng.next(); };
    const int64_t groups = p_.k / p_.g;
    p_.q.resize(p_.k * p_.n);
    for (auto& v : p_.q) v = next() & 0xf;
    p_.z.resize(groups * p_.n);
    for (auto& v : p_.z) v = next() & 0xf;
    p_.s.resize(groups * p_.n);
    for (auto& v : p_.s) {
      const float f = (static_cast<float>(next() >> 40) / 16777216.0f + 0.01f) * 0.02f * ((next() & 1) ? 1 : -1);
      v = stype_ == "bf16" ? float_to_bf16(f) : float_to_half(f);
    }
    const auto qweight = awq_ ? pack_awq_qweight(p_) : pack_gptq_qweight(p_);
    const auto qzeros = pack_along_n(p_.z, groups, p_.n, awq_);
    const size_t qbytes = qweight.size() * 4;
    const int copies = static_cast<int>(std::clamp<size_t>(3 * l2_bytes / std::max<size_t>(qbytes, 1) + 1, 1, 16));
    for (int c = 0; c < copies; ++c) {
      q_.emplace_back(qbytes);
      q_[c].upload(qweight.data(), qbytes);
    }
    z_ = DeviceBuffer(qzeros.size() * 4);
    z_.upload(qzeros.data(), qzeros.size() * 4);
    s_ = DeviceBuffer(p_.s.size() * 2);
    s_.upload(p_.s.data(), p_.s.size() * 2);
    out_ = DeviceBuffer(p_.k * p_.n * 2);
    for (int c = 0; c < copies; ++c)
      add_copy(AwqDequantArgs{dev(q_[c].ptr()), dev(z_.ptr()), dev(s_.ptr()), dev(out_.ptr())}.pack());
  }

  // On the candidate's stream (a legacy-stream memset is not ordered with it).
  void poison_output(CUstream stream) override { QJIT_CU(cuMemsetD8Async(out_.ptr(), 0xff, out_.bytes(), stream)); }

  Verification verify(double) override {
    QJIT_CU(cuCtxSynchronize());
    std::vector<uint16_t> got(p_.k * p_.n);
    out_.download(got.data(), got.size() * 2);
    // The reference once per workload: a winner is verified 17 times.
    if (want_.empty()) want_ = dequant_reference(p_, sym_, stype_, otype_);
    const auto& want = want_;
    Verification v;
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i] && bad++ == 0) first = static_cast<int64_t>(i);
    v.ok = bad == 0;
    v.rel_error = static_cast<double>(bad) / static_cast<double>(want.size());  // fraction not bit-equal
    if (!v.ok) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%lld of %zu results differ; first out[%lld][%lld] = 0x%04x, reference 0x%04x",
                    static_cast<long long>(bad), want.size(), static_cast<long long>(first / p_.n),
                    static_cast<long long>(first % p_.n), got[first], want[first]);
      v.message = buf;
    }
    return v;
  }

  std::vector<Baseline> baselines(std::string* why_none) override {
    *why_none = "PyTorch's elementwise dequantisation is the peer; peers.py measures it";
    return {};
  }

 private:
  PlainQuant p_;
  bool awq_ = true, sym_ = false;
  std::string stype_, otype_;
  std::vector<DeviceBuffer> q_;
  DeviceBuffer z_, s_, out_;
  std::vector<uint16_t> want_;  // the reference, computed at the first verify
};

}  // namespace

std::unique_ptr<Workload> make_awq_dequant_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  return std::make_unique<AwqDequantWorkload>(spec, seed, l2_bytes);
}

}  // namespace qjit::tuner
