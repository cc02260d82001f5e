// fused_ffn on the tensor cores, for 16-bit x/W and M = 2..8 rows of x:
// y[m, r] = SiLU(<W1[r,:], x[m,:]>) * <W3[r,:], x[m,:]>, fp32 accumulation.
// Same contract as fused_ffn.cu (the CUDA-core version it must equal).
//
// Why: on CUDA cores every x element is widened to fp32 once per row group,
// and at M = 8 those conversions, not DRAM, set the pace. mma.m16n8k16
// multiplies 16-bit inputs directly: a 16-row tile of W (A, "row") times
// x as 8 columns (B, "col"; rows of x past kM are zero).
//
// Fragments straight from global memory. In an m16n8k16 tile, lane
// (g = lane/4, c = lane%4) holds A[g][2c..2c+1], A[g+8][2c..2c+1],
// A[g][2c+8..2c+9], A[g+8][2c+8..2c+9] and B[2c..2c+1][g], B[2c+8..2c+9][g]
// (PTX ISA, "Matrix Fragments for mma.m16n8k16"). A dot product does not care
// in which order k is summed, so we may choose which physical column plays
// which logical k, as long as A and B choose the same. Each lane loads 16
// bytes = 8 consecutive columns col = step*32 + c*8 of its rows g, g+8 of W
// and of row g of x; its 4 words w0..w3 (2 columns each) feed two mmas:
//   mma 1: A = {row g w0, row g+8 w0, row g w1, row g+8 w1}, B = {x w0, x w1}
//   mma 2: A = {row g w2, row g+8 w2, row g w3, row g+8 w3}, B = {x w2, x w3}
// Logical k (2c+e, 2c+8+e) of mma 1 is physical column c*8 + (0+e, 2+e), of
// mma 2 c*8 + (4+e, 6+e): a bijection on the 32 columns of a step, identical
// for A and B. No shared memory, no shuffles, 16-byte coalesced loads.
//
// Work split: a warp owns kTiles 16-row tiles; kSplitD warps share a tile set
// and take every kSplitD-th 32-column step, adding their partial sums through
// shared memory at the end. kUnroll steps are loaded before any mma.

using namespace qjit_spec;

constexpr int kThreads = kWarps * 32;
constexpr int kGroups = kWarps / kSplitD;
constexpr int kRowsPerGroup = 16 * kTiles;
constexpr int kSteps = (kD + 31) / 32;  // 32 columns per step; kD % 8 == 0 (codegen checks)
static_assert(kWarps % kSplitD == 0, "kSplitD must divide kWarps");
static_assert(kM <= 8, "x fills at most the 8 columns of B");

struct StepData {
  uint4 w1[kTiles][2], w3[kTiles][2];  // [tile][row g / row g+8]
  uint4 x;
};

__device__ __forceinline__ void load_step(const TX* __restrict__ x, const TW* const (&w1)[kTiles][2],
                                          const TW* const (&w3)[kTiles][2], int step, int g, int c, StepData& s) {
  const int col = step * 32 + c * 8;
  const bool in = col < kD;  // the last step may be partial: missing columns count as zero
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s.w1[t][h] = in ? qjit::load_raw16<true>(w1[t][h] + col) : make_uint4(0, 0, 0, 0);
      s.w3[t][h] = in ? qjit::load_raw16<true>(w3[t][h] + col) : make_uint4(0, 0, 0, 0);
    }
  s.x = (in && g < kM) ? qjit::load_raw16<false>(x + static_cast<long long>(g) * kD + col) : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ void mma_step(const StepData& s, float (&acc1)[kTiles][4], float (&acc3)[kTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    qjit::mma_16816<TW>(acc1[t], s.w1[t][0].x, s.w1[t][1].x, s.w1[t][0].y, s.w1[t][1].y, s.x.x, s.x.y);
    qjit::mma_16816<TW>(acc1[t], s.w1[t][0].z, s.w1[t][1].z, s.w1[t][0].w, s.w1[t][1].w, s.x.z, s.x.w);
    qjit::mma_16816<TW>(acc3[t], s.w3[t][0].x, s.w3[t][1].x, s.w3[t][0].y, s.w3[t][1].y, s.x.x, s.x.y);
    qjit::mma_16816<TW>(acc3[t], s.w3[t][0].z, s.w3[t][1].z, s.w3[t][0].w, s.w3[t][1].w, s.x.z, s.x.w);
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_fused_ffn(const TX* __restrict__ x, const TW* __restrict__ w1, const TW* __restrict__ w3, TY* __restrict__ y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int group = warp / kSplitD, part = warp % kSplitD;
  const int row0 = (blockIdx.x * kGroups + group) * kRowsPerGroup;

  // Rows past kH read row kH-1 (valid memory) and are not stored.
  const TW* w1r[kTiles][2];
  const TW* w3r[kTiles][2];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long row = min(row0 + t * 16 + h * 8 + g, kH - 1);
      w1r[t][h] = w1 + row * kD;
      w3r[t][h] = w3 + row * kD;
    }

  float acc1[kTiles][4], acc3[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc1[t][i] = acc3[t][i] = 0.0f;

  constexpr int kStride = kSplitD * kUnroll;
  int step = part;
  for (; step + (kUnroll - 1) * kSplitD < kSteps; step += kStride) {
    StepData s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_step(x, w1r, w3r, step + u * kSplitD, g, c, s[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) mma_step(s[u], acc1, acc3);
  }
  for (; step < kSteps; step += kSplitD) {
    StepData s;
    load_step(x, w1r, w3r, step, g, c, s);
    mma_step(s, acc1, acc3);
  }

  if constexpr (kSplitD > 1) {
    // Lane-for-lane sum of the kSplitD warps' accumulators.
    __shared__ float partial[kWarps][kTiles][8][32];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        partial[warp][t][i][lane] = acc1[t][i];
        partial[warp][t][4 + i][lane] = acc3[t][i];
      }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int s = 1; s < kSplitD; ++s) {
          acc1[t][i] += partial[warp + s][t][i][lane];
          acc3[t][i] += partial[warp + s][t][4 + i][lane];
        }
      }
  }

  // Accumulator i of lane (g, c): row g + 8*(i/2) of the tile, column (= row m of x) 2c + i%2.
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = row0 + t * 16 + g + 8 * (i / 2), m = 2 * c + i % 2;
      if (m < kM && row < kH)
        y[static_cast<long long>(m) * kH + row] = qjit::from_f32<TY>(Act::apply(acc1[t][i]) * acc3[t][i]);
    }
}
