#pragma once
// Outputs split between blocks (split-k): each block stores its piece of an
// output in global memory and counts it on a per-output counter; the pieces
// are summed by one block, in a fixed order, so the result does not depend
// on which block ran first. Counters live in the runtime's workspace (zeroed
// when it is allocated) and are set back to 0 by the block that sums, for
// the next launch, which touches them only after waiting for this grid.
//
// Memory ordering (PTX ISA, memory consistency model): the caller orders
// every thread's stores of its piece before the count (__syncwarp or a block
// barrier) and the release is cumulative, so whoever acquires the count sees
// them all; it passes its acquire on to the threads that read the pieces the
// same way, and they read through L2 (__ldcg), not a stale L1 line.
namespace qjit {

// One more piece stored (the summing block waits for the count).
__device__ __forceinline__ void release_piece(unsigned* flag) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(flag) : "memory");
}

// Waits until `pieces` pieces are stored, then resets the flag.
__device__ __forceinline__ void acquire_pieces(unsigned* flag, unsigned pieces) {
  unsigned stored;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(stored) : "l"(flag) : "memory");
  } while (stored != pieces);
  *flag = 0;
}

// One more of `pieces` pieces stored, without waiting: true for the caller
// that stored the last one (it then sums them all and resets the counter).
// Release for the caller's piece, acquire for the others'.
__device__ __forceinline__ bool last_piece(unsigned* counter, unsigned pieces) {
  unsigned before;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
  const bool last = before + 1 == pieces;
  if (last) *counter = 0;
  return last;
}

}  // namespace qjit
