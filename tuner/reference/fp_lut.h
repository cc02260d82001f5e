// CPU reference of fp_lut: the table lookup of ../shared/seeds/003_* in fp32,
// written step by step. templates/common/qjit_lut.cuh follows the same steps
// and must equal this bit for bit:
//   1. sin/cos: x = fmod(x, 2π_f); x -= 2π_f if x > π_f, += 2π_f if x < -π_f
//   2. NaN → NaN; x = clamp(x, c0, c10); xh = fp16(x) (round to nearest even)
//   3. xh <= c0 → T[0]; xh >= c10 → T[258]; else i = last k with c_k <= xh
//   4. p = (xh - c_i) * s_i; j = clamp(floor(p), 0, len_i); j+ = min(j+1, len_i)
//      α = clamp(p - j, 0, 1)
//   5. y = fma(T[pre_i + j+] - T[pre_i + j], α, T[pre_i + j])   (one rounding)
//   6. y = clamp(y, -65504, 65504), then rounded to the output type.
// Every operation is a single IEEE fp32 operation; there is no contraction
// other than the explicit fma of step 5.
#pragma once
#include <cstdint>
#include "codegen/ops/fp_lut_table.h"

namespace qjit::tuner {

float lut_lookup(const codegen::lut::Table& t, float x);  // steps 1-5
float lut_apply(const codegen::lut::Table& t, float x);   // steps 1-6 before the output rounding

// Output element bits (fp16/bf16 in the low 16 bits, or fp32 bits) for one
// input element given as bits of `in`.
uint32_t lut_reference_bits(const codegen::lut::Table& t, const std::string& in, const std::string& out,
                            uint32_t x_bits);

}  // namespace qjit::tuner
