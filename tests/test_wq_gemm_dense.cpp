// wq_gemm's "cublas" family (codegen/ops/wq_dense.h): its configs and
// errors, the launch it asks the runtime for, and its two kernels compiled
// for every bit width, zero mode and type. The GPU runs them in test_gpu.cpp.
#include <catch2/catch.hpp>
#include <algorithm>
#include "codegen/error.h"
#include "codegen/ops/wq_gemm.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "tests/helpers.h"

using namespace qjit;
using codegen::parse_spec;

namespace {

const nlohmann::json kDense = {{"family", "cublas"}, {"warps", 4}, {"tiles", 1}};

size_t dense_count(const char* shape) {
  const auto space = codegen::find_op("wq_gemm").tunable_space(parse_spec("wq_gemm", shape));
  return static_cast<size_t>(std::count_if(space.begin(), space.end(), [](const nlohmann::json& c) {
    return c.value("family", "") == "cublas";
  }));
}

}  // namespace

TEST_CASE("wq_gemm cublas family: configs, errors, and never the untuned default", "[wq_gemm]") {
  const auto& op = codegen::find_op("wq_gemm");
  // A candidate in every bucket where x has the scales' type (cuBLAS multiplies one type).
  CHECK(dense_count("k=4096,n=11008,m=1") == 4);
  CHECK(dense_count("k=4096,n=11008,m=1024,bits=3,zero=float,scales=bf16,x=bf16,g=64") == 4);
  CHECK(dense_count("k=4096,n=11008,m=256,x=fp32") == 0);
  CHECK(dense_count("k=4096,n=11008,m=256,x=bf16") == 0);
  // ... and first, so a tune cut short by --budget still measures it.
  for (const char* s : {"k=4096,n=11008,m=1", "k=4096,n=11008,m=512"}) {
    const auto space = op.tunable_space(parse_spec("wq_gemm", s));
    REQUIRE(space.size() > 4);
    for (size_t i = 0; i < 4; ++i) CHECK(space[i].value("family", "") == "cublas");
  }
  for (const char* s : {"k=4096,n=11008,m=1", "k=4096,n=11008,m=256", "k=64,n=16,m=1024,bits=2,g=32"})
    CHECK(op.default_config(parse_spec("wq_gemm", s)).value("family", "") != "cublas");
  const auto spec = parse_spec("wq_gemm", "k=4096,n=11008,m=64");
  op.validate_config(spec, kDense);
  auto with = [](const char* key, int v) {
    nlohmann::json c = kDense;
    c[key] = v;
    return c;
  };
  CHECK_THROWS_WITH(op.validate_config(spec, with("warps", 3)), Catch::Contains("warps must be 4 or 8"));
  CHECK_THROWS_WITH(op.validate_config(spec, with("tiles", 2)), Catch::Contains("tiles must be 1 or 4"));
  CHECK_THROWS_WITH(op.validate_config(spec, with("stages", 3)), Catch::Contains("needs family, warps and tiles"));
  nlohmann::json missing = kDense;
  missing.erase("tiles");
  CHECK_THROWS_WITH(op.validate_config(spec, missing), Catch::Contains("needs family, warps and tiles"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("wq_gemm", "k=4096,n=11008,m=64,x=fp32"), kDense),
                    Catch::Contains("x (fp32) must be the scales' type (fp16)"));
}

TEST_CASE("wq_gemm cublas family: the plan (dequantise, cuBLAS, epilogue; workspace, the GEMM's operands)",
          "[wq_gemm]") {
  const auto& op = codegen::find_op("wq_gemm");
  using Step = codegen::PlanStep::Kind;
  // Nothing after the GEMM: the dequantisation kernel, then cuBLAS; the workspace holds the dense W alone.
  {
    const auto p = op.plan(parse_spec("wq_gemm", "k=4096,n=11008,m=64"), kDense);
    REQUIRE(p.steps.size() == 2);
    REQUIRE(p.kernels.size() == 1);
    CHECK((p.steps[0].kind == Step::kernel && p.steps[0].kernel == 0 && p.steps[1].kind == Step::cublas_gemm));
    CHECK(p.needs_cublas());
    const auto& g = p.kernels[0].geometry;
    CHECK(p.kernels[0].symbol == "qjit_wq_gemm");
    CHECK(g.grid[0] == (11008 / 16) * (4096 / 64) / 4);
    CHECK(g.block[0] == 128);
    CHECK(g.programmatic);
    CHECK(test::is_workspace(p.kernels[0], 8));
    CHECK(p.workspace_fixed == size_t{4096} * 11008 * 2);
    const auto& d = p.steps[1].gemm;
    CHECK((d.x == "x" && d.y == "y" && d.rows == "m"));
    CHECK(d.bias.empty());
    CHECK(d.residual.empty());
    CHECK(d.k == 4096);
    CHECK(d.n == 11008);
    CHECK_FALSE(d.bf16);
    CHECK(d.epilogue == -1);
    CHECK(d.w_offset == 0);
  }
  // The residual alone is the GEMM's β: still no sums in the workspace, no epilogue.
  {
    const auto p = op.plan(parse_spec("wq_gemm", "k=11008,n=4096,m=8,residual=yes,scales=bf16,x=bf16"),
                           {{"family", "cublas"}, {"warps", 8}, {"tiles", 4}});
    CHECK(p.kernels[0].geometry.grid[0] == (4096 / 16) * (11008 / 64) / 32);
    CHECK(p.kernels[0].geometry.block[0] == 256);
    const auto& d = p.steps.at(1).gemm;
    CHECK(d.residual == "residual");
    CHECK(d.bf16);
    CHECK(d.epilogue == -1);
    CHECK(p.workspace_fixed == size_t{11008} * 4096 * 2);
  }
  // A bias or a clamp: fp32 sums of a slab of rows after W, the bucket's rows, 1024 in the open bucket,
  // each slab stored by the epilogue kernel.
  {
    const auto p = op.plan(parse_spec("wq_gemm", "k=256,n=48,m=16,act=relu"), kDense);
    CHECK(p.kernels[0].geometry.grid[0] == 3);  // 3 × 4 tiles, a block of 4 warps of one tile each
    const auto& d = p.steps.at(1).gemm;
    CHECK(d.slab_rows == 16);
    REQUIRE(d.epilogue == 1);
    CHECK(p.kernels[1].symbol == "qjit_wq_gemm_epilogue");
    CHECK(d.sums_offset == size_t{256} * 48 * 2);
    CHECK(p.workspace_fixed == size_t{256} * 48 * 2 + 16 * 48 * 4);
    const auto open = op.plan(parse_spec("wq_gemm", "k=256,n=48,m=1024,bias=yes,residual=yes"), kDense);
    CHECK(open.steps.at(1).gemm.slab_rows == 1024);
    CHECK(open.steps.at(1).gemm.bias == "bias");
    CHECK(open.steps.at(1).gemm.residual == "residual");
    CHECK(open.workspace_fixed == size_t{256} * 48 * 2 + 1024 * 48 * 4);
  }
  // Pointers: the native words by vector loads; cuBLAS takes x and y at any element; no zeros when symmetric.
  const auto ptrs = op.plan(parse_spec("wq_gemm", "k=256,n=48,m=16,bits=3,zero=sym"), kDense).pointers;
  REQUIRE(ptrs.size() == 7);
  CHECK(ptrs[0].align == 2);
  CHECK(ptrs[1].align == 4);
  CHECK(ptrs[3].optional);
  CHECK(op.plan(parse_spec("wq_gemm", "k=256,n=48,m=16,bits=4"), kDense).pointers[1].align == 16);
}

TEST_CASE("wq_gemm cublas family: both kernels compile for every bit width, zero mode and type", "[wq_gemm][nvrtc]") {
  const auto& op = codegen::find_op("wq_gemm");
  std::vector<test::CompileJob> jobs;
  int i = 0;
  for (int bits : {2, 3, 4, 8})
    for (const char* zero : {"sym", "int", "float"})
      for (const char* type : {"fp16", "bf16"}) {
        // A bias on every other spec: the epilogue kernel is compiled either way (the runtime looks it up
        // only where the geometry has slabs).
        const std::string shape = "k=192,n=48,m=32,bits=" + std::to_string(bits) + ",zero=" + zero +
                                  ",scales=" + type + ",x=" + type + ",g=" + (i % 2 ? "64" : "192") +
                                  (i % 2 ? ",bias=yes,act=relu6" : "");
        const auto spec = parse_spec("wq_gemm", shape);
        const auto space = op.tunable_space(spec);
        for (const auto& c : space)
          if (c.value("family", "") == "cublas" && (c["warps"] == 4) == (i % 2 == 0)) jobs.push_back({spec, c});
        ++i;
      }
  REQUIRE(jobs.size() == 2 * 24);
  test::compile_jobs(jobs, "sm_90", "wq_gemm cublas");
  for (const auto& j : jobs) {
    INFO(j.spec.label() << " " << j.config.dump() << "\n" << j.error << j.result.log);
    REQUIRE(j.error.empty());
    CHECK(j.result.ok);
    CHECK(j.result.ptx.find(".entry qjit_wq_gemm(") != std::string::npos);
    CHECK(j.result.ptx.find(".entry qjit_wq_gemm_epilogue(") != std::string::npos);
    // Each lane stores a row's 16 weights as two 16-byte pieces.
    CHECK(j.result.ptx.find("st.global.v4.u32") != std::string::npos);
    CHECK(j.result.spill_bytes == 0);
    // Under PDL the weights are read before the wait for the previous grid and W is written only after it.
    const auto& ptx = j.result.ptx;
    const size_t entry = ptx.find(".entry qjit_wq_gemm("), wait = ptx.find("griddepcontrol.wait", entry);
    REQUIRE(wait != std::string::npos);
    CHECK(ptx.find("ld.global.nc", entry) < wait);
    CHECK(ptx.find("st.global", entry) > wait);
  }
  // And for sm_80, where the family is the large-M candidate that cuBLAS makes strong.
  std::vector<test::CompileJob> ampere{{parse_spec("wq_gemm", "k=4096,n=11008,m=256,bias=yes"), kDense}};
  test::compile_jobs(ampere, "sm_80", "wq_gemm cublas sm_80");
  INFO(ampere[0].error << ampere[0].result.log);
  CHECK(ampere[0].result.ok);
  CHECK_FALSE(codegen::generate_source(ampere[0].spec, kDense).needs_sm90a);
}
