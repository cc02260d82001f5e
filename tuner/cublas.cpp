#include "tuner/cublas.h"
#include <dlfcn.h>
#include <cstdlib>

namespace qjit::tuner {

const Cublas* try_cublas(std::string* why) {
  static std::string error;
  static const Cublas* loaded = []() -> const Cublas* {
    std::string candidates[] = {"libcublas.so.13", "libcublas.so.12", "/usr/local/cuda/lib64/libcublas.so.13",
                                "/usr/local/cuda/lib64/libcublas.so.12", "libcublas.so"};
    void* lib = nullptr;
    if (const char* home = std::getenv("CUDA_HOME")) lib = dlopen((std::string(home) + "/lib64/libcublas.so").c_str(), RTLD_NOW);
    for (const auto& c : candidates)
      if (!lib) lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
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

}  // namespace qjit::tuner
