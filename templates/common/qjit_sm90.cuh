#pragma once
// Hopper (sm_90) building blocks of the warp-specialised tensor-core kernels
// (wq_gemm's and w8a8_gemm's wgmma families): the ring's mbarriers, bulk and tensor copies into shared memory, and wgmma's
// shared-memory matrix descriptors. Each names the PTX ISA section it
// follows. Compiled only for sm_90 and later: no other target can call them.
namespace qjit {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// --- mbarriers (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier") ---

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Whether the phase of parity `parity` has completed: try_wait suspends
// the thread for a while before it answers no.
__device__ __forceinline__ bool mbarrier_try_wait(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{.reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Blocks until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

// mbarrier_wait that stops the kernel (a trap: a launch error the caller
// sees) if the phase has not completed after 4 s, far beyond any legitimate
// wait: a byte count that never lands or a miscounted arrival then fails
// the launch instead of hanging the GPU.
__device__ __forceinline__ void mbarrier_wait_or_trap(unsigned bar, unsigned parity) {
  if (mbarrier_try_wait(bar, parity)) return;
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (!mbarrier_try_wait(bar, parity)) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > 4000000000ull) __trap();
  }
}

// One arrival (release: this thread's earlier reads of the slot are done).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("{.reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}" ::"r"(bar) : "memory");
}

// The copies of the barrier's current phase will bring `bytes` more through
// the async proxy (expect_tx alone: the arrival comes separately).
__device__ __forceinline__ void mbarrier_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// One arrival that also announces `bytes` to come (mbarrier.arrive.expect_tx:
// both in one operation). Made before the copies are issued, it leaves the
// phase waiting for exactly those bytes, whatever order they land in.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("{.reg .b64 state;\n mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 state, [%0], %1;\n}" ::"r"(bar),
               "r"(bytes)
               : "memory");
}

// The barriers of a ring of kSlots stages (the wgmma families' producer /
// consumer rings): slot i has a full barrier at full + 8i (the stage's
// bytes have landed) and an empty one at empty + 8i (its consumers are done
// with it). Stage q (counted from the kernel's start) uses slot q % kSlots
// in phase (q / kSlots) & 1 of both.
template <int kSlots>
struct StageBarriers {
  unsigned full, empty;
  __device__ __forceinline__ unsigned full_of(unsigned q) const { return full + 8 * (q % kSlots); }
  __device__ __forceinline__ unsigned empty_of(unsigned q) const { return empty + 8 * (q % kSlots); }
  static __device__ __forceinline__ unsigned phase_of(unsigned q) { return (q / kSlots) & 1; }
  // One thread: every slot's barriers with their arrival counts, the
  // initialisation made visible to the copy engine's completions as well
  // (PTX ISA, "fence.mbarrier_init"). The block synchronises before use.
  __device__ __forceinline__ void init(unsigned full_arrivals, unsigned empty_arrivals) const {
    for (int i = 0; i < kSlots; ++i) mbarrier_init(full + 8 * i, full_arrivals), mbarrier_init(empty + 8 * i, empty_arrivals);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
};

// --- bulk and tensor copies (PTX ISA, "Data Movement and Conversion Instructions: cp.async.bulk") ---

// The kernel parameter that holds a tensor map (CUtensorMap: 128 opaque
// bytes, 64-byte aligned), passed by value (__grid_constant__).
struct alignas(64) TensorMapParam {
  unsigned long long words[16];
};

// The box at (column k, row) of a 2-d tensor map into shared dst (1024-byte
// aligned for the 128-byte swizzle), completing its bytes on the barrier.
// Elements outside the tensor arrive as zeros and count as bytes all the same.
__device__ __forceinline__ void tma_load_box(unsigned dst, const TensorMapParam* map, int k, int row, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar)
      : "memory");
}

// One bulk copy of `bytes` (a multiple of 16) from global src to shared dst,
// both 16-byte aligned, completing its bytes on the barrier.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// --- wgmma's shared-memory matrix descriptors (PTX ISA, "Matrix Descriptor Format") ---
//
// For a K-major operand in the 128-byte swizzle: start address >> 4 (bits
// 0-13), leading dimension byte offset (unused by swizzled K-major layouts;
// 1), stride dimension byte offset 1024 >> 4 (bits 32-45: 8 rows of 128
// bytes make one swizzle atom), swizzle mode 1 = 128 bytes (bits 62-63). The
// atoms are 1024-byte aligned, so the matrix base offset (bits 49-51) is 0.
// A row is 128 bytes whatever the element type (64 16-bit or 128 8-bit
// values); a wgmma step reads 32 bytes of each row (k16 of 16-bit, k32 of
// 8-bit) and starts 32·s bytes into the atom: the hardware applies the XOR
// to the address it forms.
//
// A stage's steps read at constant offsets from its slot, so the low word is
// formed once per slot (smem_descriptor_lo) and each step adds its offset >>
// 4 to it (descriptor_at): no carry leaves bits 0-13, since every shared
// address is below 2^18 (228 KB).
constexpr unsigned kDescriptorHigh = (1024u >> 4) | 1u << 30;  // bits 32-63: stride 1024 bytes, 128-byte swizzle
__device__ __forceinline__ unsigned smem_descriptor_lo(const unsigned char* base) {
  return ((static_cast<unsigned>(__cvta_generic_to_shared(base)) & 0x3ffff) >> 4) | 1u << 16;
}
template <int kOffset>
__device__ __forceinline__ unsigned long long descriptor_at(unsigned lo) {
  static_assert(kOffset % 16 == 0, "a step starts on a 16-byte boundary");
  return static_cast<unsigned long long>(kDescriptorHigh) << 32 | (lo + kOffset / 16);
}

#endif  // __CUDA_ARCH__ >= 900
}  // namespace qjit
