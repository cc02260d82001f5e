// The GPU qjit runs on: the primary context of one device (QJIT_DEVICE, default
// 0) and its identity for the cache key.
#pragma once
#include <cuda.h>
#include <string>
#include "cache/fingerprint.h"
#include "codegen/op.h"

namespace qjit::runtime {

struct Device {
  int ordinal = 0;
  CUdevice handle = 0;
  CUcontext context = nullptr;     // primary context, shared with the CUDA runtime / cuBLAS
  cache::DeviceIdentity identity;  // name, compute capability, SM count, driver version
  std::string arch;                // "sm_90"
  size_t l2_bytes = 0;
  int smem_per_sm = 0;              // shared memory of one SM, bytes
  int smem_per_block_optin = 0;     // the most one block may ask for
  int smem_reserved_per_block = 0;  // what the system keeps of it per block
  size_t memory_bytes = 0;
  std::string key() const;         // "NVIDIA H100 80GB HBM3|9.0|132|13000": per-device rows
};

// The process-wide device; retains its primary context on first use and makes
// it current on the calling thread. Throws qjit::Error("driver", ...) without a GPU.
const Device& current_device();
// The current device's limits that bound a config (codegen::DeviceLimits).
codegen::DeviceLimits device_limits();
// False (with the reason) when no usable GPU/driver is present.
bool gpu_available(std::string* why = nullptr);

}  // namespace qjit::runtime
