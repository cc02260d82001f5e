// Device buffers and the benchmark harness: CUDA events, warm-up, many
// repetitions, median. Callers rotate inputs (launch(i) gets the launch index)
// so that weights come from HBM, not L2.
#pragma once
#include <cuda.h>
#include <cstddef>
#include <functional>

namespace qjit::tuner {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
  int samples = 0;
  // Relative spread between the quartiles: the noise a win must exceed.
  double noise = 0;
};

// Times launch(i) for i = 0, 1, 2, ...: `warmup` launches, then `reps`
// samples of `per_sample` back-to-back launches between two events; returns
// per-launch statistics over the samples. Checks the stream for errors.
// Each sample is queued behind a short spin kernel that outlasts the host's
// enqueueing of it, so the events time the GPU running the launches back to
// back, not the host's launch calls (3-4 µs each, as long as the kernels
// being timed at small M).
Timing time_launches(const std::function<void(int)>& launch, CUstream stream, int warmup = 5, int reps = 21,
                     int per_sample = 10);

// Times launch(i) run back to back for about `seconds` (`expected_us`, a
// launch's time from time_launches, sizes the batches: ~10 ms each), the
// host enqueueing ahead of the GPU without gates, so the board reaches the
// steady clock its power limit allows: statistics over the batches of the
// second half. A dense fp16 GEMM looped for seconds on a 700 W H100 ran
// 15-17% slower than timed in bursts, at a median SM clock of ~1330 MHz
// against 1980 at rest (docs/measuring.md).
Timing time_sustained(const std::function<void(int)>& launch, CUstream stream, double seconds, double expected_us);

// Device-to-device copy of 1 GiB, counting bytes read + written (GB/s = 1e9 B/s).
double measure_copy_bandwidth_gbps();

}  // namespace qjit::tuner
