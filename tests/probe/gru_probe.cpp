// qjit_gru_probe: where a step of gru_quant's cluster plan spends its time.
// Builds one config with QJIT_GRU_CLOCKS (templates/gru_quant/gru_marks.cuh),
// runs it on a random workload (checked bit-exact against the CPU
// reference, so the marks do not change the result), and prints the median
// over steps and blocks of each phase of a step, in SM cycles and ns:
//   gemm_own (thread 0's GEMM task), gemm_all (the rest of the block's tasks,
//   to the __syncthreads), gate (thread 0's gate arithmetic), gate_all,
//   push (the 16-byte pushes issued), arrive (the arrive and the global
//   stores), input (the fused projection), wait (the cluster barrier's wait:
//   the slowest block's step plus the barrier), and the whole step.
//
// Usage: qjit_gru_probe PARAMS.json T N CONFIG_JSON
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "codegen/ops/gru_quant.h"
#include "tests/probe/probe_module.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "tuner/workload.h"

using namespace qjit;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: qjit_gru_probe PARAMS.json T N CONFIG_JSON\n");
    return 2;
  }
  try {
    std::ifstream in(argv[1]);
    if (!in) throw Error("argument", std::string("cannot read ") + argv[1]);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json doc = nlohmann::json::parse(text.str());
    const auto spec = codegen::make_spec("gru_quant", {{"t", std::atoll(argv[2])},
                                                       {"n", std::atoll(argv[3])},
                                                       {"c", doc.at("input_size")},
                                                       {"h", doc.at("hidden_size")},
                                                       {"params", codegen::gru::canonical_params(doc)}});
    const nlohmann::json config = nlohmann::json::parse(argv[4]);
    const auto& op = codegen::find_op("gru_quant");
    op.validate_config(spec, config);
    auto src = codegen::generate_source(spec, config);
    src.text = "#define QJIT_GRU_CLOCKS 1\n" + src.text;
    const auto& dev = runtime::current_device();
    const auto r = codegen::compile(src, dev.arch);
    if (!r.ok) throw Error("nvrtc", "gru_quant with clocks failed to compile:\n" + r.log);
    const auto plan = runtime::load_plan("gru_quant", op.plan(spec, config), r.cubin);
    auto work = tuner::make_workload(spec, 1234, 0);
    CUstream stream = nullptr;
    QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 3; ++i) {
      work->poison_output(stream);
      const CUresult rc = runtime::run_steps(plan, work->args(0), stream);
      if (rc != CUDA_SUCCESS) throw Error("driver", "launch failed: " + runtime::describe(rc));
    }
    QJIT_CU(cuStreamSynchronize(stream));
    const auto v = work->verify(1.0);
    if (!v.ok) throw Error("verify", "the build with clocks differs from the CPU: " + v.message);

    CUdeviceptr clocks = 0;
    size_t bytes = 0;
    QJIT_CU(cuModuleGetGlobal(&clocks, &bytes, plan.module, "qjit_gru_clocks"));
    constexpr int kBlocks = 16, kSteps = 64, kEvents = 8;
    std::vector<long long> c(static_cast<size_t>(kBlocks) * kSteps * kEvents);
    if (bytes != c.size() * sizeof(long long)) throw Error("probe", "qjit_gru_clocks has an unexpected size");
    QJIT_CU(cuMemcpyDtoH(c.data(), clocks, bytes));
    int khz = 0;
    QJIT_CU(cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev.handle));

    const int64_t T = spec.get_int("t");
    const int blocks = std::min<int>(kBlocks, static_cast<int>(plan.kernels.back().def.geometry.grid[0]));
    const char* names[] = {"gemm_own", "gemm_all", "gate", "gate_all", "push", "global", "input", "wait", "step"};
    std::vector<std::vector<double>> d(9);
    const auto at = [&](int b, int t, int e) { return c[(static_cast<size_t>(b) * kSteps + t) * kEvents + e]; };
    for (int b = 0; b < blocks; ++b)
      for (int t = 2; t + 1 < std::min<int64_t>(T, kSteps) - 1; ++t) {
        for (int e = 0; e < 7; ++e) d[e].push_back(static_cast<double>(at(b, t, e + 1) - at(b, t, e)));
        d[7].push_back(static_cast<double>(at(b, t + 1, 0) - at(b, t, 7)));
        d[8].push_back(static_cast<double>(at(b, t + 1, 0) - at(b, t, 0)));
      }
    if (d[8].empty()) throw Error("argument", "T must be at least 5 for the step medians");
    std::printf("{\"device\": \"%s\", \"spec\": \"t=%lld n=%lld c=%lld h=%lld\", \"config\": %s, \"clock_mhz\": %d",
                dev.identity.name.c_str(), static_cast<long long>(T), static_cast<long long>(spec.get_int("n")),
                static_cast<long long>(spec.get_int("c")), static_cast<long long>(spec.get_int("h")), config.dump().c_str(),
                khz / 1000);
    for (int e = 0; e < 9; ++e) {
      auto& v = d[e];
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      std::printf(", \"%s\": [%.0f, %.3f]", names[e], v[v.size() / 2], v[v.size() / 2] / (khz / 1e6) / 1e3);
    }
    std::printf("}\n");
    runtime::driver().cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qjit_gru_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
