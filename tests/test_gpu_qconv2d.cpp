// GPU tests of qconv2d: run only through `qjit_tests "[gpu]"`, which exits 77
// (skipped) without a device. Inputs are fresh random data from the tuner's
// workload, every output checked against the float64 CPU reference
// (tuner/reference/qconv2d.cpp) within qconv2d_tolerance.
#include <catch2/catch.hpp>
#include "codegen/registry.h"
#include "qjit/qjit.h"
#include "runtime/kernel_cache.h"
#include "tests/gpu_helpers.h"
#include "tests/helpers.h"
#include "tuner/tuner.h"
#include "tuner/workload.h"

using namespace qjit;
using test::expect_every_candidate_verifies;
using test::fresh_seed;

namespace {

QConv2dShape shape_of(const codegen::OpSpec& spec) {
  auto i = [&](const char* k) { return static_cast<int>(spec.get_int(k)); };
  QConv2dShape s;
  s.n = i("n"), s.ci = i("ci"), s.h = i("h"), s.w = i("w"), s.co = i("co"), s.kh = i("kh"), s.kw = i("kw");
  s.stride_h = i("stride_h"), s.stride_w = i("stride_w"), s.pad_h = i("pad_h"), s.pad_w = i("pad_w");
  s.dil_h = i("dil_h"), s.dil_w = i("dil_w");
  s.layout = spec.get_str("layout"), s.bits = i("bits"), s.block = i("block");
  s.x = spec.get_str("x") == "fp32" ? DType::fp32 : DType::fp16;
  s.bias = spec.get_str("bias") == "yes", s.act = spec.get_str("act");
  return s;
}

}  // namespace

TEST_CASE("qconv2d: every candidate verifies (tuner)", "[gpu]") {
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (const char* shape : {
           // ResNet-like 3×3, stride 1, pad 1, int4 block 32, nhwc (the target)
           "n=1,ci=64,h=14,w=14,co=64,pad_h=1,pad_w=1,layout=nhwc",
           // nchw int8, odd sizes, co not a multiple of any bn
           "n=2,ci=32,h=9,w=11,co=40,pad_h=1,pad_w=1,bits=8,block=32",
           // 1×1 through the same GEMM path
           "n=3,ci=48,h=7,w=5,co=24,kh=1,kw=1,block=16,layout=nhwc,bits=8",
           // stride 2, per-channel (block = ci), bias, relu6, nchw
           "n=2,ci=64,h=15,w=15,co=72,stride_h=2,stride_w=2,pad_h=1,pad_w=1,block=64,bias=yes,act=relu6",
           // dilation 2, small blocks (several per 8-byte unit of weights), relu
           "n=1,ci=32,h=12,w=10,co=16,dil_h=2,dil_w=2,pad_h=2,pad_w=2,block=8,act=relu,layout=nhwc",
           // ci = 16: stages of one mma step (bk = 16), int4 block 2
           "n=1,ci=16,h=6,w=6,co=8,block=2,pad_h=1,pad_w=1",
           // igemm_ring (nhwc, ci a multiple of 32): stride 2, odd co (2-byte y
           // stores, zero-filled weight rows past co), per-channel blocks, bias, relu6
           "n=2,ci=64,h=15,w=15,co=75,stride_h=2,stride_w=2,pad_h=1,pad_w=1,block=64,bias=yes,act=relu6,layout=nhwc",
           // 1×1, int4 blocks of 4 (two (scale, offset) pairs per 8 codes), chunks of 32
           "n=2,ci=96,h=7,w=9,co=40,kh=1,kw=1,block=4,act=relu,layout=nhwc",
           // small M, deep K: split-K up to 16 blocks per tile, int8, bias
           "n=1,ci=256,h=7,w=7,co=128,pad_h=1,pad_w=1,bits=8,block=64,bias=yes,layout=nhwc",
           // fp32 x (the direct kernel), ci without 16, non-square kernel
           "n=2,ci=6,h=9,w=9,co=10,kh=3,kw=5,pad_w=2,block=6,x=fp32,bias=yes,layout=nhwc",
           "n=1,ci=3,h=10,w=10,co=8,block=3,bits=8,x=fp32,stride_h=3,act=relu6",
       }) {
    auto spec = codegen::parse_spec("qconv2d", shape);
    // A few large tiles (bm = 128) spill and are pruned: at most 10% of a space.
    auto rep = expect_every_candidate_verifies(store, spec, /*allow_pruned=*/true);
    CHECK(rep.best.tuned);
  }
}

TEST_CASE("qconv2d: the typed entry point against the reference; bad arguments launch nothing", "[gpu]") {
  test::TempDir dir;
  set_cache_path(dir.file("api.db"));
  const auto spec = codegen::parse_spec("qconv2d", "n=2,ci=64,h=10,w=9,co=48,pad_h=1,pad_w=1,layout=nhwc,bias=yes,act=relu");
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  auto work = tuner::make_workload(spec, seed, 0);
  const ArgPack& a = work->args(0);
  auto ptr = [&](int i) { return reinterpret_cast<char*>(a.values[i].ptr); };
  const QConv2dShape s = shape_of(spec);
  const QConv2dArgs good{ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), ptr(5)};
  work->poison_output(nullptr);
  // The default config (implicit_gemm) reads x in 16 bytes and the weights in 8.
  QConv2dArgs bad = good;
  bad.qweight = ptr(1) + 4;
  CHECK_THROWS_WITH(qconv2d(s, bad), Catch::Contains("qweight") && Catch::Contains("not aligned to 8"));
  bad = good, bad.x = ptr(0) + 2;
  CHECK_THROWS_WITH(qconv2d(s, bad), Catch::Contains("x") && Catch::Contains("not aligned to 16"));
  bad = good, bad.bias = nullptr;
  CHECK_THROWS_WITH(qconv2d(s, bad), Catch::Contains("bias is null"));
  bad = good, bad.offsets = nullptr;
  CHECK_THROWS_WITH(qconv2d(s, bad), Catch::Contains("offsets"));
  QConv2dShape t = s;
  t.block = 48;
  CHECK_THROWS_WITH(qconv2d(t, good), Catch::Contains("block=48 does not divide ci=64"));
  t = s, t.pad_h = -1;
  CHECK_THROWS_WITH(qconv2d(t, good), Catch::Contains("pad_h=-1"));
  t = s, t.x = DType::bf16;
  CHECK_THROWS_WITH(qconv2d(t, good), Catch::Contains("x bf16"));
  CHECK_FALSE(work->verify(1.0).ok);  // still poisoned: nothing ran
  const std::string key = runtime::fingerprint(spec).key();
  CHECK_FALSE(cache::Store(dir.file("api.db")).lookup(key));  // and nothing was cached
  qconv2d(s, good);
  auto v = work->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
  CHECK(cache::Store(dir.file("api.db")).lookup(key));
  // fp32 x through the direct kernel, nchw.
  const auto spec32 = codegen::parse_spec("qconv2d", "n=1,ci=10,h=7,w=8,co=6,kh=3,kw=3,block=5,bits=8,x=fp32,act=relu6");
  auto work32 = tuner::make_workload(spec32, seed + 1, 0);
  const ArgPack& b = work32->args(0);
  work32->poison_output(nullptr);
  qconv2d(shape_of(spec32), {reinterpret_cast<void*>(b.values[0].ptr), reinterpret_cast<void*>(b.values[1].ptr),
                             reinterpret_cast<void*>(b.values[2].ptr), reinterpret_cast<void*>(b.values[3].ptr),
                             nullptr, reinterpret_cast<void*>(b.values[5].ptr)});
  v = work32->verify(1.0);
  INFO(v.message);
  CHECK(v.ok);
}
