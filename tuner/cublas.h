// cuBLAS, loaded with dlopen when a baseline is measured (so nothing else
// needs libcublas). Uses the primary context that qjit's runtime made current.
#pragma once
#include <cublas_v2.h>
#include <string>

namespace qjit::tuner {

struct Cublas {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  // Spelled out: cublas_api.h overloads cublasGemmEx in C++.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
};

// nullptr (with the reason) when libcublas cannot be loaded.
const Cublas* try_cublas(std::string* why);

}  // namespace qjit::tuner
