#include "runtime/device.h"
#include <cstdlib>
#include "runtime/driver.h"

namespace qjit::runtime {

std::string Device::key() const {
  return identity.name + "|" + identity.compute_capability + "|" + std::to_string(identity.sm_count) + "|" +
         std::to_string(identity.driver_version);
}

bool gpu_available(std::string* why) { return try_driver(why) != nullptr; }

codegen::DeviceLimits device_limits() {
  const Device& d = current_device();
  return {d.identity.sm_count, d.smem_per_sm, d.smem_reserved_per_block};
}

static Device open_device() {
  Device d;
  if (const char* env = std::getenv("QJIT_DEVICE")) d.ordinal = std::atoi(env);
  int count = 0;
  QJIT_CU(cuDeviceGetCount(&count));
  if (d.ordinal < 0 || d.ordinal >= count)
    throw Error("driver", "QJIT_DEVICE=" + std::to_string(d.ordinal) + " but " + std::to_string(count) +
                              " device(s) are visible");
  QJIT_CU(cuDeviceGet(&d.handle, d.ordinal));
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
  QJIT_CU(cuDevicePrimaryCtxRetain(&d.context, d.handle));
  QJIT_CU(cuCtxSetCurrent(d.context));
  size_t free_bytes = 0;
  QJIT_CU(cuMemGetInfo(&free_bytes, &d.memory_bytes));
  return d;
}

const Device& current_device() {
  static const Device d = open_device();
  // Cheap when already current (one driver call); needed on every new thread.
  CUcontext cur = nullptr;
  driver().cuCtxGetCurrent(&cur);
  if (cur != d.context) QJIT_CU(cuCtxSetCurrent(d.context));
  return d;
}

}  // namespace qjit::runtime
