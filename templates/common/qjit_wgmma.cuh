#pragma once
// Hopper's warpgroup matrix multiply (PTX ISA, "Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate Instructions: wgmma.mma_async") for every
// kernel that issues it: one m64nNk16 (fp16 or bf16 into fp32) or m64nNk32
// (s8 into s32, e4m3 into fp32) step, A from shared memory (a descriptor) or,
// for the 16-bit types, from registers, B always from shared memory; scale-d
// 0 overwrites d, 1 accumulates. Everything is a parameter: nothing here
// reads a constant of the including kernel. Compiled for sm_90a only.
//
// Accumulator i of a thread (lane (gq, t) of warp w of the warpgroup) is row
// 16w + gq + 8·((i % 4) / 2), column 8·(i / 4) + 2t + i % 2 of D, for every
// form ("Register Fragments and Shared Memory Matrix Layouts" of wgmma: one
// figure for the m64nNk16 and m64nNk32 accumulator D).
namespace qjit {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The accumulators' operand list (eight at a time) and their placeholders.
#define QJIT_WG_D8(C, i) C(d[i]), C(d[i + 1]), C(d[i + 2]), C(d[i + 3]), C(d[i + 4]), C(d[i + 5]), C(d[i + 6]), C(d[i + 7])
#define QJIT_WG_D32(C, i) QJIT_WG_D8(C, i), QJIT_WG_D8(C, i + 8), QJIT_WG_D8(C, i + 16), QJIT_WG_D8(C, i + 24)
#define QJIT_WG_R0                                                                                               \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define QJIT_WG_R32                                                                                                 \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, " \
  "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define QJIT_WG_R64                                                                                                 \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, " \
  "%86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define QJIT_WG_R96                                                                                                    \
  ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, " \
  "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// One instruction: "wgmma... {d}, a, b, p<tail>" with p = (scale != 0).
#define QJIT_WG_ASM(shape, types, d, a, b, scale, tail) \
  "{.reg .pred p;\n setp.ne.b32 p, " scale ", 0;\n wgmma.mma_async.sync.aligned." shape types " {" d "}, " a ", " b ", p" tail ";\n}"

// The four operand counts (N = 64, 128, 192, 256: N / 2 accumulators) of one
// form, as asm statements: OPS are the form's inputs after the accumulators,
// named from placeholder %N/2 on (A..S: their placeholders for each N).
#define QJIT_WG_CASES(C, shape_k, types, A64, B64, S64, A128, B128, S128, A192, B192, S192, A256, B256, S256, tail, ...) \
  if constexpr (N == 64) {                                                                                                \
    asm volatile(QJIT_WG_ASM("m64n64" shape_k, types, QJIT_WG_R0, A64, B64, S64, tail)                                     \
                 : QJIT_WG_D32(C, 0)                                                                                       \
                 : __VA_ARGS__);                                                                                           \
  } else if constexpr (N == 128) {                                                                                        \
    asm volatile(QJIT_WG_ASM("m64n128" shape_k, types, QJIT_WG_R0 QJIT_WG_R32, A128, B128, S128, tail)                     \
                 : QJIT_WG_D32(C, 0), QJIT_WG_D32(C, 32)                                                                   \
                 : __VA_ARGS__);                                                                                           \
  } else if constexpr (N == 192) {                                                                                        \
    asm volatile(QJIT_WG_ASM("m64n192" shape_k, types, QJIT_WG_R0 QJIT_WG_R32 QJIT_WG_R64, A192, B192, S192, tail)         \
                 : QJIT_WG_D32(C, 0), QJIT_WG_D32(C, 32), QJIT_WG_D32(C, 64)                                               \
                 : __VA_ARGS__);                                                                                           \
  } else {                                                                                                                \
    asm volatile(QJIT_WG_ASM("m64n256" shape_k, types, QJIT_WG_R0 QJIT_WG_R32 QJIT_WG_R64 QJIT_WG_R96, A256, B256, S256, \
                             tail)                                                                                         \
                 : QJIT_WG_D32(C, 0), QJIT_WG_D32(C, 32), QJIT_WG_D32(C, 64), QJIT_WG_D32(C, 96)                           \
                 : __VA_ARGS__);                                                                                           \
  }

// Both operands from shared memory: desc_a, desc_b, scale_d.
#define QJIT_WG_SS(C, shape_k, types, tail)                                                                          \
  QJIT_WG_CASES(C, shape_k, types, "%32", "%33", "%34", "%64", "%65", "%66", "%96", "%97", "%98", "%128", "%129", \
                "%130", tail, "l"(desc_a), "l"(desc_b), "r"(scale_d))
// A from registers (a0..a3, 16-bit types): a, desc_b, scale_d.
#define QJIT_WG_RS(C, shape_k, types, tail)                                                                        \
  QJIT_WG_CASES(C, shape_k, types, "{%32, %33, %34, %35}", "%36", "%37", "{%64, %65, %66, %67}", "%68", "%69",      \
                "{%96, %97, %98, %99}", "%100", "%101", "{%128, %129, %130, %131}", "%132", "%133", tail, "r"(a[0]), \
                "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

// d (+)= A · B over 16 k of fp16 (kBf16 false) or bf16 values into fp32,
// both operands K-major in shared memory (imm-scale-a = imm-scale-b = 1, no
// transposes).
template <bool kBf16, int N>
__device__ __forceinline__ void wgmma_k16(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b,
                                          int scale_d) {
  static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma n of 64, 128, 192 or 256");
  if constexpr (kBf16) {
    QJIT_WG_SS("+f", "k16", ".f32.bf16.bf16", ", 1, 1, 0, 0")
  } else {
    QJIT_WG_SS("+f", "k16", ".f32.f16.f16", ", 1, 1, 0, 0")
  }
}
// The same with A from registers (a0..a3: the m64nNk16 A fragment).
template <bool kBf16, int N>
__device__ __forceinline__ void wgmma_k16(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long desc_b,
                                          int scale_d) {
  static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma n of 64, 128, 192 or 256");
  if constexpr (kBf16) {
    QJIT_WG_RS("+f", "k16", ".f32.bf16.bf16", ", 1, 1, 0")
  } else {
    QJIT_WG_RS("+f", "k16", ".f32.f16.f16", ", 1, 1, 0")
  }
}
// d (+)= A · B over 32 k of 8-bit codes, both K-major in shared memory (FP8
// and s8 operands have no transpose): s8 into int32 (integer types have no
// scale operands), e4m3 into fp32 (imm-scale-a = imm-scale-b = 1).
template <int N>
__device__ __forceinline__ void wgmma_k32(int (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b,
                                          int scale_d) {
  static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma n of 64, 128, 192 or 256");
  QJIT_WG_SS("+r", "k32", ".s32.s8.s8", "")
}
template <int N>
__device__ __forceinline__ void wgmma_k32(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b,
                                          int scale_d) {
  static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma n of 64, 128, 192 or 256");
  QJIT_WG_SS("+f", "k32", ".f32.e4m3.e4m3", ", 1, 1")
}

#undef QJIT_WG_RS
#undef QJIT_WG_SS
#undef QJIT_WG_CASES
#undef QJIT_WG_ASM
#undef QJIT_WG_R96
#undef QJIT_WG_R64
#undef QJIT_WG_R32
#undef QJIT_WG_R0
#undef QJIT_WG_D32
#undef QJIT_WG_D8

// Orders other uses of accumulators (zeroing, a promotion, the epilogue)
// after the wait for the wgmma writing them: a wgmma's asm returns at once,
// so without this the compiler may move them across wgmma.wait_group.
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

#endif
}  // namespace qjit
