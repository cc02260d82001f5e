#pragma once
// The s8 wgmma of w8a8_gemm's wgmma family (w8a8_gemm_wgmma.cu):
// wgmma.mma_async.sync.aligned.m64nNk32.s32.s8.s8 with both operands in
// shared memory, K-major (PTX ISA, "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate Instructions: wgmma.mma_async", integer type: no
// transpose or negation operands; N = 64, 128 or 192 here).
//
// d += A · B over 32 k (scale_d 0: d = A · B, the first step of a block),
// A at desc_a (64 rows × 32 bytes), B at desc_b (N rows × 32 bytes), both
// K-major in the 128-byte swizzle (qjit_sm90.cuh's descriptors). Accumulator
// i of a thread (lane (gq, t) of warp w) is row 16w + gq + 8·((i % 4) / 2),
// column 8·(i / 4) + 2t + i % 2, the same fragment as the f32 forms.

#define QJIT_S32_8(i)                                                                                       \
  "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]), "+r"(d[i + 4]), "+r"(d[i + 5]), "+r"(d[i + 6]), \
      "+r"(d[i + 7])
#define QJIT_D_0_31                                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31"
#define QJIT_D_32_63                                                                                            \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define QJIT_D_64_95                                                                                            \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, " \
  "%85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
// The instruction with its predicate scale-d formed from operand `scale`: "{...}, %desc_a, %desc_b, p".
#define QJIT_WGMMA_S8(N, regs, desc_a, desc_b, scale)                                                     \
  "{.reg .pred p;\n setp.ne.b32 p, " scale ", 0;\n wgmma.mma_async.sync.aligned.m64n" N "k32.s32.s8.s8 {" \
  regs "}, " desc_a ", " desc_b ", p;\n}"

template <int N>
__device__ __forceinline__ void wgmma_s8(int (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b,
                                         int scale_d) {
  static_assert(N == 64 || N == 128 || N == 192, "wgmma n of 64, 128 or 192");
  if constexpr (N == 64) {
    asm volatile(QJIT_WGMMA_S8("64", QJIT_D_0_31, "%32", "%33", "%34")
                 : QJIT_S32_8(0), QJIT_S32_8(8), QJIT_S32_8(16), QJIT_S32_8(24)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else if constexpr (N == 128) {
    asm volatile(QJIT_WGMMA_S8("128", QJIT_D_0_31 QJIT_D_32_63, "%64", "%65", "%66")
                 : QJIT_S32_8(0), QJIT_S32_8(8), QJIT_S32_8(16), QJIT_S32_8(24), QJIT_S32_8(32), QJIT_S32_8(40),
                   QJIT_S32_8(48), QJIT_S32_8(56)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    asm volatile(QJIT_WGMMA_S8("192", QJIT_D_0_31 QJIT_D_32_63 QJIT_D_64_95, "%96", "%97", "%98")
                 : QJIT_S32_8(0), QJIT_S32_8(8), QJIT_S32_8(16), QJIT_S32_8(24), QJIT_S32_8(32), QJIT_S32_8(40),
                   QJIT_S32_8(48), QJIT_S32_8(56), QJIT_S32_8(64), QJIT_S32_8(72), QJIT_S32_8(80), QJIT_S32_8(88)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
}
#undef QJIT_WGMMA_S8
#undef QJIT_D_64_95
#undef QJIT_D_32_63
#undef QJIT_D_0_31
#undef QJIT_S32_8

// Orders the int32 accumulators' other uses (the promotion's reads) after
// the wait for the wgmma writing them: the asm of a wgmma returns at once,
// so without this the compiler may read them before wgmma.wait_group.
template <int N>
__device__ __forceinline__ void fence_ints(int (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}
