// libqjit_runtime.so, as an FFI caller (ctypes, an engine in another
// language) sees it: it loads alone, exports the C API, and its calls
// return a status and the text of the last error without a GPU when the
// arguments are wrong.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <filesystem>
#include <string>

#include "qjit/qjit_c.h"

namespace {

// The installed layout (bin/qjit_tests beside lib/libqjit_runtime.so), else the build tree's.
std::string runtime_library() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = self.parent_path().parent_path() / "lib" / "libqjit_runtime.so";
    if (std::filesystem::exists(installed)) return installed.string();
  }
  return QJIT_RUNTIME_SO;
}

template <class F>
F symbol(void* library, const char* name) {
  void* p = dlsym(library, name);
  INFO(name);
  REQUIRE(p != nullptr);
  return reinterpret_cast<F>(p);
}

}  // namespace

TEST_CASE("libqjit_runtime.so loads alone and its C API reports bad arguments", "[capi]") {
  const std::string path = runtime_library();
  INFO(path);
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  INFO((lib ? "" : dlerror()));
  REQUIRE(lib != nullptr);
  const auto last_error = symbol<const char* (*)()>(lib, "qjit_last_error");
  const auto set_cache = symbol<qjit_status (*)(const char*)>(lib, "qjit_set_cache_path");
  const auto gru = symbol<qjit_status (*)(const qjit_gru_quant_args*, void*)>(lib, "qjit_gru_quant");
  symbol<void*>(lib, "qjit_fused_ffn");
  symbol<void*>(lib, "qjit_fp_lut");

  CHECK(set_cache("") == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("empty path"));
  CHECK(gru(nullptr, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("args is null"));
  qjit_gru_quant_args args{};
  args.t = 4, args.n = 1, args.c = 8, args.h = 8;
  CHECK(gru(&args, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("params is null"));
  args.params = "{\"input_size\": 8";  // not JSON: refused before any device is touched
  CHECK(gru(&args, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("gru_quant params"));

  // Every op has its entry and argument struct.
  const auto wq = symbol<qjit_status (*)(const qjit_wq_gemm_args*, void*)>(lib, "qjit_wq_gemm");
  const auto awq = symbol<qjit_status (*)(const qjit_awq_dequant_args*, void*)>(lib, "qjit_awq_dequant");
  const auto qffn = symbol<qjit_status (*)(const qjit_quant_ffn_args*, void*)>(lib, "qjit_quant_ffn");
  const auto dense = symbol<qjit_status (*)(const qjit_dense_ffn_args*, void*)>(lib, "qjit_dense_ffn");
  CHECK(dense(nullptr, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("fused_ffn: args is null"));
  qjit_dense_ffn_args ffn{};
  ffn.d = 4096, ffn.h = 11008, ffn.m = 1, ffn.dtype = "int4";
  CHECK(dense(&ffn, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("dtype 'int4'"));
  ffn.dtype = "fp16", ffn.act = "gelu";
  CHECK(dense(&ffn, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("act 'gelu'"));
  CHECK(wq(nullptr, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("wq_gemm: args is null"));
  qjit_wq_gemm_args w{};
  w.k = 4096, w.n = 4096, w.bits = 4, w.g = 128, w.x_dtype = "int4";
  CHECK(wq(&w, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("x_dtype 'int4'"));
  CHECK(awq(nullptr, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("awq_dequant: args is null"));
  qjit_awq_dequant_args d{};
  d.scales_dtype = "mixed";
  CHECK(awq(&d, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("scales_dtype 'mixed'"));
  qjit_quant_ffn_args f{};
  f.act = "gelu";
  CHECK(qffn(&f, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("act 'gelu'"));
  // qconv2d: every bad value named before any device is touched.
  const auto qconv = symbol<qjit_status (*)(const qjit_qconv2d_args*, void*)>(lib, "qjit_qconv2d");
  CHECK(qconv(nullptr, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("qconv2d: args is null"));
  qjit_qconv2d_args c{};
  c.n = 1, c.ci = 64, c.h = 8, c.w = 8, c.co = 32, c.kh = 3, c.kw = 3, c.bits = 4, c.block = 32;
  c.stride_h = 1, c.stride_w = 0, c.dil_h = 1, c.dil_w = 1;
  CHECK(qconv(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("stride_w=0"));
  c.stride_w = 1, c.x_dtype = "bf16";
  CHECK(qconv(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("qconv2d: x bf16"));
  c.x_dtype = "int8";
  CHECK(qconv(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("x_dtype 'int8'"));
  c.x_dtype = nullptr, c.bias = 1;  // bias=1 without bias_ptr
  CHECK(qconv(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("bias is null"));
  c.bias = 0, c.block = 48;
  CHECK(qconv(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("block=48 does not divide ci=64"));
  c.block = 63, c.ci = 63;  // int4 with an odd ci
  CHECK(qconv(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("ci=63"));
  c.ci = 64, c.pad_h = -1;
  CHECK(qconv(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("pad_h=-1"));
  c.pad_h = 0, c.dil_w = 5;  // a 9-wide dilated kernel on 8 columns
  CHECK(qconv(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("output is empty along w"));
  c.dil_w = 1, c.layout = "chw";
  CHECK(qconv(&c, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("layout=chw"));
  // w8a8_gemm's format: named when unknown, and not mixed with an int8 quant_a or quant_w (before any device).
  const auto w8 = symbol<qjit_status (*)(const qjit_w8a8_gemm_args*, void*)>(lib, "qjit_w8a8_gemm");
  qjit_w8a8_gemm_args q{};
  q.k = 512, q.n = 256, q.block = 128, q.m = 4, q.format = "fp4";
  CHECK(w8(&q, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("format=\"fp4\""));
  q.format = "int8", q.quant_w = "e4m3";
  CHECK(w8(&q, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("format=\"int8\" with"));
  q.format = "e4m3", q.quant_w = "offset";
  CHECK(w8(&q, nullptr) == QJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("e4m3 quantizes x and W alike"));
  dlclose(lib);
}
