#include "tuner/timing.h"
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>
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

// A kernel that spins for `ns` nanoseconds of %globaltimer. Written in PTX
// and JIT-compiled by the driver, so the harness needs no NVRTC; sm_80 PTX
// runs on every GPU qjit supports.
constexpr char kSpinPtx[] = R"(.version 7.0
.target sm_80
.address_size 64
.visible .entry timing_gate_spin(.param .u64 ns)
{
  .reg .u64 %start, %now, %limit;
  .reg .pred %wait;
  ld.param.u64 %limit, [ns];
  mov.u64 %start, %globaltimer;
SPIN:
  mov.u64 %now, %globaltimer;
  sub.u64 %now, %now, %start;
  setp.lt.u64 %wait, %now, %limit;
  @%wait bra SPIN;
  ret;
}
)";

// The spin kernel of the current context: one module per context (a tune
// on several GPUs times on each from its own thread), loaded once, never
// unloaded.
CUfunction spin_kernel() {
  CUcontext ctx = nullptr;
  QJIT_CU(cuCtxGetCurrent(&ctx));
  static std::mutex mu;
  static std::map<CUcontext, CUfunction> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(ctx); it != loaded.end()) return it->second;
  CUmodule m = nullptr;
  QJIT_CU(cuModuleLoadData(&m, kSpinPtx));
  CUfunction fn = nullptr;
  QJIT_CU(cuModuleGetFunction(&fn, m, "timing_gate_spin"));
  return loaded[ctx] = fn;
}

void spin(CUstream stream, double us) {
  unsigned long long ns = static_cast<unsigned long long>(us * 1e3);
  void* args[] = {&ns};
  QJIT_CU(cuLaunchKernel(spin_kernel(), 1, 1, 1, 32, 1, 1, 0, stream, args, nullptr));
}

// Per-launch statistics of samples (µs each).
Timing stats_of(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  Timing t;
  t.samples = static_cast<int>(us.size());
  t.median_us = us[us.size() / 2];
  t.min_us = us.front();
  t.max_us = us.back();
  t.noise = (us[us.size() * 3 / 4] - us[us.size() / 4]) / t.median_us;
  return t;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Timing time_launches(const std::function<void(int)>& launch, CUstream stream, int warmup, int reps, int per_sample) {
  int i = 0;
  // The warm-up also measures how long the host takes to enqueue a launch
  // (the median: a first call may set up a library).
  std::vector<double> enqueue_us;
  for (; i < warmup; ++i) {
    const double t0 = seconds_now();
    launch(i);
    enqueue_us.push_back((seconds_now() - t0) * 1e6);
  }
  QJIT_CU(cuStreamSynchronize(stream));
  std::sort(enqueue_us.begin(), enqueue_us.end());
  const double enqueue = enqueue_us.empty() ? 10.0 : enqueue_us[enqueue_us.size() / 2];
  // Twice the host's time to enqueue a sample, within [20 µs, 2 ms]: the
  // launches are all queued before the GPU reaches the start event.
  const double gate_us = std::clamp(2.0 * enqueue * (per_sample + 2), 20.0, 2000.0);
  Event start, stop;
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    spin(stream, gate_us);
    QJIT_CU(cuEventRecord(start.e, stream));
    for (int k = 0; k < per_sample; ++k) launch(i++);
    QJIT_CU(cuEventRecord(stop.e, stream));
    QJIT_CU(cuEventSynchronize(stop.e));
    float ms = 0;
    QJIT_CU(cuEventElapsedTime(&ms, start.e, stop.e));
    us.push_back(ms * 1e3 / per_sample);
  }
  return stats_of(std::move(us));
}

Timing time_sustained(const std::function<void(int)>& launch, CUstream stream, double seconds, double expected_us) {
  const int per_batch = std::clamp(static_cast<int>(1e4 / std::max(expected_us, 0.1)), 1, 100000);
  const int batches = std::clamp(static_cast<int>(seconds * 1e6 / (expected_us * per_batch)), 2, 100000);
  // All batches are enqueued at once (the host blocks while the launch queue is full, which keeps it fed),
  // each between two events; only then is anything read back.
  std::vector<Event> marks(static_cast<size_t>(batches) + 1);
  int i = 0;
  QJIT_CU(cuEventRecord(marks[0].e, stream));
  for (int b = 0; b < batches; ++b) {
    for (int k = 0; k < per_batch; ++k) launch(i++);
    QJIT_CU(cuEventRecord(marks[static_cast<size_t>(b) + 1].e, stream));
  }
  QJIT_CU(cuEventSynchronize(marks.back().e));
  std::vector<double> us;
  for (int b = batches / 2; b < batches; ++b) {
    float ms = 0;
    QJIT_CU(cuEventElapsedTime(&ms, marks[static_cast<size_t>(b)].e, marks[static_cast<size_t>(b) + 1].e));
    us.push_back(ms * 1e3 / per_batch);
  }
  return stats_of(std::move(us));
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
