#pragma once
// Equal runs of work units over a persistent grid, and the flag through
// which pieces of one output split between blocks are counted: shared by the
// small-M balanced schedule (wq_balanced.cuh) and the wgmma kernel's stream
// schedule (wq_stream_schedule.cuh).
//
// Worker w of `workers` takes units [w·U/W, (w+1)·U/W) of U = `units`. The
// blocks that do not complete a split output store their piece, then
// release its flag (one count each); the block that completes it acquires
// the flag once every other piece is counted and sets it back to 0 for the
// next launch, which touches it only after waiting for this grid
// (templates/common/qjit_pieces.cuh).

// First unit of worker w's run.
__device__ __forceinline__ int run_start(long long w, long long units, int workers) {
  return static_cast<int>(w * units / workers);
}

// The worker whose run holds unit u: the largest w with w·U/W <= u, i.e. w·U < (u + 1)·W.
__device__ __forceinline__ int worker_of(long long u, long long units, int workers) {
  return static_cast<int>(((u + 1) * workers - 1) / units);
}

using qjit::acquire_pieces;  // qjit_pieces.cuh
using qjit::release_piece;
