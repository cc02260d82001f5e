// Plans and argument structs of every shipped op, without a GPU: every name a
// plan uses is an argument of its op, every step refers to a kernel, and each
// typed argument struct packs exactly the op's argument list.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>
#include "codegen/error.h"
#include "codegen/ops/gru_quant.h"
#include "codegen/registry.h"
#include "codegen/spec.h"
#include "qjit/qjit.h"
#include "runtime/cublas.h"
#include "runtime/cublaslt.h"
#include "runtime/plan.h"
#include "runtime/spec_key.h"
#include "tests/helpers.h"
#include "tests/gru_helpers.h"

using namespace qjit;

namespace {

bool has_arg(const std::vector<codegen::ArgDef>& args, const std::string& name, codegen::ArgDef::Kind kind) {
  for (const auto& a : args)
    if (a.name == name) return a.kind == kind;
  return false;
}

// Every name of the plan is an argument of the right kind; steps and the
// GEMM's epilogue refer to step kernels; init kernels take nothing.
void check_plan(const codegen::OpDef& op, const codegen::OpSpec& spec, const nlohmann::json& config) {
  INFO(spec.label() << " " << config.dump());
  using Kind = codegen::ArgDef::Kind;
  const auto args = op.args();
  const auto plan = op.plan(spec, config);
  REQUIRE_FALSE(plan.steps.empty());
  for (const auto& k : plan.kernels) {
    INFO(k.symbol);
    if (k.role == codegen::KernelDef::Role::init) CHECK((k.params.empty() && k.tensor_maps.empty()));
    for (const auto& p : k.params)
      if (p.kind == codegen::KernelParam::Kind::arg)
        CHECK((has_arg(args, p.arg, Kind::pointer) || has_arg(args, p.arg, Kind::int32)));
    for (const auto& m : k.tensor_maps) {
      // A map over the workspace names no argument; it must lie inside the plan's workspace.
      if (m.in_workspace) CHECK((m.source.empty() && m.workspace_offset < plan.workspace_fixed));
      else CHECK(has_arg(args, m.source, Kind::pointer));
      if (!m.rows_arg.empty()) CHECK(has_arg(args, m.rows_arg, Kind::int32));
    }
    CHECK(k.tensor_maps.size() <= codegen::KernelDef::kMaxTensorMaps);
  }
  const auto step_kernel = [&](int i) {
    return i >= 0 && static_cast<size_t>(i) < plan.kernels.size() &&
           plan.kernels[static_cast<size_t>(i)].role == codegen::KernelDef::Role::step;
  };
  for (const auto& s : plan.steps) {
    if (s.kind == codegen::PlanStep::Kind::kernel) {
      CHECK(step_kernel(s.kernel));
      continue;
    }
    if (s.kind == codegen::PlanStep::Kind::cublaslt_fp8_gemm) {
      for (const auto* name : {&s.lt.w, &s.lt.y}) CHECK(has_arg(args, *name, Kind::pointer));
      if (!s.lt.bias.empty()) CHECK(has_arg(args, s.lt.bias, Kind::pointer));
      CHECK(has_arg(args, s.lt.rows, Kind::int32));
      for (size_t offset : {s.lt.x_offset, s.lt.x_scale_offset, s.lt.w_scale_offset})
        CHECK(offset < plan.workspace_fixed);
      continue;
    }
    for (const auto* name : {&s.gemm.x, &s.gemm.w, &s.gemm.y, &s.gemm.bias, &s.gemm.residual})
      if (!name->empty()) CHECK(has_arg(args, *name, Kind::pointer));
    if (s.gemm.rows.empty()) CHECK(s.gemm.fixed_rows > 0);
    else CHECK(has_arg(args, s.gemm.rows, Kind::int32));
    if (s.gemm.to_sums) CHECK(s.gemm.epilogue < 0);
    else CHECK(!s.gemm.y.empty());
    if (s.gemm.epilogue >= 0) CHECK(step_kernel(s.gemm.epilogue));
  }
  for (const auto& p : plan.pointers) CHECK(has_arg(args, p.name, Kind::pointer));
}

}  // namespace

TEST_CASE("every shipped op's plans name only its arguments and its kernels", "[codegen]") {
  const std::pair<const char*, const char*> specs[] = {
      {"fused_ffn", "d=4096,h=11008,m=1"},
      {"fused_ffn", "d=512,h=100,m=8,dtype=fp32"},
      {"fused_ffn", "d=1024,h=528,m=1,weights=native,bits=3,zero=float"},
      {"fp_lut", "n=1000003,fn=sin,in=fp32,out=bf16"},
      {"fp_lut", "n=77,fn=silu,out=fp32"},
      {"awq_dequant", "k=4096,n=11008,g=128"},
      {"awq_dequant", "k=256,n=64,g=64,layout=gptq,zero=sym"},
      {"wq_gemm", "k=4096,n=11008,m=1"},
      {"wq_gemm", "k=4096,n=11008,m=256,bias=yes,act=relu"},
      {"wq_gemm", "k=4096,n=11008,m=1024,residual=yes,zero=float,scales=bf16,x=bf16"},
      {"w8a8_gemm", "k=4096,n=11008,m=4096"},  // its space ends with the wgmma family (a map over the workspace)
      {"w8a8_gemm", "k=4096,n=11008,m=16"},    // the stream family
      {"w8a8_gemm", "k=4096,n=11008,m=64,format=e4m3,bias=yes"},  // the cuBLASLt family leads
      {"qconv2d", "n=2,ci=64,h=14,w=14,co=64,pad_h=1,pad_w=1"},  // nchw: the ring behind a transpose step
  };
  std::vector<codegen::OpSpec> all;
  for (const auto& [op_name, shape] : specs) all.push_back(codegen::parse_spec(op_name, shape));
  // gru_quant's params document travels as one canonical JSON string, not a --shape item.
  std::mt19937_64 rng(5);
  all.push_back(codegen::make_spec(
      "gru_quant", {{"t", 9}, {"n", 2}, {"c", 20}, {"h", 33},
                    {"params", codegen::gru::canonical_params(test::random_gru_params(rng, 20, 33, 4, 16))}}));
  for (const auto& spec : all) {
    const auto& op = codegen::find_op(spec.op);
    check_plan(op, spec, op.default_config(spec));
    // Each family's first few configs (wq_gemm's space begins with the cuBLAS family).
    const auto space = op.tunable_space(spec);
    for (size_t i = 0; i < space.size(); i += 1 + space.size() / 40) check_plan(op, spec, space[i]);
  }
}

TEST_CASE("each typed argument struct packs its op's argument list", "[codegen]") {
  auto* p = reinterpret_cast<void*>(uintptr_t{4096});  // aligned for every check, never dereferenced
  const auto matches = [](const char* op, const ArgPack& pack) {
    const auto args = codegen::find_op(op).args();
    REQUIRE(pack.count == static_cast<int>(args.size()));
    for (size_t i = 0; i < args.size(); ++i) {
      INFO(op << " argument " << args[i].name);
      CHECK((((pack.int_mask >> i) & 1) != 0) == (args[i].kind == codegen::ArgDef::Kind::int32));
    }
  };
  matches("fused_ffn", FusedFfnArgs{p, p, p, p, p, p, p, p}.pack());
  matches("fp_lut", FpLutArgs{p, p}.pack());
  matches("awq_dequant", AwqDequantArgs{p, p, p, p}.pack());
  matches("wq_gemm", WqGemmArgs{p, p, p, p, p, p, p, 3}.pack());
  matches("gru_quant", GruQuantArgs{p, p, p, p, p, p, p}.pack());
  // A pack that does not fit the op is refused before anything runs.
  const auto& op = codegen::find_op("wq_gemm");
  const auto spec = codegen::parse_spec("wq_gemm", "k=4096,n=11008,m=16");
  const auto plan = op.plan(spec, op.default_config(spec));
  CHECK_NOTHROW(runtime::check_pointers(op.args(), plan, WqGemmArgs{p, p, p, p, nullptr, nullptr, p, 3}.pack()));
  CHECK_THROWS_WITH(runtime::check_pointers(op.args(), plan, FpLutArgs{p, p}.pack()),
                    Catch::Contains("2 arguments packed, the op takes 8"));
  ArgPack swapped("wq_gemm");
  swapped.ptr(p).ptr(p).ptr(p).ptr(p).ptr(nullptr).ptr(nullptr).i32(3).ptr(p);
  CHECK_THROWS_WITH(runtime::check_pointers(op.args(), plan, swapped), Catch::Contains("argument y packed as an int"));
  CHECK_THROWS_WITH(
      runtime::check_pointers(op.args(), plan, WqGemmArgs{p, static_cast<char*>(p) + 4, p, p, nullptr, nullptr, p, 3}.pack()),
      Catch::Contains("wq_gemm: qweight = 4100 is not aligned"));
}

TEST_CASE("the fast key and the JSON spec come from the same fields", "[codegen]") {
  const auto describe = [](runtime::SpecFields& f) { f.add("k", 4096).add("n", 11008).add("zero", "sym"); };
  runtime::SpecFields fast(runtime::SpecFields::Mode::fast_key, "wq_gemm"), json(runtime::SpecFields::Mode::json, "wq_gemm");
  describe(fast);
  describe(json);
  CHECK(fast.fast_key() == "wq_gemm|k=4096|n=11008|zero=sym");
  CHECK(json.params() == nlohmann::json{{"k", 4096}, {"n", 11008}, {"zero", "sym"}});
  CHECK(codegen::make_spec("wq_gemm", json.params()).get_str("zero") == "sym");
  runtime::SpecFields long_key(runtime::SpecFields::Mode::fast_key, "fp_lut");
  CHECK_THROWS_WITH(long_key.add("cuts", std::string(600, 'a')), Catch::Contains("spec too long"));
}

TEST_CASE("a dense fused_ffn's spec leaves out the parameters of quantized weights", "[spec]") {
  const auto dense = codegen::parse_spec("fused_ffn", "d=64,h=16,bits=4,g=128,zero=int");
  CHECK(dense.canonical_json() == codegen::parse_spec("fused_ffn", "d=64,h=16").canonical_json());
  for (const char* key : {"bits", "\"g\"", "zero", "scales"}) CHECK(dense.canonical_json().find(key) == std::string::npos);
  CHECK(dense.shape_string() == "act=silu,d=64,dtype=fp16,h=16,m=1");
  CHECK_THROWS_WITH(codegen::parse_spec("fused_ffn", "d=64,h=16,bits=3"), Catch::Contains("applies to weights=native only"));
  const auto native = codegen::parse_spec("fused_ffn", "d=64,h=16,bits=3,g=32,weights=native");
  CHECK(native.canonical_json().find("\"bits\":3") != std::string::npos);
  CHECK(native.shape_string().find("g=32") != std::string::npos);
}

namespace {

// The byte sizes of kernel `symbol`'s parameters as PTX declares them:
// `.param .u64 name`, `.param .u32 name`, `.param .align 64 .b8 name[128]`.
std::vector<size_t> ptx_param_sizes(const std::string& ptx, const std::string& symbol) {
  const size_t entry = ptx.find(".entry " + symbol + "(");
  if (entry == std::string::npos) return {};
  const size_t end = ptx.find(')', entry);
  std::vector<size_t> sizes;
  for (size_t at = ptx.find(".param", entry); at < end; at = ptx.find(".param", at + 1)) {
    const std::string decl = ptx.substr(at, ptx.find_first_of(",)", at) - at);
    const size_t bracket = decl.find('[');
    if (bracket != std::string::npos) sizes.push_back(std::stoul(decl.substr(bracket + 1)));
    else sizes.push_back(decl.find("64 ") != std::string::npos ? 8 : decl.find("32 ") != std::string::npos ? 4 : 0);
  }
  return sizes;
}

}  // namespace

TEST_CASE("every family's kernels take the parameters their plans pass (PTX declarations)", "[codegen][nvrtc]") {
  // load_plan checks the same against the cubin on a GPU (cuFuncGetParamInfo); here the PTX of one
  // config of each family says it without one: a parameter added to a kernel and not to its plan (or
  // in another order of sizes) fails here, naming both lists.
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"fused_ffn:d=4096,h=11008,m=1", nullptr},
      {"fp_lut:n=1000003,fn=silu", nullptr},
      {"awq_dequant:k=4096,n=11008,g=128", nullptr},
      {"wq_gemm:k=4096,n=11008,m=1", nullptr},
      {"wq_gemm:k=4096,n=11008,m=256,bias=yes,act=relu", nullptr},
      {"w8a8_gemm:k=4096,n=11008,m=64", nullptr},
      {"w8a8_gemm:k=4096,n=11008,m=16", {{"family", "stream"}, {"warps", 8}, {"tiles", 1}, {"splits", 4}, {"unroll", 2}}},
      {"w8a8_gemm:k=1024,n=256,m=16", {{"family", "simple"}, {"threads", 128}}},
      {"w8a8_gemm:k=4096,n=11008,m=256,format=e4m3", {{"family", "wgmma"}, {"bm", 128}, {"stages", 4}, {"persistent", 1}}},
      {"w8a8_gemm:k=4096,n=11008,m=16,format=e4m3", {{"family", "cublaslt"}, {"algo", 0}}},
      {"qconv2d:n=1,ci=64,h=14,w=14,co=64,pad_h=1,pad_w=1", nullptr},
      {"qconv2d:n=1,ci=64,h=14,w=14,co=64,pad_h=1,pad_w=1,x=fp32", nullptr},
      {"qconv2d:n=2,ci=64,h=14,w=14,co=64,pad_h=1,pad_w=1",
       {{"family", "igemm_ring"}, {"bm", 64}, {"bn", 64}, {"bk", 64}, {"warps_m", 2}, {"warps_n", 2}, {"stages", 3},
        {"split", 2}}},
      {"qconv2d:n=1,ci=64,h=14,w=14,co=64,pad_h=1,pad_w=1,layout=nhwc,bits=8",
       {{"family", "igemm_ring"}, {"bm", 64}, {"bn", 64}, {"bk", 32}, {"warps_m", 2}, {"warps_n", 2}, {"stages", 4},
        {"split", 1}, {"predeq", 1}}},
  };
  std::vector<test::CompileJob> jobs;
  for (const auto& [text, config] : cases) {
    const std::string s(text);
    const auto spec = codegen::parse_spec(s.substr(0, s.find(':')), s.substr(s.find(':') + 1));
    jobs.emplace_back(spec, config.is_null() ? codegen::find_op(spec.op).default_config(spec) : config);
  }
  test::compile_jobs(jobs, "sm_90", "plan parameters");  // (sm_90a where a family needs it)
  for (const auto& j : jobs) {
    INFO(j.spec.label() << " " << j.config.dump() << "\n" << j.error);
    REQUIRE(j.result.ok);
    const auto& op = codegen::find_op(j.spec.op);
    const auto plan = op.plan(j.spec, j.config);
    std::vector<bool> epilogue(plan.kernels.size(), false);  // a cuBLAS step passes its epilogue's parameters
    for (const auto& s : plan.steps)
      if (s.kind == codegen::PlanStep::Kind::cublas_gemm && s.gemm.epilogue >= 0) epilogue[s.gemm.epilogue] = true;
    for (size_t k = 0; k < plan.kernels.size(); ++k) {
      if (epilogue[k]) continue;
      const auto& kd = plan.kernels[k];
      INFO(kd.symbol);
      const auto declared = ptx_param_sizes(j.result.ptx, kd.symbol);
      CHECK(declared == runtime::plan_param_sizes(kd, op.args(), op.name()));
    }
  }
}

TEST_CASE("cuBLASLt and cuBLAS load by dlopen with every entry point the plans call (no GPU needed)", "[codegen]") {
  // A misspelt symbol or a too-old library would otherwise show only on a GPU, as a family that never
  // runs. Where the toolkit's libraries are not installed the loaders say so, naming the library.
  std::string why;
  const auto* lt = runtime::try_cublaslt(&why);
  const auto* blas = runtime::try_cublas(&why);
  if (!std::ifstream("/usr/local/cuda/lib64/libcublasLt.so.13").good() && !std::getenv("CUDA_HOME")) {
    CHECK((lt != nullptr || why.find("libcublas") != std::string::npos));
    return;
  }
  INFO(why);
  REQUIRE(lt != nullptr);
  CHECK(lt->version() >= 120900);  // the 1x128 and 128x128 FP8 block scales
  CHECK(blas != nullptr);
}
