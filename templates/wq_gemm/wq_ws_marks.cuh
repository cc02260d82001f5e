#pragma once
// Probe marks of the warp-specialised wgmma kernel (wq_wgmma_ws.cuh and the
// stream schedule's finish in wq_stream_schedule.cuh). Empty unless the kernel is
// compiled with QJIT_WS_CLOCKS, as tests/probe/ws_probe.cpp does.
//
// Stage clocks: lane 0 of the first warp of warpgroup r (consumers 0 .. kGroups - 1, then the producer) records
// %clock64 for the block's stage q at event e:
//   consumer  0 A of stage q ready (before its wgmma), 1 wgmma issued,
//             2 the wgmma of stage q - 1 done, 3 stage q + 1's copies landed
//   producer  0 before the wait for the slot, 1 the slot free, 2 copies issued,
//             3 the weights' copies issued (x's follow)
#ifdef QJIT_WS_CLOCKS
constexpr int kClockBlocks = 1024, kClockStages = 96, kClockEvents = 4;
__device__ long long qjit_ws_clocks[kClockBlocks][kGroups + 1][kClockStages][kClockEvents];
__device__ __forceinline__ void ws_clock(unsigned q, int event) {
  const unsigned block = blockIdx.x + gridDim.x * blockIdx.y;
  if (threadIdx.x % 128 != 0 || block >= kClockBlocks || q >= kClockStages) return;
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  qjit_ws_clocks[block][threadIdx.x / 128][q][event] = t;
}
#define QJIT_WS_CLOCK(q, event) ws_clock(q, event)
// The block's timeline, kept by thread 0 (lane 0 of consumer 0):
//   qjit_ws_block[b]       entry and exit in %clock64, then in %globaltimer (ns,
//                          comparable across SMs); then the start's steps in
//                          %clock64: 4 the producer's copies of the first
//                          stages' weights issued, 5 the previous grid done, 6
//                          their x issued, 7 consumer 0 sees stage 0 landed,
//                          8 the producer past the block barrier, 9 the
//                          producer at its first tile (the schedule computed),
//                          10 the producer past its register move, 11 the
//                          first stage's weights issued
//   qjit_ws_pieces[b][p]   piece p (a tile, or part of one under the stream
//                          schedule): 0 its start, 1 its mainloop done, 2 its
//                          sums stored or completed, 3 its kind (0 a whole
//                          tile, 1 a part stored to the workspace, 2 the part
//                          that completes a tile), 4 its first stage q, 5 its
//                          stages; for a stored part 6 its stores issued, 7
//                          past the finishers' barrier (2 comes after the
//                          release); for a completing part 6 the flag
//                          acquired (under ws: the first part landed in
//                          the ring), 7 the other parts added (2 after y)
constexpr int kClockPieces = 8, kPieceEvents = 8;
__device__ long long qjit_ws_block[kClockBlocks][12];
__device__ long long qjit_ws_pieces[kClockBlocks][kClockPieces][kPieceEvents];
__device__ __forceinline__ bool ws_timeline_thread() {
  return threadIdx.x == 0 && blockIdx.x + gridDim.x * blockIdx.y < kClockBlocks;
}
__device__ __forceinline__ long long ws_now() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void ws_block_mark(int exit) {
  if (!ws_timeline_thread()) return;
  long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  qjit_ws_block[blockIdx.x + gridDim.x * blockIdx.y][exit] = ws_now();
  qjit_ws_block[blockIdx.x + gridDim.x * blockIdx.y][2 + exit] = ns;
}
// Step `event` (4 to 11) of the start, by the producer's first thread or consumer 0's.
__device__ __forceinline__ void ws_start_mark(int event) {
  const unsigned block = blockIdx.x + gridDim.x * blockIdx.y;
  if ((threadIdx.x == 0 || threadIdx.x == kMmaThreads) && block < kClockBlocks) qjit_ws_block[block][event] = ws_now();
}
__device__ __forceinline__ void ws_piece_mark(int p, int event, long long value) {
  if (ws_timeline_thread() && p < kClockPieces) qjit_ws_pieces[blockIdx.x + gridDim.x * blockIdx.y][p][event] = value;
}
#define QJIT_WS_BLOCK(exit) ws_block_mark(exit)
#define QJIT_WS_PIECE(p, event, value) ws_piece_mark(p, event, value)
#define QJIT_WS_NOW() ws_now()
#define QJIT_WS_START(event) ws_start_mark(event)
#else
#define QJIT_WS_START(event)
#define QJIT_WS_CLOCK(q, event)
#define QJIT_WS_BLOCK(exit)
#define QJIT_WS_PIECE(p, event, value)
#define QJIT_WS_NOW() 0
#endif
