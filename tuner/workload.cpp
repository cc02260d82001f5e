#include "tuner/workload.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include "codegen/error.h"
#include "runtime/driver.h"
#include "tuner/ops.h"

namespace qjit::tuner {

Verification check_baseline(Workload& work, const Baseline& b, CUstream stream) {
  if (!b.checked) {
    Verification v;
    v.rel_error = std::numeric_limits<double>::quiet_NaN();
    v.message = "timed only: it writes a scratch output, not the op's (it lacks the op's epilogue or output type)";
    return v;
  }
  work.poison_output(stream);
  b.run(0, stream);
  QJIT_CU(cuStreamSynchronize(stream));
  return work.verify(2.0);
}

std::unique_ptr<Workload> make_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes) {
  return op_hooks(spec.op).make_workload(spec, seed, l2_bytes);
}

Verification compare_float(const std::vector<double>& ref, const std::function<double(size_t)>& out, double tolerance,
                           const std::function<std::string(size_t)>& where) {
  Verification v;
  v.tolerance = tolerance;
  double err2 = 0, ref2 = 0, ref_max = 0;
  int64_t first_bad = -1;
  for (double r : ref) ref_max = std::max(ref_max, std::fabs(r));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double o = out(i), e = std::fabs(o - ref[i]);
    if ((!std::isfinite(o) || e > 8 * tolerance * ref_max) && first_bad < 0) first_bad = static_cast<int64_t>(i);
    err2 += std::isfinite(e) ? e * e : 1e300;
    ref2 += ref[i] * ref[i];
    v.max_abs_error = std::max(v.max_abs_error, std::isfinite(e) ? e : INFINITY);
  }
  v.rel_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  v.ok = first_bad < 0 && v.rel_error <= tolerance;
  if (!v.ok) {
    char buf[256];
    if (first_bad >= 0)
      std::snprintf(buf, sizeof buf, "%s = %g, reference %g; relative error %.3g (tolerance %.3g)",
                    where(static_cast<size_t>(first_bad)).c_str(), out(static_cast<size_t>(first_bad)), ref[first_bad],
                    v.rel_error, tolerance);
    else
      std::snprintf(buf, sizeof buf, "relative error %.3g exceeds tolerance %.3g", v.rel_error, tolerance);
    v.message = buf;
  }
  return v;
}

}  // namespace qjit::tuner
