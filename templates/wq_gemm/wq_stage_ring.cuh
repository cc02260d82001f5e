#pragma once
// The cp.async ring of the large-M wq_gemm kernels (wq_gemm_tiled.cu,
// wq_gemm_wgmma.cu): per stage, kWarpsK chunks of 64 k, each holding, in
// 16-byte pieces,
//   W  kBlockTiles × 8·kBits    the block's tiles of native words, as in global
//   S  G × kBlockTiles × 2      for each of the chunk's G groups, the scales of the
//                               block's 16·kBlockTiles rows of n (as in global)
//   Z  G × kBlockTiles × zb     their zero bytes (zb = 1) or fp16 offsets (zb = 2), likewise
//   X  kRingRows × 9            x[m][64c .. 64c + 64): 8 pieces and one of padding
// all copied by the kCopyThreads threads from kCopyFirst on (the whole block,
// or a producer warpgroup). The padding makes a row 144 bytes:
// the 8 lanes of a 16-byte shared load phase (gq = 0, 1 × t = 0..3, at
// 144·gq + 32t) then hit 8 distinct 4-bank groups. A kernel that stages x
// elsewhere (the wgmma kernel copies it straight into wgmma's layout) sets
// kRingRows to 0 and passes its own copy to ring_prologue / ring_refill.
//
// A chunk is padded to a multiple of kChunkAlign pieces (the wgmma kernel's
// tensor copies write to 128-byte aligned addresses only; with its 4·kGroups
// tiles a block's W and S are whole multiples of 128 bytes, so S and Z start
// on such addresses too). S and Z hold, per group, the block's rows of n as
// they lie in global memory, so that a tensor copy brings each in one box.
//
// The includer defines kCopyThreads, kCopyFirst, kBlockTiles, kBlockRows,
// kRingRows, kWarpsK, kChunkAlign and kStages (after wq_dequant.cuh).

constexpr int kRowPieces = 9;  // a staged row of x: 8 pieces of 64 k and one of padding
constexpr int kWPieces = kBlockTiles * 8 * kBits;
constexpr int kSPieces = kBlockTiles * kGroupsPerChunk * 2;
constexpr int kZPieces = kBlockTiles * kGroupsPerChunk * kZeroBytes;
constexpr int kXPieces = kRingRows * kRowPieces;
constexpr int kChunkPieces = (kWPieces + kSPieces + kZPieces + kXPieces + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
constexpr int kStagePieces = kWarpsK * kChunkPieces;
constexpr int kIters = (kChunks + kWarpsK - 1) / kWarpsK;  // stages of a pass over k

__device__ __forceinline__ void cp_async16(uint4* dst, const void* src, bool fill = true) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  // src-size 0 writes 16 zero bytes and reads nothing (rows of x past M).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(fill ? 16 : 0) : "memory");
}

// This thread's index among the copying threads.
__device__ __forceinline__ int copy_thread() { return static_cast<int>(threadIdx.x) - kCopyFirst; }

// Block tile i, clamped to a valid tile (the last block may stick out past n;
// nothing is stored for the tiles past the end).
__device__ __forceinline__ int tile_at(int first_tile, int i) { return min(first_tile + i, kNTiles - 1); }

// Weights, scales and zeros of the stage's chunks (read nothing an earlier
// kernel writes: they go before wait_for_previous_grid).
__device__ __forceinline__ void copy_weights(const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
                                             const void* __restrict__ zeros, int first_tile, int stage_index,
                                             uint4* stage) {
#pragma unroll
  for (int kk = 0; kk < kWarpsK; ++kk) {
    const int kc = stage_index * kWarpsK + kk;
    if (kc >= kChunks) break;
    uint4* chunk = stage + kk * kChunkPieces;
#pragma unroll
    for (int r = 0; r < (kWPieces + kCopyThreads - 1) / kCopyThreads; ++r) {
      const int p = r * kCopyThreads + copy_thread();  // tile p / (8 kBits), piece p % (8 kBits)
      if (kWPieces % kCopyThreads == 0 || p < kWPieces) {
        const int i = p / (8 * kBits), piece = p % (8 * kBits);
        const unsigned* src = qweight + (static_cast<long long>(tile_at(first_tile, i)) * kChunks + kc) * 32 * kBits;
        cp_async16(chunk + p, src + 4 * piece);
      }
    }
#pragma unroll
    for (int r = 0; r < (kSPieces + kZPieces + kCopyThreads - 1) / kCopyThreads; ++r) {
      const int p = r * kCopyThreads + copy_thread();
      if (p < kSPieces) {  // 8 scales: group p / (2 kBlockTiles), tile (p / 2) % kBlockTiles, half p % 2
        // (with one group per chunk, as is usual, plain p / 2: the modulo cost a 256-row kernel a spill)
        const int gi = kGroupsPerChunk > 1 ? p / (2 * kBlockTiles) : 0;
        const int i = kGroupsPerChunk > 1 ? (p / 2) % kBlockTiles : p / 2, h = p % 2;
        const long long group = kc * 64 / kGroup + gi;
        cp_async16(chunk + kWPieces + p, scales + group * kN + tile_at(first_tile, i) * 16 + 8 * h);
      } else if (p < kSPieces + kZPieces) {  // 16 zero bytes, or 8 of the 16 offsets
        const int q = p - kSPieces;
        const int gi = kGroupsPerChunk > 1 ? q / (kZeroBytes * kBlockTiles) : 0;
        const int i = kGroupsPerChunk > 1 ? (q / kZeroBytes) % kBlockTiles : q / kZeroBytes, h = q % kZeroBytes;
        const long long group = kc * 64 / kGroup + gi;
        const char* base = static_cast<const char*>(zeros);
        cp_async16(chunk + kWPieces + p, base + (group * kN + tile_at(first_tile, i) * 16) * kZeroBytes + 16 * h);
      }
    }
  }
}

// The stage's rows of x into the ring (rows m0 + r >= M are zero-filled).
__device__ __forceinline__ void copy_x(const TX* __restrict__ x, int m0, int M, int stage_index, uint4* stage) {
#pragma unroll
  for (int kk = 0; kk < kWarpsK; ++kk) {
    const int kc = stage_index * kWarpsK + kk;
    if (kc >= kChunks) break;
    uint4* rows = stage + kk * kChunkPieces + kWPieces + kSPieces + kZPieces;
#pragma unroll
    for (int r = 0; r < (kBlockRows * 8 + kCopyThreads - 1) / kCopyThreads; ++r) {
      const int p = r * kCopyThreads + copy_thread();  // row p / 8, piece p % 8
      if ((kBlockRows * 8) % kCopyThreads == 0 || p < kBlockRows * 8) {
        const int row = p / 8, piece = p % 8;
        const bool live = m0 + row < M;
        const TX* src = x + static_cast<long long>(live ? m0 + row : 0) * kK + kc * 64 + 8 * piece;
        cp_async16(rows + row * kRowPieces + piece, src, live);
      }
    }
  }
}

// Four B fragment words of x as the mma input type TS (as they are when x
// already has that type, else through fp32).
__device__ __forceinline__ void to_mma_type(uint4 v, unsigned (&b)[4]) {
  const unsigned raw[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (qjit::IsBf16<TX>::value == qjit::IsBf16<TS>::value) b[i] = raw[i];
    else b[i] = pack2(widen16<TX>(raw[i] & 0xffffu), widen16<TX>(raw[i] >> 16));
  }
}

// Dequantisation parameters of row `row` (0..15) of block tile bt for the
// chunk's group gi, from the scales and zeros staged in the chunk.
__device__ __forceinline__ RowParams staged_row_params(const uint4* chunk, int bt, int gi, int row) {
  const int at = (gi * kBlockTiles + bt) * 16 + row;
  RowRaw raw{reinterpret_cast<const unsigned short*>(chunk + kWPieces)[at], 0};
  if constexpr (kZeroMode == 1) raw.zo = reinterpret_cast<const unsigned char*>(chunk + kWPieces + kSPieces)[at];
  if constexpr (kZeroMode == 2) raw.zo = reinterpret_cast<const unsigned short*>(chunk + kWPieces + kSPieces)[at];
  return row_params(raw);
}

// Lane `lane`'s 16 A registers of block tile bt for the chunk at `chunk`,
// dequantised (register R = 4s + r as a[s][r]: row gq + 8(r%2) of the tile,
// see wq_dequant.cuh): its native words, as load_tile reads them from global,
// and its two rows' scale and zero for the group of its 16 k.
__device__ __forceinline__ void dequant_lane(const uint4* chunk, int bt, int lane, unsigned (&a)[4][4]) {
  const int gq = lane / 4, t = lane % 4, slot = native_slot(lane);
  unsigned w[kBits];
  const unsigned* words = reinterpret_cast<const unsigned*>(chunk) + bt * 32 * kBits;
#pragma unroll
  for (int v = 0; v < kBits / kVec; ++v) {
    const unsigned* p = words + (v * 32 + slot) * kVec;
    if constexpr (kVec == 4) {
      const uint4 q = *reinterpret_cast<const uint4*>(p);
      w[4 * v] = q.x, w[4 * v + 1] = q.y, w[4 * v + 2] = q.z, w[4 * v + 3] = q.w;
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) w[kVec * v + e] = p[e];
    }
  }
  const int gi = kGroupsPerChunk > 1 ? (16 * t) / kGroup : 0;
  const RowParams rp[2] = {staged_row_params(chunk, bt, gi, gq), staged_row_params(chunk, bt, gi, gq + 8)};
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[s][r] = dequant2<false>(w, 4 * s + r, rp[r % 2]);
}

// Fills the ring with stages first .. first + kStages - 2 of those before
// `end` (stage i in slot i % kStages): every stage's weights first, then
// (after waiting for the previous kernel, which may write x) its x, through
// copy_x_stage(stage index, slot). cp.async group s holds stage first + s's x
// (group 0 also every prologue weight).
template <class CopyX>
__device__ __forceinline__ void ring_prologue(const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
                                              const void* __restrict__ zeros, int first_tile, int first, int end,
                                              uint4* ring, CopyX copy_x_stage) {
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (first + s < end)
      copy_weights(qweight, scales, zeros, first_tile, first + s, ring + ((first + s) % kStages) * kStagePieces);
  qjit::wait_for_previous_grid();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (first + s < end) copy_x_stage(first + s, (first + s) % kStages);
    asm volatile("cp.async.commit_group;" ::: "memory");  // empty groups keep the count uniform
  }
}

// Refills the ring with stage `ahead` (if it is before `end`) as one cp.async group.
template <class CopyX>
__device__ __forceinline__ void ring_refill(const unsigned* __restrict__ qweight, const TS* __restrict__ scales,
                                            const void* __restrict__ zeros, int first_tile, int ahead, int end,
                                            uint4* ring, CopyX copy_x_stage) {
  if (ahead < end) {
    copy_weights(qweight, scales, zeros, first_tile, ahead, ring + (ahead % kStages) * kStagePieces);
    copy_x_stage(ahead, ahead % kStages);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}
