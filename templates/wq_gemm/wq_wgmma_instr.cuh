#pragma once
// The wgmma instruction (wgmma.mma_async m64nNk16, A from registers or from
// shared memory; qjit_wgmma.cuh) in the kernel's type, and its shared-memory
// matrix descriptors, for the wgmma kernel: wq_gemm_wgmma.cu includes this
// once kAcc is defined.

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
// wgmma_k16<N>: one m64nNk16 step in x's and the scales' 16-bit type
// (kHalf), accumulating (scale-d 1): qjit_wgmma.cuh's instruction, A from
// registers or from a descriptor.
template <int N>
__device__ __forceinline__ void wgmma_k16(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long desc_b) {
  qjit::wgmma_k16<!kHalf, N>(d, a, desc_b, 1);
}
template <int N>
__device__ __forceinline__ void wgmma_k16(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b) {
  qjit::wgmma_k16<!kHalf, N>(d, desc_a, desc_b, 1);
}

// Orders the accumulators' other uses (zeroing, the epilogue) around the
// wgmma asm. Only where no wgmma is in flight: ptxas makes a read of an
// accumulator wait for every wgmma writing it, so a fence between two
// iterations would serialise the tensor cores with the dequantisation.
__device__ __forceinline__ void fence_acc(float (&d)[kAcc]) { qjit::fence_accumulators(d); }
