#include "runtime/device.h"
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include "runtime/driver.h"

namespace qjit::runtime {

std::string Device::key() const {
  return identity.name + "|" + identity.compute_capability + "|" + std::to_string(identity.sm_count) + "|" +
         std::to_string(identity.driver_version);
}

bool gpu_available(std::string* why) { return try_driver(why) != nullptr; }

ContextId context_id(CUcontext context) {
  ContextId id = 0;
  QJIT_CU(cuCtxGetId(context, &id));
  return id;
}

codegen::DeviceLimits device_limits() {
  const Device& d = current_device();
  return {d.identity.sm_count, d.smem_per_sm, d.smem_reserved_per_block, std::stoi(d.arch.substr(3)), d.arch};  // "sm_90" -> 90
}

namespace {

// Device attributes and identity of `handle` (ordinal `ordinal`), used from `context`.
Device describe_device(int ordinal, CUdevice handle, CUcontext context, ContextId id) {
  Device d;
  d.ordinal = ordinal;
  d.handle = handle;
  d.context = context;
  d.context_id = id;
  char name[256] = {};
  QJIT_CU(cuDeviceGetName(name, sizeof(name), d.handle));
  int major = 0, minor = 0, sms = 0, l2 = 0;
  QJIT_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.handle));
  QJIT_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.handle));
  QJIT_CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d.handle));
  QJIT_CU(cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d.handle));
  QJIT_CU(cuDeviceGetAttribute(&d.smem_per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, d.handle));
  QJIT_CU(cuDeviceGetAttribute(&d.smem_per_block_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d.handle));
  QJIT_CU(cuDeviceGetAttribute(&d.smem_reserved_per_block, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, d.handle));
  QJIT_CU(cuDriverGetVersion(&d.identity.driver_version));
  d.identity.name = name;
  d.identity.compute_capability = std::to_string(major) + "." + std::to_string(minor);
  d.identity.sm_count = sms;
  d.arch = "sm_" + std::to_string(major) + std::to_string(minor);
  d.l2_bytes = static_cast<size_t>(l2);
  size_t free_bytes = 0;
  QJIT_CU(cuMemGetInfo(&free_bytes, &d.memory_bytes));
  return d;
}

// The primary context of device QJIT_DEVICE (default 0), retained once.
CUcontext default_context() {
  static const CUcontext context = [] {
    int ordinal = 0;
    if (const char* env = std::getenv("QJIT_DEVICE")) ordinal = std::atoi(env);
    int count = 0;
    QJIT_CU(cuDeviceGetCount(&count));
    if (ordinal < 0 || ordinal >= count)
      throw Error("driver", "QJIT_DEVICE=" + std::to_string(ordinal) + " but " + std::to_string(count) +
                                " device(s) are visible");
    CUdevice handle = 0;
    QJIT_CU(cuDeviceGet(&handle, ordinal));
    CUcontext c = nullptr;
    QJIT_CU(cuDevicePrimaryCtxRetain(&c, handle));
    return c;
  }();
  return context;
}

}  // namespace

CUcontext current_context() {
  if (!try_driver()) return nullptr;  // no GPU: the caller's checks speak first, current_device() throws later
  CUcontext cur = nullptr;
  QJIT_CU(cuCtxGetCurrent(&cur));
  if (cur) return cur;
  const CUcontext c = default_context();
  QJIT_CU(cuCtxSetCurrent(c));
  return c;
}

const Device& current_device() {
  const CUcontext context = current_context();
  const ContextId id = context_id(context);
  // One record per context, never freed (references stay valid); the last
  // one this thread used is remembered without the lock.
  thread_local const Device* last = nullptr;
  if (last && last->context_id == id) return *last;
  static std::mutex mu;
  static std::unordered_map<ContextId, std::unique_ptr<Device>> known;
  std::lock_guard<std::mutex> lock(mu);
  auto& d = known[id];
  if (!d) {
    CUdevice handle = 0;
    QJIT_CU(cuCtxGetDevice(&handle));
    int ordinal = 0, count = 0;
    QJIT_CU(cuDeviceGetCount(&count));
    for (int i = 0; i < count; ++i) {
      CUdevice h = 0;
      QJIT_CU(cuDeviceGet(&h, i));
      if (h == handle) ordinal = i;
    }
    d = std::make_unique<Device>(describe_device(ordinal, handle, context, id));
  }
  last = d.get();
  return *d;
}

std::vector<VisibleDevice> visible_devices() {
  driver();  // throws without a GPU
  int count = 0;
  QJIT_CU(cuDeviceGetCount(&count));
  std::vector<VisibleDevice> out;
  for (int i = 0; i < count; ++i) {
    CUdevice h = 0;
    QJIT_CU(cuDeviceGet(&h, i));
    char name[256] = {};
    QJIT_CU(cuDeviceGetName(name, sizeof(name), h));
    int major = 0, minor = 0;
    QJIT_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, h));
    QJIT_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, h));
    out.push_back({i, name, std::to_string(major) + "." + std::to_string(minor)});
  }
  return out;
}

DeviceScope::DeviceScope(int ordinal) {
  int count = 0;
  QJIT_CU(cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count)
    throw Error("driver", "device " + std::to_string(ordinal) + " but " + std::to_string(count) +
                              " device(s) are visible");
  QJIT_CU(cuDeviceGet(&handle_, ordinal));
  QJIT_CU(cuCtxGetCurrent(&previous_));
  CUcontext c = nullptr;
  QJIT_CU(cuDevicePrimaryCtxRetain(&c, handle_));
  if (const CUresult r = driver().cuCtxSetCurrent(c); r != CUDA_SUCCESS) {
    driver().cuDevicePrimaryCtxRelease(handle_);
    throw Error("driver", "cannot make device " + std::to_string(ordinal) + "'s context current: " + describe(r));
  }
}

DeviceScope::~DeviceScope() {
  driver().cuCtxSetCurrent(previous_);
  driver().cuDevicePrimaryCtxRelease(handle_);
}

CallerContext::CallerContext() {
  if (!try_driver()) return;  // without a GPU the argument checks still run (and then current_device() throws)
  CUcontext cur = nullptr;
  QJIT_CU(cuCtxGetCurrent(&cur));
  if (cur) {
    context_ = cur;
  } else {
    context_ = default_context();
    QJIT_CU(cuCtxSetCurrent(context_));
    restore_none_ = true;
  }
  id_ = context_id(context_);
}

CallerContext::~CallerContext() {
  if (restore_none_) driver().cuCtxSetCurrent(nullptr);
}

}  // namespace qjit::runtime
