// fused_ffn: y[m, r] = SiLU(<W1[r,:], x[m,:]>) * <W3[r,:], x[m,:]>
// for m < kM, r < kH; W1, W3 row-major [kH, kD] (PyTorch Linear layout),
// x row-major [kM, kD], y row-major [kM, kH]. fp32 accumulation, SiLU in fp32
// (Act: expf, or an FP16 lookup table when the spec asks for one).
//
// Decode is bound by reading W1 and W3 once. Work split:
//   block  = kWarps warps, which form kWarps / kSplitD row groups;
//   group  = kSplitD warps (kLanes threads) sharing kRowsPerWarp rows, each
//            thread walking the rows' kD columns in kVecElems-element vectors;
//   every thread keeps 2 * kM * kRowsPerWarp fp32 partial sums, so one pass
//   over the weights serves all kM rows of x.
// Each thread issues kUnroll * kRowsPerWarp * 2 independent vector loads per
// iteration before using any of them (bytes in flight hide DRAM latency).
// The specialisation (shape, dtypes, tunables) comes from namespace qjit_spec.

using namespace qjit_spec;

constexpr int kThreads = kWarps * 32;
constexpr int kGroups = kWarps / kSplitD;               // row groups per block
constexpr int kLanes = 32 * kSplitD;                    // threads sharing a row group
constexpr int kVecsPerRow = kD / kVecElems;             // kD % kVecElems == 0 (codegen checks)
constexpr int kStride = kLanes * kUnroll;               // vectors per main-loop step
constexpr int kMainVecs = kVecsPerRow / kStride * kStride;
constexpr int kAcc = kM * kRowsPerWarp;                 // outputs per row group
static_assert(kWarps % kSplitD == 0, "kSplitD must divide kWarps");

// One step of the walk over the columns: kN vectors per row of both weight
// matrices are loaded first (all loads in flight together), then multiplied
// against every row of x.
template <int kN>
__device__ __forceinline__ void accumulate(const TX* __restrict__ x, const TW* const (&w1)[kRowsPerWarp],
                                           const TW* const (&w3)[kRowsPerWarp], int vec,
                                           float (&g)[kM][kRowsPerWarp], float (&u)[kM][kRowsPerWarp]) {
  float a[kN][kRowsPerWarp][kVecElems], b[kN][kRowsPerWarp][kVecElems];
#pragma unroll
  for (int k = 0; k < kN; ++k)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const long long col = static_cast<long long>(vec + k * kLanes) * kVecElems;
      qjit::load_f32<TW, kVecElems, true>(w1[r] + col, a[k][r]);
      qjit::load_f32<TW, kVecElems, true>(w3[r] + col, b[k][r]);
    }
#pragma unroll
  for (int k = 0; k < kN; ++k)
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float xv[kVecElems];
      qjit::load_f32<TX, kVecElems, false>(x + static_cast<long long>(m) * kD + static_cast<long long>(vec + k * kLanes) * kVecElems, xv);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int i = 0; i < kVecElems; ++i) {
          g[m][r] = fmaf(a[k][r][i], xv[i], g[m][r]);
          u[m][r] = fmaf(b[k][r][i], xv[i], u[m][r]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
qjit_fused_ffn(const TX* __restrict__ x, const TW* __restrict__ w1, const TW* __restrict__ w3, TY* __restrict__ y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / kSplitD;
  const int part = (warp % kSplitD) * 32 + lane;  // this thread's place among kLanes
  const int row0 = (blockIdx.x * kGroups + group) * kRowsPerWarp;

  // Rows past kH read row kH-1 (valid memory, no divergent loads) and are not stored.
  const TW* w1r[kRowsPerWarp];
  const TW* w3r[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const long long row = min(row0 + r, kH - 1);
    w1r[r] = w1 + row * kD;
    w3r[r] = w3 + row * kD;
  }

  float g[kM][kRowsPerWarp], u[kM][kRowsPerWarp];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) g[m][r] = u[m][r] = 0.0f;

  for (int v = part; v < kMainVecs; v += kStride) accumulate<kUnroll>(x, w1r, w3r, v, g, u);
  for (int v = kMainVecs + part; v < kVecsPerRow; v += kLanes) accumulate<1>(x, w1r, w3r, v, g, u);

#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      g[m][r] = qjit::warp_sum(g[m][r]);
      u[m][r] = qjit::warp_sum(u[m][r]);
    }

  if constexpr (kSplitD > 1) {
    // The kSplitD warps of a group add their warp totals through shared memory.
    __shared__ float partial[kWarps][2 * kAcc];
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          partial[warp][m * kRowsPerWarp + r] = g[m][r];
          partial[warp][kAcc + m * kRowsPerWarp + r] = u[m][r];
        }
    }
    __syncthreads();
    if (warp % kSplitD != 0) return;
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        float gs = 0.0f, us = 0.0f;
#pragma unroll
        for (int s = 0; s < kSplitD; ++s) {
          gs += partial[warp + s][m * kRowsPerWarp + r];
          us += partial[warp + s][kAcc + m * kRowsPerWarp + r];
        }
        g[m][r] = gs;
        u[m][r] = us;
      }
  }

  // Every lane holds every total; lane i stores output i so the stores run in parallel.
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int idx = m * kRowsPerWarp + r;
      if (lane == idx % 32 && row0 + r < kH)
        y[static_cast<long long>(m) * kH + row0 + r] = qjit::from_f32<TY>(Act::apply(g[m][r]) * u[m][r]);
    }
}
