// gru_quant, cluster plan: the whole sequence in one launch, R resident in
// shared memory, one cluster barrier per step (Hopper thread-block clusters,
// sm_90). Same arithmetic as the step plan (gru_gates.cuh), bit for bit.
//
// Work split: a cluster of kCS blocks runs kNc sequences of the batch
// (blockIdx.x / kCS picks which); block `rank` of it owns the hidden units
// j ∈ [rank·kHs, rank·kHs + kHs) and the three gate rows u, r, n of each —
// kRows = 3·kHs rows of R (and of W when the input projection is fused),
// copied into shared memory once. Per step every block needs all of
// h_{t−1}: each block pushes its new units into every other block's copy of
// h with st.async, which completes bytes on the receiving block's mbarrier
// for that buffer (PTX ISA: st.async, mbarrier complete_tx); a block waits
// only for its own mbarrier to see every peer's bytes — no cluster barrier
// per step. h is double buffered — step t reads buffer t % 2 and writes
// buffer (t + 1) % 2 — and the data order makes that safe: block A pushes
// into B's buffer t % 2 again in step t + 1 only after receiving B's step-t
// units, which B sends after its step-t GEMM has read that buffer.
//
// The recurrent GEMM runs on int8 tensor cores (mma.sync m16n8k32, s32
// accumulation) from operands kept in fragment order: R as the A operand
// (16 bytes per lane per k-step, one conflict-free 128-bit load), h as B
// (8 bytes per lane). h and x codes wider than 8 bits are split into byte
// planes, v = 256·hi + lo with lo unsigned and hi of v's signedness; each
// plane is its own exact int32 product, combined in int64. The zero point
// comes off afterwards: Σ R·(h − zp) = Σ R·h − zp·Σ R, with the row sums
// taken while R is copied in. Every int32 sum is exact: |R| ≤ 128, a byte
// ≤ 255 and at most 16384 terms.
//
// Input projection: fused (kFused) — W's rows in shared memory too, and
// W·x_{t+1} computed between this step's barrier arrive and wait, off the
// recurrence's critical path — or precomputed for all T by
// qjit_gru_input_mma into the workspace (ih, int32 [T·N][3H]) and
// prefetched one step ahead.

#include "qjit/gru_quant/gru_gates.cuh"
#include "qjit/gru_quant/gru_marks.cuh"

using namespace qjit_spec;
using namespace qjit_gru;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "gru_quant's cluster plan needs thread-block clusters (compute capability 9.0)"
#endif

constexpr int kThreads = kWarps * 32;
constexpr int kRows = 3 * kHs;  // the block's gate rows: u, r, n of its kHs units
constexpr int kMT = kRows / 16; // m tiles of 16 rows
constexpr int kNcP = kNT * 8;   // sequences padded to n tiles of 8
static_assert(kHs % 16 == 0, "units per block a multiple of 16 (whole m tiles)");

// --- fragment-order buffers -----------------------------------------------
// A operand (m16n8k32, PTX ISA "matrix fragments for mma.m16n8k32"): lane
// l = 4g + q holds rows g and g + 8, k 4q..4q+3 and 16+4q..16+4q+3, as
// registers a0 = (g, 4q), a1 = (g + 8, 4q), a2 = (g, 16 + 4q), a3 = (g + 8,
// 16 + 4q). Stored [m tile][k step][lane] × 16 bytes.
// B operand: lane 4g + q holds column (sequence) g, k 4q..4q+3 (b0) and
// 16+4q..16+4q+3 (b1). Stored [plane][k step][n tile][half][lane] × 4 bytes
// (half 0: the b0 words, 1: the b1 words), so the 16 codes k = 16m..16m+15
// of one sequence are 16 consecutive bytes: a block pushes its units to the
// other blocks 16 at a time. The byte of (sequence n, k) is at
// b_offset(n, k) within its plane.
__device__ __forceinline__ int b_offset(int n, int k, int n_tiles) {
  const int ks = k >> 5, kk = k & 31;
  const int lane = (n & 7) * 4 + ((kk & 15) >> 2);
  return (((ks * n_tiles + (n >> 3)) * 2 + (kk >> 4)) * 32 + lane) * 4 + (kk & 3);
}

// Byte plane p of a code: one plane holds the code itself (its low byte,
// read as s8 or u8 by the mma); two hold lo = v & 255 (u8) and hi = v >> 8
// (of v's signedness).
__device__ __forceinline__ unsigned plane_byte(int v, int p) { return static_cast<unsigned>(v >> (8 * p)) & 255u; }
// Whether plane p of kPlanes is read as s8 (else u8).
template <int kPlanes, bool kSigned>
constexpr bool signed_plane(int p) { return p == kPlanes - 1 ? kSigned : false; }

template <bool kBSigned>
__device__ __forceinline__ void mma_s8(int (&d)[4], const uint4& a, const uint2& b) {
  if constexpr (kBSigned)
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y));
  else
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y));
}

// Sum of the four signed bytes of w (the row sums of the zero-point term).
__device__ __forceinline__ int byte_sum(unsigned w) { return __dp4a(static_cast<int>(w), 0x01010101, 0); }

// Four bytes of row `row` of a [rows][K] int8 matrix at k..k+3, zeros past
// row_count or K. One 32-bit load when K is a multiple of 4 (rows then start
// 4-byte aligned: the plan asks the pointer for 4).
template <int K>
__device__ __forceinline__ unsigned load_row_bytes(const signed char* m, long long row, bool row_ok, int k) {
  if (!row_ok || k >= K) return 0;
  const signed char* p = m + row * K + k;
  if constexpr (K % 4 == 0) return *reinterpret_cast<const unsigned*>(p);
  unsigned w = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (k + i < K) w |= (static_cast<unsigned>(p[i]) & 255u) << (8 * i);
  return w;
}

// --- cluster primitives (PTX ISA: mapa, st.async, mbarrier, barrier.cluster)
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned map_to_rank(unsigned local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
// 16 bytes into the same offset of block `rank`'s shared memory, completing
// 16 bytes of the transaction on that block's mbarrier at `bar` (a local address).
__device__ __forceinline__ void push_16(unsigned local, unsigned bar, unsigned rank, const uint4& v) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   map_to_rank(local, rank)),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(map_to_rank(bar, rank))
               : "memory");
}
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// The local arrival of a phase that also waits for `bytes` from st.async.
__device__ __forceinline__ void mbarrier_arrive_expect(unsigned bar, unsigned bytes) {
  asm volatile("{.reg .b64 state;\n mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{.reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// Shared memory (dynamic), in this order; kSmemBytes (from the plan) is the
// total. Last, the two mbarriers that count each h buffer's incoming bytes.
constexpr int kHPlaneBytes = kKH * kNT * 256, kXPlaneBytes = kKX * kNT * 256;
constexpr int kRFrag = kRows * kKH * 32;
constexpr int kWFrag = kFused ? kRows * kKX * 32 : 0;
constexpr int kHBuf = kHPlanes * kHPlaneBytes;  // one of the two h buffers
constexpr int kXBuf = kFused ? kXPlanes * kXPlaneBytes : 0;
constexpr int kAccH = kKSplit * kHPlanes * kRows * kNcP;  // int32 partial sums
constexpr int kAccX = kFused ? kKSplit * kXPlanes * kRows * kNcP : 0;
constexpr int kOffW = kRFrag, kOffH = kOffW + kWFrag, kOffX = kOffH + 2 * kHBuf, kOffAccH = kOffX + kXBuf,
              kOffAccX = kOffAccH + 4 * kAccH, kOffRowH = kOffAccX + 4 * kAccX, kOffRowX = kOffRowH + 12 * kRows,
              kOffBar = kOffRowX + (kFused ? 12 * kRows : 0), kOffLut = kOffBar + 16, kSmemTotal = kOffLut + 4 * kLutWords;
constexpr bool kLutTables = kLutWords > 0;
static_assert(!kLutTables || kLutWords == lut_entries<ULut>() + lut_entries<RLut>() + lut_entries<NLut>(),
              "the plan's LUT tables differ from the LUTs' input ranges");
static_assert(kSmemTotal == kSmemBytes, "the plan's shared memory differs from the template's layout");

// Global row of local gate row `row` (gate = row / kHs), or −1 for a padding unit.
__device__ __forceinline__ long long global_row(int row, unsigned rank) {
  const int j = static_cast<int>(rank) * kHs + row % kHs;
  return j < kH ? static_cast<long long>(row / kHs) * kH + j : -1;
}

// Copies the block's rows of a [3H][K] weight into fragment order and adds
// each row's byte sum into row_sum (zeroed before).
template <int K, int kKSteps>
__device__ void load_fragments(const signed char* m, unsigned rank, uint4* frag, int* row_sum) {
#pragma unroll 4
  for (int chunk = threadIdx.x; chunk < kMT * kKSteps * 32; chunk += kThreads) {
    const int lane = chunk & 31, ks = (chunk >> 5) % kKSteps, mt = (chunk >> 5) / kKSteps;
    const int r0 = mt * 16 + (lane >> 2), r1 = r0 + 8, k = ks * 32 + (lane & 3) * 4;
    const long long g0 = global_row(r0, rank), g1 = global_row(r1, rank);
    uint4 a;
    a.x = load_row_bytes<K>(m, g0, g0 >= 0, k);
    a.y = load_row_bytes<K>(m, g1, g1 >= 0, k);
    a.z = load_row_bytes<K>(m, g0, g0 >= 0, k + 16);
    a.w = load_row_bytes<K>(m, g1, g1 >= 0, k + 16);
    frag[chunk] = a;
    atomicAdd(&row_sum[r0], byte_sum(a.x) + byte_sum(a.z));
    atomicAdd(&row_sum[r1], byte_sum(a.y) + byte_sum(a.w));
  }
}

// Per gate row: the bias in the GEMM's scale minus zp·(row sum), and the
// shift to the linear output. bias [3H] and the shift tables by global row.
template <class RowShifts>
__device__ void row_constants(const int* bias, const int* row_sum, long long zp, unsigned rank, long long* row_bias,
                              int* row_shift) {
  for (int row = threadIdx.x; row < kRows; row += kThreads) {
    const long long g = global_row(row, rank);
    row_bias[row] = g < 0 ? 0 : rshift_round(bias[g], RowShifts::bias_shift(g)) - zp * row_sum[row];
    row_shift[row] = g < 0 ? 1 : RowShifts::out_shift(g);  // (a padding row's: any shift the fast path takes)
  }
}
struct HhShifts {
  __device__ static int bias_shift(long long g) { return static_cast<int>(Rows::kHhBias[g]); }
  __device__ static int out_shift(long long g) { return static_cast<int>(Rows::kHhOut[g]); }
};
struct IhShifts {
  __device__ static int bias_shift(long long g) { return static_cast<int>(Rows::kIhBias[g]); }
  __device__ static int out_shift(long long g) { return static_cast<int>(Rows::kIhOut[g]); }
};

// acc[kq][plane][row][n] = the block's GEMM of the A fragments with buffer
// b, k split in kKSplit ranges of kPer steps; tasks (m tile, n tile, k
// range) over warps. A task loads the operands of up to 8 k steps before
// their first mma, so the shared-memory latency is paid once per 8 steps,
// not per step.
template <int kKSteps, int kPlanes, bool kSigned>
__device__ __forceinline__ void block_gemm(const uint4* frag, const unsigned char* b, int plane_bytes, int* acc) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int kTasks = kMT * kNT * kKSplit, kPer = (kKSteps + kKSplit - 1) / kKSplit;
  for (int task = warp; task < kTasks; task += kWarps) {
    const int mt = task % kMT, nt = (task / kMT) % kNT, kq = task / (kMT * kNT);
    int d[kPlanes][4] = {};
    // In batches of up to 8 k steps (the operands of a batch in registers).
    constexpr int kBatch = kPer < 8 ? kPer : 8;
#pragma unroll 1
    for (int i0 = 0; i0 < kPer; i0 += kBatch) {
      uint4 a[kBatch];
      uint2 bv[kBatch][kPlanes];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int ks = kq * kPer + i0 + i;
        if (ks < kKSteps && i0 + i < kPer) {
          a[i] = frag[(mt * kKSteps + ks) * 32 + lane];
#pragma unroll
          for (int p = 0; p < kPlanes; ++p) {
            const unsigned* w = reinterpret_cast<const unsigned*>(b + p * plane_bytes) + (ks * kNT + nt) * 64 + lane;
            bv[i][p] = make_uint2(w[0], w[32]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
        if (kq * kPer + i0 + i < kKSteps && i0 + i < kPer) {
#pragma unroll
          for (int p = 0; p < kPlanes; ++p) {
            if (signed_plane<kPlanes, kSigned>(p)) mma_s8<true>(d[p], a[i], bv[i][p]);
            else mma_s8<false>(d[p], a[i], bv[i][p]);
          }
        }
    }
    const int row = mt * 16 + (lane >> 2), n = nt * 8 + (lane & 3) * 2;
#pragma unroll
    for (int p = 0; p < kPlanes; ++p) {
      int* out = acc + (kq * kPlanes + p) * kRows * kNcP;
      *reinterpret_cast<int2*>(out + row * kNcP + n) = make_int2(d[p][0], d[p][1]);
      *reinterpret_cast<int2*>(out + (row + 8) * kNcP + n) = make_int2(d[p][2], d[p][3]);
    }
  }
}

// Σ over k ranges and planes (plane p weighs 256^p) of row `row`, sequence n,
// in S (64-bit only where the generator's bound needs it).
template <int kPlanes, class S>
__device__ __forceinline__ S gemm_sum(const int* acc, int row, int n) {
  S s = 0;
#pragma unroll
  for (int kq = 0; kq < kKSplit; ++kq)
#pragma unroll
    for (int p = 0; p < kPlanes; ++p) s += static_cast<S>(acc[((kq * kPlanes + p) * kRows + row) * kNcP + n]) << (8 * p);
  return s;
}

// The fused projection's x: each thread's share of x_t for the cluster's
// sequences (kXSlots codes, element i = threadIdx.x + s·kThreads of the
// [kNc][kC] slice) is loaded a step ahead into registers and written into the
// x buffer as byte planes when its step comes: the global load's latency is
// off the critical path.
constexpr int kXSlots = kFused ? (kNc * kC + kThreads - 1) / kThreads : 1;
__device__ __forceinline__ void fetch_x(const int* x, int t, int n0, int (&xr)[kXSlots]) {
#pragma unroll
  for (int s = 0; s < kXSlots; ++s) {
    const int i = threadIdx.x + s * kThreads, n = i / kC, k = i % kC;
    xr[s] = i < kNc * kC && n0 + n < kN ? x[(static_cast<long long>(t) * kN + n0 + n) * kC + k] : static_cast<int>(kXZp);
  }
}
__device__ __forceinline__ void store_x(const int (&xr)[kXSlots], unsigned char* xbuf) {
#pragma unroll
  for (int s = 0; s < kXSlots; ++s) {
    const int i = threadIdx.x + s * kThreads, n = i / kC, k = i % kC;
    if (i < kNc * kC)
#pragma unroll
      for (int p = 0; p < kXPlanes; ++p) xbuf[p * kXPlaneBytes + b_offset(n, k, kNT)] = plane_byte(xr[s], p);
  }
}

constexpr int kPairs = kNc * kHs;  // (sequence, unit) pairs of the gate stage
constexpr int kPairSlots = (kPairs + kThreads - 1) / kThreads;

// y (and y_float) of step t from the thread's pairs.
__device__ __forceinline__ void store_states(int t, int n0, unsigned rank, const int (&h)[kPairSlots], int* y,
                                             float* y_float) {
#pragma unroll
  for (int i = 0; i < kPairSlots; ++i) {
    const int p = threadIdx.x + i * kThreads, jl = p % kHs, n = p / kHs, j = static_cast<int>(rank) * kHs + jl;
    if (p < kPairs && j < kH && n0 + n < kN) {
      const long long at = (static_cast<long long>(t) * kN + n0 + n) * kH + j;
      y[at] = h[i];
      if (y_float) y_float[at] = dequantize_h(h[i]);
    }
  }
}

extern "C" __global__ void __cluster_dims__(kCS, 1, 1) __launch_bounds__(kThreads, 1)
qjit_gru_cluster(const int* __restrict__ x, const int* __restrict__ h0, const signed char* __restrict__ W,
                 const signed char* __restrict__ R, const int* __restrict__ bw, const int* __restrict__ br,
                 const int* __restrict__ ih, int* __restrict__ y, float* __restrict__ y_float) {
  extern __shared__ __align__(16) unsigned char smem[];
  QJIT_GRU_CLOCK_STORAGE
  uint4* r_frag = reinterpret_cast<uint4*>(smem);
  uint4* w_frag = reinterpret_cast<uint4*>(smem + kOffW);
  unsigned char* hbuf = smem + kOffH;
  unsigned char* xbuf = smem + kOffX;
  int* acc_h = reinterpret_cast<int*>(smem + kOffAccH);
  int* acc_x = reinterpret_cast<int*>(smem + kOffAccX);
  long long* hh_bias = reinterpret_cast<long long*>(smem + kOffRowH);
  int* hh_shift = reinterpret_cast<int*>(smem + kOffRowH + 8 * kRows);
  long long* ih_bias = reinterpret_cast<long long*>(smem + kOffRowX);
  int* ih_shift = reinterpret_cast<int*>(smem + kOffRowX + 8 * kRows);
  const unsigned rank = cluster_rank();
  const int n0 = static_cast<int>(blockIdx.x / kCS) * kNc;

  // Zero h's buffers (padding sequences and k read as zero codes times a
  // zero weight column) and use the accumulators as the row-sum scratch.
  for (int i = threadIdx.x; i < (kSmemTotal - kOffH) / 4; i += kThreads) reinterpret_cast<int*>(smem + kOffH)[i] = 0;
  __syncthreads();
  int* lut_tables = reinterpret_cast<int*>(smem + kOffLut);
  if constexpr (kLutTables) {
    fill_lut_table<ULut>(lut_tables, threadIdx.x, kThreads);
    fill_lut_table<RLut>(lut_tables + lut_entries<ULut>(), threadIdx.x, kThreads);
    fill_lut_table<NLut>(lut_tables + lut_entries<ULut>() + lut_entries<RLut>(), threadIdx.x, kThreads);
  }
  int* r_sum = acc_h;
  int* w_sum = acc_h + kRows;
  load_fragments<kH, kKH>(R, rank, r_frag, r_sum);
  if constexpr (kFused) load_fragments<kC, kKX>(W, rank, w_frag, w_sum);
  // h0 of the cluster's sequences, every unit (each block keeps a full copy).
  for (int i = threadIdx.x; i < kNc * kH; i += kThreads) {
    const int n = i / kH, k = i % kH;
    const int v = n0 + n < kN ? h0[static_cast<long long>(n0 + n) * kH + k] : static_cast<int>(kHidZp);
#pragma unroll
    for (int p = 0; p < kHPlanes; ++p) hbuf[p * kHPlaneBytes + b_offset(n, k, kNT)] = plane_byte(v, p);
  }
  int x_next[kXSlots];
  if constexpr (kFused) {
    fetch_x(x, 0, n0, x_next);
    store_x(x_next, xbuf);
    if (kT > 1) fetch_x(x, 1, n0, x_next);
  }
  __syncthreads();
  row_constants<HhShifts>(br, r_sum, kHidZp, rank, hh_bias, hh_shift);
  if constexpr (kFused) row_constants<IhShifts>(bw, w_sum, kXZp, rank, ih_bias, ih_shift);

  // Each thread's pairs: unit jl = p % kHs (consecutive threads, consecutive
  // units: coalesced stores of y), sequence p / kHs. Their previous codes and,
  // when precomputed, the next step's ih stay in registers.
  int h_prev[kPairSlots];
  int ih_next[kPairSlots][3];
#pragma unroll
  for (int i = 0; i < kPairSlots; ++i) {
    const int p = threadIdx.x + i * kThreads, jl = p % kHs, n = p / kHs, j = static_cast<int>(rank) * kHs + jl;
    const bool ok = p < kPairs && j < kH && n0 + n < kN;
    h_prev[i] = ok ? h0[static_cast<long long>(n0 + n) * kH + j] : static_cast<int>(kHidZp);
#pragma unroll
    for (int g = 0; g < 3; ++g)
      ih_next[i][g] = !kFused && ok ? ih[(static_cast<long long>(n0 + n)) * 3 * kH + g * kH + j] : static_cast<int>(kIhZp);
  }
  __syncthreads();  // row sums read; the accumulators are free again
  if constexpr (kFused) block_gemm<kKX, kXPlanes, kXSigned>(w_frag, xbuf, kXPlaneBytes, acc_x);
  const unsigned bar0 = smem_addr(smem + kOffBar);  // h buffer b's mbarrier: bar0 + 8b
  if (threadIdx.x == 0) {
    mbarrier_init(bar0, 1);
    mbarrier_init(bar0 + 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // Every block of the cluster has started, zeroed its h buffers and set up
  // its mbarriers before any block pushes into them (distributed shared
  // memory of a block that has not started is not accessible).
  cluster_arrive();
  cluster_wait();
  // Bytes each block receives per step: its peers' units, 16 codes a chunk.
  constexpr int kChunks = kHPlanes * kNc * (kHs / 16);
  constexpr unsigned kIncoming = 16u * kChunks * (kCS - 1);
  unsigned parity = 0;  // bit b: the phase of buffer b's mbarrier to wait for

  using SumH = IntOf<kWideSumH>::T;
  using SumX = IntOf<kWideSumX>::T;
  for (int t = 0; t < kT; ++t) {
    const unsigned char* h_now = hbuf + (t & 1) * kHBuf;
    unsigned char* h_next = hbuf + ((t + 1) & 1) * kHBuf;
    QJIT_GRU_CLOCK(t, 0);
    block_gemm<kKH, kHPlanes, kHSigned>(r_frag, h_now, kHPlaneBytes, acc_h);
    QJIT_GRU_CLOCK(t, 1);
    __syncthreads();
    QJIT_GRU_CLOCK(t, 2);
#pragma unroll
    for (int i = 0; i < kPairSlots; ++i) {
      const int p = threadIdx.x + i * kThreads;
      if (p >= kPairs) continue;
      const int jl = p % kHs, n = p / kHs, j = static_cast<int>(rank) * kHs + jl;
      int hh[3], ihc[3];
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        const int row = g * kHs + jl;
        hh[g] = linear_out<kHhZp, kHhLo, kHhHi, SumH, kHhOutPositive>(gemm_sum<kHPlanes, SumH>(acc_h, row, n),
                                                       static_cast<SumH>(hh_bias[row]), hh_shift[row]);
        if constexpr (kFused)
          ihc[g] = linear_out<kIhZp, kIhLo, kIhHi, SumX, kIhOutPositive>(gemm_sum<kXPlanes, SumX>(acc_x, row, n),
                                                          static_cast<SumX>(ih_bias[row]), ih_shift[row]);
        else
          ihc[g] = ih_next[i][g] - kIhZp;
      }
      const int h_new = gru_cell<kLutTables>(ihc[0], ihc[1], ihc[2], hh[0], hh[1], hh[2], h_prev[i], lut_tables);
      h_prev[i] = h_new;
      if (j < kH && t + 1 < kT)
#pragma unroll
        for (int pl = 0; pl < kHPlanes; ++pl) h_next[pl * kHPlaneBytes + b_offset(n, j, kNT)] = plane_byte(h_new, pl);
    }
    QJIT_GRU_CLOCK(t, 3);
    if (t + 1 == kT) {
      store_states(t, n0, rank, h_prev, y, y_float);
      break;
    }
    // Push this block's new units (16 codes of one sequence per 16-byte
    // store) into the other blocks' copies of h, then publish them.
    const unsigned bar_next = bar0 + 8 * ((t + 1) & 1);
    if (threadIdx.x == 0) mbarrier_arrive_expect(bar_next, kIncoming);
    __syncthreads();
    QJIT_GRU_CLOCK(t, 4);
    for (int c = threadIdx.x; c < kChunks * (kCS - 1); c += kThreads) {
      const int chunk = c % kChunks, peer = c / kChunks;
      const int pl = chunk / (kNc * (kHs / 16)), n = chunk / (kHs / 16) % kNc, m = chunk % (kHs / 16);
      const unsigned char* src = h_next + pl * kHPlaneBytes + b_offset(n, static_cast<int>(rank) * kHs + 16 * m, kNT);
      const unsigned to = (rank + 1 + static_cast<unsigned>(peer)) % kCS;
      push_16(smem_addr(src), bar_next, to, *reinterpret_cast<const uint4*>(src));
    }
    QJIT_GRU_CLOCK(t, 5);
    store_states(t, n0, rank, h_prev, y, y_float);
    if constexpr (!kFused) {
#pragma unroll
      for (int i = 0; i < kPairSlots; ++i) {
        const int p = threadIdx.x + i * kThreads, jl = p % kHs, n = p / kHs, j = static_cast<int>(rank) * kHs + jl;
        if (p < kPairs && j < kH && n0 + n < kN)
#pragma unroll
          for (int g = 0; g < 3; ++g) ih_next[i][g] = ih[((t + 1LL) * kN + n0 + n) * 3 * kH + g * kH + j];
      }
    }
    QJIT_GRU_CLOCK(t, 6);
    // Off the critical path: the next step's input projection.
    if constexpr (kFused) {
      store_x(x_next, xbuf);
      if (t + 2 < kT) fetch_x(x, t + 2, n0, x_next);
      __syncthreads();
      block_gemm<kKX, kXPlanes, kXSigned>(w_frag, xbuf, kXPlaneBytes, acc_x);
    }
    QJIT_GRU_CLOCK(t, 7);
    // The peers' units of step t: buffer (t + 1) % 2 complete.
    mbarrier_wait(bar_next, (parity >> ((t + 1) & 1)) & 1);
    parity ^= 1u << ((t + 1) & 1);
  }
  QJIT_GRU_CLOCK_FLUSH();
}

// The precomputed input projection: ih[row][c] for every row = t·N + n. A
// block of 4 warps computes 64 channels (16 per warp) × 64 rows: the rows'
// x codes are staged through shared memory as byte planes in B-fragment
// order, 128 k at a time, shared by the warps; each warp reads its W rows
// straight into A fragments (W is small and stays in L2).
constexpr int kInRowTiles = 8;  // n tiles of 8 rows per block
constexpr int kInWarps = 4;
constexpr int kInKChunk = 128;  // k staged per round: 4 k steps
constexpr int kInRows = 8 * kInRowTiles;
// x staged by cp.async (32 KB of shared memory): before it, the loads held in
// registers took 128 of them, 4 blocks an SM, and N = 16, H = 512 needed two
// waves of blocks (46.9 µs on an H100, L1 67% busy with 4-byte loads).
constexpr bool kInRawStage = kC % 4 == 0;
// Five blocks an SM (40 KB of shared memory each with one plane; four with
// two): N = 16, H = 512 is 600 blocks, one wave on 132 SMs. Unbounded,
// ptxas gave the kernel 232 registers, two blocks an SM and three waves.
constexpr int kInBlocksPerSm = kXPlanes == 1 ? 5 : 4;

extern "C" __global__ void __launch_bounds__(kInWarps * 32, kInBlocksPerSm)
qjit_gru_input_mma(const int* __restrict__ x, const signed char* __restrict__ W, const int* __restrict__ bw,
                   int* __restrict__ ih) {
  // [plane][k step of the chunk][n tile][half][lane] words, as b_offset lays out a B buffer.
  __shared__ __align__(16) unsigned xs[kXPlanes * (kInKChunk / 32) * kInRowTiles * 64];
  // A chunk's int32 codes as they arrive, [row][k] (kInRawStage).
  __shared__ __align__(16) int xraw[kInRawStage ? kInRows * kInKChunk : 4];
  constexpr int kPlaneWords = (kInKChunk / 32) * kInRowTiles * 64;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int c0 = (blockIdx.y * kInWarps + warp) * 16;
  const long long row0 = static_cast<long long>(blockIdx.x) * kInRows;
  constexpr long long kRowsTotal = static_cast<long long>(kT) * kN;
  int d[kInRowTiles][kXPlanes][4] = {};
  int sum0 = 0, sum1 = 0;  // byte sums of rows c0 + g and c0 + g + 8 over this lane's k
  constexpr int kStageIters = kInRows * (kInKChunk / 4) / (kInWarps * 32);
  unsigned* const planes = xs;
  const auto store_planes = [planes](int r, int kk, const int (&v)[4]) {
#pragma unroll
    for (int p = 0; p < kXPlanes; ++p)
      planes[p * kPlaneWords + b_offset(r, kk, kInRowTiles) / 4] =
          plane_byte(v[0], p) | plane_byte(v[1], p) << 8 | plane_byte(v[2], p) << 16 | plane_byte(v[3], p) << 24;
  };
  for (int k0 = 0; k0 < kKX * 32; k0 += kInKChunk) {
    __syncthreads();  // the previous chunk's reads are done
    if constexpr (kInRawStage) {
      // Rows of x start 16-byte aligned (C a multiple of 4): the chunk's codes
      // come by cp.async (zero-filled past the ends), no registers held over
      // the round trip, then four codes a word into the planes.
#pragma unroll
      for (int it = 0; it < kStageIters; ++it) {
        const int i = threadIdx.x + it * kInWarps * 32;
        const int r = i / (kInKChunk / 4), kk = (i % (kInKChunk / 4)) * 4;
        const long long row = row0 + r;
        const bool in = row < kRowsTotal && k0 + kk < kC;
        qjit::cp_async16(xraw + r * kInKChunk + kk, in ? x + row * kC + k0 + kk : x, in ? 16 : 0);
      }
      asm volatile("cp.async.wait_all;" ::: "memory");
      __syncthreads();
#pragma unroll 4
      for (int it = 0; it < kStageIters; ++it) {
        const int i = threadIdx.x + it * kInWarps * 32;
        const int r = i / (kInKChunk / 4), kk = (i % (kInKChunk / 4)) * 4;
        const int4 w = *reinterpret_cast<const int4*>(xraw + r * kInKChunk + kk);
        const int v[4] = {w.x, w.y, w.z, w.w};
        store_planes(r, kk, v);
      }
    } else {
      // Unrolled: every load of the chunk in flight before the first store
      // (a rolled loop waited a global round trip per iteration).
#pragma unroll
      for (int it = 0; it < kStageIters; ++it) {
        const int i = threadIdx.x + it * kInWarps * 32;
        const int r = i / (kInKChunk / 4), kk = (i % (kInKChunk / 4)) * 4;
        const long long row = row0 + r;
        int v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = row < kRowsTotal && k0 + kk + e < kC ? x[row * kC + k0 + kk + e] : 0;
        store_planes(r, kk, v);
      }
    }
    __syncthreads();
    if (c0 >= 3 * kH) continue;  // (whole warps: no mma behind a divergent branch)
#pragma unroll
    for (int s = 0; s < kInKChunk / 32; ++s) {
      const int k = k0 + s * 32 + q * 4;
      if (k0 + s * 32 >= kKX * 32) break;
      uint4 a;
      a.x = load_row_bytes<kC>(W, c0 + g, c0 + g < 3 * kH, k);
      a.y = load_row_bytes<kC>(W, c0 + g + 8, c0 + g + 8 < 3 * kH, k);
      a.z = load_row_bytes<kC>(W, c0 + g, c0 + g < 3 * kH, k + 16);
      a.w = load_row_bytes<kC>(W, c0 + g + 8, c0 + g + 8 < 3 * kH, k + 16);
      sum0 += byte_sum(a.x) + byte_sum(a.z);
      sum1 += byte_sum(a.y) + byte_sum(a.w);
#pragma unroll
      for (int nt = 0; nt < kInRowTiles; ++nt)
#pragma unroll
        for (int p = 0; p < kXPlanes; ++p) {
          const unsigned* w = xs + p * kPlaneWords + (s * kInRowTiles + nt) * 64 + lane;
          const uint2 b = make_uint2(w[0], w[32]);
          if (signed_plane<kXPlanes, kXSigned>(p)) mma_s8<true>(d[nt][p], a, b);
          else mma_s8<false>(d[nt][p], a, b);
        }
    }
  }
  if (c0 >= 3 * kH) return;
  // Row sums over all k: the four lanes of a group hold a quarter each.
  sum0 += __shfl_xor_sync(0xffffffffu, sum0, 1);
  sum0 += __shfl_xor_sync(0xffffffffu, sum0, 2);
  sum1 += __shfl_xor_sync(0xffffffffu, sum1, 1);
  sum1 += __shfl_xor_sync(0xffffffffu, sum1, 2);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int c = c0 + g + 8 * half;
    if (c >= 3 * kH) continue;
    const long long bias =
        rshift_round(bw[c], static_cast<int>(Rows::kIhBias[c])) - static_cast<long long>(kXZp) * (half ? sum1 : sum0);
    const int shift = static_cast<int>(Rows::kIhOut[c]);
#pragma unroll
    for (int nt = 0; nt < kInRowTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const long long row = row0 + nt * 8 + q * 2 + e;
        if (row >= kRowsTotal) continue;
        long long s = 0;
#pragma unroll
        for (int p = 0; p < kXPlanes; ++p) s += static_cast<long long>(d[nt][p][2 * half + e]) << (8 * p);
        ih[row * 3 * kH + c] = linear_out<kIhZp, kIhLo, kIhHi, long long, kIhOutPositive>(s, bias, shift) + kIhZp;
      }
  }
}
