// The C API: each call catches every exception, maps its stage to a status and
// keeps the message for qjit_last_error().
#include <memory>
#include <string>
#include <vector>
#include "qjit/qjit.h"
#include "qjit/qjit_c.h"

namespace {
thread_local std::string last_error;

qjit_status status_of(const qjit::Error& e) {
  const std::string& s = e.stage();
  if (s == "argument" || s == "spec" || s == "config") return QJIT_ERROR_INVALID_ARGUMENT;
  if (s == "nvrtc" || s == "codegen") return QJIT_ERROR_COMPILE;
  if (s == "cache") return QJIT_ERROR_CACHE;
  if (s == "untuned") return QJIT_ERROR_NOT_TUNED;
  if (s == "no_device") return QJIT_ERROR_NO_DEVICE;
  if (s == "driver") return QJIT_ERROR_DRIVER;
  return QJIT_ERROR_INTERNAL;
}

template <typename F>
qjit_status guarded(F&& f) {
  try {
    f();
    last_error.clear();
    return QJIT_OK;
  } catch (const qjit::Error& e) {
    last_error = e.what();
    if (!e.detail().empty()) last_error += "\n" + e.detail();
    return status_of(e);
  } catch (const std::exception& e) {
    last_error = std::string("internal: ") + e.what();
    return QJIT_ERROR_INTERNAL;
  }
}

bool parse_dtype(const char* s, qjit::DType* out) {
  for (auto t : {qjit::DType::fp16, qjit::DType::bf16, qjit::DType::fp32, qjit::DType::mixed})
    if (s && std::string(s) == qjit::to_string(t)) return *out = t, true;
  return false;
}

// A struct's element-type field: NULL is `fallback`; mixed is not an element type.
qjit::DType element_type(const char* s, qjit::DType fallback, const char* op, const char* field) {
  qjit::DType t = fallback;
  if (s && (!parse_dtype(s, &t) || t == qjit::DType::mixed))
    throw qjit::Error("argument", std::string(op) + ": " + field + " '" + s + "' (expected fp16, bf16 or fp32)");
  return t;
}

qjit::Activation activation(const char* act, const char* op) {
  if (!act) return qjit::Activation::silu;
  for (auto c : {qjit::Activation::silu, qjit::Activation::silu_lut, qjit::Activation::silu_lut_seed})
    if (std::string(act) == qjit::to_string(c)) return c;
  throw qjit::Error("argument", std::string(op) + ": act '" + act + "' (expected silu, silu_lut or silu_lut_seed)");
}

template <class A>
const A& required(const A* a, const char* op) {
  if (!a) throw qjit::Error("argument", std::string(op) + ": args is null");
  return *a;
}

void dense_ffn(int d, int h, int m, const char* dtype, const char* act, const void* x, const void* w1, const void* w3,
               void* y, void* stream) {
  qjit::DType t;
  if (!parse_dtype(dtype, &t))
    throw qjit::Error("argument", std::string("fused_ffn: dtype '") + (dtype ? dtype : "(null)") +
                                      "' (expected fp16, bf16, fp32 or mixed)");
  qjit::fused_ffn({d, h, m, t, activation(act, "fused_ffn")}, x, w1, w3, y, static_cast<CUstream_st*>(stream));
}

}  // namespace

extern "C" qjit_status qjit_fused_ffn(int d, int h, int m, const char* dtype, const char* act, const void* x,
                                      const void* w1, const void* w3, void* y, void* stream) {
  return guarded([&] { dense_ffn(d, h, m, dtype, act, x, w1, w3, y, stream); });
}

extern "C" qjit_status qjit_dense_ffn(const qjit_dense_ffn_args* args, void* stream) {
  return guarded([&] {
    const auto& a = required(args, "fused_ffn");
    dense_ffn(a.d, a.h, a.m, a.dtype, a.act, a.x, a.w1, a.w3, a.y, stream);
  });
}

extern "C" qjit_status qjit_fp_lut(const char* fn, long long n, const char* in, const char* out, const char* cuts,
                                   const void* x, void* y, void* stream) {
  return guarded([&] {
    qjit::DType ti, to;
    if (!parse_dtype(in, &ti) || !parse_dtype(out, &to) || ti == qjit::DType::mixed || to == qjit::DType::mixed)
      throw qjit::Error("argument", std::string("fp_lut: in/out '") + (in ? in : "(null)") + "'/'" +
                                        (out ? out : "(null)") + "' (expected fp16, bf16 or fp32)");
    if (!fn) throw qjit::Error("argument", "fp_lut: fn is null");
    qjit::fp_lut({fn, n, ti, to, cuts ? cuts : "default"}, x, y, static_cast<CUstream_st*>(stream));
  });
}

extern "C" qjit_status qjit_wq_gemm(const qjit_wq_gemm_args* args, void* stream) {
  return guarded([&] {
    const auto& a = required(args, "wq_gemm");
    qjit::WqGemmShape s;
    s.k = a.k, s.n = a.n, s.bits = a.bits, s.g = a.g;
    s.zero = a.zero ? a.zero : "int";
    s.scales = element_type(a.scales_dtype, qjit::DType::fp16, "wq_gemm", "scales_dtype");
    s.x = element_type(a.x_dtype, qjit::DType::fp16, "wq_gemm", "x_dtype");
    s.bias = a.bias != 0, s.residual = a.residual != 0;
    s.act = a.act ? a.act : "none";
    qjit::wq_gemm(s, {a.x, a.qweight, a.scales, a.zeros, a.bias_ptr, a.residual_ptr, a.y, a.m},
                  static_cast<CUstream_st*>(stream));
  });
}

extern "C" qjit_status qjit_w8a8_gemm(const qjit_w8a8_gemm_args* args, void* stream) {
  return guarded([&] {
    const auto& a = required(args, "w8a8_gemm");
    qjit::W8a8GemmShape s;
    s.k = a.k, s.n = a.n, s.block = a.block;
    s.x = element_type(a.x_dtype, qjit::DType::fp16, "w8a8_gemm", "x_dtype");
    // format names the codes; with format NULL, "e4m3" in quant_a or quant_w selects the FP8 format
    // (which quantizes x and W alike) as it did before the field existed.
    const std::string qa = a.quant_a ? a.quant_a : "", qw = a.quant_w ? a.quant_w : "";
    const std::string format = a.format ? a.format : "";
    if (!format.empty() && format != "int8" && format != "e4m3")
      throw qjit::Error("argument", "w8a8_gemm: format=\"" + format + "\" (expected \"int8\" or \"e4m3\")");
    if (format == "int8" && (qa == "e4m3" || qw == "e4m3"))
      throw qjit::Error("argument", "w8a8_gemm: format=\"int8\" with quant_a=\"" + qa + "\", quant_w=\"" + qw +
                                        "\" (e4m3 is format=\"e4m3\")");
    if (format == "e4m3" || qa == "e4m3" || qw == "e4m3") {
      if ((!qa.empty() && qa != "e4m3") || (!qw.empty() && qw != "e4m3"))
        throw qjit::Error("argument", "w8a8_gemm: quant_a=\"" + qa + "\" with quant_w=\"" + qw +
                                          "\": e4m3 quantizes x and W alike (both \"e4m3\", or the other NULL)");
      s.format = "e4m3";
    } else {
      s.quant_a = qa.empty() ? "offset" : qa;
      s.quant_w = qw.empty() ? "offset" : qw;
    }
    s.bias = a.bias != 0;
    s.act = a.act ? a.act : "none";
    qjit::w8a8_gemm(s, {a.x, a.wq, a.w_scale, a.w_offset, a.w_sum, a.bias_ptr, a.y, a.m},
                    static_cast<CUstream_st*>(stream));
  });
}

extern "C" qjit_status qjit_awq_dequant(const qjit_awq_dequant_args* args, void* stream) {
  return guarded([&] {
    const auto& a = required(args, "awq_dequant");
    qjit::AwqDequantShape s;
    s.k = a.k, s.n = a.n, s.g = a.g;
    s.layout = a.layout ? a.layout : "awq";
    s.symmetric = a.symmetric != 0;
    s.scales = element_type(a.scales_dtype, qjit::DType::fp16, "awq_dequant", "scales_dtype");
    s.out = a.out_dtype ? a.out_dtype : "scales";
    qjit::awq_dequant(s, {a.qweight, a.qzeros, a.scales, a.out}, static_cast<CUstream_st*>(stream));
  });
}

extern "C" qjit_status qjit_quant_ffn(const qjit_quant_ffn_args* args, void* stream) {
  return guarded([&] {
    const auto& a = required(args, "fused_ffn");
    qjit::QuantFfnShape s;
    s.d = a.d, s.h = a.h, s.m = a.m, s.bits = a.bits, s.g = a.g;
    s.zero = a.zero ? a.zero : "int";
    s.scales = element_type(a.scales_dtype, qjit::DType::fp16, "fused_ffn", "scales_dtype");
    s.x = element_type(a.x_dtype, qjit::DType::fp16, "fused_ffn", "x_dtype");
    s.act = activation(a.act, "fused_ffn");
    qjit::fused_ffn(s, {a.x, a.qweight1, a.scales1, a.zeros1, a.qweight3, a.scales3, a.zeros3, a.y},
                    static_cast<CUstream_st*>(stream));
  });
}

extern "C" qjit_status qjit_gru_quant(const qjit_gru_quant_args* args, void* stream) {
  return guarded([&] {
    const auto& a = required(args, "gru_quant");
    if (!a.params) throw qjit::Error("argument", "gru_quant: params is null");
    qjit::gru_quant({a.t, a.n, a.c, a.h, a.params}, {a.x, a.h0, a.W, a.R, a.bw, a.br, a.y, a.y_float},
                    static_cast<CUstream_st*>(stream));
  });
}

extern "C" qjit_status qjit_qconv2d(const qjit_qconv2d_args* args, void* stream) {
  return guarded([&] {
    const auto& a = required(args, "qconv2d");
    qjit::QConv2dShape s;
    s.n = a.n, s.ci = a.ci, s.h = a.h, s.w = a.w, s.co = a.co, s.kh = a.kh, s.kw = a.kw;
    s.stride_h = a.stride_h, s.stride_w = a.stride_w, s.pad_h = a.pad_h, s.pad_w = a.pad_w;
    s.dil_h = a.dil_h, s.dil_w = a.dil_w;
    s.layout = a.layout ? a.layout : "nchw";
    s.bits = a.bits, s.block = a.block;
    s.x = element_type(a.x_dtype, qjit::DType::fp16, "qconv2d", "x_dtype");
    s.bias = a.bias != 0;
    s.act = a.act ? a.act : "none";
    qjit::qconv2d(s, {a.x, a.qweight, a.scales, a.offsets, a.bias_ptr, a.y}, static_cast<CUstream_st*>(stream));
  });
}

// The C API's preload scopes: qjit::Preload objects held per thread.
static thread_local std::vector<std::unique_ptr<qjit::Preload>> preloads;
extern "C" void qjit_preload_begin(void) { preloads.push_back(std::make_unique<qjit::Preload>()); }
extern "C" void qjit_preload_end(void) {
  if (!preloads.empty()) preloads.pop_back();
}

extern "C" qjit_status qjit_set_cache_path(const char* path) {
  return guarded([&] {
    if (!path || !*path) throw qjit::Error("argument", "qjit_set_cache_path: empty path");
    qjit::set_cache_path(path);
  });
}

extern "C" const char* qjit_last_error(void) { return last_error.c_str(); }
