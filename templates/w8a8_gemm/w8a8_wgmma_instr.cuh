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
// K-major in the 128-byte swizzle (qjit_sm90.cuh's descriptors); the
// accumulators' layout is in qjit_wgmma.cuh.

// The instruction is qjit_wgmma.cuh's (wgmma_k32<N>(d, desc_a, desc_b,
// scale_d) for both code types), as is fence_accumulators.
using qjit::fence_accumulators;
using qjit::wgmma_k32;
