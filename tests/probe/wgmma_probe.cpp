// qjit_wgmma_probe: how close to the tensor cores' nominal rate a block of
// wgmma.m64n256k16 (fp16 in, fp32 out) runs on this GPU, alone and beside
// the work the large-M wq_gemm kernel puts next to it, to tell what holds
// that kernel's stage at ~1090 cycles against 1024 of tensor work (two
// consumer warpgroups × 4 wgmma of 64 × 256 × 16 a stage;
// docs/wq_gemm_wgmma.md).
//
// One block per SM (shared memory sized so), GROUPS warpgroups that each
// issue STAGES stages of 4 wgmma into 128 accumulators, in the kernel's
// pattern: fence, 4 wgmma, commit, wait for the previous stage's group, then
// the "dequantisation" of the next stage. What varies (VARIANT's bits):
//   A_SMEM  A from shared memory (SS) instead of registers (RS);
//   ALU     per stage, one ldmatrix.x4 and 16 registers of the other A
//           buffer rebuilt with a shift, a lop3 and an hfma2 each (the shape
//           of wq_dequant.cuh's 4-bit dequant2, not its values), ALU times;
//   PROD    a producer warpgroup that lands 36 KB in shared memory by bulk
//           copy (cp.async.bulk, an L2-resident source) every PERIOD cycles,
//           the bytes of one 256-row stage of x and weights.
// B (x) is one 32 KB slot of 256 rows × 64 k in the 128-byte swizzle, A
// 64 rows × 64 k per warpgroup; the values are fp16 in [1, 2), so the sums
// stay finite. The cycles a stage are each warpgroup's clock64 span ÷
// STAGES, the median over blocks; the nominal is 512 × GROUPS (a
// 64 × 256 × 16 wgmma is 524288 FLOP; an SM does 4096 dense fp16 FLOP a
// cycle: the H100 SXM's 989.4 TFLOPS ÷ (132 SMs × 1830 MHz), NVIDIA's H100
// datasheet).
//
// Usage: qjit_wgmma_probe   (prints one JSON line per variant)
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>
#include "tests/probe/probe_module.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tuner/timing.h"

using namespace qjit;

static const char* kSource = R"(
#define ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define ACC128 ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56), ACC8(64), ACC8(72), ACC8(80), ACC8(88), ACC8(96), ACC8(104), ACC8(112), ACC8(120)
#define D128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

__device__ __forceinline__ void mma_rs(float (&d)[128], const unsigned (&a)[4], unsigned long long db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " D128 ", {%128, %129, %130, %131}, %132, 1, 1, 1, 0;"
               : ACC128 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void mma_ss(float (&d)[128], unsigned long long da, unsigned long long db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " D128 ", %128, %129, 1, 1, 1, 0, 0;"
               : ACC128 : "l"(da), "l"(db));
}

constexpr bool kASmem = VARIANT & 1, kProd = VARIANT & 2;
constexpr int kB = 32768, kA = 8192, kLand = 36864;

// Start address >> 4, leading offset 1, stride 1024 bytes, 128-byte swizzle (as wq_wgmma_instr.cuh).
__device__ __forceinline__ unsigned long long desc(unsigned addr) {
  return static_cast<unsigned long long>((1024u >> 4) | 1u << 30) << 32 | (((addr & 0x3ffff) >> 4) | 1u << 16);
}

template <int B>
__device__ __forceinline__ void step(int q, unsigned a_addr, unsigned b_addr, unsigned word_addr, float (&acc)[128],
                                     unsigned (&a)[2][4][4], unsigned scale) {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    if constexpr (kASmem) mma_ss(acc, desc(a_addr) + 2 * s, desc(b_addr) + 2 * s);
    else mma_rs(acc, a[B][s], desc(b_addr) + 2 * s);
  }
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
#pragma unroll
  for (int rep = 0; rep < ALU; ++rep) {
    unsigned w[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(word_addr + ((q + rep) % 16) * 512) : "memory");
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        // 0x6400 | nibble is the fp16 1024 + nibble; times the scale, plus the zero (fma).
        unsigned v;
        asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(v) : "r"(w[s] >> (4 * r)), "r"(0x000f000fu), "r"(0x64006400u));
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(a[1 - B][s][r]) : "r"(v), "r"(scale), "r"(0x3c003c00u ^ a[1 - B][s][r]));
      }
  }
}

extern "C" __global__ void __launch_bounds__(128 * (GROUPS + (kProd ? 1 : 0)), 1)
wgmma_rate(const uint4* __restrict__ src, unsigned long long* cycles, float* sink) {
  extern __shared__ __align__(1024) unsigned char raw[];
  __shared__ __align__(8) unsigned long long landed;
  __shared__ volatile int done;
  const unsigned raw_addr = static_cast<unsigned>(__cvta_generic_to_shared(raw));
  const unsigned pad = (1024 - raw_addr % 1024) % 1024;
  unsigned char* base = raw + pad;
  const unsigned b_addr = raw_addr + pad, a0 = b_addr + kB, land = a0 + GROUPS * kA;
  for (int i = threadIdx.x; i < (kB + GROUPS * kA) / 4; i += blockDim.x)
    reinterpret_cast<unsigned*>(base)[i] = 0x3c003c00u | ((i * 2654435761u) & 0x03ff03ffu);
  if (threadIdx.x == 0) {
    done = 0;
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(&landed))));
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  // As the kernel's roles are branched: on a warp-uniform (shuffled) warpgroup index.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  // Two consumer warpgroups beside a producer: the registers moved as wq_wgmma_ws.cuh moves them
  // (168 a thread at entry; without the move ptxas spills and serialises the wgmma, C7512).
  constexpr bool kMove = kProd && GROUPS == 2;
  if (wg < GROUPS) {
    if constexpr (kMove) asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    unsigned a[2][4][4];
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r) a[b][s][r] = 0x3c003c00u | ((threadIdx.x * 7 + 16 * s + r) & 0x03ff);
    const unsigned a_addr = a0 + wg * kA;
    const unsigned word_addr = a_addr + (threadIdx.x % 32) * 16;
    const unsigned scale = 0x1c001c00u;  // fp16 2^-8, so the rebuilt A stays in [1, 2)-ish
    const long long t0 = clock64();
#pragma unroll 1
    for (int q = 0; q < STAGES; q += 2) {
      step<0>(q, a_addr, b_addr, word_addr, acc, a, scale);
      step<1>(q + 1, a_addr, b_addr, word_addr, acc, a, scale);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 128; ++i) s += acc[i];
    const long long t1 = clock64();
    if (threadIdx.x % 128 == 0) cycles[blockIdx.x * GROUPS + wg] = static_cast<unsigned long long>(t1 - t0);
    if (s == 12345.0f) sink[0] = s;  // keeps the wgmma
    asm volatile("bar.sync 1, %0;" ::"n"(128 * GROUPS) : "memory");
    if (threadIdx.x == 0) done = 1;
  } else {
    if constexpr (kMove) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x != 128 * GROUPS) return;
    const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&landed));
    unsigned phase = 0;
    while (!done) {
      const long long t0 = clock64();
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kLand) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(land), "l"(src + (blockIdx.x % 8) * (kLand / 16)), "r"(kLand), "r"(bar) : "memory");
      unsigned ok = 0;
      while (!ok)
        asm volatile("{.reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(ok) : "r"(bar), "r"(phase) : "memory");
      phase ^= 1;
      while (clock64() - t0 < PERIOD) {
      }
    }
  }
}
)";

struct Variant {
  const char* name;
  int a_smem, alu, prod;
};

int main(int argc, char**) {
  if (argc > 1) {
    std::fprintf(stderr, "usage: qjit_wgmma_probe (no arguments)\n");
    return 2;
  }
  try {
    const auto& dev = runtime::current_device();
    if (dev.arch != "sm_90") throw Error("device", "qjit_wgmma_probe needs compute capability 9.0 (wgmma), not " + dev.arch);
    std::printf("{\"device\": \"%s\", \"sms\": %d}\n", dev.identity.name.c_str(), dev.identity.sm_count);
    const int sms = dev.identity.sm_count;
    constexpr int kStages = 2000, kPeriod = 1024;
    tuner::DeviceBuffer src(8 * 36864), cycles(static_cast<size_t>(sms) * 2 * 8), sink(16);
    QJIT_CU(cuMemsetD8(src.ptr(), 0x3c, 8 * 36864));
    CUstream stream = nullptr;
    QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    const std::vector<Variant> variants = {
        {"ss", 1, 0, 0},        {"rs", 0, 0, 0},        {"rs_alu1", 0, 1, 0},      {"rs_alu2", 0, 2, 0},
        {"ss_prod", 1, 0, 1},   {"rs_prod", 0, 0, 1},   {"rs_alu1_prod", 0, 1, 1}, {"rs_alu2_prod", 0, 2, 1},
    };
    for (int groups : {2, 1})
      for (const Variant& v : variants) {
        codegen::GeneratedSource s;
        s.file_name = "wgmma_probe.cu", s.kernel_name = "wgmma_rate", s.needs_sm90a = true;
        s.text = "#define VARIANT " + std::to_string(v.a_smem | v.prod << 1) + "\n#define ALU " + std::to_string(v.alu) +
                 "\n#define GROUPS " + std::to_string(groups) + "\n#define STAGES " + std::to_string(kStages) +
                 "\n#define PERIOD " + std::to_string(kPeriod / 2 * groups) + "\n" + kSource;
        const auto [module, fn] = probe::load_source(s);
        // Enough shared memory that one block fills an SM.
        const int smem = 200 * 1024;
        QJIT_CU(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
        const unsigned threads = 128u * (groups + v.prod);
        CUdeviceptr p = src.ptr(), c = cycles.ptr(), o = sink.ptr();
        void* args[] = {&p, &c, &o};
        const auto t = tuner::time_launches(
            [&](int) { QJIT_CU(cuLaunchKernel(fn, sms, 1, 1, threads, 1, 1, smem, stream, args, nullptr)); }, stream, 3,
            11, 1);
        std::vector<unsigned long long> host(static_cast<size_t>(sms) * groups);
        QJIT_CU(cuMemcpyDtoH(host.data(), c, host.size() * 8));
        std::sort(host.begin(), host.end());
        const double per_stage = static_cast<double>(host[host.size() / 2]) / kStages;
        const double flops = 2.0 * 64 * 256 * 64 * groups * kStages * sms;
        std::printf("{\"groups\": %d, \"variant\": \"%s\", \"cycles_per_stage\": %.1f, \"nominal\": %d, "
                    "\"of_nominal\": %.3f, \"us\": %.1f, \"tflops\": %.0f, \"mhz_implied\": %.0f}\n",
                    groups, v.name, per_stage, 512 * groups, 512.0 * groups / per_stage, t.median_us,
                    flops / (t.median_us * 1e6), host[host.size() / 2] / t.median_us);
        std::fflush(stdout);
        runtime::driver().cuModuleUnload(module);
      }
    runtime::driver().cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qjit_wgmma_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
