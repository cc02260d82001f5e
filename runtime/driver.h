// The CUDA driver API, loaded with dlopen so that every qjit binary starts
// (and runs its CPU parts) on a machine without a driver. Only
// cuGetProcAddress is looked up by name; it hands out each entry point in the
// ABI version we ask for (12.0, matching cuda.h's declarations and _v2 macros).
#pragma once
#include <cuda.h>
#include <string>
#include "codegen/error.h"

namespace qjit::runtime {

#define QJIT_DRIVER_FUNCTIONS(X)                                                                     \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)            \
  X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) \
  X(cuCtxGetCurrent) X(cuCtxGetId)                                                                  \
  X(cuCtxGetDevice) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags)   \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)                                          \
  X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                  \
  X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)                \
  X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD8Async)              \
  X(cuStreamCreate) X(cuStreamDestroy)                                                              \
  X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                        \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuGetErrorName) X(cuGetErrorString)                 \
  X(cuMemGetInfo) X(cuFuncSetAttribute) X(cuLaunchKernelEx) X(cuModuleGetGlobal) X(cuTensorMapEncodeTiled)

struct Driver {
#define QJIT_DECLARE_FN(name) decltype(&::name) name = nullptr;
  QJIT_DRIVER_FUNCTIONS(QJIT_DECLARE_FN)
#undef QJIT_DECLARE_FN
  // Optional (drivers of CUDA 12.4 and newer; nullptr before): a kernel's
  // parameter sizes as its cubin declares them, which load_plan checks the
  // plan's parameters against.
  decltype(&::cuFuncGetParamInfo) cuFuncGetParamInfo = nullptr;
};

// The loaded driver, or nullptr with the reason in *why (no libcuda, old
// driver, cuInit failed, no device). Loads once per process; thread-safe.
const Driver* try_driver(std::string* why = nullptr);
// Throws qjit::Error("no_device", reason) when there is no usable driver/GPU.
const Driver& driver();

// "CUDA_ERROR_INVALID_VALUE (invalid argument)"
std::string describe(CUresult r);

}  // namespace qjit::runtime

// QJIT_CU(call): call a driver function through the dlopen'ed table and throw
// qjit::Error("driver", ...) with the call text, the error and file:line.
#define QJIT_CU(call)                                                                          \
  do {                                                                                         \
    CUresult r_ = ::qjit::runtime::driver().call;                                              \
    if (r_ != CUDA_SUCCESS)                                                                    \
      throw ::qjit::Error("driver", std::string(#call) + " failed: " +                         \
                                        ::qjit::runtime::describe(r_) + " [" + __FILE__ + ":" + \
                                        std::to_string(__LINE__) + "]");                      \
  } while (0)
