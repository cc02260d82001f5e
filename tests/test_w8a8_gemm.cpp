// w8a8_gemm without a GPU: spec and config errors name the value, the
// buckets, the plan's pointer rules and workspace, and NVRTC compiles of the
// candidates for sm_80 and sm_90 without spills; the wgmma family's space,
// plan and tensor maps, and its sm_90a compiles, for int8 and e4m3 codes;
// the cuBLASLt family's space, plan and module.
// The CPU reference and its quantizers are tested in test_w8a8_reference.cpp.
#include <catch2/catch.hpp>

#include <algorithm>

#include "codegen/nvrtc.h"
#include "codegen/ops/w8a8_gemm.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "tests/helpers.h"
#include "tuner/tuner.h"

using namespace qjit;
using codegen::parse_spec;

namespace {

codegen::PointerArg pointer_rule(const codegen::Plan& p, const std::string& name) {
  for (const auto& r : p.pointers)
    if (r.name == name) return r;
  FAIL("no pointer rule for " << name);
  return {};
}

// Compile jobs: a sample of the space of each `sampled` spec (every stride-th, test::compile_sample) and
// its default; for each `few` spec its default and every few_stride-th candidate.
std::vector<test::CompileJob> w8a8_jobs(std::initializer_list<std::pair<const char*, size_t>> sampled,
                                        std::initializer_list<const char*> few, size_t few_stride) {
  const auto& op = codegen::find_op("w8a8_gemm");
  std::vector<test::CompileJob> jobs;
  for (const auto& [s, stride] : sampled) {
    const auto spec = parse_spec("w8a8_gemm", s);
    const auto space = op.tunable_space(spec);
    const auto sample = test::compile_sample(stride, std::string("w8a8_gemm ") + s);
    // (The wgmma family, sm_90a only, has its own compile test.)
    for (size_t i = 0; i < space.size(); ++i)
      if (sample.takes(i) && space[i].value("family", "") != "wgmma") jobs.push_back({spec, space[i]});
    jobs.push_back({spec, op.default_config(spec)});
  }
  for (const char* s : few) {
    const auto spec = parse_spec("w8a8_gemm", s);
    const auto space = op.tunable_space(spec);
    jobs.push_back({spec, op.default_config(spec)});
    for (size_t i = 0; i < space.size(); i += few_stride)
      if (space[i].value("family", "") != "wgmma") jobs.push_back({spec, space[i]});
  }
  return jobs;
}

}  // namespace

TEST_CASE("w8a8_gemm specs: bad values are named", "[w8a8]") {
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=11008,block=96"), Catch::Contains("block=96 does not divide k=4096"));
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=11008,block=16"), Catch::Contains("block"));
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=11008,block=1024"), Catch::Contains("block"));
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=11008,m=48"), Catch::Contains("m=48 is not a bucket"));
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=11008,m=8192"), Catch::Contains("m"));
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=11008,quant_a=minmax"), Catch::Contains("minmax"));
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=11008,act=gelu"), Catch::Contains("gelu"));
  CHECK(codegen::w8a8_gemm_bucket(1) == 1);
  CHECK(codegen::w8a8_gemm_bucket(17) == 32);
  CHECK(codegen::w8a8_gemm_bucket(4096) == 4096);
  CHECK(codegen::w8a8_gemm_bucket(100000) == 4096);
  const auto& op = codegen::find_op("w8a8_gemm");
  CHECK(op.m_values_for_rows(1, 4096).size() == 13);
  CHECK(op.m_values_for_rows(3000, 9000) == std::vector<int64_t>{4096});
}

TEST_CASE("w8a8_gemm configs: legality, families, defaults", "[w8a8]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  const auto spec = parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096");
  // Every candidate is legal; the simple kernel leads a small-M list and is left out of large M.
  const auto space = op.tunable_space(spec);
  REQUIRE(space.size() > 20);
  for (const auto& c : space) CHECK((c.value("family", "") == "tiled" || c.value("family", "") == "wgmma"));
  CHECK(op.tunable_space(parse_spec("w8a8_gemm", "k=4096,n=11008,m=16"))[0].value("family", "") == "simple");
  for (const auto& c : space) CHECK_NOTHROW(op.validate_config(spec, c));
  CHECK_NOTHROW(op.validate_config(spec, op.default_config(spec)));
  auto tiled = [](int bm, int bn, int bk, int wm, int wn, int st) {
    return nlohmann::json{{"family", "tiled"}, {"bm", bm}, {"bn", bn},           {"bk", bk},
                          {"warps_m", wm},     {"warps_n", wn}, {"stages", st}};
  };
  CHECK_THROWS_WITH(op.validate_config(spec, tiled(128, 128, 64, 1, 1, 4)), Catch::Contains("at most 16 mma tiles"));
  CHECK_THROWS_WITH(op.validate_config(spec, tiled(64, 96, 64, 1, 1, 4)), Catch::Contains("bn must be"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096,block=32"), tiled(64, 64, 64, 2, 2, 4)),
                    Catch::Contains("bk=64 does not divide block=32"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("w8a8_gemm", "k=4096,n=11008,m=1"), tiled(64, 64, 64, 2, 2, 4)),
                    Catch::Contains("bm=64 exceeds the bucket's rows m=1"));
  CHECK_THROWS_WITH(op.validate_config(spec, nlohmann::json{{"family", "wmma"}}), Catch::Contains("unknown family 'wmma'"));
  // A block that is not a multiple of 32 and an n no tile divides leave the simple kernel alone.
  for (const char* s : {"k=96,n=32,block=48", "k=128,n=40,block=64"}) {
    const auto odd = parse_spec("w8a8_gemm", s);
    for (const auto& c : op.tunable_space(odd)) CHECK(c.value("family", "") == "simple");
    CHECK(op.default_config(odd).value("family", "") == "simple");
    CHECK_THROWS_WITH(op.validate_config(odd, tiled(16, 16, 32, 1, 1, 3)), Catch::Contains("multiple of"));
  }
}

TEST_CASE("w8a8_gemm plans: pointer rules and the workspace", "[w8a8]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  const auto rule = pointer_rule;
  // Offsets on both sides: every W tensor is read; symmetric x needs no ΣB, symmetric W no offsets.
  const auto both = parse_spec("w8a8_gemm", "k=256,n=64,m=16,block=64");
  auto p = op.plan(both, op.default_config(both));
  CHECK_FALSE(rule(p, "w_offset").optional);
  CHECK_FALSE(rule(p, "w_sum").optional);
  CHECK(rule(p, "bias").optional);
  CHECK(rule(p, "wq").align == 16);
  const auto sym = parse_spec("w8a8_gemm", "k=256,n=64,m=16,block=64,quant_a=symmetric,quant_w=symmetric,bias=yes");
  p = op.plan(sym, op.default_config(sym));
  CHECK(rule(p, "w_offset").optional);
  CHECK(rule(p, "w_sum").optional);
  CHECK_FALSE(rule(p, "bias").optional);
  // Two kernels, quantization first; the workspace holds one bucket of codes and padded parameter rows.
  REQUIRE(p.kernels.size() == 2);
  CHECK(p.kernels[0].symbol == "qjit_w8a8_quant_a");
  CHECK(p.kernels[1].symbol == "qjit_w8a8_gemm");
  const auto ws = codegen::w8a8_workspace(16, 256, 64);
  CHECK(ws.scale == 16 * 256);
  CHECK(ws.offset - ws.scale == 4 * 128 * 4);  // 4 blocks × 128 padded rows × float
  CHECK(p.workspace_fixed == ws.total);
}

TEST_CASE("w8a8_gemm: candidates compile for sm_80 and sm_90 without spills", "[w8a8][nvrtc]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  auto jobs = w8a8_jobs({{"k=4096,n=11008,m=4096", 8}, {"k=4096,n=11008,m=1", 4}},
                        {"k=1024,n=256,m=64,block=32,x=bf16,quant_a=symmetric,bias=yes,act=relu6",
                         "k=1536,n=48,m=256,block=512,x=fp32,quant_w=symmetric,act=relu", "k=96,n=40,m=2,block=48"},
                        9);
  std::vector<test::CompileJob> sm80;
  for (size_t i = 0; i < jobs.size(); i += 3) sm80.push_back(jobs[i]);
  test::compile_jobs(jobs, "sm_90", "w8a8_gemm");
  test::compile_jobs(sm80, "sm_80", "w8a8_gemm");
  size_t spilling = 0;
  for (const auto* list : {&jobs, &sm80})
    for (const auto& j : *list) {
      INFO(j.spec.label() << " " << j.config.dump() << "\n" << j.error << j.result.log);
      REQUIRE(j.error.empty());
      CHECK(j.result.ok);
      CHECK(j.result.ptx.find(".entry qjit_w8a8_quant_a") != std::string::npos);
      CHECK(j.result.ptx.find(".entry qjit_w8a8_gemm") != std::string::npos);
      // The tuner prunes a spilling candidate; the default runs untuned on a miss and must never spill.
      if (j.config == op.default_config(j.spec)) CHECK(j.result.spill_bytes == 0);
      spilling += j.result.spill_bytes > 0;
    }
  // ptxas spills a little in a few short-k-tile configs of 8 warps.
  CHECK(spilling * 10 <= jobs.size() + sm80.size());
}

TEST_CASE("w8a8_gemm format=e4m3: spec rules, cache keys, refusals", "[w8a8]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  // int8 specs keep their keys: format=int8 is left out, as if the key did not exist.
  const auto int8 = parse_spec("w8a8_gemm", "k=4096,n=11008,m=16");
  CHECK(int8.canonical_json().find("format") == std::string::npos);
  CHECK(int8.canonical_json() == parse_spec("w8a8_gemm", "k=4096,n=11008,m=16,format=int8").canonical_json());
  CHECK(int8.canonical_json().find("\"quant_a\":\"offset\"") != std::string::npos);
  // e4m3 names itself; quant_a and quant_w do not apply to it.
  const auto fp8 = parse_spec("w8a8_gemm", "k=4096,n=11008,m=16,format=e4m3");
  CHECK(fp8.canonical_json().find("\"format\":\"e4m3\"") != std::string::npos);
  CHECK(fp8.canonical_json().find("quant_") == std::string::npos);
  CHECK(fp8.canonical_json() ==
        parse_spec("w8a8_gemm", "k=4096,n=11008,m=16,format=e4m3,quant_a=symmetric").canonical_json());
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=11008,format=e4m3,block=64"),
                    Catch::Contains("format=e4m3 takes block=128 only") && Catch::Contains("not block=64"));
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=4000,format=e4m3"),
                    Catch::Contains("multiple of 128") && Catch::Contains("not n=4000"));
  CHECK_THROWS_WITH(parse_spec("w8a8_gemm", "k=4096,n=11008,format=fp8"), Catch::Contains("int8|e4m3"));

  // sm_89+ only: the space is refused on an older device, and so is a compile for an older target.
  codegen::DeviceLimits ampere;
  ampere.compute_capability = 80;
  CHECK_THROWS_WITH(op.tunable_space(fp8, ampere),
                    Catch::Contains("FP8 tensor cores") && Catch::Contains("8.9 or newer, not 8.0"));
  CHECK_NOTHROW(op.tunable_space(int8, ampere));
  codegen::DeviceLimits ada;
  ada.compute_capability = 89;
  CHECK_FALSE(op.tunable_space(fp8, ada).empty());
  const auto src = codegen::generate_source(fp8, op.default_config(fp8));
  CHECK_THROWS_WITH(codegen::compile(src, "sm_80"), Catch::Contains("needs sm_89 or newer, not sm_80"));
  CHECK(codegen::generate_source(int8, op.default_config(int8)).arch_need.compute_capability == 0);

  // The plan reads no offsets or sums; W's tile scales arrive 4 bytes at a time.
  const auto rule = pointer_rule;
  for (const auto& c : op.tunable_space(fp8)) {
    INFO(c.dump());
    CHECK_NOTHROW(op.validate_config(fp8, c));
    const auto p = op.plan(fp8, c);
    CHECK(rule(p, "w_offset").optional);
    CHECK(rule(p, "w_sum").optional);
    CHECK(rule(p, "w_scale").align == 4);
  }
  // The library path leads the space on compute capability 9.0 (the default limits), the simple kernel elsewhere.
  CHECK(op.tunable_space(fp8)[0].value("family", "") == "cublaslt");
  CHECK(op.tunable_space(fp8, ada)[0].value("family", "") == "simple");
  CHECK(op.traffic(fp8).bytes < op.traffic(int8).bytes);  // no offsets or sums, one scale per 128 columns
  CHECK(src.text.find("constexpr bool kFp8 = true;") != std::string::npos);
  CHECK(src.text.find("constexpr int kWScaleCols = 86;") != std::string::npos);  // 11008 / 128 tiles
}

TEST_CASE("w8a8_gemm format=e4m3: candidates compile for sm_90a and sm_89 without spills", "[w8a8][nvrtc]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  // (A stride past the space's end: the default and the first candidate, the simple kernel where m <= 64.)
  auto jobs = w8a8_jobs({{"k=4096,n=11008,m=4096,format=e4m3", 8}, {"k=4096,n=11008,m=1,format=e4m3", 8}},
                        {"k=512,n=256,m=16,format=e4m3,x=bf16,bias=yes,act=relu6",
                         "k=1024,n=384,m=256,format=e4m3,x=fp32,act=relu"},
                        100000);
  std::vector<test::CompileJob> ada;
  for (size_t i = 0; i < jobs.size(); i += 4) ada.push_back(jobs[i]);
  test::compile_jobs(jobs, "sm_90a", "w8a8_gemm e4m3");
  test::compile_jobs(ada, "sm_89", "w8a8_gemm e4m3");
  for (const auto* list : {&jobs, &ada})
    for (const auto& j : *list) {
      INFO(j.spec.label() << " " << j.config.dump() << "\n" << j.error << j.result.log);
      REQUIRE(j.error.empty());
      CHECK(j.result.ok);
      CHECK(j.result.ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
      if (j.config.value("family", "") == "tiled") {
        CHECK(j.result.ptx.find("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32") != std::string::npos);
        CHECK(j.result.ptx.find(".s8.s8") == std::string::npos);
      }
      CHECK(j.result.spill_bytes == 0);  // the space leaves out the warp shapes that spill (w8a8_gemm.cpp)
    }
  // The int8 kernels hold no FP8 instruction (they also run on sm_80).
  const auto int8 = parse_spec("w8a8_gemm", "k=512,n=256,m=64");
  const auto r = codegen::compile(codegen::generate_source(int8, op.default_config(int8)), "sm_80");
  REQUIRE(r.ok);
  CHECK(r.ptx.find("e4m3") == std::string::npos);
}

namespace {

nlohmann::json wgmma(int bm, int stages, int persistent) {
  return {{"family", "wgmma"}, {"bm", bm}, {"stages", stages}, {"persistent", persistent}};
}

bool is_wgmma(const nlohmann::json& c) { return c.value("family", "") == "wgmma"; }

// The wgmma configs of spec's space on device d.
std::vector<nlohmann::json> wgmma_configs(const codegen::OpSpec& spec, const codegen::DeviceLimits& d = {}) {
  std::vector<nlohmann::json> out;
  for (const auto& c : codegen::find_op("w8a8_gemm").tunable_space(spec, d))
    if (is_wgmma(c)) out.push_back(c);
  return out;
}

// A compiled wgmma-family module: sm_90a, the given wgmma instruction, the
// ring's tensor copies and barriers, the register move, the trap of a wait
// that never completes, the quantization kernel; no ptxas advisory on wgmma
// and no spill in any kernel.
void check_wgmma_module(const test::CompileJob& j, const std::string& instruction) {
  INFO(j.spec.label() << " " << j.config.dump() << "\n" << j.error << j.result.log);
  REQUIRE(j.error.empty());
  REQUIRE(j.result.ok);
  CHECK(j.result.ptx.find(".target sm_90a") != std::string::npos);
  CHECK(j.result.ptx.find(instruction) != std::string::npos);
  CHECK(j.result.ptx.find("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes") !=
        std::string::npos);
  CHECK(j.result.ptx.find("mbarrier.arrive.expect_tx") != std::string::npos);
  CHECK(j.result.ptx.find("setmaxnreg.inc.sync.aligned.u32 232") != std::string::npos);
  CHECK(j.result.ptx.find("trap;") != std::string::npos);  // a barrier wait that never completes fails the launch
  CHECK(j.result.ptx.find(".entry qjit_w8a8_quant_a") != std::string::npos);
  // ptxas's performance advisories on wgmma (C7510 and up: serialised wgmma, ignored setmaxnreg).
  CHECK(j.result.log.find("C75") == std::string::npos);
  // No kernel of the module spills (the report has a line per kernel).
  size_t at = 0, lines = 0;
  while ((at = j.result.log.find(" bytes spill stores", at)) != std::string::npos) {
    const size_t start = j.result.log.rfind(',', at) + 1;
    CHECK(std::stoi(j.result.log.substr(start, at - start)) == 0);
    ++at, ++lines;
  }
  CHECK(lines >= 2);
}

}  // namespace

TEST_CASE("w8a8_gemm wgmma family: space, legality, plan and tensor maps, compute capability 9.0 only", "[w8a8]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  const auto spec = parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096");
  auto family_count = [](const codegen::OpSpec& sp, const codegen::DeviceLimits& d = {}) {
    return wgmma_configs(sp, d).size();
  };
  // A small space of sane configs on an H100/H200; none on another target, below 128 rows, for
  // blocks that are not whole stages of 128 codes, or for n not a multiple of 16.
  const auto count = family_count(spec);
  CHECK(count >= 10);
  CHECK(count <= 40);
  codegen::DeviceLimits ampere;
  ampere.arch = "sm_80";
  ampere.compute_capability = 80;
  CHECK(family_count(spec, ampere) == 0);
  CHECK(family_count(parse_spec("w8a8_gemm", "k=4096,n=11008,m=64")) == 0);
  CHECK(family_count(parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096,block=64")) == 0);
  CHECK(family_count(parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096,block=256")) > 0);
  CHECK(family_count(parse_spec("w8a8_gemm", "k=4096,n=11016,m=4096")) == 0);
  for (const auto& c : wgmma_configs(spec)) {
    CHECK_NOTHROW(op.validate_config(spec, c));
    CHECK(op.needs_sm90a(c));
  }
  // bm of 192 only from the 256 bucket; the untuned default never needs sm_90a.
  for (const auto& c : op.tunable_space(parse_spec("w8a8_gemm", "k=4096,n=11008,m=128")))
    if (c.value("family", "") == "wgmma") CHECK(c.at("bm").get<int>() <= 128);
  CHECK_FALSE(op.needs_sm90a(op.default_config(spec)));

  CHECK_THROWS_WITH(op.validate_config(spec, wgmma(96, 4, 0)), Catch::Contains("bm must be 64, 128 or 192"));
  CHECK_THROWS_WITH(op.validate_config(spec, wgmma(128, 9, 0)), Catch::Contains("stages must be 2..8"));
  CHECK_THROWS_WITH(op.validate_config(spec, wgmma(128, 4, 2)), Catch::Contains("persistent must be 0 or 1"));
  CHECK_THROWS_WITH(op.validate_config(spec, wgmma(192, 6, 0)), Catch::Contains("shared memory"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("w8a8_gemm", "k=4096,n=11008,m=128"), wgmma(192, 4, 0)),
                    Catch::Contains("bm=192 exceeds the bucket's rows m=128"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096,block=64"), wgmma(128, 4, 0)),
                    Catch::Contains("block=64 is not a multiple of 128"));
  CHECK_THROWS_WITH(op.validate_config(spec, nlohmann::json{{"family", "wgmma"}, {"bm", 128}, {"stages", 4}}),
                    Catch::Contains("needs family, bm, stages, persistent"));

  // The plan: the quantization kernel, then 384 threads on a ring of stages (W's 128 rows and x's bm
  // rows of 128 codes, the parameters padded to 1 KB) plus 1 KB of alignment; a block per tile of
  // bm × 128 (m fastest), or a persistent grid capped at the tiles.
  const auto plan = op.plan(spec, wgmma(128, 4, 0));
  REQUIRE(plan.kernels.size() == 2);
  const auto& gemm = plan.kernels[1];
  CHECK(gemm.geometry.block[0] == 384);
  CHECK(gemm.geometry.dynamic_smem == 4 * (128 * 128 + 128 * 128 + 3072) + 1024);
  CHECK(gemm.geometry.grid[0] == 32 * 86);
  CHECK(gemm.geometry.grid_per_sm == 0);
  CHECK(gemm.geometry.programmatic);
  const auto persistent = op.plan(spec, wgmma(192, 5, 1)).kernels[1].geometry;
  CHECK(persistent.grid_per_sm == 1);
  CHECK(persistent.max_grid == 22 * 86);
  CHECK(persistent.dynamic_smem == 5 * (128 * 128 + 192 * 128 + 4096) + 1024);
  // Tensor maps: W's codes [n][k] from the argument, x's codes [m][k] from the workspace (rows: the
  // call's m), boxes of one 128-byte row of k, swizzled as wgmma reads them.
  REQUIRE(gemm.tensor_maps.size() == 2);
  const auto& w = gemm.tensor_maps[0];
  CHECK((w.source == "wq" && !w.in_workspace && w.element == codegen::TensorMap::Element::u8 && w.rank == 2));
  CHECK((w.dims[0] == 4096 && w.dims[1] == 11008 && w.pitches[0] == 4096 && w.box[0] == 128 && w.box[1] == 128));
  CHECK(w.swizzle_128);
  const auto& x = gemm.tensor_maps[1];
  const auto ws = codegen::w8a8_workspace(4096, 4096, 128);
  CHECK((x.source.empty() && x.in_workspace && x.workspace_offset == ws.codes && x.rows_arg == "m"));
  CHECK((x.dims[0] == 4096 && x.box[0] == 128 && x.box[1] == 128 && x.swizzle_128));
  CHECK(op.plan(spec, wgmma(64, 4, 0)).kernels[1].tensor_maps[1].box[1] == 64);
  // The parameters come by 16-byte bulk copies; y two 16-bit columns at a time.
  for (const auto& r : plan.pointers) {
    if (r.name == "w_scale" || r.name == "wq") CHECK(r.align == 16);
    if (r.name == "y") CHECK(r.align == 4);
  }
  const auto src = codegen::generate_source(spec, wgmma(128, 4, 0));
  CHECK(src.needs_sm90a);
  CHECK(src.template_path == "templates/w8a8_gemm/w8a8_gemm_wgmma.cu");
  CHECK_THROWS_WITH(codegen::compile(src, "sm_80"), Catch::Contains("compute capability 9.0 only, not sm_80"));
}

TEST_CASE("w8a8_gemm wgmma family: each accumulator width and form compiles for sm_90a, no spills or serialised wgmma",
          "[w8a8][nvrtc]") {
  // stages and persistent change only constants of the ring and the grid; the code differs with bm
  // (the wgmma's n and the accumulators), the forms' promotion, the stages per block and y's type.
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"k=4096,n=11008,m=4096", wgmma(192, 5, 1)},
      {"k=4096,n=11008,m=4096,x=bf16,quant_a=symmetric,quant_w=symmetric,bias=yes,act=relu", wgmma(128, 4, 0)},
      {"k=1024,n=1008,m=256,block=256,x=fp32,quant_w=symmetric,act=relu6,bias=yes", wgmma(64, 6, 1)},
      {"k=2048,n=512,m=512,block=512,quant_a=symmetric", wgmma(192, 3, 0)},
  };
  std::vector<test::CompileJob> jobs;
  for (const auto& [s, c] : cases) jobs.push_back({parse_spec("w8a8_gemm", s), c});
  test::compile_jobs(jobs, "sm_90", "w8a8_gemm wgmma");
  for (const auto& j : jobs) {
    const int bm = j.config.at("bm").get<int>();
    check_wgmma_module(j, "wgmma.mma_async.sync.aligned.m64n" + std::to_string(bm) + "k32.s32.s8.s8");
    CHECK(j.result.ptx.find("e4m3") == std::string::npos);
  }
}

TEST_CASE("w8a8_gemm format=e4m3 wgmma family: compute capability 9.0 and m >= 128 only; plan and tensor maps",
          "[w8a8]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  const auto spec = parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096,format=e4m3");
  codegen::DeviceLimits hopper;
  hopper.arch = "sm_90", hopper.compute_capability = 90;
  // The int8 family's configs (bm 64, 128, 192 × stages 3..6 × persistent 0/1, 192 × 6 over shared memory;
  // and bm 64 overlapped, 8 more).
  const auto configs = wgmma_configs(spec, hopper);
  CHECK(configs.size() == 30);
  for (const auto& c : configs) {
    INFO(c.dump());
    CHECK_NOTHROW(op.validate_config(spec, c));
    CHECK(op.needs_sm90a(c));
  }
  // From the 128-row bucket up (bm of 192 from 256), on sm_90 only; the tiled family stays.
  CHECK_FALSE(wgmma_configs(parse_spec("w8a8_gemm", "k=4096,n=11008,m=256,format=e4m3"), hopper).empty());
  const auto m128 = wgmma_configs(parse_spec("w8a8_gemm", "k=1024,n=256,m=128,format=e4m3"), hopper);
  CHECK_FALSE(m128.empty());
  for (const auto& c : m128) CHECK(c.at("bm").get<int>() <= 128);
  for (const char* small : {"m=1", "m=16", "m=64"})
    CHECK(wgmma_configs(parse_spec("w8a8_gemm", std::string("k=4096,n=11008,format=e4m3,") + small), hopper).empty());
  codegen::DeviceLimits ada, blackwell;
  ada.arch = "sm_89", ada.compute_capability = 89;
  blackwell.arch = "sm_100", blackwell.compute_capability = 100;
  for (const auto* d : {&ada, &blackwell}) {
    INFO(d->arch);
    CHECK(wgmma_configs(spec, *d).empty());
    CHECK_FALSE(op.tunable_space(spec, *d).empty());
  }
  CHECK_FALSE(op.needs_sm90a(op.default_config(spec)));  // the untuned default runs on sm_89 too
  // tests/gpu_w8a8.sh's LARGE_ONLY='{"family":"wgmma"}' (qjit tune --only) keeps exactly these.
  CHECK(tuner::select_configs(op.tunable_space(spec, hopper), {{"family", "wgmma"}}) == configs);

  // Its own shared-memory rule: a slot carries x's scales alone (1 KB), so 192 rows fit 5 slots, not 6.
  CHECK_NOTHROW(op.validate_config(spec, wgmma(192, 5, 1)));
  CHECK_THROWS_WITH(op.validate_config(spec, wgmma(192, 6, 0)), Catch::Contains("shared memory"));
  CHECK_THROWS_WITH(op.validate_config(parse_spec("w8a8_gemm", "k=1024,n=256,m=128,format=e4m3"), wgmma(192, 4, 0)),
                    Catch::Contains("bm=192 exceeds the bucket's rows m=128"));

  // The plan: the int8 family's geometry and tensor maps over e4m3 bytes (W's codes [n][k] from the argument,
  // x's from the workspace, boxes of 128 codes of k); slots of W's and x's codes and 1 KB of x's scales.
  const auto plan = op.plan(spec, wgmma(128, 4, 0));
  REQUIRE(plan.kernels.size() == 2);
  CHECK(plan.kernels[0].symbol == "qjit_w8a8_quant_a");
  const auto& gemm = plan.kernels[1];
  CHECK(gemm.geometry.block[0] == 384);
  CHECK(gemm.geometry.dynamic_smem == 4 * (128 * 128 + 128 * 128 + 1024) + 1024);
  CHECK(gemm.geometry.grid[0] == 32 * 86);
  CHECK(op.plan(spec, wgmma(192, 5, 1)).kernels[1].geometry.dynamic_smem == 5 * (128 * 128 + 192 * 128 + 1024) + 1024);
  REQUIRE(gemm.tensor_maps.size() == 2);
  const auto& w = gemm.tensor_maps[0];
  CHECK((w.source == "wq" && w.element == codegen::TensorMap::Element::u8 && w.dims[0] == 4096 &&
         w.dims[1] == 11008 && w.box[0] == 128 && w.box[1] == 128 && w.swizzle_128));
  const auto& x = gemm.tensor_maps[1];
  CHECK((x.in_workspace && x.workspace_offset == codegen::w8a8_workspace(4096, 4096, 128).codes && x.rows_arg == "m" &&
         x.box[1] == 128 && x.swizzle_128));
  // W's tile scales [k/128][n/128] are loaded a float at a time; no offsets or sums are read.
  CHECK(pointer_rule(plan, "w_scale").align == 4);
  CHECK(pointer_rule(plan, "w_offset").optional);
  CHECK(pointer_rule(plan, "w_sum").optional);
  CHECK(pointer_rule(plan, "y").align == 4);
  const auto src = codegen::generate_source(spec, wgmma(128, 4, 0));
  CHECK(src.needs_sm90a);
  CHECK(src.template_path == "templates/w8a8_gemm/w8a8_gemm_wgmma.cu");
  CHECK(src.text.find("constexpr bool kFp8 = true;") != std::string::npos);
  CHECK(src.text.find("constexpr int kWScaleCols = 86;") != std::string::npos);
}

TEST_CASE("w8a8_gemm format=e4m3 wgmma family: compiles for sm_90a to e4m3 wgmma, no mma.sync, no spills",
          "[w8a8][nvrtc]") {
  // A sample of the large-M space (every candidate with QJIT_TEST_EXHAUSTIVE=1), and each accumulator width
  // with the other output types, bias and clamps. stages and persistent change only constants.
  const auto spec = parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096,format=e4m3");
  const auto space = wgmma_configs(spec);
  const auto sample = test::compile_sample(1, "w8a8_gemm e4m3 wgmma");
  std::vector<test::CompileJob> jobs;
  for (size_t i = 0; i < space.size(); ++i)
    if (sample.takes(i)) jobs.push_back({spec, space[i]});
  jobs.push_back({parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096,format=e4m3,x=bf16,bias=yes,act=relu"), wgmma(64, 4, 0)});
  jobs.push_back({parse_spec("w8a8_gemm", "k=1024,n=384,m=256,format=e4m3,x=fp32,bias=yes,act=relu6"), wgmma(192, 3, 1)});
  jobs.push_back({parse_spec("w8a8_gemm", "k=512,n=256,m=128,format=e4m3"), wgmma(128, 6, 1)});
  test::compile_jobs(jobs, "sm_90", "w8a8_gemm e4m3 wgmma");  // (sm_90a, from needs_sm90a)
  for (const auto& j : jobs) {
    const int bm = j.config.at("bm").get<int>();
    check_wgmma_module(j, "wgmma.mma_async.sync.aligned.m64n" + std::to_string(bm) + "k32.f32.e4m3.e4m3");
    CHECK(j.result.ptx.find("e4m3.e4m3") != std::string::npos);
    CHECK(j.result.ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);  // the quantization kernel
    // Neither the mma.sync path (fp16 HMMA on sm_90) nor the int8 instruction.
    CHECK(j.result.ptx.find("mma.sync") == std::string::npos);
    CHECK(j.result.ptx.find(".s8.s8") == std::string::npos);
  }
}

TEST_CASE("w8a8_gemm cublaslt family: e4m3 on compute capability 9.0+, the plan's layouts, its module", "[w8a8][nvrtc]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  const auto lt = [](int algo) { return nlohmann::json{{"family", "cublaslt"}, {"algo", algo}}; };
  const auto family_of = [&](const codegen::OpSpec& spec, const codegen::DeviceLimits& d) {
    std::vector<nlohmann::json> out;
    for (const auto& c : op.tunable_space(spec, d))
      if (c.value("family", "") == "cublaslt") out.push_back(c);
    return out;
  };
  codegen::DeviceLimits hopper, ada, blackwell;
  ada.arch = "sm_89", ada.compute_capability = 89;
  blackwell.arch = "sm_100", blackwell.compute_capability = 100;
  // Every bucket, fp16/bf16/fp32 y, bias, relu: cuBLASLt's four best answers; first in the space.
  for (const char* s : {"k=4096,n=11008,m=1,format=e4m3", "k=4096,n=11008,m=4096,format=e4m3,x=bf16,bias=yes,act=relu",
                        "k=512,n=256,m=64,format=e4m3,x=fp32"}) {
    INFO(s);
    const auto spec = parse_spec("w8a8_gemm", s);
    CHECK(family_of(spec, hopper) == std::vector<nlohmann::json>{lt(0), lt(1), lt(2), lt(3)});
    CHECK(family_of(spec, blackwell).size() == 4);
    CHECK(op.tunable_space(spec, hopper).front() == lt(0));
    CHECK(family_of(spec, ada).empty());  // cuBLASLt's 1x128 and 128x128 scales need compute capability 9.0
    CHECK_FALSE(op.needs_sm90a(lt(0)));
  }
  // Not int8 (no block-scaled int8 GEMM in cuBLASLt), not relu6 (no such epilogue); algo in range.
  const auto int8 = parse_spec("w8a8_gemm", "k=4096,n=11008,m=16");
  CHECK(family_of(int8, hopper).empty());
  CHECK_THROWS_WITH(op.validate_config(int8, lt(0)), Catch::Contains("format=e4m3"));
  const auto relu6 = parse_spec("w8a8_gemm", "k=4096,n=11008,m=16,format=e4m3,act=relu6");
  CHECK(family_of(relu6, hopper).empty());
  // fp32 y with a bias: cuBLASLt's FP8 GEMMs take no fp32 bias vector.
  const auto f32_bias = parse_spec("w8a8_gemm", "k=512,n=256,m=64,format=e4m3,x=fp32,bias=yes");
  CHECK(family_of(f32_bias, hopper).empty());
  CHECK_THROWS_WITH(op.validate_config(f32_bias, lt(0)), Catch::Contains("no fp32 bias"));
  CHECK_THROWS_WITH(op.validate_config(relu6, lt(0)), Catch::Contains("relu6"));
  const auto spec = parse_spec("w8a8_gemm", "k=4096,n=11008,m=256,format=e4m3,x=bf16,bias=yes,act=relu");
  CHECK_THROWS_WITH(op.validate_config(spec, lt(4)), Catch::Contains("algo must be 0..3"));
  CHECK_THROWS_WITH(op.validate_config(spec, nlohmann::json{{"family", "cublaslt"}}), Catch::Contains("needs family and algo"));

  // The plan: one kernel (quantization, and one block more for W's scales), then the library step.
  const auto p = op.plan(spec, lt(2));
  CHECK_FALSE(p.needs_cublas());
  CHECK(p.needs_cublaslt());
  REQUIRE(p.kernels.size() == 1);
  const auto& quant = p.kernels[0];
  CHECK(quant.symbol == "qjit_w8a8_quant_a_lt");
  CHECK(quant.geometry.grid[0] == 256 * 32 / 8 + 1);
  REQUIRE(p.steps.size() == 2);
  CHECK((p.steps[0].kind == codegen::PlanStep::Kind::kernel && p.steps[0].kernel == 0));
  REQUIRE(p.steps[1].kind == codegen::PlanStep::Kind::cublaslt_fp8_gemm);
  const auto& g = p.steps[1].lt;
  CHECK((g.w == "wq" && g.bias == "bias" && g.y == "y" && g.rows == "m" && g.k == 4096 && g.n == 11008));
  CHECK((g.out == codegen::CublasLtFp8Gemm::Out::bf16 && g.relu && g.algo == 2));
  // The workspace: codes, x's scales [k/128][M ≤ 256] inside the scale array, W's 32 × 86 tile scales after
  // everything the other families use, each where the kernel's parameters point.
  const auto ws = codegen::w8a8_workspace(256, 4096, 128);
  CHECK(g.x_offset == ws.codes);
  CHECK(g.x_scale_offset == ws.scale);
  CHECK(ws.offset - ws.scale >= size_t{32} * 256 * 4);
  CHECK(g.w_scale_offset >= ws.total);
  CHECK(g.w_scale_offset % 256 == 0);
  CHECK(p.workspace_fixed == g.w_scale_offset + size_t{32} * 86 * 4);
  REQUIRE(quant.params.size() == 6);
  CHECK((quant.params[2].offset == ws.codes && quant.params[3].offset == ws.scale));
  CHECK((quant.params[4].arg == "w_scale" && quant.params[5].offset == g.w_scale_offset));
  // cuBLASLt's operands at 16 bytes; no offsets or sums.
  CHECK(pointer_rule(p, "y").align == 16);
  CHECK(pointer_rule(p, "wq").align == 16);
  CHECK(pointer_rule(p, "w_offset").optional);
  CHECK(pointer_rule(p, "w_sum").optional);
  CHECK_FALSE(pointer_rule(p, "bias").optional);
  CHECK(pointer_rule(op.plan(parse_spec("w8a8_gemm", "k=512,n=256,m=1,format=e4m3"), lt(0)), "bias").optional);
  CHECK_THAT(p.describe(), Catch::Contains("cuBLASLt e4m3 GEMM") && Catch::Contains("algo 2") &&
                               Catch::Contains("+ bias, relu"));
  // fp16 and fp32 y; no bias, no relu.
  const auto f32 = op.plan(parse_spec("w8a8_gemm", "k=512,n=256,m=1,format=e4m3,x=fp32"), lt(0)).steps[1].lt;
  CHECK((f32.out == codegen::CublasLtFp8Gemm::Out::f32 && f32.bias.empty() && !f32.relu));

  // The module compiles for sm_90 and sm_89 (the kernel alone runs anywhere e4m3 converts), no spill.
  for (const char* arch : {"sm_90", "sm_89"}) {
    INFO(arch);
    const auto src = codegen::generate_source(spec, lt(0));
    CHECK(src.template_path == "templates/w8a8_gemm/w8a8_gemm_cublaslt.cu");
    const auto r = codegen::compile(src, arch);
    INFO(r.log);
    REQUIRE(r.ok);
    CHECK(r.ptx.find(".entry qjit_w8a8_quant_a_lt") != std::string::npos);
    CHECK(r.ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
    CHECK(r.spill_bytes == 0);
  }
}

TEST_CASE("w8a8_gemm stream family: int8, blocks of 128·j, m <= 64; plan, workspace and compiles", "[w8a8][nvrtc]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  const auto stream = [](int warps, int tiles, int splits, int unroll) {
    return nlohmann::json{{"family", "stream"}, {"warps", warps}, {"tiles", tiles}, {"splits", splits}, {"unroll", unroll}};
  };
  const auto family_of = [&](const codegen::OpSpec& spec) {
    std::vector<nlohmann::json> out;
    for (const auto& c : op.tunable_space(spec))
      if (c.value("family", "") == "stream") out.push_back(c);
    return out;
  };
  // 2 warp counts × 3 (tiles, unroll) with at most 4 pieces of W ahead × splits dividing the 32 blocks ×
  // x quantized by a kernel before or inside (fuse, up to 16 rows).
  const auto m16 = parse_spec("w8a8_gemm", "k=4096,n=11008,m=16");
  CHECK(family_of(m16).size() == 2 * 3 * 4 * 2);
  for (const auto& c : family_of(m16)) CHECK_NOTHROW(op.validate_config(m16, c));
  // Two tiles of W hold at most four of x's: none at m = 64.
  for (const auto& c : family_of(parse_spec("w8a8_gemm", "k=4096,n=11008,m=64"))) {
    CHECK(c.at("tiles") == 1);
    CHECK_FALSE(c.contains("fuse"));  // x's 64 rows over a slice of k do not stay in a block
  }
  // Not above 64 rows, not e4m3, not blocks that are not whole pieces of 128; splits divide the blocks.
  for (const char* s : {"k=4096,n=11008,m=128", "k=4096,n=11008,m=16,format=e4m3", "k=4096,n=11008,m=16,block=64",
                        "k=96,n=40,m=8,block=48"})
    CHECK(family_of(parse_spec("w8a8_gemm", s)).empty());
  CHECK_THROWS_WITH(op.validate_config(parse_spec("w8a8_gemm", "k=4096,n=11008,m=128"), stream(8, 1, 1, 2)),
                    Catch::Contains("above the stream family's 64 rows"));
  const auto k768 = parse_spec("w8a8_gemm", "k=768,n=128,m=8,block=256");  // 3 blocks
  CHECK(family_of(k768).size() == 2 * 3 * 2);
  CHECK_THROWS_WITH(op.validate_config(k768, stream(8, 1, 2, 2)), Catch::Contains("divide the 3 blocks"));
  CHECK_THROWS_WITH(op.validate_config(m16, stream(8, 2, 1, 4)), Catch::Contains("at most 4"));
  CHECK_THROWS_WITH(op.validate_config(m16, stream(6, 1, 1, 2)), Catch::Contains("warps must be 4 or 8"));
  auto extra = stream(8, 1, 1, 2);
  extra["bm"] = 16;
  CHECK_THROWS_WITH(op.validate_config(m16, extra), Catch::Contains("needs family, warps"));

  // The plan: a block per band of 16·tiles·warps rows and slice of k; with split k the workspace holds a
  // counter per band and each slice's float sums after the quantization's arrays.
  const auto p = op.plan(m16, stream(8, 1, 4, 2));
  REQUIRE(p.kernels.size() == 2);
  const auto& gemm = p.kernels[1];
  CHECK(gemm.geometry.block[0] == 256);
  CHECK(gemm.geometry.grid[0] == 86);  // ceil(11008 / 128)
  CHECK(gemm.geometry.grid[1] == 4);
  CHECK(gemm.geometry.programmatic);
  REQUIRE(gemm.params.size() == 12);
  const auto ws = codegen::w8a8_workspace(16, 4096, 128);
  const size_t base = (ws.total + 255) / 256 * 256;
  CHECK(gemm.params[11].kind == codegen::KernelParam::Kind::workspace);
  CHECK(gemm.params[11].offset == base);
  CHECK(p.workspace_fixed == base + 512 + size_t{4} * 86 * 8 * (1 * 2 * 4) * 32 * 4);
  CHECK(op.plan(m16, stream(8, 1, 1, 2)).workspace_fixed == ws.total);  // no slices to sum
  CHECK(pointer_rule(p, "wq").align == 16);
  CHECK(pointer_rule(p, "w_scale").align == 4);
  const auto src = codegen::generate_source(m16, stream(8, 1, 4, 2));
  CHECK(src.template_path == "templates/w8a8_gemm/w8a8_gemm_stream.cu");
  CHECK(src.text.find("constexpr int kMTiles = 2;") != std::string::npos);
  // fuse: one kernel taking x itself, its slice of x's codes and parameters in shared memory, only the split
  // sums in the workspace.
  auto fused = stream(8, 1, 4, 2);
  fused["fuse"] = 1;
  const auto fp = op.plan(m16, fused);
  REQUIRE(fp.kernels.size() == 1);
  REQUIRE(fp.steps.size() == 1);
  CHECK(fp.kernels[0].symbol == "qjit_w8a8_gemm_fused");
  REQUIRE(fp.kernels[0].params.size() == 9);
  CHECK((fp.kernels[0].params[0].arg == "x" && fp.kernels[0].params[8].offset == 0));
  CHECK(fp.kernels[0].geometry.dynamic_smem == 16 * (1024 + 16) + 12 * 8 * 16);
  CHECK(fp.workspace_fixed == 512 + size_t{4} * 86 * 8 * (1 * 2 * 4) * 32 * 4);
  fused["splits"] = 1;
  CHECK(op.plan(m16, fused).workspace_fixed == 0);
  CHECK_THROWS_WITH(op.validate_config(parse_spec("w8a8_gemm", "k=4096,n=11008,m=32"), fused),
                    Catch::Contains("fuse needs m <= 16"));

  // Each accumulator width, both sides' forms and a block of several pieces compile for sm_80 and sm_90
  // to the int8 mma, without spills for the configs the tuner would keep at M <= 16.
  std::vector<test::CompileJob> jobs;
  jobs.emplace_back(parse_spec("w8a8_gemm", "k=4096,n=11008,m=1"), stream(8, 1, 4, 4));
  jobs.emplace_back(parse_spec("w8a8_gemm", "k=4096,n=11008,m=16,quant_a=symmetric,bias=yes,act=relu"),
                    stream(4, 2, 2, 2));
  jobs.emplace_back(parse_spec("w8a8_gemm", "k=2048,n=272,m=8,block=512,x=bf16,quant_w=symmetric"), stream(8, 1, 1, 2));
  jobs.emplace_back(parse_spec("w8a8_gemm", "k=4096,n=11008,m=64,x=fp32"), stream(8, 1, 8, 2));
  auto fused16 = stream(4, 2, 1, 2), fused1 = stream(8, 1, 8, 4);
  fused16["fuse"] = fused1["fuse"] = 1;
  jobs.emplace_back(parse_spec("w8a8_gemm", "k=4096,n=11008,m=16,quant_a=symmetric,x=bf16"), fused16);
  jobs.emplace_back(parse_spec("w8a8_gemm", "k=2048,n=512,m=1,block=256"), fused1);
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto these = jobs;
    test::compile_jobs(these, arch, std::string("w8a8_gemm stream ") + arch);
    for (const auto& j : these) {
      INFO(arch << " " << j.spec.label() << " " << j.config.dump() << "\n" << j.error << j.result.log);
      REQUIRE(j.error.empty());
      REQUIRE(j.result.ok);
      CHECK(j.result.ptx.find("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32") != std::string::npos);
      CHECK(j.result.ptx.find("ld.global.nc.L1::no_allocate.v4.u32") != std::string::npos);
      if (j.spec.get_int("m") <= 16) CHECK(j.result.spill_bytes == 0);
    }
  }
}

TEST_CASE("w8a8_gemm wgmma family, overlap: bm 64, two blocks' stages in the ring; compiles without spills or "
          "serialised wgmma", "[w8a8][nvrtc]") {
  const auto& op = codegen::find_op("w8a8_gemm");
  const auto overlapped = [](int bm, int stages, int persistent) {
    return nlohmann::json{{"family", "wgmma"}, {"bm", bm}, {"stages", stages}, {"persistent", persistent}, {"overlap", 1}};
  };
  const auto spec = parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096");
  // Offered at bm 64 and every ring deep enough; the key is left out of a config without it.
  std::vector<nlohmann::json> offered;
  for (const auto& c : op.tunable_space(spec))
    if (c.value("overlap", 0) == 1) offered.push_back(c);
  CHECK(offered.size() == 8);  // stages 3..6 × persistent 0/1
  for (const auto& c : offered) CHECK(c.at("bm") == 64);
  for (const auto& c : op.tunable_space(spec))
    if (c.value("family", "") == "wgmma" && !c.contains("overlap")) CHECK(c.size() == 4);
  CHECK_NOTHROW(op.validate_config(spec, overlapped(64, 3, 0)));
  CHECK_THROWS_WITH(op.validate_config(spec, overlapped(128, 4, 0)), Catch::Contains("overlap needs bm=64"));
  const auto b512 = parse_spec("w8a8_gemm", "k=4096,n=11008,m=4096,block=512");  // 4 stages a block
  CHECK_THROWS_WITH(op.validate_config(b512, overlapped(64, 6, 0)), Catch::Contains("overlap needs stages >= 8"));
  auto bad = overlapped(64, 4, 0);
  bad["overlap"] = 2;
  CHECK_THROWS_WITH(op.validate_config(spec, bad), Catch::Contains("overlap must be 0 or 1"));
  CHECK(codegen::generate_source(spec, overlapped(64, 4, 1)).text.find("constexpr bool kOverlap = true;") !=
        std::string::npos);

  // Every form, blocks of one and two stages, an odd number of blocks (runs of 3), e4m3: no spill, no
  // ptxas advisory (a consumer's wgmma kept in flight across a loop's back edge serialises them all).
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"k=4096,n=11008,m=4096", overlapped(64, 4, 1)},
      {"k=4096,n=11008,m=4096,x=bf16,quant_a=symmetric,quant_w=symmetric,bias=yes,act=relu", overlapped(64, 3, 0)},
      {"k=1152,n=1008,m=256,x=fp32,quant_w=symmetric,act=relu6,bias=yes", overlapped(64, 5, 1)},
      {"k=1536,n=400,m=256,block=256,quant_a=symmetric", overlapped(64, 4, 0)},
      {"k=4096,n=11008,m=4096,format=e4m3,x=bf16", overlapped(64, 4, 1)},
  };
  std::vector<test::CompileJob> jobs;
  for (const auto& [s, c] : cases) jobs.push_back({parse_spec("w8a8_gemm", s), c});
  test::compile_jobs(jobs, "sm_90", "w8a8_gemm wgmma overlap");
  for (const auto& j : jobs) {
    check_wgmma_module(j, j.spec.get_str("format") == "e4m3" ? "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"
                                                             : "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8");
    // The overlap itself: a wait that leaves the next block's groups (one a stage) in flight.
    const int stages_per_block = static_cast<int>(j.spec.get_int("block") / 128);
    CHECK(j.result.ptx.find("wgmma.wait_group.sync.aligned " + std::to_string(stages_per_block) + ";") !=
          std::string::npos);
  }
}
