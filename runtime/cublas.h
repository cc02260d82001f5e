// cuBLAS, loaded with dlopen the first time something needs it (so nothing
// else needs libcublas): the tuner's library baselines and wq_gemm's
// "cublas" family (a kernel dequantises W, cuBLAS multiplies). Uses the
// primary context that qjit's runtime made current.
#pragma once
#include <cuda.h>
#include <cublas_v2.h>
#include <string>

namespace qjit::runtime {

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

// dlopen of a CUDA toolkit library by its stem ("libcublas", "libcublasLt"):
// under $CUDA_HOME/lib64, then version 13 and 12 on the loader's path and in
// /usr/local/cuda/lib64, then the unversioned name; nullptr when none loads.
void* open_toolkit_library(const std::string& stem);

// nullptr (with the reason) when libcublas cannot be loaded.
const Cublas* try_cublas(std::string* why);

// y[rows][n] = x[rows][k] · W[n][k]ᵀ + β·y, every matrix row-major, sums in
// fp32: cuBLAS's column-major Yᵀ (n × rows) = (W as k × n)ᵀ · (x as k ×
// rows), leading dimensions k, k and n. x and W of type `xw`, y of `yt`.
cublasStatus_t gemm_x_wt(const Cublas& c, cublasHandle_t h, int rows, int n, int k, CUdeviceptr w, CUdeviceptr x,
                         cudaDataType xw, float beta, CUdeviceptr y, cudaDataType yt);

// The process's cuBLAS handle for `stream` of the current context, created
// (and bound to the stream) on first use and kept for the process: a handle
// is not to be shared by two host threads at once, and launches on one
// stream are ordered anyway. nullptr with the reason when cuBLAS is missing
// or cublasCreate fails.
cublasHandle_t cublas_handle(CUstream stream, std::string* why);

}  // namespace qjit::runtime
