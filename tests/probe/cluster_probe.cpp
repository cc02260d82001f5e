// qjit_cluster_probe: the latency of one step of a recurrence's exchange on
// a thread-block cluster — what gru_quant's cluster plan pays per step
// besides its own arithmetic, and so the floor its µs per step is reported
// against.
//
// A cluster of CS blocks runs STEPS iterations of what the plan does between
// two steps: `pushers` threads of each block store one byte into every block
// of the cluster (st.shared::cluster, as a new h unit is pushed), then the
// cluster barrier (arrive.release, wait.acquire), and each block reads one
// byte pushed by another (so the exchange is on the path). The time per step
// is the slope between two step counts, which removes the launch and the
// start-up: (t(4·S) − t(S)) / 3S.
//
// Usage: qjit_cluster_probe   (prints one JSON line per cluster size and push count)
#include <cstdio>
#include <string>
#include "tests/probe/probe_module.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "tuner/timing.h"

using namespace qjit;

static const char* kSource = R"(
extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(256, 1)
cluster_steps(int steps, int pushers, unsigned* out) {
  __shared__ unsigned char h[2][4096];
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  for (int i = threadIdx.x; i < 2 * 4096; i += blockDim.x) (&h[0][0])[i] = 0;
  asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
  unsigned acc = 0;
  for (int t = 0; t < steps; ++t) {
    unsigned char* next = h[(t + 1) & 1];
    if (threadIdx.x < pushers) {
      const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(next + rank * 256 + threadIdx.x));
      const unsigned v = (acc + t) & 255u;
      for (unsigned r = 0; r < CS; ++r) {
        unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(r));
        asm volatile("st.shared::cluster.u8 [%0], %1;" ::"r"(remote), "r"(v) : "memory");
      }
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
    acc += next[((rank + 1) % CS) * 256 + (threadIdx.x % 256)];
  }
  if (acc == 0xffffffffu) out[0] = acc;  // keeps the reads
}
)";

int main() {
  try {
    const auto& dev = runtime::current_device();
    std::printf("{\"device\": \"%s\"}\n", dev.identity.name.c_str());
    tuner::DeviceBuffer out(16);
    CUstream stream = nullptr;
    QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int cs : {2, 4, 8, 16}) {
      const auto [module, fn] =
          probe::load_source("cluster_probe.cu", "cluster_steps", "#define CS " + std::to_string(cs) + "\n" + kSource);
      if (cs > 8) QJIT_CU(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
      for (int pushers : {0, 32, 128}) {
        auto time = [&](int steps) {
          return tuner::time_launches(
                     [&](int) {
                       CUdeviceptr o = out.ptr();
                       int s = steps, p = pushers;
                       void* args[] = {&s, &p, &o};
                       QJIT_CU(cuLaunchKernel(fn, static_cast<unsigned>(cs), 1, 1, 256, 1, 1, 0, stream, args, nullptr));
                     },
                     stream, 5, 21, 5)
              .median_us;
        };
        const int s = 250;
        const double t1 = time(s), t4 = time(4 * s);
        std::printf("{\"cluster\": %d, \"pushers\": %d, \"us_per_step\": %.3f, \"launch_and_start_us\": %.2f}\n", cs, pushers,
                    (t4 - t1) / (3.0 * s), t1 - (t4 - t1) / 3.0);
        std::fflush(stdout);
      }
      runtime::driver().cuModuleUnload(module);
    }
    runtime::driver().cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qjit_cluster_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
