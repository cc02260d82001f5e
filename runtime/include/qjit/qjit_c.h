/* qjit C API, for FFI. Same semantics as qjit.h; errors are returned as a
 * non-zero status and described by qjit_last_error() (per thread). */
#ifndef QJIT_C_H
#define QJIT_C_H
#ifdef __cplusplus
extern "C" {
#endif

/* QJIT_ERROR_NOT_TUNED: QJIT_REQUIRE_TUNED=1 is set and the shape has no tuned kernel for this GPU. */
typedef enum { QJIT_OK = 0, QJIT_ERROR_INVALID_ARGUMENT = 1, QJIT_ERROR_NO_DEVICE = 2, QJIT_ERROR_COMPILE = 3,
               QJIT_ERROR_CACHE = 4, QJIT_ERROR_DRIVER = 5, QJIT_ERROR_INTERNAL = 6,
               QJIT_ERROR_NOT_TUNED = 7 } qjit_status;

/* dtype: "fp16", "bf16", "fp32" or "mixed"; act: "silu", "silu_lut", "silu_lut_seed" or NULL (= "silu");
 * stream: a CUstream / cudaStream_t or NULL. */
qjit_status qjit_fused_ffn(int d, int h, int m, const char* dtype, const char* act, const void* x, const void* w1,
                           const void* w3, void* y, void* stream);
/* The same call with its arguments in one struct (one pointer to pass: the cheaper form from FFI). */
typedef struct {
  int d, h, m;
  const char* dtype;
  const char* act;
  const void* x;
  const void* w1;
  const void* w3;
  void* y;
} qjit_dense_ffn_args;
qjit_status qjit_dense_ffn(const qjit_dense_ffn_args* args, void* stream);
/* fn, cuts as in qjit.h (cuts NULL = "default"); in/out: "fp16", "bf16", "fp32". */
qjit_status qjit_fp_lut(const char* fn, long long n, const char* in, const char* out, const char* cuts, const void* x,
                        void* y, void* stream);
/* Quantized GEMM (qjit.h: WqGemmShape, WqGemmArgs). The string fields may be
 * NULL for their defaults: zero "int" ("sym", "int", "float"), scales_dtype
 * "fp16" ("bf16"), x_dtype "fp16" ("bf16", "fp32"), act "none" ("relu",
 * "relu6"); bias and residual are 0 or 1 (whether the call passes them). */
typedef struct {
  int k, n, bits, g;
  const char* zero;
  const char* scales_dtype;
  const char* x_dtype;
  int bias, residual;
  const char* act;
  const void* x;
  const void* qweight;
  const void* scales;
  const void* zeros;
  const void* bias_ptr;
  const void* residual_ptr;
  void* y;
  int m;
} qjit_wq_gemm_args;
qjit_status qjit_wq_gemm(const qjit_wq_gemm_args* args, void* stream);

/* AWQ/GPTQ int4 dequantization (qjit.h: AwqDequantShape): layout "awq" or
 * "gptq" (NULL: "awq"), scales_dtype "fp16" or "bf16" (NULL: "fp16"), out
 * "scales", "fp16" or "bf16" (NULL: "scales"). */
typedef struct {
  int k, n, g;
  const char* layout;
  int symmetric;
  const char* scales_dtype;
  const char* out_dtype;
  const void* qweight;
  const void* qzeros;
  const void* scales;
  void* out;
} qjit_awq_dequant_args;
qjit_status qjit_awq_dequant(const qjit_awq_dequant_args* args, void* stream);

/* fused_ffn on group-quantized W1 and W3 (qjit.h: QuantFfnShape), the
 * matrices as wq_gemm's native tensors; strings as for qjit_wq_gemm, act as
 * for qjit_fused_ffn (NULL: "silu"). */
typedef struct {
  int d, h, m, bits, g;
  const char* zero;
  const char* scales_dtype;
  const char* x_dtype;
  const char* act;
  const void* x;
  const void* qweight1;
  const void* scales1;
  const void* zeros1;
  const void* qweight3;
  const void* scales3;
  const void* zeros3;
  void* y;
} qjit_quant_ffn_args;
qjit_status qjit_quant_ffn(const qjit_quant_ffn_args* args, void* stream);

/* Fixed-point GRU forward (qjit.h: GruQuantShape, GruQuantArgs): params is the
 * layer's quantization document (JSON text); y_float may be NULL. */
typedef struct {
  int t, n, c, h;
  const char* params;
  const void* x;
  const void* h0;
  const void* W;
  const void* R;
  const void* bw;
  const void* br;
  void* y;
  void* y_float;
} qjit_gru_quant_args;
qjit_status qjit_gru_quant(const qjit_gru_quant_args* args, void* stream);
/* Online-quantized int8 GEMM (qjit.h: W8a8GemmShape, W8a8GemmArgs). The
 * string fields may be NULL for their defaults: x_dtype "fp16" ("bf16",
 * "fp32"), format "int8" ("e4m3"), quant_a and quant_w "offset"
 * ("symmetric"; int8 only), act "none"; bias is 0 or 1 (whether the call
 * passes bias_ptr). format "e4m3" is the FP8 format (W8a8GemmShape's
 * format): wq e4m3 codes, w_scale per 128 x 128 tile [K/128][N/128], block
 * 128, w_offset and w_sum NULL, quant_a and quant_w NULL (or "e4m3"). With
 * format NULL, quant_a and quant_w "e4m3" (both, or one with the other NULL)
 * select the FP8 format too, as before format existed. format is the last
 * field, so the earlier fields keep their offsets. */
typedef struct {
  int k, n, block;
  const char* x_dtype;
  const char* quant_a;
  const char* quant_w;
  int bias;
  const char* act;
  const void* x;
  const void* wq;
  const void* w_scale;
  const void* w_offset;
  const void* w_sum;
  const void* bias_ptr;
  void* y;
  int m;
  const char* format;
} qjit_w8a8_gemm_args;
qjit_status qjit_w8a8_gemm(const qjit_w8a8_gemm_args* args, void* stream);

/* Quantized conv2d (qjit.h: QConv2dShape, QConv2dArgs). Every int field is
 * used as given (stride and dilation 0 are errors, as in the spec); the
 * strings may be NULL for layout "nchw" ("nhwc"), x_dtype "fp16" ("fp32"),
 * act "none" ("relu", "relu6"); bias is 0 or 1 (whether bias_ptr is passed). */
typedef struct {
  int n, ci, h, w, co, kh, kw;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  const char* layout;
  int bits, block;
  const char* x_dtype;
  int bias;
  const char* act;
  const void* x;
  const void* qweight;
  const void* scales;
  const void* offsets;
  const void* bias_ptr;
  void* y;
} qjit_qconv2d_args;
qjit_status qjit_qconv2d(const qjit_qconv2d_args* args, void* stream);
qjit_status qjit_set_cache_path(const char* path);
/* Between qjit_preload_begin() and qjit_preload_end() on a thread, calls check
 * their arguments and make their kernels and the stream's workspace ready
 * but launch nothing (qjit.h: Preload): before CUDA graph capture. Nests. */
void qjit_preload_begin(void);
void qjit_preload_end(void);
/* The message of the last failed call on this thread ("" after a success). */
const char* qjit_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
