// The GPU qjit runs on: the calling thread's current CUDA context and its
// device (the primary context of device QJIT_DEVICE, default 0, when none is
// current), and that device's identity for the cache key. Several devices
// and contexts in one process each get their own record (and their own
// loaded modules: runtime/kernel_cache.h).
#pragma once
#include <cuda.h>
#include <string>
#include <vector>
#include "cache/fingerprint.h"
#include "codegen/op.h"

namespace qjit::runtime {

// How the runtime tells contexts apart: the driver's id of a context
// (cuCtxGetId), unique for the life of the process. A handle is not enough:
// a context created after another was destroyed may get the same address,
// and must not inherit the destroyed one's modules, workspaces or cuBLAS
// handles.
using ContextId = unsigned long long;
ContextId context_id(CUcontext context);

struct Device {
  int ordinal = 0;
  CUdevice handle = 0;
  CUcontext context = nullptr;     // the context the caller had current (often the primary one, shared with the CUDA runtime)
  ContextId context_id = 0;        // context's id: what the record is kept by
  cache::DeviceIdentity identity;  // name, compute capability, SM count, driver version
  std::string arch;                // "sm_90"
  size_t l2_bytes = 0;
  int smem_per_sm = 0;              // shared memory of one SM, bytes
  int smem_per_block_optin = 0;     // the most one block may ask for
  int smem_reserved_per_block = 0;  // what the system keeps of it per block
  size_t memory_bytes = 0;
  std::string key() const;         // "NVIDIA H100 80GB HBM3|9.0|132|13000": per-device rows
};

// The device of the calling thread's current context. With none current it
// retains device QJIT_DEVICE's (default 0) primary context and makes it
// current on this thread, where it stays (the tools' behaviour; the typed
// entry points restore "none" afterwards through CallerContext). Throws
// qjit::Error("driver", ...) without a GPU.
const Device& current_device();

// The calling thread's current context, made current as current_device()
// does when none is (one driver call when one is); nullptr without a driver.
CUcontext current_context();

// What the typed entry points hold for one call: the caller's context is
// used as it is; when none was current, the default device's primary context
// is made current for the call and "none" restored after it, so a call
// leaves the caller's context as it found it.
class CallerContext {
 public:
  CallerContext();
  ~CallerContext();
  CallerContext(const CallerContext&) = delete;
  CallerContext& operator=(const CallerContext&) = delete;
  CUcontext context() const { return context_; }
  ContextId id() const { return id_; }

 private:
  CUcontext context_ = nullptr;
  ContextId id_ = 0;
  bool restore_none_ = false;
};
// A device the driver sees, by ordinal (as QJIT_DEVICE and `qjit tune
// --devices` count them).
struct VisibleDevice {
  int ordinal = 0;
  std::string name;                // "NVIDIA H100 80GB HBM3"
  std::string compute_capability;  // "9.0"
};
// Every device the driver sees. Throws qjit::Error("driver", ...) without a GPU.
std::vector<VisibleDevice> visible_devices();

// Device `ordinal`'s primary context, made current on this thread for the
// object's life (a tuning worker per GPU); the thread's earlier context is
// current again after it.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  CUdevice handle_ = 0;
  CUcontext previous_ = nullptr;
};

// The current device's limits that bound a config (codegen::DeviceLimits).
codegen::DeviceLimits device_limits();
// False (with the reason) when no usable GPU/driver is present.
bool gpu_available(std::string* why = nullptr);

}  // namespace qjit::runtime
