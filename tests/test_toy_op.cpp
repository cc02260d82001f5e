// A toy op of two kernels, registered by this test binary (qjit does not
// ship it): y[0] = Σ_i scale · x[i], as a scale kernel writing the plan's
// workspace and then a one-block sum kernel reading it. It goes through the
// same registry, source assembly, NVRTC, cache key, tuner and runtime as
// the shipped ops, so it shows that an op's plan may launch more than one
// kernel: the CPU cases compile both kernels, the GPU case tunes and
// verifies the plan and calls it through a typed entry point.
#include <catch2/catch.hpp>
#include <cmath>
#include "codegen/op.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "codegen/templates.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/spec_key.h"
#include "tests/gpu_helpers.h"
#include "tests/helpers.h"
#include "tuner/ops.h"
#include "tuner/timing.h"
#include "tuner/tuner.h"

using namespace qjit;

namespace {

// templates/toy_scale_sum/toy_scale_sum.cu, registered at run time.
constexpr const char* kTemplate = R"(#include "qjit/qjit_common.cuh"
using namespace qjit_spec;

// scaled[i] = kScale · x[i] for i < kN, grid-stride.
extern "C" __global__ void toy_scale(const float* __restrict__ x, float* __restrict__ scaled) {
  for (long long i = blockIdx.x * (long long)kScaleThreads + threadIdx.x; i < kN; i += gridDim.x * (long long)kScaleThreads)
    scaled[i] = kScale * x[i];
}

// y[0] = Σ scaled[i], one block: per-thread strided sums, then a tree in shared memory.
extern "C" __global__ void toy_sum(const float* __restrict__ scaled, float* __restrict__ y) {
  __shared__ float part[kSumThreads];
  float s = 0.0f;
  for (long long i = threadIdx.x; i < kN; i += kSumThreads) s += scaled[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = kSumThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = part[0];
}
)";

class ToyScaleSumOp final : public codegen::OpDef {
 public:
  std::string name() const override { return "toy_scale_sum"; }
  std::string summary() const override { return "y[0] = sum(scale * x): a test's op of two kernels"; }
  std::vector<codegen::ParamDef> params() const override {
    return {{"n", "elements of x", nullptr, {}, 1, int64_t{1} << 26}, {"scale", "integer factor", 1, {}, -64, 64}};
  }
  std::vector<codegen::ArgDef> args() const override { return {{"x"}, {"y"}}; }
  std::string template_path(const nlohmann::json&) const override { return "templates/toy_scale_sum/toy_scale_sum.cu"; }
  std::vector<nlohmann::json> candidates(const codegen::OpSpec&, const codegen::DeviceLimits&) const override {
    std::vector<nlohmann::json> out;
    for (int scale_threads : {128, 256})
      for (int sum_threads : {64, 256}) out.push_back({{"scale_threads", scale_threads}, {"sum_threads", sum_threads}});
    return out;
  }
  nlohmann::json default_config(const codegen::OpSpec&) const override {
    return {{"scale_threads", 256}, {"sum_threads", 256}};
  }
  void validate_config(const codegen::OpSpec&, const nlohmann::json& c) const override {
    for (const char* k : {"scale_threads", "sum_threads"})
      if (!c.contains(k) || !c[k].is_number_integer() || c[k].get<int>() < 32 || c[k].get<int>() > 1024)
        throw Error("config", std::string("toy config needs ") + k + " in 32..1024: " + c.dump());
  }
  std::vector<codegen::Constant> constants(const codegen::OpSpec& spec, const nlohmann::json& c) const override {
    return {{"long long", "kN", std::to_string(spec.get_int("n")), "elements"},
            {"float", "kScale", std::to_string(spec.get_int("scale")) + ".0f", "the factor"},
            {"int", "kScaleThreads", c.at("scale_threads").dump(), "tunable: threads of the scale kernel"},
            {"int", "kSumThreads", c.at("sum_threads").dump(), "tunable: threads of the sum kernel"}};
  }
  // Two step kernels joined by the workspace: the scaled x, n floats.
  codegen::Plan plan(const codegen::OpSpec& spec, const nlohmann::json& c) const override {
    codegen::Plan p;
    codegen::LaunchGeometry scale, sum;
    const int64_t n = spec.get_int("n"), threads = c.at("scale_threads").get<int>();
    scale.grid[0] = static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 1024));
    scale.block[0] = static_cast<unsigned>(threads);
    sum.block[0] = c.at("sum_threads").get<unsigned>();
    p.kernels.push_back({"toy_scale", codegen::KernelDef::Role::step, scale,
                         {codegen::arg_param("x"), codegen::workspace_param(0)}, {}});
    p.kernels.push_back({"toy_sum", codegen::KernelDef::Role::step, sum,
                         {codegen::workspace_param(0), codegen::arg_param("y")}, {}});
    p.steps = {{codegen::PlanStep::Kind::kernel, 0, {}}, {codegen::PlanStep::Kind::kernel, 1, {}}};
    p.pointers = {{"x", 4}, {"y", 4}};
    p.workspace_fixed = static_cast<size_t>(n) * 4;
    return p;
  }
  codegen::Traffic traffic(const codegen::OpSpec& spec) const override {
    return {4.0 * static_cast<double>(spec.get_int("n")), 0};
  }
};

struct ToyArgs {
  const void* x = nullptr;
  void* y = nullptr;
  ArgPack pack() const { return ArgPack("toy_scale_sum").ptr(x).ptr(y); }
};

// The op's composition of one call: its two kernels in order, written out
// as an op with steps of its own would (run_steps would do the same here).
CUresult run_toy(const runtime::LoadedPlan& p, const ArgPack& a, CUstream stream) {
  const CUresult r = runtime::launch_kernel(p, 0, a, stream);
  return r == CUDA_SUCCESS ? runtime::launch_kernel(p, 1, a, stream) : r;
}

// Random x in [-1, 1), the float64 sum as the reference; two copies of x.
class ToyWorkload final : public tuner::Workload {
 public:
  ToyWorkload(const codegen::OpSpec& spec, uint64_t seed) : n_(spec.get_int("n")), scale_(spec.get_int("scale")) {
    tuner::SplitMix64 rng{seed};
    x_host_.resize(static_cast<size_t>(n_));
    for (auto& v : x_host_) v = rng.uniform();
    for (float v : x_host_) ref_ += static_cast<double>(scale_) * v;
    for (auto& x : x_) {
      x = tuner::DeviceBuffer(x_host_.size() * 4);
      x.upload(x_host_.data(), x_host_.size() * 4);
      add_copy(ToyArgs{tuner::dev(x.ptr()), tuner::dev(y_.ptr())}.pack());
    }
  }
  void poison_output(CUstream stream) override { QJIT_CU(cuMemsetD8Async(y_.ptr(), 0xff, 4, stream)); }
  // fp32 sums of n terms of magnitude ≤ |scale|: within n · 2^-24 · |scale| of the exact sum.
  tuner::Verification verify(double tolerance_scale) override {
    QJIT_CU(cuCtxSynchronize());
    float y = 0;
    y_.download(&y, 4);
    const double bound = static_cast<double>(n_) * std::ldexp(1.0, -23) * std::abs(scale_) * tolerance_scale;
    return tuner::compare_float({ref_}, [&](size_t) { return static_cast<double>(y); },
                                bound / std::max(1.0, std::abs(ref_)), [](size_t) { return std::string("y[0]"); });
  }
  std::vector<tuner::Baseline> baselines(std::string* why_none) override {
    *why_none = "a test's op";
    return {};
  }

 private:
  int64_t n_;
  int64_t scale_;
  std::vector<float> x_host_;
  double ref_ = 0;
  tuner::DeviceBuffer x_[2], y_{4};
};

void register_toy_op() {
  static const bool once = [] {
    static const ToyScaleSumOp op;
    codegen::register_template(op.template_path({}), kTemplate);
    tuner::register_op(op, {run_toy, [](const codegen::OpSpec& spec, uint64_t seed, size_t) {
                              return std::unique_ptr<tuner::Workload>(std::make_unique<ToyWorkload>(spec, seed));
                            }});
    return true;
  }();
  (void)once;
}

// The typed entry point, as runtime/ops/<op>.cpp writes one.
void toy_scale_sum(int64_t n, int scale, const ToyArgs& args, CUstream stream) {
  const ArgPack pack = args.pack();
  const auto describe = [&](runtime::SpecFields& f) { f.add("n", n).add("scale", scale); };
  const auto& plan = runtime::plan_for("toy_scale_sum", describe, pack);
  runtime::run_checked(run_toy, plan, pack, stream);
}

}  // namespace

TEST_CASE("a toy op of two kernels registers and builds one module holding both", "[codegen][nvrtc]") {
  register_toy_op();
  const auto& op = codegen::find_op("toy_scale_sum");
  CHECK_THROWS_WITH(tuner::register_op(op, {run_toy, nullptr}), Catch::Contains("registered already"));
  const auto spec = codegen::parse_spec("toy_scale_sum", "n=1000,scale=3");
  const auto config = op.default_config(spec);
  const auto plan = op.plan(spec, config);
  REQUIRE(plan.kernels.size() == 2);
  CHECK(plan.steps.size() == 2);
  CHECK(plan.main_kernel().symbol == "toy_scale");
  CHECK(plan.describe().find("2. toy_sum") != std::string::npos);
  const auto src = codegen::generate_source(spec, config);
  CHECK(src.text.find("constexpr float kScale = 3.0f;") != std::string::npos);
  for (const char* arch : {"sm_80", "sm_90"}) {
    const auto built = codegen::compile(src, arch);
    INFO(arch << "\n" << built.log);
    REQUIRE(built.ok);
    CHECK(built.ptx.find(".entry toy_scale(") != std::string::npos);
    CHECK(built.ptx.find(".entry toy_sum(") != std::string::npos);
  }
  // Its cache key hashes its own template, not the shipped ops' (and theirs not its).
  CHECK(runtime::templates_hash("toy_scale_sum") != runtime::templates_hash("fp_lut"));
  // A plan naming an argument the op lacks is refused when its pointers are checked.
  codegen::Plan bad = plan;
  bad.pointers.push_back({"z", 4});
  const ArgPack pack = ToyArgs{reinterpret_cast<void*>(256), reinterpret_cast<void*>(512)}.pack();
  CHECK_THROWS_WITH(runtime::check_pointers(op.args(), bad, pack), Catch::Contains("argument 'z'"));
  CHECK_NOTHROW(runtime::check_pointers(op.args(), plan, pack));
  CHECK_THROWS_WITH(runtime::check_pointers(op.args(), plan, ToyArgs{nullptr, reinterpret_cast<void*>(512)}.pack()),
                    Catch::Contains("toy_scale_sum: x is null"));
}

TEST_CASE("a toy op of two kernels is tuned, verified and called through the tuner and the runtime", "[gpu]") {
  register_toy_op();
  test::TempDir dir;
  cache::Store store(dir.file("kernels.db"));
  for (const char* shape : {"n=1,scale=-5", "n=4097,scale=3", "n=1000003,scale=64"}) {
    const auto spec = codegen::parse_spec("toy_scale_sum", shape);
    const auto rep = test::expect_every_candidate_verifies(store, spec, /*allow_pruned=*/false);
    CHECK(rep.best.tuned);
  }
  // The typed entry point finds the tuned plan in the cache and runs both kernels.
  set_cache_path(dir.file("kernels.db"));
  const auto spec = codegen::parse_spec("toy_scale_sum", "n=4097,scale=3");
  ToyWorkload work(spec, test::fresh_seed());
  for (int i = 0; i < 3; ++i) {
    work.poison_output(nullptr);
    toy_scale_sum(4097, 3, ToyArgs{tuner::dev(work.args(i % 2).values[0].ptr), tuner::dev(work.args(0).values[1].ptr)},
                  nullptr);
    const auto v = work.verify(1.0);
    INFO(v.message);
    CHECK(v.ok);
  }
  CHECK(runtime::KernelCache::instance().get("toy_scale_sum|n=4097|scale=3", [&] { return spec; }).tuned);
}
