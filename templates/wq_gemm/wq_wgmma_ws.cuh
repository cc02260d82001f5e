#pragma once
// Warp specialisation for the wgmma kernel (kWs, wq_gemm_wgmma.cu).
//
// Without it every warp of a block passes one block barrier per stage, and
// each warp's chain per stage is: wait for its previous wgmma, the barrier,
// its share of the copies, the next stage's dequantisation, the next wgmma.
// At M = 256 on the H100 that chain took about 2100 cycles per stage against
// 1024 of tensor-core work (2 warps per scheduler, issue slots 24% busy;
// docs/wq_gemm_wgmma.md).
//
// Here the producer warpgroup alone copies, and nothing is shared by a
// barrier of the whole block. Ring slot i has two mbarriers (PTX ISA,
// "Parallel Synchronization and Communication Instructions: mbarrier"):
//   full[i]   kFullArrivals arrivals, one per producer thread that copies,
//             each made by the hardware when that thread's copies of the
//             stage have landed (cp.async.mbarrier.arrive.noinc), and the
//             bytes of the bulk copies (see arrive_full for their arrival);
//   empty[i]  kMmaThreads arrivals, one per consumer thread, once its
//             warpgroup's wgmma reading the slot have completed.
// A block numbers its stages q = 0, 1, ... over all its tiles: stage q uses
// slot q % kStages, in the (q / kStages)-th phase of both its barriers, so
// it waits for full's phase parity (q / kStages) & 1, and the producer,
// before refilling the slot with stage q >= kStages, for empty's phase of
// stage q - kStages. The two consumer warpgroups may drift apart by up to
// the ring's depth; measured, they stay within ~40 cycles of each other
// (qjit_ws_probe), and making them take turns did not help
// (docs/wq_gemm_wgmma.md).
//
// Registers (setmaxnreg, sm_90a): the producer drops to 56 per thread, which
// frees the registers for consumers to hold 256 rows of accumulators beside
// two stages of A (224 each with two consumer warpgroups: 56·128 + 224·256 =
// 64512 of the SM's 65536); ptxas allocates each role's branch under its
// count (without the move the 256-row kernel spills 336 bytes and serialises
// its wgmma, C7512). At 40 the producer's copies of two chunks per stage
// spilled. With kWsBlocks blocks per SM (the stream schedule's) each block
// splits its own registers the same way (the producer at 40), so that they
// are resident together. It takes effect because the kernel's register cap
// is set at entry (__launch_bounds__(kThreads, kWsBlocks), QJIT_WQ_BOUNDS)
// and the roles are the two branches of one if/else; one block of one
// consumer warpgroup needs no move. A block's pool is its threads × the entry
// cap (ptxas: 65536 / (threads × blocks per SM), down to a multiple of 8),
// and setmaxnreg.inc waits until the pool can grant it: asking for more than
// the producer gives back would wait forever (it did, at 104 for two blocks
// of 384 threads, whose pool holds 96).
//
// x by the bulk tensor copy engine (kTmaX): one producer thread copies a
// stage's x with one cp.async.bulk.tensor per chunk (PTX ISA, "Tensor
// copy"), from a tensor map the runtime makes at each launch (x as [M][k]
// 16-bit values, boxes of 64 k × kBlockRows rows, the 128-byte swizzle: the
// layout the cp.async copies wrote, so nothing else changes; rows past M and
// chunks past k arrive as zeros). It counts its bytes on the slot's full
// barrier (expect_tx) beside the 128 arrivals of the weights' copies
// (announce_bytes). The
// 16-byte copies of x took the producer about 1000 cycles a stage at 256
// rows (qjit_ws_probe, H100), as long as the tensor cores' work.
//
// Weights, scales and zeros by the bulk tensor copy engine (kTmaW): producer
// thread 0 (the one that copies x under kTmaX; without it, x in the
// permuted order, all producer threads copy x 4 bytes at a time beside the
// boxes) copies each chunk's words with one
// cp.async.bulk.tensor.3d, from a second tensor map (qweight as words
// [n / 16][k / 64][32 · kBits], boxes of one chunk × the block's tiles: the
// ring's layout of a chunk's words; tiles past n arrive as zeros), and the
// chunk's scales and zeros with one 2-d box each from a third and a fourth
// ([k / g][n], boxes of the block's 16·kBlockTiles rows of n × the chunk's
// groups: the ring's layout of S and Z), all counted on the full barrier
// like x. Boxes land on 128-byte boundaries: the ring pads each chunk
// (kChunkAlign). The consumers read them with ordinary loads once the
// barrier's phase completes, which makes the copy engine's writes visible
// to them. The weights' box alone gained 0.3-0.7% (H100): the
// producer still spent ~930 cycles a stage issuing, and what held it was the
// 16-byte cp.async of the scales and zeros, a handful of instructions that
// took ~560 of them (qjit_ws_probe; issued from another warp
// they still cost half of that). With their boxes the producer issues a
// stage in ~380-500 cycles, and tma_w wins by 2.5-4.7% in one tuner run
// (M = 64 to 512 at 4096 × 11008 and 11008 × 4096, H100; docs/wq_gemm_wgmma.md).
//
// The includer defines kWs, kStages, kMmaThreads and kGroups, and the
// mainloop pieces (dequant_stage, multiply_stage, fence_acc, copy_x_natural,
// copy_x_permuted, copy_weights, the stream schedule).

static_assert(!kWs || (kProducer == 1 && kSplit == 1 && kGroups <= 2),
              "warp specialisation: a producer warpgroup, no split, one or two consumer warpgroups");
static_assert(!kTmaX || kWs, "x by the tensor copy engine is a warp-specialised producer's");
static_assert(!kTmaW || kWs, "the weights by the tensor copy engine are a warp-specialised producer's");

constexpr int kWsBlocks = kStream > 1 ? kStream : 1;
constexpr bool kWsMovesRegisters = kGroups == 2 || kWsBlocks > 1;
constexpr int kWsEntryRegs = 65536 / (kThreads * kWsBlocks) / 8 * 8;
constexpr int kWsProducerRegs = kWsBlocks > 1 ? 40 : 56;
constexpr int kWsConsumerShare = (kThreads * kWsEntryRegs - 128 * kWsProducerRegs) / (128 * kGroups) / 8 * 8;
constexpr int kWsConsumerRegs = kWsConsumerShare < 224 ? kWsConsumerShare : 224;
static_assert(!kWsMovesRegisters ||
                  128 * kWsProducerRegs + 128 * kGroups * kWsConsumerRegs <= kThreads * kWsEntryRegs,
              "the consumers ask for no more registers than the producer gives back (or setmaxnreg waits forever)");

// The ring's barriers and copies (qjit_sm90.cuh, shared with w8a8_gemm's wgmma family).
using qjit::bulk_load;
using qjit::mbarrier_arrive;
using qjit::mbarrier_expect_bytes;
using qjit::mbarrier_wait_or_trap;
using qjit::smem_address;
using qjit::tma_load_box;
using qjit::TensorMapParam;

// An arrival that the hardware makes once every cp.async this thread has
// issued so far has landed (noinc: the arrival is one of the init count).
__device__ __forceinline__ void arrive_when_copied(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// One producer thread. Where the tensor copy engine brings x and the
// weights, scales and zeros (kTmaX and kTmaW), producer thread 0 issues
// every copy and counts every byte on the full barriers, and the other 127
// threads have nothing to copy. They used to walk the ring beside it all the
// same, waiting on each empty barrier and arriving on each full one. They
// now leave after the register move, and full barriers take thread 0's
// arrival alone. Their polls shared the SMs' schedulers with the consumers:
// without them the 256-row stage ran ~1060 cycles instead of ~1090, the
// producer's issue ~450 instead of ~570, and 30 launches back to back ran
// 1.2-1.9% faster at M = 512 (4096 x 11008 and 11008 x 4096) and 5% at
// M = 64 (4096 x 11008; qjit_ws_probe, H100).
constexpr bool kOneProducerThread = kTmaX && kTmaW;

// The producer's arrival on a stage's full barrier, after its copies are
// issued. With one producer thread every copy is a bulk copy counted in
// bytes (expect_tx), and the arrival is a plain one, made by the thread in
// program order after its expect_tx. The hardware-made arrival
// (arrive_when_copied) gave wrong results there: one-warpgroup configs of
// 128 rows and one chunk a stage, 8 verifications each at 4096 x 11008,
// M = 1024 and 11008 x 4096, M = 512, failed 10 of 288 times (up to 7 of 8
// for one config in other runs); 0 of 288 with the plain arrival (H100;
// stage_y and the stream schedule's 2 blocks per SM made it
// likelier). The likely reading: with no cp.async in flight, that arrival
// can count before the stage's last expect_tx (x's), so once the weights'
// boxes are in the phase completes without x's bytes and the consumers
// multiply the slot's previous x.
//
// With 128 producer threads the hardware arrival stays: their own cp.async
// copies must land first. Thread 0's may have landed before it announces
// its bulk copies' bytes (in the prologue it waits for the previous grid
// between the two), which is the case above. So there thread 0 announces
// the bytes with an arrival of its own (mbarrier.arrive.expect_tx: the
// bytes and the arrival in one operation), one more than the 128 hardware
// arrivals (kBulkArrival): the phase cannot complete before the bytes are
// counted, whatever order the arrivals come in. The stream schedule's parts
// (ws_produce_parts) are bulk copies only: there thread 0 announces them
// the same way and every producer thread arrives with a plain arrival.
constexpr bool kBulkArrival = !kOneProducerThread && (kTmaX || kTmaW);
constexpr unsigned kFullArrivals = kOneProducerThread ? 1 : 128 + (kBulkArrival ? 1 : 0);

__device__ __forceinline__ void arrive_full(unsigned bar) {
  if constexpr (kOneProducerThread) mbarrier_arrive(bar);
  else arrive_when_copied(bar);
}

// The probe marks (QJIT_WS_CLOCK and the rest) are in wq_ws_marks.cuh, which the includer
// includes first: the stream schedule's finish marks its steps too.

// Thread 0's announcement of its bulk copies' bytes on a full barrier: with
// one producer thread the bytes alone (its plain arrival follows, arrive_full);
// with 128, the bytes and thread 0's own arrival at once (kBulkArrival).
__device__ __forceinline__ void announce_bytes(unsigned bar, unsigned bytes) {
  if constexpr (kBulkArrival) qjit::mbarrier_arrive_expect_bytes(bar, bytes);
  else mbarrier_expect_bytes(bar, bytes);
}

// The tensor maps a warp-specialised kernel copies from (null where the config has none).
struct WsMaps {
  const TensorMapParam *x, *w, *s, *z;
};

// The weights' box at (chunk kc, first tile) of the tensor map into dst (128-byte aligned).
__device__ __forceinline__ void tma_load_words(unsigned dst, const TensorMapParam* map, int kc, int first_tile,
                                               unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
          dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(0), "r"(kc), "r"(first_tile), "r"(bar)
      : "memory");
}

// The ring's barriers: slot i's full at full + 8i, its empty at empty + 8i.
using WsBarriers = qjit::StageBarriers<kStages>;  // (qjit_sm90.cuh)

// --- producer ----------------------------------------------------------------------

// Copies stages [begin, begin + count) of one output tile, the block's stages
// seq .. seq + count - 1. The block's first tile copies the weights of the
// stages the empty ring takes before waiting for the previous grid (which
// may write x), as ring_prologue does.
__device__ __forceinline__ void ws_produce_tile(const TX* __restrict__ x, const WsMaps& maps,
                                                const unsigned* __restrict__ qweight,
                                                const TS* __restrict__ scales, const void* __restrict__ zeros, int M,
                                                int m0, int first_tile,
                                                int begin, int count, unsigned seq, uint4* ring, unsigned char* sb,
                                                const WsBarriers& bars) {
  // Stage stage_index's x into slot `slot`, whose full barrier is `full`.
  const auto stage_x = [&](int stage_index, int slot, unsigned full) {
    if constexpr (kTmaX) {
      if (copy_thread() == 0) {
        announce_bytes(full, kSbStage);
        const unsigned dst = smem_address(sb + slot * kSbStage);
#pragma unroll
        for (int kk = 0; kk < kChunksPerStage; ++kk)
          tma_load_box(dst + kk * kSbBytes, maps.x, (stage_index * kChunksPerStage + kk) * 64, m0, full);
      }
    } else if constexpr (kASmem || kAQuad) {
      copy_x_natural(x, m0, M, stage_index, sb + slot * kSbStage);
    } else {
      copy_x_permuted(x, m0, M, stage_index, sb + slot * kSbStage);
    }
  };
  // Stage stage_index's weights, scales and zeros into slot `slot`.
  const auto stage_w = [&](int stage_index, int slot, unsigned full) {
    uint4* stage = ring + slot * kStagePieces;
    if constexpr (kTmaW) {
      if (copy_thread() == 0) {
        // The consumers read the slot's words, scales and zeros with ordinary loads (the generic
        // proxy) before their arrival on its empty barrier; the boxes write through the async
        // proxy, so the proxy fence orders the two (as for the parts, ws_produce_parts, where
        // the race showed). Here a whole stage separates them and none showed; the fence cost
        // 0.2-0.7% on six 64-row configs (H100).
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        // One chunk's words, scales and zeros: the boxes of the three maps (the scales and zeros
        // once a stage where its chunks share a group, kStageSharesGroup).
        constexpr unsigned kSZChunks = kStageSharesGroup ? 1 : kChunksPerStage;
        announce_bytes(full, (kChunksPerStage * kWPieces + kSZChunks * (kSPieces + kZPieces)) * 16);
#pragma unroll
        for (int kk = 0; kk < kChunksPerStage; ++kk) {
          const int kc = stage_index * kChunksPerStage + kk;
          const unsigned chunk = smem_address(stage + kk * kChunkPieces);
          tma_load_words(chunk, maps.w, kc, first_tile, full);
          if (kk >= static_cast<int>(kSZChunks)) continue;
          // The chunk's first group; past k (a stage past the end) the boxes arrive as zeros.
          const int group = kc * 64 / kGroup;
          tma_load_box(chunk + kWPieces * 16, maps.s, first_tile * 16, group, full);
          if constexpr (kZeroBytes > 0)
            tma_load_box(chunk + (kWPieces + kSPieces) * 16, maps.z, first_tile * 16, group, full);
        }
      }
    } else {
      copy_weights(qweight, scales, zeros, first_tile, stage_index, stage);
    }
  };
  int head = 0;
  if (seq == 0) {
    QJIT_WS_START(9);
    head = min(count, kStages);
#pragma unroll 1
    for (int s = 0; s < head; ++s) {
      stage_w(begin + s, s % kStages, bars.full_of(s));
      if (s == 0) QJIT_WS_START(11);
    }
    QJIT_WS_START(4);
    qjit::wait_for_previous_grid();
    QJIT_WS_START(5);
#pragma unroll 1
    for (int s = 0; s < head; ++s) {
      stage_x(begin + s, s % kStages, bars.full_of(s));
      arrive_full(bars.full_of(s));
    }
    QJIT_WS_START(6);
  }
#pragma unroll 1
  for (int s = head; s < count; ++s) {
    const unsigned q = seq + s;
    QJIT_WS_CLOCK(q, 0);
    if (q >= kStages) mbarrier_wait_or_trap(bars.empty_of(q), WsBarriers::phase_of(q - kStages));
    QJIT_WS_CLOCK(q, 1);
    const int slot = static_cast<int>(q % kStages);
    stage_w(begin + s, slot, bars.full_of(q));
    QJIT_WS_CLOCK(q, 3);
    stage_x(begin + s, slot, bars.full_of(q));
    arrive_full(bars.full_of(q));
    QJIT_WS_CLOCK(q, 2);
  }
}

// --- consumers ---------------------------------------------------------------------

// Waits for stage q's copies. x copied by cp.async reaches the tensor cores
// through the async proxy, so the proxy fence follows the acquire; the
// tensor copy engine writes x through the async proxy itself.
__device__ __forceinline__ void ws_wait_stage(const WsBarriers& bars, unsigned q) {
  mbarrier_wait_or_trap(bars.full_of(q), WsBarriers::phase_of(q));
  if constexpr (!kTmaX) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Stage it (the block's stage q) multiplied from A buffer B; then, once the
// warpgroup's wgmma of stage q - 1 are done, its slot released, and stage
// it + 1 dequantised into the other buffer.
template <int B>
__device__ __forceinline__ void ws_step(int it, unsigned q, int begin, int end, int bt, int lane, const uint4* ring,
                                        const unsigned char* sb, const WsBarriers& bars, ABuffers& a,
                                        float (&acc)[kAcc]) {
  if constexpr (kASmem) warpgroup_sync(bt / 4);  // the warpgroup's stores of stage it into sA
  QJIT_WS_CLOCK(q, 0);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  multiply_stage<B>(a, sb + (q % kStages) * kSbStage, acc);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  QJIT_WS_CLOCK(q, 1);
  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  QJIT_WS_CLOCK(q, 2);
  if (it > begin) mbarrier_arrive(bars.empty_of(q - 1));
  if (it + 1 < end) {
    ws_wait_stage(bars, q + 1);
    QJIT_WS_CLOCK(q, 3);
    dequant_stage<1 - B>(ring + ((q + 1) % kStages) * kStagePieces, it + 1, bt, lane, a);
  }
}

// Sums stages [begin, begin + count) of one output tile (the block's stages
// seq ..) into acc, releasing every slot it used.
__device__ __forceinline__ void ws_consume_tile(int begin, int count, unsigned seq, int bt, int lane,
                                                const uint4* ring, unsigned char* sb, const WsBarriers& bars,
                                                float (&acc)[kAcc]) {
  const int end = begin + count;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  fence_acc(acc);
  ABuffers a;
  a.smem = sb + kStages * kSbStage + (bt / 4) * 2 * kSaStage;  // unused without kASmem
  ws_wait_stage(bars, seq);
  if (seq == 0) QJIT_WS_START(7);
  dequant_stage<0>(ring + (seq % kStages) * kStagePieces, begin, bt, lane, a);
  // Unrolled by two so the A buffer index is a constant.
#pragma unroll 1
  for (int i = 0; i < count / 2; ++i) {
    ws_step<0>(begin + 2 * i, seq + 2 * i, begin, end, bt, lane, ring, sb, bars, a, acc);
    ws_step<1>(begin + 2 * i + 1, seq + 2 * i + 1, begin, end, bt, lane, ring, sb, bars, a, acc);
  }
  if (count % 2 == 1) ws_step<0>(end - 1, seq + count - 1, begin, end, bt, lane, ring, sb, bars, a, acc);
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  fence_acc(acc);
  mbarrier_arrive(bars.empty_of(seq + count - 1));
}

// --- the stream schedule's parts through the ring (kStream) -------------------------
//
// A block completes a split tile in its last piece (stream_run's order), so
// when the consumers finish that piece's mainloop the producer has nothing
// left to copy. It waits for the tile's flag then, while the consumers still
// multiply, and copies the other blocks' parts into the sB slots by bulk
// copies (cp.async.bulk, one per slot) as the consumers free them: the
// parts are more stages of the ring, on the same full and empty barriers.
// The consumers add them from shared memory in block order, as the reads
// through L2 did (the same sums, bit for bit). Read through L2 by the
// consumers, after the mainloop, the parts took ~3400 cycles each at 256
// rows (the loads' latency under the other SMs' streams), most of a
// completing block's finish, and the kernel's end waits for the blocks that
// complete. Through the ring a part takes ~1900, and 30 launches back to
// back ran 7.7-9.2% faster at M = 256 (4096 x 11008 and 11008 x 4096) and
// 6.3% at M = 512 (4096 x 11008; qjit_ws_probe, H100).
//
// A part ([kAcc / 4][kMmaThreads] float4, piece_of) fills kPartSlots slots
// of kPartSlotBytes, each the float4 rows j of a contiguous range.
constexpr int kPartBytes = kAcc * 4 * kMmaThreads;
constexpr int kPartSlots = kPartBytes > kSbStage ? kPartBytes / kSbStage : 1;
constexpr int kPartSlotBytes = kPartBytes / kPartSlots;
constexpr int kPartSlotQuads = kAcc / 4 / kPartSlots;
static_assert(kPartSlots * kPartSlotBytes == kPartBytes && kPartSlots * kPartSlotQuads == kAcc / 4 &&
                  kPartSlotBytes <= kSbStage && kPartSlotBytes % 16 == 0,
              "a part fills whole sB slots");

// The producer, after its last piece: if that piece completes a split tile,
// the other parts into the ring as the block's stages seq, seq + 1, ...
__device__ __forceinline__ void ws_produce_parts(int M, void* workspace, unsigned seq, unsigned char* sb,
                                                 const WsBarriers& bars) {
  const StreamRun head = stream_run(M, 0);
  if (head.pieces == 0) return;
  const StreamRun r = stream_run(M, head.pieces - 1);
  if (whole_tile(r) || !completes_tile(r)) return;
  int first, last;
  parts_of(r, first, last);
  if (copy_thread() == 0) {
    acquire_pieces(static_cast<unsigned*>(workspace) + r.piece.t, static_cast<unsigned>(last - first));
    // The parts were stored through the generic proxy; the bulk copies read them through the async one.
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }
#pragma unroll 1
  for (int v = first; v < last; ++v)
#pragma unroll 1
    for (int s = 0; s < kPartSlots; ++s, ++seq) {
      if (seq >= kStages) mbarrier_wait_or_trap(bars.empty_of(seq), WsBarriers::phase_of(seq - kStages));
      if (copy_thread() == 0) {
        // The consumers read the slot's last part with ordinary loads (the generic proxy) before
        // their arrival; the bulk copy writes it through the async proxy, and only a proxy fence
        // orders the two (PTX ISA, memory consistency model: proxies). Without it the copy could
        // land first: 3-stage configs, whose parts reuse the ring, summed a later slot's part in
        // 2 of 216 verifications, 0 of 216 with it (12 configs, H100).
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        announce_bytes(bars.full_of(seq), kPartSlotBytes);
        bulk_load(smem_address(sb + (seq % kStages) * kSbStage), piece_of(workspace, v) + s * kPartSlotQuads * kMmaThreads,
                  kPartSlotBytes, bars.full_of(seq));
      }
      mbarrier_arrive(bars.full_of(seq));  // a bulk copy only: plain (see arrive_full)
    }
}

// The consumers' side: parts [first, last) added to acc from the ring, the
// block's stages seq, seq + 1, ... (seq is advanced past them).
__device__ __forceinline__ void ws_add_parts(int first, int last, unsigned& seq, int p, const unsigned char* sb,
                                             const WsBarriers& bars, float (&acc)[kAcc]) {
#pragma unroll 1
  for (int v = first; v < last; ++v) {
#pragma unroll
    for (int s = 0; s < kPartSlots; ++s, ++seq) {
      ws_wait_stage(bars, seq);
      if (v == first && s == 0) QJIT_WS_PIECE(p, 6, QJIT_WS_NOW());
      const float4* part = reinterpret_cast<const float4*>(sb + (seq % kStages) * kSbStage) + threadIdx.x;
#pragma unroll
      for (int jj = 0; jj < kPartSlotQuads; ++jj) {
        const int j = s * kPartSlotQuads + jj;
        const float4 q = part[jj * kMmaThreads];
        acc[4 * j] += q.x, acc[4 * j + 1] += q.y, acc[4 * j + 2] += q.z, acc[4 * j + 3] += q.w;
      }
      mbarrier_arrive(bars.empty_of(seq));
    }
  }
}
