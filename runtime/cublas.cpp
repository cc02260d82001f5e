#include "runtime/cublas.h"
#include <dlfcn.h>
#include <cstdlib>
#include <mutex>
#include <map>
#include <utility>
#include "runtime/device.h"

namespace qjit::runtime {

void* open_toolkit_library(const std::string& stem) {
  void* lib = nullptr;
  if (const char* home = std::getenv("CUDA_HOME"))
    lib = dlopen((std::string(home) + "/lib64/" + stem + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  for (const std::string dir : {"", "/usr/local/cuda/lib64/"})
    for (const char* version : {".so.13", ".so.12"})
      if (!lib) lib = dlopen((dir + stem + version).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen((stem + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  return lib;
}

const Cublas* try_cublas(std::string* why) {
  static std::string error;
  static const Cublas* loaded = []() -> const Cublas* {
    void* lib = open_toolkit_library("libcublas");
    if (!lib) {
      error = "libcublas could not be loaded (set CUDA_HOME or LD_LIBRARY_PATH)";
      return nullptr;
    }
    static Cublas c;
    c.create = reinterpret_cast<decltype(c.create)>(dlsym(lib, "cublasCreate_v2"));
    c.destroy = reinterpret_cast<decltype(c.destroy)>(dlsym(lib, "cublasDestroy_v2"));
    c.set_stream = reinterpret_cast<decltype(c.set_stream)>(dlsym(lib, "cublasSetStream_v2"));
    c.gemm_ex = reinterpret_cast<decltype(c.gemm_ex)>(dlsym(lib, "cublasGemmEx"));
    if (!c.create || !c.destroy || !c.set_stream || !c.gemm_ex) {
      error = "libcublas lacks cublasCreate_v2/cublasGemmEx";
      return nullptr;
    }
    return &c;
  }();
  if (!loaded && why) *why = error;
  return loaded;
}

cublasStatus_t gemm_x_wt(const Cublas& c, cublasHandle_t h, int rows, int n, int k, CUdeviceptr w, CUdeviceptr x,
                         cudaDataType xw, float beta, CUdeviceptr y, cudaDataType yt) {
  const float one = 1.0f;
  return c.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &one, reinterpret_cast<void*>(w), xw, k,
                   reinterpret_cast<void*>(x), xw, k, &beta, reinterpret_cast<void*>(y), yt, n, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
}

cublasHandle_t cublas_handle(CUstream stream, std::string* why) {
  const Cublas* c = try_cublas(why);
  if (!c) return nullptr;
  // By context and stream: a stream handle names a stream of one context
  // only, and the legacy default stream (nullptr) is every context's; a
  // handle made in one context (its workspace, its device) is not used in
  // another. With none current, the default device's context is made
  // current, as current_context() does for the tools.
  const CUcontext context = current_context();
  if (!context) {
    if (why) *why = "no CUDA device";
    return nullptr;
  }
  const std::pair<ContextId, CUstream> key{context_id(context), stream};
  static std::mutex mu;
  static std::map<std::pair<ContextId, CUstream>, cublasHandle_t> handles;  // never destroyed: the context may be gone at exit
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(key);
  if (it != handles.end()) return it->second;
  cublasHandle_t h = nullptr;
  cublasStatus_t st = c->create(&h);
  if (st == CUBLAS_STATUS_SUCCESS) st = c->set_stream(h, reinterpret_cast<cudaStream_t>(stream));
  if (st != CUBLAS_STATUS_SUCCESS) {
    if (h) c->destroy(h);
    if (why) *why = "cublasCreate/cublasSetStream failed with status " + std::to_string(static_cast<int>(st));
    return nullptr;
  }
  handles.emplace(key, h);
  return h;
}

}  // namespace qjit::runtime
