#pragma once
// The wgmma instruction (wgmma.mma_async m64nNk16, A from registers or from
// shared memory) and its shared-memory matrix descriptors, for the wgmma
// kernel: wq_gemm_wgmma.cu includes this once kAcc is defined.

// Shared-memory matrix descriptors: qjit_sm90.cuh (128-byte swizzle,
// K-major). A stage's 4·kChunksPerStage wgmma read B (and, with kASmem, A)
// at constant offsets from its slot: the low word is formed once per slot.
// Formed from scratch for every step, the descriptor was a chain of five
// uniform instructions before each wgmma: 80 of the ~600 instructions of the
// 64-row consumers' loop of two stages (Nsight Compute's SASS of the M = 64
// winner, H100).
using qjit::descriptor_at;
using qjit::smem_descriptor_lo;

// d += A · B for one step of 16 k, B at desc_b in shared memory, A either
// the warp's 4 registers (a) or at desc_a in shared memory.
template <int N>
__device__ __forceinline__ void wgmma_k16(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long desc_b);
template <int N>
__device__ __forceinline__ void wgmma_k16(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b);

// Operands: the kAcc accumulators, A (4 registers or a descriptor), B's
// descriptor, and 1 for scale-d (D = A·B + D); B K-major (trans-b = 0), and
// A too when in shared memory (trans-a = 0). T is the input type's PTX name.
#define QJIT_ACC8(i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define QJIT_WGMMA_RS64(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %37, 0;\n wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24)                                                                               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<64>(float (&d)[32], const unsigned (&a)[4], unsigned long long desc_b) {
  if constexpr (kHalf) QJIT_WGMMA_RS64("f16");
  else QJIT_WGMMA_RS64("bf16");
}
#undef QJIT_WGMMA_RS64

#define QJIT_WGMMA_SS64(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %34, 0;\n wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24)                                                                               \
      : "l"(desc_a), "l"(desc_b), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<64>(float (&d)[32], unsigned long long desc_a, unsigned long long desc_b) {
  if constexpr (kHalf) QJIT_WGMMA_SS64("f16");
  else QJIT_WGMMA_SS64("bf16");
}
#undef QJIT_WGMMA_SS64

#define QJIT_WGMMA_RS128(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %69, 0;\n wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24), QJIT_ACC8(32), QJIT_ACC8(40), QJIT_ACC8(48), QJIT_ACC8(56)                                                                               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<128>(float (&d)[64], const unsigned (&a)[4], unsigned long long desc_b) {
  if constexpr (kHalf) QJIT_WGMMA_RS128("f16");
  else QJIT_WGMMA_RS128("bf16");
}
#undef QJIT_WGMMA_RS128

#define QJIT_WGMMA_SS128(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %66, 0;\n wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24), QJIT_ACC8(32), QJIT_ACC8(40), QJIT_ACC8(48), QJIT_ACC8(56)                                                                               \
      : "l"(desc_a), "l"(desc_b), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<128>(float (&d)[64], unsigned long long desc_a, unsigned long long desc_b) {
  if constexpr (kHalf) QJIT_WGMMA_SS128("f16");
  else QJIT_WGMMA_SS128("bf16");
}
#undef QJIT_WGMMA_SS128

#define QJIT_WGMMA_RS256(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %133, 0;\n wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24), QJIT_ACC8(32), QJIT_ACC8(40), QJIT_ACC8(48), QJIT_ACC8(56), QJIT_ACC8(64), QJIT_ACC8(72), QJIT_ACC8(80), QJIT_ACC8(88), QJIT_ACC8(96), QJIT_ACC8(104), QJIT_ACC8(112), QJIT_ACC8(120)                                                                               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<256>(float (&d)[128], const unsigned (&a)[4], unsigned long long desc_b) {
  if constexpr (kHalf) QJIT_WGMMA_RS256("f16");
  else QJIT_WGMMA_RS256("bf16");
}
#undef QJIT_WGMMA_RS256

#define QJIT_WGMMA_SS256(T)                                                                  \
  asm volatile(                                                                              \
      "{.reg .pred p;\n setp.ne.b32 p, %130, 0;\n wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}"                    \
      : QJIT_ACC8(0), QJIT_ACC8(8), QJIT_ACC8(16), QJIT_ACC8(24), QJIT_ACC8(32), QJIT_ACC8(40), QJIT_ACC8(48), QJIT_ACC8(56), QJIT_ACC8(64), QJIT_ACC8(72), QJIT_ACC8(80), QJIT_ACC8(88), QJIT_ACC8(96), QJIT_ACC8(104), QJIT_ACC8(112), QJIT_ACC8(120)                                                                               \
      : "l"(desc_a), "l"(desc_b), "r"(1))
template <>
__device__ __forceinline__ void wgmma_k16<256>(float (&d)[128], unsigned long long desc_a, unsigned long long desc_b) {
  if constexpr (kHalf) QJIT_WGMMA_SS256("f16");
  else QJIT_WGMMA_SS256("bf16");
}
#undef QJIT_WGMMA_SS256
#undef QJIT_ACC8

// Orders the accumulators' other uses (zeroing, the epilogue) around the
// wgmma asm. Only where no wgmma is in flight: ptxas makes a read of an
// accumulator wait for every wgmma writing it, so a fence between two
// iterations would serialise the tensor cores with the dequantisation.
__device__ __forceinline__ void fence_acc(float (&d)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
