// qjit_l2_probe: how fast the SMs can re-read a buffer that L2 holds, as the
// large-M wq_gemm kernels re-read x (one pass over x per block of n: 86 of
// them at 4096 x 11008 with 128 rows of n per block), to tell whether those
// kernels are bound by L2 rather than by DRAM or their instructions.
//
// Every block copies the whole buffer into a shared-memory ring with
// 16-byte cp.async.cg (as the kernels copy x: LDGSTS.BYPASS), `kStages`
// commit groups in flight of UNROLL pieces per thread. The rate is the bytes
// all blocks copied over the time: blocks × buffer ÷ µs. Blocks either start
// together at the buffer's first byte (as the kernels' blocks walk k in
// step) or each at its own offset (STAGGER). The buffer is filled once and
// stays in L2 (it is read back to back, never rotated).
//
// Usage: qjit_l2_probe [MB ...]   (default: 0.5 2 8, x at M = 64, 256, 1024 for k = 4096)
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "tests/probe/probe_module.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tuner/timing.h"

using namespace qjit;

static const char* kSource = R"(
constexpr int kStages = 4;
extern "C" __global__ void __launch_bounds__(256) l2_reread(const uint4* __restrict__ p, long long n, unsigned* out) {
  extern __shared__ uint4 ring[];  // kStages × UNROLL × 256 pieces
  const long long per_round = 256LL * UNROLL;
  const long long rounds = (n + per_round - 1) / per_round;
  const long long first = STAGGER ? (blockIdx.x * 7919LL) % rounds : 0;  // a round to start from
  for (long long r = 0; r < rounds; ++r) {
    const long long base = ((first + r) % rounds) * per_round;
    uint4* slot = ring + (r % kStages) * per_round;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long i = base + u * 256 + threadIdx.x;
      const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(slot + u * 256 + threadIdx.x));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(p + (i < n ? i : 0)),
                   "r"(i < n ? 16 : 0) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1) : "memory");
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  if (ring[threadIdx.x].x == 0x9e3779b9u) out[0] = 1;  // keeps the copies; never true for 0x5a bytes
}
)";

static probe::Module build(int unroll, int stagger) {
  return probe::load_source("l2_probe.cu", "l2_reread",
                            "#define UNROLL " + std::to_string(unroll) + "\n#define STAGGER " + std::to_string(stagger) +
                                "\n" + kSource);
}

int main(int argc, char** argv) {
  std::vector<double> mbs;
  for (int i = 1; i < argc; ++i) mbs.push_back(std::atof(argv[i]));
  if (mbs.empty()) mbs = {0.5, 2, 8};
  try {
    const auto& dev = runtime::current_device();
    const double copy_gbps = tuner::measure_copy_bandwidth_gbps();
    std::printf("{\"device\": \"%s\", \"copy_gbps\": %.0f, \"l2_mb\": %.1f}\n", dev.identity.name.c_str(), copy_gbps,
                dev.l2_bytes / 1e6);
    const int sms = dev.identity.sm_count;
    tuner::DeviceBuffer out(16);
    CUstream stream = nullptr;
    QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int stagger : {0, 1})
      for (int unroll : {2, 4}) {
        const auto [module, fn] = build(unroll, stagger);
        const unsigned smem = 4u * unroll * 256 * 16;
        QJIT_CU(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)));
        for (double mb : mbs) {
          const size_t bytes = static_cast<size_t>(mb * 1e6) / 16 * 16;
          tuner::DeviceBuffer data(bytes);
          QJIT_CU(cuMemsetD8(data.ptr(), 0x5a, bytes));
          for (int blocks : {1, 2}) {
            codegen::LaunchGeometry g;
            g.grid[0] = static_cast<unsigned>(sms * blocks), g.block[0] = 256;
            g.dynamic_smem = smem;
            const auto t = tuner::time_launches(
                [&](int) {
                  CUdeviceptr p = data.ptr(), o = out.ptr();
                  long long n = static_cast<long long>(bytes / 16);
                  void* args[] = {&p, &n, &o};
                  QJIT_CU(cuLaunchKernel(fn, g.grid[0], 1, 1, g.block[0], 1, 1, g.dynamic_smem, stream, args, nullptr));
                },
                stream, 10, 31, 10);
            const double total = static_cast<double>(bytes) * sms * blocks;
            std::printf("{\"stagger\": %d, \"unroll\": %d, \"mb\": %.2f, \"blocks_per_sm\": %d, \"us\": %.2f, "
                        "\"l2_to_sm_gbps\": %.0f}\n",
                        stagger, unroll, bytes / 1e6, blocks, t.median_us, total / (t.median_us * 1e3));
            std::fflush(stdout);
          }
        }
        runtime::driver().cuModuleUnload(module);
      }
    runtime::driver().cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qjit_l2_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
