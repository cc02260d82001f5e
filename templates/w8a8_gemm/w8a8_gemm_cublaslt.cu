// w8a8_gemm format=e4m3 through cuBLASLt's block-scaled FP8 GEMM (the
// "cublaslt" family): this module holds only the plan's first step, which
// lays the operands out as cuBLASLt's 1×128 (VEC128_32F) and 128×128
// (BLK128x128_32F) scale modes read them; the plan's second step is the
// library's matmul (codegen/op.h CublasLtFp8Gemm, runtime/cublaslt.cpp).
//
// One launch: blocks 0 .. gridDim.x − 2 quantize x exactly as the other
// families do (w8a8_quant_a.cuh), its scales written [kBlocks][M rounded up
// to 4] for the call's M rather than the bucket's padded rows; the last block copies W's
// tile scales from the op's [kBlocks][kWScaleCols] to cuBLASLt's
// [kWScaleCols][kBlocks] (a few thousand floats).
using namespace qjit_spec;
#include "qjit/w8a8_gemm/w8a8_quant_a.cuh"

static_assert(kFp8 && kBlock == 128, "the cublaslt family runs format=e4m3 (blocks of 128) only");

extern "C" __global__ void __launch_bounds__(32 * kQuantWarps)
qjit_w8a8_quant_a_lt(const TX* __restrict__ x, int M, unsigned char* __restrict__ codes, float* __restrict__ a_scale,
                     const float* __restrict__ w_scale, float* __restrict__ w_scale_t) {
  // As qjit_w8a8_quant_a: x and w_scale may come from the previous kernel,
  // and the previous call's GEMM reads what this writes.
  qjit::wait_for_previous_grid();
  qjit::allow_next_grid();
  if (blockIdx.x + 1 == gridDim.x) {
    for (int i = threadIdx.x; i < kWScaleCols * kBlocks; i += blockDim.x) {
      const int tile = i / kBlocks, block = i % kBlocks;
      w_scale_t[i] = w_scale[block * kWScaleCols + tile];
    }
    return;
  }
  // x's scales [kBlocks][ld], ld = M rounded up to 4: cuBLASLt declined the 1×128 mode at M = 1 and 257
  // and ran it at 16, 300 and 4096 (H100, cuBLASLt 13.1), which fits its scale rows being 16-byte
  // aligned; TransformerEngine's GEMM-ready 1×128 scales are padded the same way (inferred, not documented).
  const long long item = static_cast<long long>(blockIdx.x) * kQuantWarps + threadIdx.x / 32;
  w8a8_quantize_block(x, M, item, reinterpret_cast<signed char*>(codes), a_scale, nullptr, nullptr, (M + 3) / 4 * 4);
}
