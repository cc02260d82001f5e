// qjit runtime: launch tuned, specialised kernels on device pointers.
//
//   qjit::FusedFfnShape s{.d = 4096, .h = 11008, .m = 1, .dtype = qjit::DType::fp16};
//   qjit::fused_ffn(s, {.x = x, .w1 = w1, .w3 = w3, .y = y}, stream);
//
// Each op takes its shape (what is baked into the kernels) and one argument
// struct (device pointers and run-time sizes).
//
// The first call for a shape looks the kernel up in the cache
// ($QJIT_CACHE or ~/.cache/qjit/kernels.db; see set_cache_path); later calls
// hit an in-memory map. A shape never tuned is compiled with the op's default
// config and stored marked untuned (run `qjit tune` to tune it).
// Every entry point validates its arguments and throws qjit::Error naming the
// bad value; nothing is launched then.
#pragma once
#include <cstdint>
#include <string>
#include "qjit/error.h"

struct CUstream_st;  // CUstream / cudaStream_t

namespace qjit {

// The values of one call's arguments, in the order of the op's argument
// list (codegen::OpDef::args): each argument struct below packs itself, the
// one place its fields meet positions.
struct ArgPack {
  static constexpr int kMax = 16;
  union Value {
    unsigned long long ptr;  // a device pointer (CUdeviceptr)
    int i32;
  };
  const char* op = "";  // names the op in error messages
  Value values[kMax] = {};
  uint32_t int_mask = 0;  // bit i: values[i] is an int
  int count = 0;

  explicit ArgPack(const char* op_name) : op(op_name) {}
  ArgPack& ptr(const void* p) {
    if (count < kMax) values[count].ptr = reinterpret_cast<uintptr_t>(p);
    ++count;  // more than kMax: the runtime refuses the pack by its count
    return *this;
  }
  ArgPack& i32(int v) {
    if (count < kMax) int_mask |= 1u << count, values[count].i32 = v;
    ++count;
    return *this;
  }
};

enum class DType { fp16, bf16, fp32, mixed };  // mixed: fp32 activations/output, fp16 weights
const char* to_string(DType t);

// The gate activation of fused_ffn: SiLU with expf, or an FP16 SiLU table
// (qjit's fitted cut points, or the seed's) for models calibrated against one.
enum class Activation { silu, silu_lut, silu_lut_seed };
const char* to_string(Activation a);

// y[m, h] = SiLU(x[m, d] · W1[h, d]ᵀ) ⊙ (x[m, d] · W3[h, d]ᵀ), fp32 accumulation.
struct FusedFfnShape {
  int d = 0;
  int h = 0;
  int m = 1;  // 1..8
  DType dtype = DType::fp16;
  Activation act = Activation::silu;
};
// fused_ffn's arguments: dense W1, W3 [h, d] in w1, w3 (scales and zeros
// unused); quantized ones (QuantFfnShape) as wq_gemm's packed words, scales
// and zeros of each matrix.
struct FusedFfnArgs {
  const void* x = nullptr;
  const void* w1 = nullptr;
  const void* scales1 = nullptr;
  const void* zeros1 = nullptr;
  const void* w3 = nullptr;
  const void* scales3 = nullptr;
  const void* zeros3 = nullptr;
  void* y = nullptr;
  ArgPack pack() const {
    return ArgPack("fused_ffn").ptr(x).ptr(w1).ptr(scales1).ptr(zeros1).ptr(w3).ptr(scales3).ptr(zeros3).ptr(y);
  }
};
void fused_ffn(const FusedFfnShape& shape, const FusedFfnArgs& args, CUstream_st* stream = nullptr);
inline void fused_ffn(const FusedFfnShape& shape, const void* x, const void* w1, const void* w3, void* y,
                      CUstream_st* stream = nullptr) {
  FusedFfnArgs a;
  a.x = x, a.w1 = w1, a.w3 = w3, a.y = y;
  fused_ffn(shape, a, stream);
}

// y[i] = f(x[i]) for i < n by an FP16 lookup table with linear interpolation
// (seed 003 semantics, bit-exact with qjit's CPU reference). fn: silu, gelu,
// gelu_tanh, sigmoid, tanh, exp, softplus, sin, cos; cuts: "default" (qjit's
// fitted cut points), "seed" (the seed's SiLU table) or 11 fp16 hex values
// "a:b:...". in/out: fp16, bf16, fp32 (DType::mixed is not a element type here).
struct FpLutShape {
  std::string fn = "silu";
  long long n = 0;
  DType in = DType::fp16;
  DType out = DType::fp16;
  std::string cuts = "default";
};
struct FpLutArgs {
  const void* x = nullptr;
  void* y = nullptr;
  ArgPack pack() const { return ArgPack("fp_lut").ptr(x).ptr(y); }
};
void fp_lut(const FpLutShape& shape, const FpLutArgs& args, CUstream_st* stream = nullptr);
inline void fp_lut(const FpLutShape& shape, const void* x, void* y, CUstream_st* stream = nullptr) {
  fp_lut(shape, FpLutArgs{x, y}, stream);
}

// Packed 4-bit weights -> dense out[k][n] = (q - z) * s, rounded once to the
// type `out` ("fp16", "bf16", or "scales": the scales' type). layout "awq":
// qweight int32 [K, N/8] (AWQ's interleaved nibbles), qzeros int32 [K/g, N/8];
// layout "gptq": qweight int32 [K/8, N], qzeros int32 [K/g, N/8] in plain
// order, or symmetric (zero 8, qzeros unused and may be null). scales
// [K/g, N] fp16 or bf16.
struct AwqDequantShape {
  int k = 0, n = 0, g = 128;
  std::string layout = "awq";  // "awq" | "gptq"
  bool symmetric = false;      // gptq only
  DType scales = DType::fp16;  // fp16 | bf16
  std::string out = "scales";  // "scales" | "fp16" | "bf16"
};
struct AwqDequantArgs {
  const void* qweight = nullptr;
  const void* qzeros = nullptr;  // may be null for symmetric gptq
  const void* scales = nullptr;
  void* out = nullptr;
  ArgPack pack() const { return ArgPack("awq_dequant").ptr(qweight).ptr(qzeros).ptr(scales).ptr(out); }
};
void awq_dequant(const AwqDequantShape& shape, const AwqDequantArgs& args, CUstream_st* stream = nullptr);
inline void awq_dequant(const AwqDequantShape& shape, const void* qweight, const void* qzeros, const void* scales,
                        void* out, CUstream_st* stream = nullptr) {
  awq_dequant(shape, AwqDequantArgs{qweight, qzeros, scales, out}, stream);
}

// y[m][n] = clamp(Σ_k x[m][k]·w[k][n] + bias[n]) (+ residual[m][n]) for m < M, W quantised
// with `bits` bits in groups of g along k, in qjit's native layout (see
// tuner/reference/wq_gemm.h; `qjit repack` converts awq/gptq checkpoints).
// zero: "sym" w = (q - 2^(bits-1))·s; "int" w = (q - z)·s with zeros one byte
// each [K/g][N]; "float" w = (q - 2^(bits-1))·s + o with offsets [K/g][N] in
// the scales' type (passed as `zeros`). scales [K/g][N] fp16 or bf16; x, bias
// and y of type `x` (fp16, bf16 or fp32); bias and, for sym, zeros may be null.
// act: "none", "relu", "relu6". residual [M][N] of type `x` is added after the
// clamp when shape.residual (a transformer block's skip connection); it may be
// y itself. Each M uses the kernel tuned for its bucket (next power of two, at
// most 1024; 1024 serves any M).
struct WqGemmShape {
  int k = 0, n = 0;
  int bits = 4, g = 128;
  std::string zero = "int";
  DType scales = DType::fp16;
  DType x = DType::fp16;
  bool bias = false;
  std::string act = "none";
  bool residual = false;
};
// m: rows of x in this call (0 launches nothing).
struct WqGemmArgs {
  const void* x = nullptr;
  const void* qweight = nullptr;
  const void* scales = nullptr;
  const void* zeros = nullptr;  // null for zero = "sym"
  const void* bias = nullptr;
  const void* residual = nullptr;
  void* y = nullptr;
  int m = 0;
  ArgPack pack() const {
    return ArgPack("wq_gemm").ptr(x).ptr(qweight).ptr(scales).ptr(zeros).ptr(bias).ptr(residual).ptr(y).i32(m);
  }
};
void wq_gemm(const WqGemmShape& shape, const WqGemmArgs& args, CUstream_st* stream = nullptr);
inline void wq_gemm(const WqGemmShape& shape, int m, const void* x, const void* qweight, const void* scales,
                    const void* zeros, const void* bias, const void* residual, void* y, CUstream_st* stream = nullptr) {
  wq_gemm(shape, WqGemmArgs{x, qweight, scales, zeros, bias, residual, y, m}, stream);
}

// fused_ffn on group-quantized W1 and W3: y[m, h] = SiLU(x·W1ᵀ) ⊙ (x·W3ᵀ),
// each matrix as wq_gemm's tensors with k = d, n = h (native layout; d % 64 ==
// 0, h % 16 == 0). x and y of type `x`; m = 1..8. The full FFN adds
// wq_gemm(k = h, n = d, residual) for W2.
struct QuantFfnShape {
  int d = 0, h = 0;
  int m = 1;  // 1..8
  int bits = 4, g = 128;
  std::string zero = "int";
  DType scales = DType::fp16;
  DType x = DType::fp16;
  Activation act = Activation::silu;
};
struct QuantMatrix {
  const void* qweight = nullptr;
  const void* scales = nullptr;
  const void* zeros = nullptr;  // null for zero = "sym"
};
void fused_ffn(const QuantFfnShape& shape, const FusedFfnArgs& args, CUstream_st* stream = nullptr);
inline void fused_ffn(const QuantFfnShape& shape, const void* x, const QuantMatrix& w1, const QuantMatrix& w3, void* y,
                      CUstream_st* stream = nullptr) {
  fused_ffn(shape, FusedFfnArgs{x, w1.qweight, w1.scales, w1.zeros, w3.qweight, w3.scales, w3.zeros, y}, stream);
}

// Fixed-point GRU forward (../shared/seeds/000_*), bit-exact with the CPU
// reference: h_t for t = 1..T of N sequences. `params` is the layer's
// quantization document (JSON text: bit widths, shifts, zero points, LUTs;
// see codegen/ops/gru_params.h); every value in it is baked into the kernels.
// Tensors hold integer codes within each tensor's bit range: x int32 [T][N][C],
// h0 int32 [N][H], W int8 [3H][C], R int8 [3H][H] (gate rows u, r, n), bw and
// br int32 [3H], y int32 [T][N][H]; y_float (optional, null to skip) float32
// [T][N][H], the dequantized states (y − zp_h)·2^−shift_h, exact.
struct GruQuantShape {
  int t = 0, n = 0, c = 0, h = 0;
  std::string params;
};
struct GruQuantArgs {
  const void* x = nullptr;
  const void* h0 = nullptr;
  const void* W = nullptr;
  const void* R = nullptr;
  const void* bw = nullptr;
  const void* br = nullptr;
  void* y = nullptr;
  void* y_float = nullptr;
  ArgPack pack() const { return ArgPack("gru_quant").ptr(x).ptr(h0).ptr(W).ptr(R).ptr(bw).ptr(br).ptr(y).ptr(y_float); }
};
void gru_quant(const GruQuantShape& shape, const GruQuantArgs& args, CUstream_st* stream = nullptr);

// y[m][n] = clamp(Σ_blocks dequant(qx · qw) + bias[n]) for m < M: x [M][K]
// (fp16, bf16 or fp32) quantized on the fly per row and block of `block` k
// (quant_a "offset": seed 002's QuantA, x ≈ q·s + o; "symmetric": q·s), W
// int8 codes wq [N][K] with per (block, column) parameters, block-major:
// w_scale and w_offset float32 [K/block][N], w_sum int32 [K/block][N] (Σ of
// the block's codes; tuner/reference/w8a8_quant.h defines both block rules
// and packs W). w_offset is read only with quant_w "offset", w_sum only with
// quant_a "offset" (null otherwise); bias [N] and y [M][N] of x's type; act
// "none", "relu", "relu6". Each M uses the kernels tuned for its bucket (next
// power of two, at most 4096; 4096 serves any M, 4096 rows at a time).
// format "e4m3" (compute capability 8.9+): x quantized to FP8 e4m3 per row
// and block of 128 k (scale = amax/448), wq e4m3 codes [N][K] (bytes) and
// w_scale float32 per 128 × 128 tile, block-major [K/128][N/128]
// (tuner/reference/w8a8_fp8.h); block must be 128, N a multiple of 128;
// quant_a and quant_w do not apply, w_offset and w_sum are not read (null).
struct W8a8GemmShape {
  int k = 0, n = 0;
  int block = 128;
  DType x = DType::fp16;
  std::string format = "int8";     // "int8" | "e4m3"
  std::string quant_a = "offset";  // "offset" | "symmetric" (int8)
  std::string quant_w = "offset";  // "offset" | "symmetric" (int8)
  bool bias = false;
  std::string act = "none";
};
struct W8a8GemmArgs {
  const void* x = nullptr;
  const void* wq = nullptr;
  const void* w_scale = nullptr;
  const void* w_offset = nullptr;  // null for quant_w = "symmetric"
  const void* w_sum = nullptr;     // null for quant_a = "symmetric"
  const void* bias = nullptr;
  void* y = nullptr;
  int m = 0;
  ArgPack pack() const {
    return ArgPack("w8a8_gemm").ptr(x).ptr(wq).ptr(w_scale).ptr(w_offset).ptr(w_sum).ptr(bias).ptr(y).i32(m);
  }
};
void w8a8_gemm(const W8a8GemmShape& shape, const W8a8GemmArgs& args, CUstream_st* stream = nullptr);

// conv2d with quantized weights (../shared/seeds/002_*, CONV_FpAInt4B):
// y = clamp(bias[co] + Σ_{fy, fx, ci} x[b][ci][iy][ix] · w[co][ci][fy][fx]),
// iy = oy·stride_h − pad_h + fy·dil_h (ix likewise), zero padding, with
// w = q·s + o, one (scale, offset) per block of `block` input channels
// (block = ci: per channel). x and y in `layout` ("nchw": [n][c][h][w],
// "nhwc": [n][h][w][c]) and type `x` (fp16 or fp32). qweight: the seed's
// packed OHWI bytes, int8 [co][kh][kw][ci] or int4 [co][kh][kw][ci/2] with
// channel 2j in the high nibble, each nibble code + 8 (tuner/reference/qconv2d.h
// pack_qconv2d_weights converts [co][ci][kh][kw] codes). scales, offsets
// float32 [co][ci/block]; bias float32 [co] or null (shape.bias says which).
// act: "none", "relu", "relu6". Output size: oh = (h + 2·pad_h −
// dil_h·(kh − 1) − 1) / stride_h + 1 (ow likewise).
struct QConv2dShape {
  int n = 1, ci = 0, h = 0, w = 0, co = 0;
  int kh = 3, kw = 3;
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  std::string layout = "nchw";  // "nchw" | "nhwc"
  int bits = 4, block = 32;
  DType x = DType::fp16;        // fp16 | fp32
  bool bias = false;
  std::string act = "none";
};
struct QConv2dArgs {
  const void* x = nullptr;
  const void* qweight = nullptr;
  const void* scales = nullptr;
  const void* offsets = nullptr;
  const void* bias = nullptr;  // null unless shape.bias
  void* y = nullptr;
  ArgPack pack() const { return ArgPack("qconv2d").ptr(x).ptr(qweight).ptr(scales).ptr(offsets).ptr(bias).ptr(y); }
};
void qconv2d(const QConv2dShape& shape, const QConv2dArgs& args, CUstream_st* stream = nullptr);

// While a Preload lives on a thread, every entry point called on that thread
// checks its arguments and makes its kernels ready (looked up, compiled on a
// miss, loaded into the current context) together with the stream's
// workspace, and launches nothing. Call each shape once under it before
// capturing a CUDA graph: capture then never compiles, stores or allocates.
//   { qjit::Preload ready; qjit::wq_gemm(shape, args, stream); }
class Preload {
 public:
  Preload();
  ~Preload();
  Preload(const Preload&) = delete;
  Preload& operator=(const Preload&) = delete;
};

// Use another cache file for this process (default: $QJIT_CACHE or ~/.cache/qjit/kernels.db).
void set_cache_path(const std::string& path);

}  // namespace qjit
