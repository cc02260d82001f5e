#pragma once
// Probe marks of gru_quant's cluster plan: empty unless the kernel is
// compiled with QJIT_GRU_CLOCKS, as tests/probe/gru_probe.cpp does.
//
// Thread 0 of each block records %clock64 at the events of step t
// (t < kClockSteps) in shared memory (a global store before the barrier's
// arrive would hold the arrive, see the kernel), copied out at the end:
//   0 step start (past the previous barrier)   1 its own GEMM task done
//   2 every GEMM task done (__syncthreads)     3 its gate arithmetic done
//   4 every unit written (__syncthreads)       5 its pushes issued
//   6 past the global stores and loads         7 past the input projection
// (the wait for the peers' units follows 7: next step's 0 minus 7).
#ifdef QJIT_GRU_CLOCKS
constexpr int kClockSteps = 64, kClockEvents = 8, kClockBlocks = 16;
__device__ long long qjit_gru_clocks[kClockBlocks][kClockSteps][kClockEvents];
#define QJIT_GRU_CLOCK_STORAGE __shared__ long long gru_clocks[kClockSteps][kClockEvents];
#define QJIT_GRU_CLOCK(t, event)                                               \
  do {                                                                         \
    if (threadIdx.x == 0 && (t) < kClockSteps) {                               \
      long long c_;                                                            \
      asm volatile("mov.u64 %0, %%clock64;" : "=l"(c_)::"memory");             \
      gru_clocks[t][event] = c_;                                               \
    }                                                                          \
  } while (0)
#define QJIT_GRU_CLOCK_FLUSH()                                                 \
  do {                                                                         \
    __syncthreads();                                                           \
    if (blockIdx.x < kClockBlocks)                                             \
      for (int i = threadIdx.x; i < kClockSteps * kClockEvents; i += blockDim.x) \
        (&qjit_gru_clocks[blockIdx.x][0][0])[i] = (&gru_clocks[0][0])[i];      \
  } while (0)
#else
#define QJIT_GRU_CLOCK_STORAGE
#define QJIT_GRU_CLOCK(t, event) \
  do {                           \
  } while (0)
#define QJIT_GRU_CLOCK_FLUSH() \
  do {                         \
  } while (0)
#endif
