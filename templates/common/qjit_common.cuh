// qjit device helpers shared by every template. Self-contained: no CUDA
// toolkit header is needed at run time (NVRTC has none built in), so 16-bit
// floats are plain storage types converted with single PTX instructions.
#pragma once

namespace qjit {

// Storage-only 16-bit float types: the kernels do their arithmetic in fp32.
struct half_t { unsigned short bits; };
struct bf16_t { unsigned short bits; };

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(half_t v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}
// bf16 is the top half of an fp32: widening is a shift.
__device__ __forceinline__ float to_f32(bf16_t v) { return __uint_as_float(static_cast<unsigned>(v.bits) << 16); }

// Narrowing rounds to nearest, ties to even (cvt.rn), like the CPU reference.
template <typename T> __device__ __forceinline__ T from_f32(float f);
template <> __device__ __forceinline__ float from_f32<float>(float f) { return f; }
template <> __device__ __forceinline__ half_t from_f32<half_t>(float f) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float f) {
  bf16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

// The raw word type of an N-byte vector access (one load instruction).
template <int kBytes> struct RawVec;
template <> struct RawVec<2> { using type = unsigned short; };
template <> struct RawVec<4> { using type = unsigned int; };
template <> struct RawVec<8> { using type = uint2; };
template <> struct RawVec<16> { using type = uint4; };

// Reads N consecutive elements of T starting at p (aligned to the access size,
// at most 16 bytes per instruction) and widens them to fp32.
// kStream: weights are read exactly once, so keep them out of L1 (no_allocate)
// and leave L1 to the small, reused activations.
template <typename T, int N, bool kStream>
__device__ __forceinline__ void load_f32(const T* p, float (&out)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  constexpr int kChunk = kBytes < 16 ? kBytes : 16;
  constexpr int kPerChunk = kChunk / static_cast<int>(sizeof(T));
  static_assert(kBytes % kChunk == 0, "vector size must be a multiple of the access size");
#pragma unroll
  for (int c = 0; c < kBytes / kChunk; ++c) {
    typename RawVec<kChunk>::type raw;
    const auto* src = reinterpret_cast<const typename RawVec<kChunk>::type*>(p) + c;
    if constexpr (kStream && kChunk == 16) {
      asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(raw.x), "=r"(raw.y), "=r"(raw.z), "=r"(raw.w)
                   : "l"(src));
    } else {
      raw = __ldg(src);
    }
    const T* elems = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kPerChunk; ++i) out[c * kPerChunk + i] = to_f32(elems[i]);
  }
}

// 16 raw bytes at p (16-byte aligned). kStream: read once, bypass L1.
template <bool kStream>
__device__ __forceinline__ uint4 load_raw16(const void* p) {
  uint4 v;
  if constexpr (kStream) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  } else {
    v = __ldg(reinterpret_cast<const uint4*>(p));
  }
  return v;
}

// D += A·B on the tensor cores, one m16n8k16 tile, fp32 accumulators.
// a: 4 registers of two 16-bit values (rows g and g+8, see the PTX ISA's
// "mma.m16n8k16" fragment layout), b: 2 registers, c: 4 fp32 accumulators.
template <typename T> struct IsBf16 { static constexpr bool value = false; };
template <> struct IsBf16<bf16_t> { static constexpr bool value = true; };

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                          unsigned b0, unsigned b1) {
  static_assert(sizeof(T) == 2, "16-bit inputs only");
  if constexpr (IsBf16<T>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// The shared-memory (.shared window) address of p, as PTX's shared-state
// instructions take it.
__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8 × 8 matrices of 16-bit values from shared memory into the mma
// fragment layout (PTX ISA, "ldmatrix"): lane l gives the address of row
// l % 8 of matrix l / 8, and register i receives matrix i.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

// 16 bytes global → shared by cp.async (sm_80+); src_bytes 0 writes zeros and
// reads nothing. Completes at cp.async.wait_group / wait_all.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(src_bytes)
               : "memory");
}

// Butterfly sum over the 32 lanes of a warp: every lane ends with the total.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// SiLU(z) = z / (1 + e^-z) in fp32 with the accurate expf (no fast-math), the
// form of the seed's fused kernel.
__device__ __forceinline__ float silu(float z) { return z / (1.0f + expf(-z)); }

// --- programmatic dependent launch (sm_90+; LaunchGeometry::programmatic) ---
//
// The runtime launches a kernel whose op sets LaunchGeometry::programmatic
// with programmatic stream serialization: it may start while the previous
// kernel of the stream is still running, once every block of that kernel has
// called allow_next_grid(). Before wait_for_previous_grid() such a kernel
// reads only weights (never written by a kernel: packed weights, scales,
// zeros) and writes nothing; its activations, which the previous kernel may
// have just produced, and every store come after it. Both are no-ops when
// the launch was an ordinary one.
__device__ __forceinline__ void wait_for_previous_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets the next kernel start its own prologue now: it waits for this grid's
// completion before it reads or writes anything this grid touches.
__device__ __forceinline__ void allow_next_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}


// A loop whose index is a constant expression in its body: static_for<N>(f)
// calls f(Int<0>{}), ..., f(Int<N - 1>{}); the body reads decltype(i)::value.
// For offsets that must be immediates of an asm operand ("n").
template <int V> struct Int {
  static constexpr int value = V;
};
template <int I, int N, typename F> __device__ __forceinline__ void static_for_from(F&& f) {
  if constexpr (I < N) {
    f(Int<I>{});
    static_for_from<I + 1, N>(f);
  }
}
template <int N, typename F> __device__ __forceinline__ void static_for(F&& f) { static_for_from<0, N>(f); }

}  // namespace qjit
