#include "runtime/cublaslt.h"
#include <dlfcn.h>
#include <cstdint>
#include <utility>
#include "runtime/cublas.h"
#include "runtime/device.h"
#include "runtime/driver.h"

namespace qjit::runtime {

namespace {
// cuBLASLt's version number (major·10000 + minor·100 + patch) from which
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F and BLK128x128_32F exist: 12.9.
constexpr size_t kBlockScalesSince = 120900;
}  // namespace

const CublasLt* try_cublaslt(std::string* why) {
  static std::string error;
  static const CublasLt* loaded = []() -> const CublasLt* {
    void* lib = open_toolkit_library("libcublasLt");
    if (!lib) {
      error = "libcublasLt could not be loaded (set CUDA_HOME or LD_LIBRARY_PATH)";
      return nullptr;
    }
    static CublasLt c;
    bool all = true;
    const auto load = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
      all = all && f;
    };
    load(c.create, "cublasLtCreate");
    load(c.version, "cublasLtGetVersion");
    load(c.desc_create, "cublasLtMatmulDescCreate");
    load(c.desc_destroy, "cublasLtMatmulDescDestroy");
    load(c.desc_set, "cublasLtMatmulDescSetAttribute");
    load(c.layout_create, "cublasLtMatrixLayoutCreate");
    load(c.layout_destroy, "cublasLtMatrixLayoutDestroy");
    load(c.pref_create, "cublasLtMatmulPreferenceCreate");
    load(c.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    load(c.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    load(c.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    load(c.matmul, "cublasLtMatmul");
    if (!all) {
      error = "libcublasLt lacks one of the cublasLtMatmul* functions";
      return nullptr;
    }
    if (const size_t v = c.version(); v < kBlockScalesSince) {
      error = "libcublasLt " + std::to_string(v) + " is older than 12.9, which brought the 1x128 and 128x128 FP8 block scales";
      return nullptr;
    }
    return &c;
  }();
  if (!loaded && why) *why = error;
  return loaded;
}

cublasLtHandle_t cublaslt_handle(std::string* why) {
  const CublasLt* c = try_cublaslt(why);
  if (!c) return nullptr;
  // By context, as cublas_handle keeps its handles: a handle belongs to the
  // device that was current when it was made.
  const CUcontext context = current_context();
  if (!context) {
    if (why) *why = "no CUDA device";
    return nullptr;
  }
  static std::mutex mu;
  static std::map<ContextId, cublasLtHandle_t> handles;  // never destroyed: the context may be gone at exit
  std::lock_guard<std::mutex> lock(mu);
  const ContextId id = context_id(context);
  if (auto it = handles.find(id); it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  if (const cublasStatus_t st = c->create(&h); st != CUBLAS_STATUS_SUCCESS) {
    if (why) *why = "cublasLtCreate failed with status " + std::to_string(static_cast<int>(st));
    return nullptr;
  }
  handles.emplace(id, h);
  return h;
}

std::string cublaslt_unavailable() {
  std::string why;
  return cublaslt_handle(&why) ? "" : why;
}

CUresult cublaslt_workspace(CUstream stream, CUdeviceptr* out) {
  *out = 0;
  const CUcontext context = current_context();
  if (!context) return CUDA_ERROR_INVALID_CONTEXT;
  static std::mutex mu;
  static std::map<std::pair<ContextId, CUstream>, CUdeviceptr> buffers;  // never freed: the context may be gone at exit
  std::lock_guard<std::mutex> lock(mu);
  const std::pair<ContextId, CUstream> key{context_id(context), stream};
  if (auto it = buffers.find(key); it != buffers.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  const CUresult r = driver().cuMemAlloc(out, kCublasLtWorkspaceBytes);
  if (r == CUDA_SUCCESS) buffers.emplace(key, *out);
  return r;
}

LtFp8Gemm::~LtFp8Gemm() {
  if (!lt_) return;
  for (auto& [rows, s] : shapes_) {
    lt_->layout_destroy(s.a);
    lt_->layout_destroy(s.b);
    lt_->layout_destroy(s.d);
  }
  if (desc_) lt_->desc_destroy(desc_);
}

namespace {

cudaDataType out_type(codegen::CublasLtFp8Gemm::Out out) {
  using Out = codegen::CublasLtFp8Gemm::Out;
  return out == Out::f32 ? CUDA_R_32F : out == Out::bf16 ? CUDA_R_16BF : CUDA_R_16F;
}

template <typename T>
cublasStatus_t set(const CublasLt& lt, cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  return lt.desc_set(d, a, &v, sizeof v);
}

}  // namespace

// cuBLASLt is column-major. y [rows][n] row-major is D = yᵀ, n × rows (ld n);
// D = op(A)·B with A = W's codes [n][k] seen as k × n (ld k) and transposed,
// B = x's codes [rows][k] seen as k × rows (ld k): the "TN" form, the only one
// cuBLASLt runs FP8 in. A's scales are W's 128 × 128 tiles, B's x's 1 × 128
// blocks; their layouts are PyTorch's for the same cuBLASLt modes (its
// ScaledBlas.cpp checks: 1×128 scales "outer-dim-major", [k/128][rows rounded up to 4]; 128 ×
// 128 ones [n/128][k/128], k's blocks adjacent).
cublasStatus_t LtFp8Gemm::make_desc(const CublasLt& lt) {
  cublasStatus_t st = lt.desc_create(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const auto check = [&](cublasStatus_t s) {
    if (st == CUBLAS_STATUS_SUCCESS) st = s;
  };
  check(set(lt, desc_, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}));
  check(set(lt, desc_, CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N}));
  check(set(lt, desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F}));
  check(set(lt, desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F}));
  const bool bias = !def_.bias.empty();
  const cublasLtEpilogue_t epilogue = bias ? (def_.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                           : (def_.relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  check(set(lt, desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(epilogue)));
  if (bias) check(set(lt, desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(out_type(def_.out))));
  return st;
}

cublasStatus_t LtFp8Gemm::make_shape(const CublasLt& lt, cublasLtHandle_t handle, int rows, Shape* s) {
  const uint64_t k = static_cast<uint64_t>(def_.k), n = static_cast<uint64_t>(def_.n), m = static_cast<uint64_t>(rows);
  cublasStatus_t st = lt.layout_create(&s->a, CUDA_R_8F_E4M3, k, n, static_cast<int64_t>(k));
  if (st == CUBLAS_STATUS_SUCCESS) st = lt.layout_create(&s->b, CUDA_R_8F_E4M3, k, m, static_cast<int64_t>(k));
  if (st == CUBLAS_STATUS_SUCCESS) st = lt.layout_create(&s->d, out_type(def_.out), n, m, static_cast<int64_t>(n));
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  cublasLtMatmulPreference_t pref = nullptr;
  st = lt.pref_create(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const uint64_t bytes = kCublasLtWorkspaceBytes;
  st = lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes);
  // The pointers a call may pass are 16-byte aligned (the plan's pointer
  // checks), not the 256 bytes the heuristic otherwise assumes.
  const uint32_t align = 16;
  for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st == CUBLAS_STATUS_SUCCESS) st = lt.pref_set(pref, a, &align, sizeof align);
  constexpr int kAsked = 8;
  cublasLtMatmulHeuristicResult_t found[kAsked] = {};
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt.heuristic(handle, desc_, s->a, s->b, s->d, s->d, pref, kAsked, found, &returned);
  lt.pref_destroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (returned <= 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  // The config's algo-th answer, tuned at the bucket's rows; a call of fewer
  // rows may get fewer answers, and then takes the best.
  s->algo = found[def_.algo < returned ? def_.algo : 0].algo;
  return CUBLAS_STATUS_SUCCESS;
}

CUresult LtFp8Gemm::run(const CublasLt& lt, cublasLtHandle_t handle, int rows, CUdeviceptr workspace,
                        CUdeviceptr scratch, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr y, CUstream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  lt_ = &lt;
  if (!desc_ && make_desc(lt) != CUBLAS_STATUS_SUCCESS) {
    if (desc_) lt.desc_destroy(desc_);
    desc_ = nullptr;
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const void* a_scale = reinterpret_cast<const void*>(workspace + def_.w_scale_offset);
  const void* b_scale = reinterpret_cast<const void*>(workspace + def_.x_scale_offset);
  cublasStatus_t st = set(lt, desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
  if (st == CUBLAS_STATUS_SUCCESS) st = set(lt, desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
  if (st == CUBLAS_STATUS_SUCCESS && !def_.bias.empty())
    st = set(lt, desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, reinterpret_cast<const void*>(bias));
  if (st != CUBLAS_STATUS_SUCCESS) return CUDA_ERROR_UNKNOWN;
  auto it = shapes_.find(rows);
  if (it == shapes_.end()) {
    Shape s;
    st = make_shape(lt, handle, rows, &s);
    if (st != CUBLAS_STATUS_SUCCESS) {
      for (auto* l : {s.a, s.b, s.d})
        if (l) lt.layout_destroy(l);
      return st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ? CUDA_ERROR_NOT_SUPPORTED
                                                                                     : CUDA_ERROR_UNKNOWN;
    }
    it = shapes_.emplace(rows, s).first;
  }
  const Shape& s = it->second;
  const float one = 1.0f, zero = 0.0f;
  const auto at = [](CUdeviceptr p) { return reinterpret_cast<void*>(p); };
  st = lt.matmul(handle, desc_, &one, at(w), s.a, at(workspace + def_.x_offset), s.b, &zero, at(y), s.d, at(y), s.d,
                 &s.algo, at(scratch), kCublasLtWorkspaceBytes,
                 reinterpret_cast<cudaStream_t>(stream));
  // A shape or argument cuBLASLt declines (checked on the host, nothing
  // launched) is not a failure of the GPU.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) return CUDA_ERROR_NOT_SUPPORTED;
  return st == CUBLAS_STATUS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

}  // namespace qjit::runtime
