#pragma once
// One m16n8k32 step on the tensor cores for w8a8_gemm's mma.sync kernels
// (tiled, stream): int8 codes into int32 sums, e4m3 into fp32. Fragments
// (PTX ISA, "Matrix Fragments for mma.m16n8k32", one figure for .s8 and
// .e4m3): A 16 × 32, lane (g, t) = (lane / 4, lane % 4) holds a0 = row g,
// k 4t..4t+3; a1 = row g + 8, the same k; a2, a3 = the same rows, k + 16. B
// 32 × 8: b0 = k 4t..4t+3 of column g, b1 = k + 16. D 16 × 8: d0, d1 = row
// g, columns 2t, 2t + 1; d2, d3 = row g + 8.

// d += a·b over k32, by the accumulators' type: int8 codes into int32, e4m3 into fp32.
__device__ __forceinline__ void mma_k32(int (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_k32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
