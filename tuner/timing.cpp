#include "tuner/timing.h"
#include <algorithm>
#include <vector>
#include "runtime/device.h"
#include "runtime/driver.h"

namespace qjit::tuner {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  runtime::current_device();
  QJIT_CU(cuMemAlloc(&ptr_, std::max<size_t>(bytes, 1)));
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) runtime::driver().cuMemFree(ptr_);
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) runtime::driver().cuMemFree(ptr_);
    ptr_ = o.ptr_, bytes_ = o.bytes_;
    o.ptr_ = 0, o.bytes_ = 0;
  }
  return *this;
}
void DeviceBuffer::upload(const void* host, size_t bytes) { QJIT_CU(cuMemcpyHtoD(ptr_, host, bytes)); }
void DeviceBuffer::download(void* host, size_t bytes) const { QJIT_CU(cuMemcpyDtoH(host, ptr_, bytes)); }

namespace {
struct Event {
  CUevent e = nullptr;
  Event() { QJIT_CU(cuEventCreate(&e, CU_EVENT_DEFAULT)); }
  ~Event() { runtime::driver().cuEventDestroy(e); }
};
}  // namespace

Timing time_launches(const std::function<void(int)>& launch, CUstream stream, int warmup, int reps, int per_sample) {
  int i = 0;
  for (; i < warmup; ++i) launch(i);
  QJIT_CU(cuStreamSynchronize(stream));
  Event start, stop;
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    QJIT_CU(cuEventRecord(start.e, stream));
    for (int k = 0; k < per_sample; ++k) launch(i++);
    QJIT_CU(cuEventRecord(stop.e, stream));
    QJIT_CU(cuEventSynchronize(stop.e));
    float ms = 0;
    QJIT_CU(cuEventElapsedTime(&ms, start.e, stop.e));
    us.push_back(ms * 1e3 / per_sample);
  }
  std::sort(us.begin(), us.end());
  Timing t;
  t.samples = static_cast<int>(us.size());
  t.median_us = us[us.size() / 2];
  t.min_us = us.front();
  t.max_us = us.back();
  t.noise = (us[us.size() * 3 / 4] - us[us.size() / 4]) / t.median_us;
  return t;
}

double measure_copy_bandwidth_gbps() {
  const size_t n = size_t{1} << 30;
  DeviceBuffer a(n), b(n);
  QJIT_CU(cuMemsetD8(a.ptr(), 0x5a, n));  // pages touched before timing
  QJIT_CU(cuMemsetD8(b.ptr(), 0, n));
  // cuMemcpyDtoD runs on the legacy default stream (nullptr), which the events bracket.
  Timing t = time_launches([&](int) { QJIT_CU(cuMemcpyDtoD(b.ptr(), a.ptr(), n)); }, nullptr, 2, 9, 1);
  return 2.0 * static_cast<double>(n) / (t.median_us * 1e3);
}

}  // namespace qjit::tuner
