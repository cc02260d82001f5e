// qjit_read_probe: what a kernel that only streams weights can reach in
// qjit's launch pattern, as the ceiling to judge the small-M kernels by.
//
// For each size it times a kernel that reads `bytes` with 16-byte loads
// (`unroll` independent loads in flight per thread, a grid-stride loop over
// `blocks` blocks per SM) and writes nothing the loads could be dropped for.
// Launches go back to back in five patterns (WAIT below): with programmatic
// dependent launch, waiting for the previous grid only at the end or after
// the first loads (as wq_gemm and fused_ffn wait for x after their first
// weights); the latter again with blocks that fill their SM (dynamic shared
// memory sized so that exactly `blocks` fit, as a register-bound kernel
// fills it: the next grid's blocks cannot be resident before the previous
// grid's leave); without PDL; and waiting after the first loads, then making
// one read that only the wait allows, as wq_gemm reads x. Inputs rotate over enough copies to defeat L2,
// and the timer is qjit's (tuner/timing.h). Per pattern, the best grid shape
// per size is printed as a JSON line, then a least-squares fit: time = fixed
// µs + bytes / rate.
//
// Usage: qjit_read_probe [MB ...]   (default: 8 16 23.6 33.5 47 90)
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "tests/probe/probe_module.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tuner/timing.h"

using namespace qjit;

// WAIT is where the kernel waits for the previous grid (griddepcontrol.wait):
//   0 at the end: nothing depends on it, so consecutive grids overlap fully;
//   1 after issuing its first UNROLL loads, as wq_gemm waits for x after its
//     first chunks of weights (the pattern of a real chain of kernels);
//   2 at entry, and launched without PDL (the plain stream order);
//   3 as 1, then one load that depends on nothing but the wait (x's role).
static const char* kSource = R"(
extern "C" __global__ void __launch_bounds__(256) read_stream(const uint4* __restrict__ p, long long n, unsigned* out) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (WAIT == 2) asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned acc = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  // The first round: up to UNROLL loads (each guarded, so that every grid
  // shape makes them), then the wait of patterns 1 and 3. With a loop that
  // only waited inside its unrolled body, grids whose first round already
  // covered the buffer never waited before the end.
  {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = i + u * stride < n ? __ldg(p + i + u * stride) : make_uint4(0, 0, 0, 0);
    if (WAIT == 1 || WAIT == 3) {
      asm volatile("griddepcontrol.wait;" ::: "memory");
      // WAIT 3: one load that only the wait allows (as wq_gemm reads x), from
      // the far end of the buffer, which this grid reads last: its latency
      // delays the loads of the next round, as x delays wq_gemm's.
      if (WAIT == 3) acc ^= __ldcg(&p[n - 1 - (threadIdx.x % 256)].x);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    i += UNROLL * stride;
  }
  for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = __ldg(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (WAIT == 0) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (acc == 0x9e3779b9u) out[0] = acc;  // keeps every load; never true for the 0x5a-filled buffers
}
)";

static probe::Module build(int unroll, int wait) {
  return probe::load_source("read_probe.cu", "read_stream",
                            "#define UNROLL " + std::to_string(unroll) + "\n#define WAIT " + std::to_string(wait) + "\n" +
                                kSource);
}

int main(int argc, char** argv) {
  std::vector<double> mbs;
  for (int i = 1; i < argc; ++i) mbs.push_back(std::atof(argv[i]));
  if (mbs.empty()) mbs = {8, 16, 23.6, 33.5, 47, 90};
  try {
    const auto& dev = runtime::current_device();
    const double copy_gbps = tuner::measure_copy_bandwidth_gbps();
    std::printf("{\"device\": \"%s\", \"copy_gbps\": %.0f}\n", dev.identity.name.c_str(), copy_gbps);
    const int sms = dev.identity.sm_count;
    const int unrolls[] = {4, 8, 16};
    const char* names[] = {"pdl, wait at end", "pdl, wait after first loads",
                           "pdl, wait after first loads, blocks fill the SM", "no pdl",
                           "pdl, wait after first loads, then a read that needed the wait"};
    int smem_per_sm = 0;
    QJIT_CU(cuDeviceGetAttribute(&smem_per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev.handle));
    tuner::DeviceBuffer out(16);
    CUstream stream = nullptr;
    QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int pattern = 0; pattern < 5; ++pattern) {
      const int wait = pattern < 2 ? pattern : pattern == 4 ? 3 : pattern - 1;  // the filling pattern is WAIT 1 with more shared memory
      const bool fill = pattern == 2;
      std::vector<probe::Module> probes;
      for (int u : unrolls) {
        probes.push_back(build(u, wait));
        if (fill)
          QJIT_CU(cuFuncSetAttribute(probes.back().function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     smem_per_sm / 2 - 1024));
      }
      std::vector<double> xs, ys;
      for (double mb : mbs) {
        const size_t bytes = static_cast<size_t>(mb * 1e6) / 16 * 16;
        const int copies = static_cast<int>(3 * dev.l2_bytes / bytes) + 2;  // rotating defeats L2
        tuner::DeviceBuffer data(bytes * copies);
        QJIT_CU(cuMemsetD8(data.ptr(), 0x5a, bytes * copies));  // words XOR to 0
        double best = 1e30;
        int best_blocks = 0, best_unroll = 0;
        for (size_t pi = 0; pi < probes.size(); ++pi)
          for (int blocks : {2, 4, 8}) {
            const unsigned grid = static_cast<unsigned>(sms * blocks);
            // Filling: the SM's shared memory over `blocks`, less the 1 KB the driver reserves per block.
            // Launched as the runtime launches qjit's kernels (PDL unless the pattern has none).
            codegen::LaunchGeometry g;
            g.grid[0] = grid, g.block[0] = 256;
            g.dynamic_smem = fill ? static_cast<unsigned>(smem_per_sm / blocks - 1024) : 0;
            const auto t = tuner::time_launches(
                [&](int i) {
                  CUdeviceptr p = data.ptr() + (i % copies) * bytes;
                  long long n = static_cast<long long>(bytes / 16);
                  CUdeviceptr o = out.ptr();
                  void* args[] = {&p, &n, &o};
                  const CUresult r = runtime::launch_function(probes[pi].function, g, wait != 2, args, stream);
                  if (r != CUDA_SUCCESS) throw Error("driver", "probe launch failed: " + runtime::describe(r));
                },
                stream, 10, 31, 10);
            if (t.median_us < best) best = t.median_us, best_blocks = blocks, best_unroll = unrolls[pi];
          }
        const double floor_us = bytes / (copy_gbps * 1e3);
        std::printf("{\"launch\": \"%s\", \"mb\": %.1f, \"us\": %.2f, \"pct_of_floor\": %.1f, \"gbps\": %.0f, "
                    "\"blocks_per_sm\": %d, \"unroll\": %d}\n",
                    names[pattern], bytes / 1e6, best, 100 * floor_us / best, bytes / (best * 1e3), best_blocks,
                    best_unroll);
        std::fflush(stdout);
        xs.push_back(bytes / 1e6), ys.push_back(best);
      }
      if (xs.size() >= 2) {  // least squares: us = fixed + MB · slope
        double mx = 0, my = 0;
        for (size_t i = 0; i < xs.size(); ++i) mx += xs[i] / xs.size(), my += ys[i] / ys.size();
        double sxy = 0, sxx = 0;
        for (size_t i = 0; i < xs.size(); ++i) sxy += (xs[i] - mx) * (ys[i] - my), sxx += (xs[i] - mx) * (xs[i] - mx);
        const double slope = sxy / sxx, fixed = my - slope * mx;
        std::printf("{\"launch\": \"%s\", \"fit_fixed_us\": %.2f, \"fit_marginal_gbps\": %.0f}\n", names[pattern],
                    fixed, 1e3 / slope);
      }
      for (auto& p : probes) runtime::driver().cuModuleUnload(p.module);
    }
    runtime::driver().cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qjit_read_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
