// What fused_ffn's two workloads (dense W in fused_ffn_workload.cpp,
// quantized W in fused_ffn_native_workload.cpp) share: the path a user has
// without qjit, measured as their baseline.
#pragma once
#include <cuda.h>
#include <cstdint>
#include <memory>
#include <string>
#include "codegen/spec.h"
#include "runtime/cublas.h"
#include "tuner/timing.h"

namespace qjit::tuner {

// The seed's standard path on dense weights: two cuBLAS GEMMs (x·W1ᵀ, x·W3ᵀ
// into intermediates g, u of `type`) and an element-wise SiLU(g)·u kernel.
// type: "fp16", "bf16" or "fp32" for x, W, g, u and y alike.
class CublasFfnPath {
 public:
  CublasFfnPath(const runtime::Cublas* cublas, const std::string& type, int64_t d, int64_t h, int64_t m);
  ~CublasFfnPath();
  CublasFfnPath(const CublasFfnPath&) = delete;
  CublasFfnPath& operator=(const CublasFfnPath&) = delete;
  void run(CUdeviceptr x, CUdeviceptr w1, CUdeviceptr w3, CUdeviceptr y, CUstream stream);

 private:
  const runtime::Cublas* cublas_;
  cublasHandle_t blas_ = nullptr;
  cudaDataType type_;
  int64_t d_, h_, m_;
  DeviceBuffer g_, u_;
  CUmodule module_ = nullptr;
  CUfunction swiglu_ = nullptr;
};

class Workload;
std::unique_ptr<Workload> make_fused_ffn_native_workload(const codegen::OpSpec& spec, uint64_t seed, size_t l2_bytes);

}  // namespace qjit::tuner
