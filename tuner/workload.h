// How the tuner feeds and checks one op: device inputs drawn fresh at random,
// enough copies of the weights that rotating through them defeats L2, the CPU
// reference for copy 0, verification of the output, and library baselines.
// One implementation per op, beside its reference in tuner/reference/<op>.cpp.
#pragma once
#include <cuda.h>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "codegen/spec.h"
#include "qjit/qjit.h"

namespace qjit::tuner {

// splitmix64: fast, seedable, good enough to fill test tensors.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) / 16777216.0f * 2.0f - 1.0f; }  // [-1, 1)
};

struct Verification {
  bool ok = false;
  double rel_error = 0;      // ‖y − ref‖₂ / ‖ref‖₂
  double max_abs_error = 0;  // max_i |y_i − ref_i|
  double tolerance = 0;
  std::string message;       // what failed, with the first bad index
};

// The float ops' check: ‖out − ref‖₂ / ‖ref‖₂ ≤ tolerance, and no element
// non-finite or off by more than 8·tolerance·max|ref|. out(i) is the output
// element that ref[i] describes; where(i) names it for the message ("y[m=0][n=5]").
Verification compare_float(const std::vector<double>& ref, const std::function<double(size_t)>& out, double tolerance,
                           const std::function<std::string(size_t)>& where);

// A library path a user already has (e.g. cuBLAS + an activation kernel).
struct Baseline {
  std::string name;                         // "cublas_2gemm_swiglu"
  std::function<void(int copy, CUstream)> run;
  // It writes the output verify() reads. False where it writes a scratch
  // buffer instead (a GEMM without the op's bias or clamp, or y in another
  // type): then it is timed only, not checked.
  bool checked = true;
};

// A device address as the argument structs take it.
inline void* dev(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

class Workload {
 public:
  virtual ~Workload() = default;
  // The call's arguments reading weight copy `copy` (0 <= copy < copies()):
  // the op's argument struct, packed.
  const ArgPack& args(int copy) const { return copies_[static_cast<size_t>(copy)]; }
  int copies() const { return static_cast<int>(copies_.size()); }
  // Fills the output with NaN bit patterns so that unwritten elements fail,
  // on `stream`: the stream the checked kernel is then launched on.
  virtual void poison_output(CUstream stream) = 0;
  // Compares the output (which must come from copy 0) with the reference.
  virtual Verification verify(double tolerance_scale = 1.0) = 0;
  virtual std::vector<Baseline> baselines(std::string* why_none) = 0;

 protected:
  // The constructor adds each copy's arguments, copy 0 first.
  void add_copy(const ArgPack& a) { copies_.push_back(a); }

 private:
  std::vector<ArgPack> copies_;
};

// Runs baseline `b` once on copy 0 and verifies it as a candidate is
// verified, with twice the tolerance (the library path rounds its
// intermediates too). A baseline that writes a scratch buffer
// (Baseline::checked false) is not run: ok false, rel_error NaN, and a
// message that says it is timed only.
Verification check_baseline(Workload& work, const Baseline& b, CUstream stream);

// Allocates and fills the inputs of `spec` on the current device (the op's
// workload of tuner/ops.h). Throws qjit::Error("tuner", ...) for an op with none.
std::unique_ptr<Workload> make_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes);
// wq_gemm with `rows` rows of x (0: the bucket m), for tests of M inside a bucket.
std::unique_ptr<Workload> make_wq_gemm_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes,
                                                int64_t rows);
// w8a8_gemm with `rows` rows of x (0: the bucket m); given rows, up to 1024 of them are all checked.
std::unique_ptr<Workload> make_w8a8_gemm_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes,
                                                  int64_t rows);

}  // namespace qjit::tuner
