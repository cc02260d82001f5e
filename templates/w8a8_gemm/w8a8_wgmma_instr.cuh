#pragma once
// The wgmma of w8a8_gemm's wgmma family (w8a8_gemm_wgmma.cu), k32 with both
// operands in shared memory, K-major (PTX ISA, "Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate Instructions: wgmma.mma_async"; N = 64, 128 or
// 192 here):
//   int8:  wgmma.mma_async.sync.aligned.m64nNk32.s32.s8.s8 into int32
//          (integer types: no scale or transpose operands);
//   e4m3:  wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 into fp32,
//          with imm-scale-a = imm-scale-b = 1 (no negation). FP8 operands
//          have no transpose operand either: both must be K-major, as the
//          s8 ones, and the same descriptors serve both (one byte per value,
//          so a 128-byte swizzled row is 128 values of k and a k32 step 32
//          bytes of it).
//
// d += A · B over 32 k (scale_d 0: d = A · B, the first step of a block),
// A at desc_a (64 rows × 32 bytes), B at desc_b (N rows × 32 bytes), both
// K-major in the 128-byte swizzle (qjit_sm90.cuh's descriptors). Accumulator
// i of a thread (lane (gq, t) of warp w) is row 16w + gq + 8·((i % 4) / 2),
// column 8·(i / 4) + 2t + i % 2, for the s32 and the f32 forms alike
// ("Register Fragments and Shared Memory Matrix Layouts" of wgmma: one figure
// for the m64nNk32 accumulator D).

// Eight accumulators d[i .. i + 7] as in-out operands of constraint C ("+r" int32, "+f" fp32).
#define QJIT_D8(C, i) C(d[i]), C(d[i + 1]), C(d[i + 2]), C(d[i + 3]), C(d[i + 4]), C(d[i + 5]), C(d[i + 6]), C(d[i + 7])
#define QJIT_D_0_31                                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31"
#define QJIT_D_32_63                                                                                            \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define QJIT_D_64_95                                                                                            \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, " \
  "%85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
// The instruction with its predicate scale-d formed from operand `scale`:
// "{...}, %desc_a, %desc_b, p" and `tail` (FP8: its imm-scale-a and imm-scale-b).
#define QJIT_WGMMA(N, types, tail, regs, desc_a, desc_b, scale)                                          \
  "{.reg .pred p;\n setp.ne.b32 p, " scale ", 0;\n wgmma.mma_async.sync.aligned.m64n" N "k32" types " {" \
  regs "}, " desc_a ", " desc_b ", p" tail ";\n}"

// wgmma_k32<N>(d, desc_a, desc_b, scale_d) for accumulators of type T
// (operand constraint C) and the instruction's types and tail: one
// definition for both code types, whose asm differs only in those.
#define QJIT_WGMMA_K32(T, C, types, tail)                                                                         \
  template <int N>                                                                                                \
  __device__ __forceinline__ void wgmma_k32(T(&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b,   \
                                            int scale_d) {                                                        \
    static_assert(N == 64 || N == 128 || N == 192, "wgmma n of 64, 128 or 192");                                  \
    if constexpr (N == 64) {                                                                                      \
      asm volatile(QJIT_WGMMA("64", types, tail, QJIT_D_0_31, "%32", "%33", "%34")                                \
                   : QJIT_D8(C, 0), QJIT_D8(C, 8), QJIT_D8(C, 16), QJIT_D8(C, 24)                                  \
                   : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                     \
    } else if constexpr (N == 128) {                                                                              \
      asm volatile(QJIT_WGMMA("128", types, tail, QJIT_D_0_31 QJIT_D_32_63, "%64", "%65", "%66")                  \
                   : QJIT_D8(C, 0), QJIT_D8(C, 8), QJIT_D8(C, 16), QJIT_D8(C, 24), QJIT_D8(C, 32), QJIT_D8(C, 40), \
                     QJIT_D8(C, 48), QJIT_D8(C, 56)                                                                \
                   : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                     \
    } else {                                                                                                      \
      asm volatile(QJIT_WGMMA("192", types, tail, QJIT_D_0_31 QJIT_D_32_63 QJIT_D_64_95, "%96", "%97", "%98")     \
                   : QJIT_D8(C, 0), QJIT_D8(C, 8), QJIT_D8(C, 16), QJIT_D8(C, 24), QJIT_D8(C, 32), QJIT_D8(C, 40), \
                     QJIT_D8(C, 48), QJIT_D8(C, 56), QJIT_D8(C, 64), QJIT_D8(C, 72), QJIT_D8(C, 80), QJIT_D8(C, 88) \
                   : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                     \
    }                                                                                                             \
  }
QJIT_WGMMA_K32(int, "+r", ".s32.s8.s8", "")            // int8 codes into int32 accumulators
QJIT_WGMMA_K32(float, "+f", ".f32.e4m3.e4m3", ", 1, 1")  // e4m3 codes into fp32 accumulators
#undef QJIT_WGMMA_K32
#undef QJIT_WGMMA
#undef QJIT_D_64_95
#undef QJIT_D_32_63
#undef QJIT_D_0_31
#undef QJIT_D8

// Orders the accumulators' other uses (the promotion's reads) after the
// wait for the wgmma writing them: the asm of a wgmma returns at once, so
// without this the compiler may read them before wgmma.wait_group.
template <int N>
__device__ __forceinline__ void fence_accumulators(int (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
