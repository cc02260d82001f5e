/* qjit C API, for FFI. Same semantics as qjit.h; errors are returned as a
 * non-zero status and described by qjit_last_error() (per thread). */
#ifndef QJIT_C_H
#define QJIT_C_H
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { QJIT_OK = 0, QJIT_ERROR_INVALID_ARGUMENT = 1, QJIT_ERROR_NO_DEVICE = 2, QJIT_ERROR_COMPILE = 3,
               QJIT_ERROR_CACHE = 4, QJIT_ERROR_DRIVER = 5, QJIT_ERROR_INTERNAL = 6 } qjit_status;

/* dtype: "fp16", "bf16", "fp32" or "mixed"; act: "silu", "silu_lut", "silu_lut_seed" or NULL (= "silu");
 * stream: a CUstream / cudaStream_t or NULL. */
qjit_status qjit_fused_ffn(int d, int h, int m, const char* dtype, const char* act, const void* x, const void* w1,
                           const void* w3, void* y, void* stream);
/* fn, cuts as in qjit.h (cuts NULL = "default"); in/out: "fp16", "bf16", "fp32". */
qjit_status qjit_fp_lut(const char* fn, long long n, const char* in, const char* out, const char* cuts, const void* x,
                        void* y, void* stream);
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
qjit_status qjit_set_cache_path(const char* path);
/* The message of the last failed call on this thread ("" after a success). */
const char* qjit_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
