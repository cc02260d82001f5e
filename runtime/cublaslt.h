// cuBLASLt, loaded with dlopen the first time a plan needs it (so nothing else
// needs libcublasLt): w8a8_gemm's "cublaslt" family, whose GEMM is cuBLASLt's
// block-scaled FP8 matmul (1×128 scales for x, 128×128 for W; cuBLASLt 12.9
// or newer, compute capability 9.0 or newer).
#pragma once
#include <cuda.h>
#include <cublasLt.h>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include "codegen/op.h"

namespace qjit::runtime {

struct CublasLt {
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtGetVersion) version = nullptr;
  decltype(&::cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
};

// nullptr (with the reason) when libcublasLt cannot be loaded or is older
// than 12.9 (the first with the 1×128 and 128×128 block scales).
const CublasLt* try_cublaslt(std::string* why);

// The process's cuBLASLt handle for the current context (a cuBLASLt handle is
// tied to a device, not to a stream; cublasLtMatmul takes the stream), made
// on first use and kept. nullptr with the reason when cuBLASLt is missing.
cublasLtHandle_t cublaslt_handle(std::string* why);

// Why a cublaslt step cannot run here, or "" when it can.
std::string cublaslt_unavailable();

// cuBLASLt's scratch for calls on `stream` of the current context: one
// buffer of kCublasLtWorkspaceBytes per (context, stream), allocated on first
// use (so not inside a CUDA graph capture: qjit::Preload makes it ready) and
// kept for the process, as cuBLAS keeps its handles' own. Plans share it:
// calls on one stream run one after another. 32 MiB is what cuBLAS's
// documentation recommends for Hopper; split-k algorithms need it.
constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;
CUresult cublaslt_workspace(CUstream stream, CUdeviceptr* out);

// One cublaslt_fp8_gemm step of a loaded plan. cuBLASLt picks an algorithm
// for a shape by a heuristic query that costs tens of µs, so the step keeps
// the query's answer and the matrix layouts for each row count it has seen.
// The pointers (the stream's workspace, bias) are set on the matmul
// descriptor at each call: a mutex keeps two threads calling the same plan
// from interleaving that with the matmul.
class LtFp8Gemm {
 public:
  explicit LtFp8Gemm(codegen::CublasLtFp8Gemm def) : def_(std::move(def)) {}
  ~LtFp8Gemm();
  LtFp8Gemm(const LtFp8Gemm&) = delete;
  LtFp8Gemm& operator=(const LtFp8Gemm&) = delete;

  // Enqueues the step for `rows` rows on `stream`. CUDA_ERROR_NOT_SUPPORTED,
  // nothing launched, when cuBLASLt declines the shape (its heuristic
  // answered none, e.g. an output type it does not offer with block scales,
  // or the matmul refused its arguments); CUDA_ERROR_UNKNOWN when it fails.
  // `workspace` is the plan's (codes and scales), `scratch` cuBLASLt's (cublaslt_workspace).
  CUresult run(const CublasLt& lt, cublasLtHandle_t handle, int rows, CUdeviceptr workspace, CUdeviceptr scratch,
               CUdeviceptr w, CUdeviceptr bias, CUdeviceptr y, CUstream stream);

 private:
  struct Shape {
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // The descriptor's fixed attributes (operations, scale modes, epilogue).
  cublasStatus_t make_desc(const CublasLt& lt);
  // The layouts and the heuristic's answer for `rows` (desc_ holds this call's pointers).
  cublasStatus_t make_shape(const CublasLt& lt, cublasLtHandle_t handle, int rows, Shape* out);

  codegen::CublasLtFp8Gemm def_;
  const CublasLt* lt_ = nullptr;  // what made the objects below, for the destructor
  std::mutex mu_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  std::map<int, Shape> shapes_;
};

}  // namespace qjit::runtime
