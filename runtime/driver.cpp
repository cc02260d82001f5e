#include "runtime/driver.h"
#include <dlfcn.h>
#include <mutex>

namespace qjit::runtime {
namespace {

struct Loaded {
  Driver fns;
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded l;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    l.why = "no CUDA driver on this machine (libcuda.so.1 could not be loaded)";
    return l;
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    l.why = "the CUDA driver is too old (no cuGetProcAddress_v2; qjit needs a CUDA 12+ driver)";
    return l;
  }
  // Ask for each entry point in its CUDA 12.0 ABI: that is the signature the
  // plain names in cuda.h declare (with its _v2 macros). Asking for
  // CUDA_VERSION (13.0) would hand out e.g. cuCtxSynchronize_v13000, which
  // takes a CUcontext argument the declared function does not have.
  constexpr int kAbiVersion = 12000;
#define QJIT_LOAD_FN(name)                                                                          \
  {                                                                                                 \
    void* p = nullptr;                                                                              \
    CUdriverProcAddressQueryResult status;                                                          \
    if (get_proc(#name, &p, kAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || \
        !p) {                                                                                       \
      l.why = std::string("the CUDA driver lacks ") + #name;                                        \
      return l;                                                                                     \
    }                                                                                               \
    l.fns.name = reinterpret_cast<decltype(l.fns.name)>(p);                                         \
  }
  QJIT_DRIVER_FUNCTIONS(QJIT_LOAD_FN)
#undef QJIT_LOAD_FN
  {
    // In the ABI of CUDA 12.4, which brought it; an older driver leaves it null.
    void* p = nullptr;
    CUdriverProcAddressQueryResult status;
    if (get_proc("cuFuncGetParamInfo", &p, 12040, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS && p)
      l.fns.cuFuncGetParamInfo = reinterpret_cast<decltype(l.fns.cuFuncGetParamInfo)>(p);
  }
  CUresult r = l.fns.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    l.fns.cuGetErrorName(r, &name);
    l.why = std::string("cuInit failed: ") + (name ? name : "?") +
            (r == CUDA_ERROR_NO_DEVICE ? " (no CUDA device is visible)" : "");
    return l;
  }
  int count = 0;
  if (l.fns.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    l.why = "the CUDA driver sees no device";
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();  // thread-safe one-time init
  return l;
}

}  // namespace

const Driver* try_driver(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.fns : nullptr;
}

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.ok) throw Error("no_device", l.why);
  return l.fns;
}

std::string describe(CUresult r) {
  const Driver* d = try_driver();
  const char *name = nullptr, *text = nullptr;
  if (d) {
    d->cuGetErrorName(r, &name);
    d->cuGetErrorString(r, &text);
  }
  return std::string(name ? name : "CUresult " + std::to_string(static_cast<int>(r))) + " (" +
         (text ? text : "unknown") + ")";
}

}  // namespace qjit::runtime
