// qconv2d as an implicit GEMM on the tensor cores (mma.sync m16n8k16, fp16
// operands, fp32 accumulators):
//   C[m][n] = Σ_k A[m][k] · B[k][n],  m = output point b·kOh·kOw + oy·kOw + ox,
//   n = output channel, k = (fy·kKw + fx)·kCi + ci (the packed weights' order),
//   A[m][k] = x[b][ci][oy·sh − ph + fy·dh][ox·sw − pw + fx·dw] (0 outside),
//   B[k][n] = w[n][fy][fx][ci] = q·s + o.
// A is never materialised: each stage gathers its kBM × kBK piece of x into
// shared memory (im2col on the fly). kBK divides kCi, so a stage lies inside
// one filter tap: its kBK channels of one input point are contiguous in nhwc
// (16-byte loads) and kH·kW apart in nchw (one 2-byte load each, threads
// along the output points so that a warp reads along a row of x).
// B's piece is read as packed bytes (8 bytes: 16 int4 or 8 int8 weights of
// one output channel) and dequantised in registers: w = q·s + o by one fp32
// fma, rounded once to fp16 (the tolerance of tuner/reference/qconv2d.h
// counts that rounding), stored to shared memory as [n][k] rows, which is
// exactly the mma's column-major B operand.
//
// Block: kWarpsM × kWarpsN warps over a kBM × kBN tile of C; each warp owns
// kWTM × kWTN = kMI × kNI mma tiles. Two stages: while the warps multiply one,
// each thread holds the next stage's loads in registers and stores (and
// dequantises) them after, then one barrier.
// Shared rows are padded by 8 halves (16 bytes): a warp's 32-bit fragment
// reads (8 rows × 4 words) then fall in 32 different banks for kBK = 16, 32, 64.
#include "qjit/qconv2d/qconv2d_common.cuh"

static_assert(sizeof(TX) == 2, "the tensor-core kernel reads fp16 x");
static_assert(kCi % kBK == 0 && kBK % 16 == 0, "a stage is whole mma steps inside one filter tap");

constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kM = kBatch * kOutPoints;
constexpr int kWTM = kBM / kWarpsM, kWTN = kBN / kWarpsN;
constexpr int kMI = kWTM / 16, kNI = kWTN / 8;
constexpr int kLd = kBK + 8;  // halves per shared row
constexpr int kStages = kK / kBK;
// x: nhwc 16-byte vectors (8 channels), nchw single halves; per thread.
constexpr int kAItems = (kNhwc ? kBM * kBK / 8 : kBM * kBK) / kThreads;
static_assert(kAItems * kThreads == (kNhwc ? kBM * kBK / 8 : kBM * kBK), "the threads split the x tile evenly");
// Weights: 8-byte units of kUnitW weights of one output channel.
constexpr int kUnitW = 64 / kBits;
constexpr int kUnitsPerRow = kBK / kUnitW;
constexpr int kBUnits = kBN * kUnitsPerRow;
constexpr int kBItems = (kBUnits + kThreads - 1) / kThreads;

using qjit::half_t;

struct AReg {
  uint4 v[kNhwc ? kAItems : 1];
  unsigned short h[kNhwc ? 1 : kAItems];
};

// Input row and column of output point m at filter tap (fy, fx); iy = -1 for
// a point past the last (m ≥ kM), which then reads zeros like padding.
__device__ __forceinline__ void input_of(int m, int fy, int fx, int& b, int& iy, int& ix) {
  if (m >= kM) {
    b = 0, iy = -1, ix = -1;
    return;
  }
  b = m / kOutPoints;
  const int r = m % kOutPoints;
  iy = r / kOw * kStrideH - kPadH + fy * kDilH;
  ix = r % kOw * kStrideW - kPadW + fx * kDilW;
}

__device__ __forceinline__ bool inside(int iy, int ix) { return iy >= 0 && iy < kH && ix >= 0 && ix < kW; }

__device__ __forceinline__ void load_a(const half_t* __restrict__ x, int m0, int stage, AReg& r) {
  const int k0 = stage * kBK, tap = k0 / kCi, c0 = k0 % kCi, fy = tap / kKw, fx = tap % kKw;
#pragma unroll
  for (int i = 0; i < kAItems; ++i) {
    const int e = threadIdx.x + i * kThreads;
    int b, iy, ix;
    if constexpr (kNhwc) {
      input_of(m0 + e / (kBK / 8), fy, fx, b, iy, ix);
      const int c = c0 + e % (kBK / 8) * 8;
      r.v[i] = inside(iy, ix) ? __ldg(reinterpret_cast<const uint4*>(x + ((b * kH + iy) * kW + ix) * kCi + c))
                              : make_uint4(0, 0, 0, 0);
    } else {
      input_of(m0 + e % kBM, fy, fx, b, iy, ix);
      const int c = c0 + e / kBM;
      r.h[i] = inside(iy, ix) ? __ldg(reinterpret_cast<const unsigned short*>(x) + ((b * kCi + c) * kH + iy) * kW + ix)
                              : static_cast<unsigned short>(0);
    }
  }
}

__device__ __forceinline__ void store_a(unsigned short* as, const AReg& r) {
#pragma unroll
  for (int i = 0; i < kAItems; ++i) {
    const int e = threadIdx.x + i * kThreads;
    if constexpr (kNhwc) *reinterpret_cast<uint4*>(as + e / (kBK / 8) * kLd + e % (kBK / 8) * 8) = r.v[i];
    else as[e % kBM * kLd + e / kBM] = r.h[i];
  }
}

__device__ __forceinline__ void load_b(const unsigned char* __restrict__ qweight, int n0, int stage, uint2 (&r)[kBItems]) {
#pragma unroll
  for (int i = 0; i < kBItems; ++i) {
    const int u = threadIdx.x + i * kThreads, co = n0 + u / kUnitsPerRow;
    const bool ok = (kBUnits % kThreads == 0 || u < kBUnits) && co < kCo;
    const long long at = static_cast<long long>(co) * kRowBytes + stage * (kBK * kBits / 8) + u % kUnitsPerRow * 8;
    r[i] = ok ? __ldg(reinterpret_cast<const uint2*>(qweight + at)) : make_uint2(0, 0);
  }
}

// Code j of an 8-byte unit: int8 byte j (signed); int4 byte j/2, high nibble
// for even j (the unit starts at an even channel).
__device__ __forceinline__ int unit_code(uint2 u, int j) {
  const unsigned word = j < kUnitW / 2 ? u.x : u.y;
  const int jj = j % (kUnitW / 2);
  if constexpr (kBits == 8) return static_cast<int>(static_cast<signed char>((word >> (8 * jj)) & 0xffu));
  else return int4_code((word >> (8 * (jj / 2))) & 0xffu, jj);
}

// Dequantises the thread's units into stage `bs` ([kBN][kLd] halves).
__device__ __forceinline__ void store_b(unsigned short* bs, const float* __restrict__ scales,
                                        const float* __restrict__ offsets, int n0, int stage,
                                        const uint2 (&r)[kBItems]) {
  const int c0 = stage * kBK % kCi;
#pragma unroll
  for (int i = 0; i < kBItems; ++i) {
    const int u = threadIdx.x + i * kThreads;
    if (kBUnits % kThreads != 0 && u >= kBUnits) break;
    const int n = u / kUnitsPerRow, part = u % kUnitsPerRow, co = n0 + n;
    const int c = c0 + part * kUnitW;  // input channel of code 0
    unsigned h[kUnitW / 2];
    if (co >= kCo) {
#pragma unroll
      for (int j = 0; j < kUnitW / 2; ++j) h[j] = 0;  // a column past co: its sums are never stored
    } else {
      const float* sp = scales + co * kGroups;
      const float* op = offsets + co * kGroups;
      // kBlock a multiple of the unit's channels: one (scale, offset) for the unit.
      constexpr bool kOneGroup = kBlock % kUnitW == 0;
      const float s1 = __ldg(sp + c / kBlock), o1 = __ldg(op + c / kBlock);
#pragma unroll
      for (int j = 0; j < kUnitW; j += 2) {
        const int g0 = (c + j) / kBlock, g1 = (c + j + 1) / kBlock;
        const float s0 = kOneGroup ? s1 : __ldg(sp + g0), o0 = kOneGroup ? o1 : __ldg(op + g0);
        const float sb = kOneGroup ? s1 : __ldg(sp + g1), ob = kOneGroup ? o1 : __ldg(op + g1);
        h[j / 2] = pack_half2(dequant(unit_code(r[i], j), s0, o0), dequant(unit_code(r[i], j + 1), sb, ob));
      }
    }
    uint4* dst = reinterpret_cast<uint4*>(bs + n * kLd + part * kUnitW);
#pragma unroll
    for (int v = 0; v < kUnitW / 8; ++v) dst[v] = make_uint4(h[4 * v], h[4 * v + 1], h[4 * v + 2], h[4 * v + 3]);
  }
}

__device__ __forceinline__ unsigned word_at(const unsigned short* p) { return *reinterpret_cast<const unsigned*>(p); }

// acc += the warp's part of stage (as, bs).
__device__ __forceinline__ void multiply(const unsigned short* as, const unsigned short* bs, int wm, int wn,
                                         float (&acc)[kMI][kNI][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int ks = 0; ks < kBK / 16; ++ks) {
    const int col = ks * 16 + 2 * t;
    unsigned a[kMI][4], b[kNI][2];
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      // mma A fragment: rows g and g + 8, k pairs 2t and 2t + 8 (PTX ISA, m16n8k16 .f16).
      const unsigned short* p = as + (wm * kWTM + mi * 16 + g) * kLd + col;
      a[mi][0] = word_at(p), a[mi][1] = word_at(p + 8 * kLd), a[mi][2] = word_at(p + 8), a[mi][3] = word_at(p + 8 * kLd + 8);
    }
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni) {
      // B fragment: column g, k pairs 2t and 2t + 8; a shared row is one column of B.
      const unsigned short* p = bs + (wn * kWTN + ni * 8 + g) * kLd + col;
      b[ni][0] = word_at(p), b[ni][1] = word_at(p + 8);
    }
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
        qjit::mma_16816<half_t>(acc[mi][ni], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[ni][0], b[ni][1]);
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_qconv2d_implicit_gemm(const half_t* __restrict__ x, const unsigned char* __restrict__ qweight,
                           const float* __restrict__ scales, const float* __restrict__ offsets,
                           const float* __restrict__ bias, half_t* __restrict__ y) {
  extern __shared__ uint4 smem[];
  unsigned short* as = reinterpret_cast<unsigned short*>(smem);  // [2][kBM][kLd]
  unsigned short* bs = as + 2 * kBM * kLd;                        // [2][kBN][kLd]
  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * kBN;
  const int warp = threadIdx.x / 32, wm = warp % kWarpsM, wn = warp / kWarpsM;

  float acc[kMI][kNI][4] = {};

  AReg ra;
  uint2 rb[kBItems];
  load_a(x, m0, 0, ra);
  load_b(qweight, n0, 0, rb);
  store_a(as, ra);
  store_b(bs, scales, offsets, n0, 0, rb);
  __syncthreads();
  for (int stage = 0; stage < kStages; ++stage) {
    const int cur = stage % 2;
    const bool more = stage + 1 < kStages;
    if (more) load_a(x, m0, stage + 1, ra), load_b(qweight, n0, stage + 1, rb);
    multiply(as + cur * kBM * kLd, bs + cur * kBN * kLd, wm, wn, acc);
    // The other stage was last read in the previous iteration, before its barrier.
    if (more) {
      store_a(as + (cur ^ 1) * kBM * kLd, ra);
      store_b(bs + (cur ^ 1) * kBN * kLd, scales, offsets, n0, stage + 1, rb);
    }
    __syncthreads();
  }

  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        // accumulator r: row g (+8 for r ≥ 2), column 2t (+1 for odd r)
        const int m = m0 + wm * kWTM + mi * 16 + g + (r / 2) * 8;
        const int n = n0 + wn * kWTN + ni * 8 + 2 * t + r % 2;
        if (m < kM && n < kCo) store_output(y, bias, m, n, acc[mi][ni][r]);
      }
}
