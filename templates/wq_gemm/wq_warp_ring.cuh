#pragma once
// The small-M mainloop's cp.async ring (kStages > 0): each warp's ring of
// shared-memory slots, what a slot holds, the copies that fill it and the
// reads that turn it into a chunk's operands (stream_chunks, and pair_loop
// with kPair). Included by wq_mma_mainloop.cuh once its chunk, x and
// L2 look-ahead helpers are defined; wq_accumulate there calls stream_chunks.
//
// Each warp streams everything a chunk needs through a kStages-deep ring of
// shared-memory slots with cp.async: weights, the tiles' scales and zeros, and
// the pass's rows of x. Loads then stay kStages - 1 chunks ahead without
// holding registers, and x and the scales wait in the same queue as the
// weights instead of costing a round trip each chunk (reading x from global
// at multiply time stalls the mma on it: the profile's long-scoreboard stalls).
// A slot holds one chunk, or with kPair one pair of chunks kc, kc + 1 (h = 0, 1),
// which share their group's scales and zeros. In 32-bit words:
//   [0, kSlotWAll)     weights, [h][tile][vector][lane]: a lane copies its own vectors from
//                      their native_slot and reads them back at its own lane (conflict-free)
//   [kSlotWAll, +kSlotS) scales: [tile][group of the chunk][16 rows]
//   [.., +kSlotZ)      zero bytes or fp16 offsets, same order (none for sym)
//   [.., +kSlotX)      x[m0 + r][64·kc .. 64·kc + 64·kSlotChunks) for r < kXRows (a row past
//                      M - 1 holds row M - 1); none with kXRegs, where each lane loads its B fragments
//                      of x into registers one chunk ahead (through L1, as the
//                      register pipeline does)
// A pair in one slot costs one copy of the scales and zeros, one wait and one
// slot address where two slots of a chunk each took theirs.
// Everything is moved in 16-byte pieces: the weight vectors by their own lanes,
// the rest spread over the warp; a lane reads what others copied only after
// cp.async.wait_group and __syncwarp.
constexpr int kRingStages = kStages > 0 ? kStages : 1;
constexpr int kXPieces = 64 * int(sizeof(TX)) / 16;                        // 16-byte pieces per row of a chunk
constexpr int kSlotChunks = kPairMode ? 2 : 1;                               // chunks per slot
constexpr int kSlotW = kTiles * kBits * 32;                                   // one chunk's weights
constexpr int kSlotWAll = kSlotChunks * kSlotW;
constexpr int kXRowPieces = kSlotChunks * kXPieces;                           // 16-byte pieces of x per row of a slot
constexpr int kSlotS = kTiles * kGroupsPerChunk * 16 * 2 / 4;
constexpr int kSlotZ = kTiles * kGroupsPerChunk * 16 * kZeroBytes / 4;
constexpr bool kXInRegs = kXRegs != 0;
static_assert(!kXInRegs || kStages > 0, "x in registers is a mode of the cp.async ring");
constexpr int kSlotX = kXInRegs ? 0 : kXRows * kXRowPieces * 4;
constexpr int kSlotWords = kSlotWAll + kSlotS + kSlotZ + kSlotX;
constexpr int kSPieces = kTiles * kGroupsPerChunk * 2, kZPieces = kTiles * kGroupsPerChunk * kZeroBytes;
constexpr int kWParamPieces = kSPieces + kZPieces, kXSlotPieces = kXInRegs ? 0 : kXRows * kXRowPieces;
// Where the scales, zeros and x take more than one round of the warp's
// 16-byte copies (from M = 2 with pairs, M = 4 without), x goes in rounds of
// its own (copy_x_rounds); else all three share the lanes of one round.
constexpr bool kXOwnRounds = kWParamPieces + kXSlotPieces > 32;
constexpr int kParamPieces = kWParamPieces + (kXOwnRounds ? 0 : kXSlotPieces);
// The ring lives in dynamic shared memory, warp w's kStages slots at
// [w·kStages·kSlotWords, ...): the launch asks for exactly
// kWarps·kStages·kSlotWords·4 bytes (wq_launch_geometry; more than the 48 KB
// of static shared memory once x has 4 or more rows and the block 8 warps).
constexpr int kRingBytes = kStages > 0 ? kWarps * kStages * kSlotWords * 4 : 0;

__device__ __forceinline__ void cp_async16(unsigned* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
// x through L1 (.ca), where the weights bypass it (.cg, each read once): the
// blocks on an SM read the same chunks of x (warp `part` of each block takes
// chunks part, part + kSplitK, ...), so L1 can serve the later reads, as it
// does the register pipeline's __ldg of x. On an H100 this took 4096 × 11008
// at M = 4 from 12.15 to 10.83 µs; at M = 8 L1 hit 28% of the ring's reads.
__device__ __forceinline__ void cp_async16_l1(unsigned* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

// What copy_chunk copies: everything, or the part that does not depend on
// the previous grid (weights, scales, zeros), or only x.
enum CopyPart { kCopyAll, kCopyWeights, kCopyX };

// Where piece p < kSPieces + kZPieces of a slot (after the weights) comes
// from for chunk kc: 8 scales or 16 zero bytes (8 fp16 offsets) of a tile
// slot's rows for one group of the chunk.
__device__ __forceinline__ const char* weight_param_src(const Operands& op, const int (&tile)[kTiles], int kc, int p) {
  if (p < kSPieces) {  // 8 scales: tile p / (2G), group (p / 2) % G, half p % 2
    const int i = p / (2 * kGroupsPerChunk), gi = (p / 2) % kGroupsPerChunk, h = p % 2;
    const int group = kc * 64 / kGroup + gi;
    return reinterpret_cast<const char*>(scales_of(op, i) + static_cast<long long>(group) * kN + tile_of(tile, i) * 16 + 8 * h);
  }
  const int q = p - kSPieces;  // 16 zero bytes or 8 offsets
  const int i = q / (kZeroBytes * kGroupsPerChunk), gi = (q / kZeroBytes) % kGroupsPerChunk, h = q % kZeroBytes;
  const int group = kc * 64 / kGroup + gi;
  return static_cast<const char*>(zeros_of(op, i)) + (static_cast<long long>(group) * kN + tile_of(tile, i) * 16) * kZeroBytes +
         16 * h;
}

// The lane's pieces of a slot after the weights (piece p = 32·round + lane:
// scales, then zeros, then x, in slot order) for a ring that carries x,
// addressed once per pass so that a chunk's copy is the same few
// instructions on every lane. Piece p of chunk kc is at base + step(kc)·
// stride bytes, where step is the chunk's group for scales and zeros
// (kc·64 / kGroup; the piece's group within the chunk is in base) and kc
// itself for x. Decided per chunk, the three kinds were three branches that
// every warp ran in turn (the M = 1 ring: 215 -> 199 instructions per chunk,
// 10.0 -> 9.45 us at 4096 x 11008 on an H100). With kXRegs the slot has no
// x; the plain x_regs ring keeps copy_chunk's per-chunk branches (this change
// made it 1 us slower at M = 8 and 16 in A/Bs on one H100,
// docs/wq_gemm_small_m.md), while the pair ring with kXRegs takes these pieces (its loop
// at M = 16: 673 -> 639 SASS instructions per two pairs).
// Every row of x a slot holds is copied, a row past M - 1 from row M - 1
// (read_slot reads it as it reads a valid row: no zeroing, no branch).
constexpr int kParamRounds = (kParamPieces + 31) / 32;
// kXOwnRounds: a round of x's copies gives kXLanes lanes to each of 32 /
// kXLanes rows (kXLanes · 16 contiguous bytes of a row: at least 128, so a
// round touches no more 128-byte lines than whole rows would), and a lane
// copies its row's pieces l % kXLanes + kXLanes·j in kXSteps rounds, each 16
// · kXLanes bytes past the one before. Those offsets fit the copy's
// immediate (LDGSTS folds about ±2 KB; a row of x is 8 KB or more away), so
// a lane forms one address per row block instead of one per round.
// (The fewest lanes, a power of two from 8, whose row blocks don't pass the
// slot's rows; kXRows need not be a power of two: the FFN's bucket is M.)
constexpr int x_lanes_wanted() {
  int lanes = 8;
  while (lanes < 32 && lanes * kXRows < 32) lanes *= 2;
  return lanes;
}
constexpr int kXLanesWanted = x_lanes_wanted();
constexpr int kXLanes = kXLanesWanted < kXRowPieces ? kXLanesWanted : kXRowPieces;
constexpr int kXRowsPerBlock = 32 / kXLanes;
constexpr int kXSteps = kXRowPieces / kXLanes;
constexpr int kXBlocks = (kXRows + kXRowsPerBlock - 1) / kXRowsPerBlock;
static_assert(!kXOwnRounds || (32 % kXLanes == 0 && kXRowPieces % kXLanes == 0), "x's rounds cover whole rows");
struct ParamPieces {
  const char* w[kTiles];  // the lane's first weight vector of tile slot i at chunk 0
  const char* base[kParamRounds];
  int stride[kParamRounds];  // bytes per step
  bool live[kParamRounds];   // the lane has a piece
  bool is_x[kParamRounds];
  // kXOwnRounds: the lane's row in row block 0 (m0 + lane / kXLanes) and
  // first piece (16 bytes at x_col); rows past x_last = M - 1 read it.
  const char* x_col;
  int x_row, x_last;
};

__device__ __forceinline__ ParamPieces param_pieces(const Operands& op, const int (&tile)[kTiles], int m0, int M,
                                                    int lane) {
  ParamPieces pp;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
    pp.w[i] = reinterpret_cast<const char*>(qweight_of(op, i) + static_cast<long long>(tile[i]) * kChunks * 32 * kBits +
                                         native_slot(lane) * kVec);
#pragma unroll
  for (int round = 0; round < kParamRounds; ++round) {
    const int p = round * 32 + lane;
    pp.base[round] = reinterpret_cast<const char*>(op.x);
    pp.stride[round] = 0;
    pp.live[round] = p < kParamPieces;
    pp.is_x[round] = p >= kSPieces + kZPieces;
    if (p < kSPieces + kZPieces) {
      pp.base[round] = weight_param_src(op, tile, 0, p);
      pp.stride[round] = p < kSPieces ? static_cast<int>(kN * sizeof(TS)) : static_cast<int>(kN * kZeroBytes);
    } else if (p < kParamPieces) {  // x row r, piece c
      const int q = p - kSPieces - kZPieces, r = q / kXRowPieces, c = q % kXRowPieces;
      pp.base[round] = reinterpret_cast<const char*>(op.x + static_cast<long long>(min(m0 + r, M - 1)) * kK) + 16 * c;
      pp.stride[round] = 64 * static_cast<int>(sizeof(TX));
    }
  }
  pp.x_col = reinterpret_cast<const char*>(op.x) + 16 * (lane % kXLanes);
  pp.x_row = m0 + lane / kXLanes, pp.x_last = M - 1;
  return pp;
}

// kXOwnRounds: x's pieces of chunk kc (with kPair, of the pair from kc) in
// rounds of their own, kXSteps rounds for each of kXBlocks row blocks (see
// kXLanes): a row block's address is the lane's row, clamped to M - 1, and
// its rounds add immediates. No branch on whether the pass's rows are all
// < M: the clamp is one instruction a row block. At M = 16 with pairs (8
// rounds, 4 row blocks) the 4096 x 11008 loop went 365 -> 312 SASS
// instructions a pair. Before, two rows a round from one address took 3
// instructions a round (the 64-bit add of the round's 16 KB offset, which
// LDGSTS cannot fold, and the copy), plus a clamped twin for passes that
// reach past M; earlier still, a piece per lane with its own row, clamp
// and test against M took about 5.
template <int kB, int kJ>
__device__ __forceinline__ void copy_x_block(const char* row, int lane, unsigned* dst) {
  if constexpr (kJ < kXSteps) {
    if (lane / kXLanes + kB * kXRowsPerBlock < kXRows) {  // a row of the slot (false only where kXRows < 32 / kXLanes)
      constexpr int kWords = 4 * (kB * kXRowsPerBlock * kXRowPieces + kJ * kXLanes);
      const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + kWords));
      // The offset in the PTX address, a constant (hence the recursion), so ptxas keeps it in the LDGSTS.
      asm volatile("cp.async.ca.shared.global [%0], [%1+%2], 16;" ::"r"(d), "l"(row), "n"(16 * kXLanes * kJ) : "memory");
    }
    copy_x_block<kB, kJ + 1>(row, lane, dst);
  }
}
template <int kB>
__device__ __forceinline__ void copy_x_blocks(const ParamPieces& pp, const char* col, int lane, unsigned* dst) {
  if constexpr (kB < kXBlocks) {
    constexpr long long kRowBytes = static_cast<long long>(kK) * sizeof(TX);
    const int r = pp.x_row + kB * kXRowsPerBlock;
    copy_x_block<kB, 0>(col + min(r, pp.x_last) * kRowBytes, lane, dst);
    copy_x_blocks<kB + 1>(pp, col, lane, dst);
  }
}

__device__ __forceinline__ void copy_x_rounds(const ParamPieces& pp, int kc, int lane, unsigned* slot) {
  // The lane's first piece of the slot: row lane / kXLanes, piece lane % kXLanes.
  unsigned* dst = slot + kSlotWAll + kSlotS + kSlotZ + 4 * (lane / kXLanes * kXRowPieces + lane % kXLanes);
  const char* col = advance(pp.x_col, kc, 64 * sizeof(TX));
  copy_x_blocks<0>(pp, col, lane, dst);
}

template <CopyPart kPart = kCopyAll>
__device__ __forceinline__ void copy_chunk(const Operands& op, const int (&tile)[kTiles], const ParamPieces& pp, int kc,
                                           int lane, unsigned* slot) {
  constexpr bool kW = kPart != kCopyX, kXPart = kPart != kCopyWeights;
#pragma unroll
  for (int i = 0; i < kTiles && kW; ++i)
#pragma unroll
    for (int v = 0; v < kBits / kVec; ++v) {
      const unsigned* src = reinterpret_cast<const unsigned*>(advance(pp.w[i], kc, 32 * kBits * 4)) + v * 32 * kVec;
      unsigned* dst = slot + i * kBits * 32 + (v * 32 + lane) * kVec;
#pragma unroll
      for (int h = 0; h < kSlotChunks; ++h) {  // a pair's second chunk follows the first in global
        if constexpr (kVec == 4) cp_async16(dst + h * kSlotW, src + h * 32 * kBits);
        else {
          const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + h * kSlotW));
          asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src + h * 32 * kBits), "n"(4 * kVec)
                       : "memory");
        }
      }
    }
  if constexpr (kXInRegs && !kPairMode) {
#pragma unroll
    for (int round = 0; round < kParamRounds && kW; ++round) {
      const int p = round * 32 + lane;
      if (p < kParamPieces) cp_async16(slot + kSlotWAll + 4 * p, weight_param_src(op, tile, kc, p));
    }
  } else {
    const int group_step = kc * 64 / kGroup;
#pragma unroll
    for (int round = 0; round < kParamRounds; ++round) {
      const bool x_piece = pp.is_x[round];
      if (!pp.live[round] || (x_piece ? !kXPart : !kW)) continue;
      // One 32 x 32 -> 64-bit multiply-add (a signed 64-bit product took five).
      const char* src = advance(pp.base[round], x_piece ? kc : group_step, pp.stride[round]);
      unsigned* dst = slot + kSlotWAll + 4 * (round * 32 + lane);
      if (x_piece) cp_async16_l1(dst, src);
      else cp_async16(dst, src);
    }
    if constexpr (kXOwnRounds && kXPart) copy_x_rounds(pp, kc, lane, slot);
  }
}

// B fragment words of x[k .. k + 16) in shared memory (a template: only TX's branch may be instantiated).
template <typename T>
__device__ __forceinline__ void read_x(const T* p, unsigned (&b)[8]) {
  if constexpr (sizeof(T) == 4) {
    const float4* f = reinterpret_cast<const float4*>(p);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float4 v = f[e];
      b[2 * e] = pack2(v.x, v.y), b[2 * e + 1] = pack2(v.z, v.w);
    }
  } else {
    b_from_16bit<T>(reinterpret_cast<const uint4*>(p)[0], reinterpret_cast<const uint4*>(p)[1], b);
  }
}

// The lane's operands of chunk h of a slot.
template <typename T>
__device__ __forceinline__ void read_slot(const unsigned* slot, int h, int lane, Chunk& c) {
  const int gq = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int v = 0; v < kBits / kVec; ++v) {
      const unsigned* p = slot + h * kSlotW + i * kBits * 32 + (v * 32 + lane) * kVec;
      if constexpr (kVec == 4) {  // one 16-byte shared load
        const uint4 r = *reinterpret_cast<const uint4*>(p);
        c.w[i][4 * v] = r.x, c.w[i][4 * v + 1] = r.y, c.w[i][4 * v + 2] = r.z, c.w[i][4 * v + 3] = r.w;
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) c.w[i][kVec * v + j] = p[j];
      }
    }
  const int gi = kGroupsPerChunk > 1 ? (16 * t) / kGroup : 0;  // the group of the lane's 16 k
  const auto* s16 = reinterpret_cast<const unsigned short*>(slot + kSlotWAll);
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int at = (i * kGroupsPerChunk + gi) * 16 + gq + 8 * e;
      c.rows[i][e].s = s16[at];
      c.rows[i][e].zo = 0;
      if constexpr (kZeroMode == 1) c.rows[i][e].zo = reinterpret_cast<const unsigned char*>(slot + kSlotWAll + kSlotS)[at];
      if constexpr (kZeroMode == 2) c.rows[i][e].zo = reinterpret_cast<const unsigned short*>(slot + kSlotWAll + kSlotS)[at];
    }
#pragma unroll
  for (int j = 0; j < kMTiles && !kXInRegs; ++j) {
    const int r = 8 * j + gq;
    // A row past the slot's (r >= kXRows) reads its last row, and the slot's
    // rows past M - 1 hold row M - 1 (param_pieces): as in x_rows, such a
    // row reaches only a column of the product that is never stored, and a
    // valid row needs neither zeroing nor a branch (at M = 1, 8 moves and
    // about 10 address instructions a pair when such rows were zeros).
    read_x(reinterpret_cast<const T*>(slot + kSlotWAll + kSlotS + kSlotZ) + min(r, kXRows - 1) * 64 * kSlotChunks + 64 * h +
               16 * t,
           c.b[j]);
  }
}

// The pair ring's loop (kPair): pair i a pass, its two chunks multiplied
// together (c0's row parameters serve both: c1's are never read). fetch(i)
// refills the ring and returns pair i's slot; chunk_at(i) is pair i's first
// chunk. (A template, so that mma_chunks<2> exists only where pairs do.)
//
// With kXRegs the slots hold weights, scales and zeros only, and pair i + 1's
// B fragments are loaded into registers during pair i. From M = 8 on x's rows
// were most of a pair's slot (at M = 16, 4 KB of 6.5), copied by every warp
// into shared memory and read back: that traffic goes, and the same shared
// memory holds more slots. Two pairs a pass, so the two x buffers swap roles
// by name (as in the plain x_regs ring).
template <typename Fetch, typename ChunkAt>
__device__ __forceinline__ void pair_loop(Fetch& fetch, const XRows& xr, const ChunkAt& chunk_at, int count, int lane,
                                          float (&acc)[kTiles][kMTiles][4]) {
  if constexpr (!kXInRegs) {
#pragma unroll 1
    for (int i = 0; i < count; ++i) {
      const unsigned* slot = fetch(i);
      Chunk c0, c1;
      read_slot<TX>(slot, 0, lane, c0);
      read_slot<TX>(slot, 1, lane, c1);
      mma_chunks<2>(c0, c1, acc);
    }
  } else {
    auto step = [&](int i, const unsigned (&x_cur)[2][kMTiles][8], unsigned (&x_after)[2][kMTiles][8]) {
      Chunk c0, c1;
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 8; ++e) c0.b[j][e] = x_cur[0][j][e], c1.b[j][e] = x_cur[1][j][e];
      if (i + 1 < count) {
        load_x_frags_mad(xr, chunk_at(i + 1), x_after[0]);
        load_x_frags_mad(xr, chunk_at(i + 1) + 1, x_after[1]);
      }
      const unsigned* slot = fetch(i);
      read_slot<TX>(slot, 0, lane, c0);
      read_slot<TX>(slot, 1, lane, c1);
      mma_chunks<2>(c0, c1, acc);
    };
    unsigned x_a[2][kMTiles][8], x_b[2][kMTiles][8];
    if (count > 0) {
      load_x_frags_mad(xr, chunk_at(0), x_a[0]);
      load_x_frags_mad(xr, chunk_at(0) + 1, x_a[1]);
    }
#pragma unroll 1
    for (int i = 0; i < count; i += 2) {
      step(i, x_a, x_b);
      if (i + 1 < count) step(i + 1, x_b, x_a);
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}

__device__ __forceinline__ void stream_chunks(const Operands& op, const int (&tile)[kTiles], int part, int end, int m0,
                                              int M, int lane, int warp, float (&acc)[kTiles][kMTiles][4]) {
  extern __shared__ __align__(16) unsigned wq_ring_smem[];
  unsigned* const ring = wq_ring_smem + warp * kRingStages * kSlotWords;  // this warp's slots
  {
    // A launch with less shared memory than the ring would corrupt it silently: trap instead.
    unsigned dynamic_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
    if (dynamic_bytes < unsigned(kRingBytes)) __trap();
  }
  // The warp's slots' worth (units) are its chunks part, part + kSplitK, ...:
  // unit i is chunk part + i·kSplitK; with kPair, unit i is the pair from
  // chunk part + 2i·kSplitK. Pairs come whole: 128 | g and g | k make kChunks
  // even, a pair starts on an even chunk, and the schedules that pass a piece
  // of k (balance) take no pairs.
  static_assert(!kPairMode || kL2Ahead == 0, "chunk pairs stream without the L2 look-ahead");
  static_assert(!kPairMode || kChunks % 2 == 0, "chunk pairs need an even number of chunks");
  const auto chunk_at = [&](int i) { return part + i * kSlotChunks * kSplitK; };
  const int count = part < end ? (end - 1 - part) / (kSlotChunks * kSplitK) + 1 : 0;
  const XRows xr = x_rows(op.x, m0, M, lane);  // kXRegs
  const ParamPieces pp = param_pieces(op, tile, m0, M, lane);
  __syncwarp();  // the previous pass over m has read every slot
  // The first kStages - 1 chunks' weights, scales and zeros go out before
  // the grid waits for its predecessor, x after it: a chain of kernels then
  // streams weights through the previous kernel's tail (a read-only stream
  // launched this way reaches 83% of the copy floor at 23.6 MB on an H100,
  // against 73% without PDL: tests/probe/read_probe.cpp). The first group
  // holds all of those weights, so chunk 0 waits for them once.
#pragma unroll
  for (int s = 0; s < kRingStages - 1; ++s)
    if (s < count) copy_chunk<kCopyWeights>(op, tile, pp, chunk_at(s), lane, ring + s * kSlotWords);
  prefetch_chunks_l2(op, tile, part, kRingStages - 1, kRingStages - 1 + kL2Ahead, count, lane);
  prefetch_x_l2(op.x, part, kRingStages - 1, count, m0, M, lane);
  wait_for_previous_grid();
  QJIT_MARK(1);
#pragma unroll
  for (int s = 0; s < kRingStages - 1; ++s) {
    if (s < count) copy_chunk<kCopyX>(op, tile, pp, chunk_at(s), lane, ring + s * kSlotWords);
    asm volatile("cp.async.commit_group;" ::: "memory");  // empty groups keep the count uniform
  }
  // fetch(i): refill the slot unit i - 1 used (with unit i + kStages - 1)
  // and wait for unit i's slot, which it returns. Unit i's slot is
  // i % kStages. Where kStages is not a power of two, that modulo cost the
  // 3-slot M = 1 pair loop 20 of its 284 instructions (multiply-by-inverse
  // sequences), so the slots are then running word offsets (units are
  // fetched in order, and unit i + kStages - 1's slot is unit i - 1's): 271.
  // For 2 and 4 slots the modulo is a mask, and the running offsets cost 6 more.
  constexpr bool kSlotsByMask = (kRingStages & (kRingStages - 1)) == 0;
  constexpr int kLastSlot = (kRingStages - 1) * kSlotWords;
  int read_at = 0, refill_at = kLastSlot;  // !kSlotsByMask: unit i's slot, unit i + kStages - 1's
  auto fetch = [&](int i) {
    __syncwarp();  // every lane has read unit i - 1's slot, which this copy refills
    const int ahead = i + kRingStages - 1;
    if constexpr (kSlotsByMask) refill_at = ahead % kRingStages * kSlotWords;
    if (ahead < count) copy_chunk(op, tile, pp, chunk_at(ahead), lane, ring + refill_at);
    prefetch_chunks_l2(op, tile, part, ahead + kL2Ahead, ahead + kL2Ahead + 1, count, lane);
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group %0;" ::"n"(kRingStages - 1) : "memory");  // this lane's part of unit i landed
    __syncwarp();                                                               // and every other lane's
    if constexpr (kSlotsByMask) return ring + i % kRingStages * kSlotWords;
    const int slot = read_at;
    refill_at = read_at;
    read_at = read_at == kLastSlot ? 0 : read_at + kSlotWords;
    return ring + slot;
  };
  if constexpr (kPairMode) {
    pair_loop(fetch, xr, chunk_at, count, lane, acc);
    return;
  }
  // Chunk i of the warp: fetch it, multiply. With kXRegs, x_cur holds chunk
  // i's B fragments (loaded during chunk i - 1) and chunk i + 1's go out
  // into x_after now, a whole chunk ahead of their use.
  auto step = [&](int i, const unsigned (&x_cur)[kMTiles][8], unsigned (&x_after)[kMTiles][8]) {
    Chunk c;
    if constexpr (kXInRegs) {
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 8; ++e) c.b[j][e] = x_cur[j][e];
      if (i + 1 < count) load_x_frags(xr, chunk_at(i + 1), x_after);
    }
    read_slot<TX>(fetch(i), 0, lane, c);
    mma_chunk(c, acc);
  };
  // With kXRegs the loop body is two chunks, so the two x buffers swap roles
  // by name: a single-chunk body copied x_after into x_cur every chunk
  // (16 moves at M = 16, of a chunk's ~250 instructions). Otherwise (and
  // in any case not unrolled further: with few chunks per warp a full unroll
  // hoists every load and runs out of registers) one chunk per pass.
  unsigned x_a[kMTiles][8], x_b[kMTiles][8];
  if (kXInRegs && count > 0) load_x_frags(xr, part, x_a);
#pragma unroll 1
  for (int i = 0; i < count; i += kXInRegs ? 2 : 1) {
    step(i, x_a, x_b);
    if (kXInRegs && i + 1 < count) step(i + 1, x_b, x_a);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}
