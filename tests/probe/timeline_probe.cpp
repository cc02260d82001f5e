// qjit_timeline_probe: where one wq_gemm kernel's time goes in a chain of
// launches, block by block and warp by warp.
//
// It compiles a wq_gemm mma-family config with QJIT_TIMELINE defined, so
// that lane 0 of every warp records %globaltimer at entry, past the wait
// for the previous grid, at the end of its chunks and after its epilogue
// (QJIT_MARK in templates/wq_gemm/wq_mma_mainloop.cuh). It then launches the
// kernel 8 times back to back with programmatic dependent launch over
// rotated weight copies, as the tuner times it, and prints per launch (from
// the third on), as JSON lines, relative to the previous launch's last
// exit: the spread over blocks of warp 0's four marks, of each block's last
// warp's end of chunks and exit, and of how far apart a block's warps end
// their chunks; the SMs grouped by how many of the launch's blocks they ran
// and when the last warp of them finished its chunks (median over the
// group); then the mean time of 30 back-to-back launches (median of three
// rounds). The period between last exits is the launch's time in a chain
// (the marks cost an atomic and four stores per warp, so it differs from
// the bench's time by up to a few µs: read the shape). %globaltimer ticks
// in steps of about 0.26 µs on an H100.
//
// Usage: qjit_timeline_probe SHAPE CONFIG
//   e.g. qjit_timeline_probe k=4096,n=11008,m=1 '{"warps":8,"split_k":8,"tiles":2,"mtiles":1,"unroll":1,"stages":4}'
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>
#include "tests/probe/probe_module.h"
#include "codegen/registry.h"
#include "codegen/source.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "tuner/workload.h"

using namespace qjit;

namespace {

// The template's qjit_timeline[kTimelineRuns][kTimelineBlocks][kTimelineWarps][5].
constexpr int kRuns = 8, kBlocks = 4096, kWarps = 16, kSlots = 5;

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: qjit_timeline_probe SHAPE CONFIG (a wq_gemm shape and an mma-family config)\n");
    return 2;
  }
  try {
    const auto& dev = runtime::current_device();
    const auto spec = codegen::parse_spec("wq_gemm", argv[1]);
    const auto config = nlohmann::json::parse(argv[2]);
    if (config.contains("family")) throw Error("argument", "the timeline marks are in the mma family only");
    // Launched as the runtime launches cached kernels (PDL from sm_90 on).
    auto marked = probe::load_marked_wq_gemm(spec, config, "QJIT_TIMELINE", "qjit_timeline");
    const runtime::LoadedPlan& plan = marked.plan;
    const CUmodule module = plan.module;
    const CUdeviceptr marks = marked.marks;
    const size_t marks_bytes = marked.marks_bytes;
    CUdeviceptr runs = 0;
    size_t runs_bytes = 0;
    QJIT_CU(cuModuleGetGlobal(&runs, &runs_bytes, module, "qjit_timeline_runs"));
    const auto& g = plan.kernels.at(0).def.geometry;
    const unsigned blocks = g.grid[0] * g.grid[1];
    if (blocks > kBlocks) throw Error("argument", "more than 4096 blocks: " + std::to_string(blocks));
    const unsigned warps = g.block[0] / 32;
    if (warps > kWarps) throw Error("argument", "more than 16 warps: " + std::to_string(warps));

    auto work = tuner::make_workload(spec, std::random_device{}(), dev.l2_bytes);
    CUstream stream = nullptr;
    QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    auto chain = [&] {
      QJIT_CU(cuMemsetD8Async(runs, 0, runs_bytes, stream));
      QJIT_CU(cuMemsetD8Async(marks, 0, marks_bytes, stream));
      for (int i = 0; i < kRuns; ++i) probe::run_wq_gemm(plan, work->args(i % work->copies()), stream);
      QJIT_CU(cuStreamSynchronize(stream));
    };
    chain();  // warm-up: module, clocks
    chain();
    std::vector<unsigned long long> t(static_cast<size_t>(kRuns) * kBlocks * kWarps * kSlots);
    QJIT_CU(cuMemcpyDtoH(t.data(), marks, t.size() * sizeof(t[0])));
    auto at = [&](int run, unsigned b, unsigned w, int point) {
      return t[((static_cast<size_t>(run) * kBlocks + b) * kWarps + w) * kSlots + point];
    };
    std::printf("{\"device\": \"%s\", \"shape\": \"%s\", \"config\": %s, \"blocks\": %u, \"threads\": %u}\n",
                dev.identity.name.c_str(), argv[1], config.dump().c_str(), blocks, g.block[0]);
    auto print_quantiles = [](const char* name, std::vector<double> v) {
      std::printf(", \"%s\": [%.2f, %.2f, %.2f, %.2f]", name, quantile(v, 0), quantile(v, 0.5), quantile(v, 0.9),
                  quantile(v, 1));
    };
    for (int run = 2; run < kRuns; ++run) {
      unsigned long long prev_exit = 0;  // the previous launch's last warp out
      for (unsigned b = 0; b < blocks; ++b)
        for (unsigned w = 0; w < warps; ++w) prev_exit = std::max(prev_exit, at(run - 1, b, w, 3));
      auto us = [&](unsigned long long mark) { return (static_cast<double>(mark) - prev_exit) / 1e3; };
      // Warp 0's four marks per block; per block, its last warp's chunks
      // and exit, and how far apart its warps end their chunks.
      std::vector<double> mark[4], last_done, last_exit, done_spread;
      for (unsigned b = 0; b < blocks; ++b) {
        for (int p = 0; p < 4; ++p) mark[p].push_back(us(at(run, b, 0, p)));
        double lo = 1e30, hi = -1e30, out = -1e30;
        for (unsigned w = 0; w < warps; ++w) {
          lo = std::min(lo, us(at(run, b, w, 2))), hi = std::max(hi, us(at(run, b, w, 2)));
          out = std::max(out, us(at(run, b, w, 3)));
        }
        last_done.push_back(hi), last_exit.push_back(out), done_spread.push_back(hi - lo);
      }
      std::printf("{\"run\": %d", run);
      const char* names[] = {"entry_us", "past_wait_us", "chunks_done_us", "exit_us"};
      for (int p = 0; p < 4; ++p) print_quantiles(names[p], mark[p]);
      print_quantiles("last_warp_chunks_done_us", last_done);
      print_quantiles("last_warp_exit_us", last_exit);
      print_quantiles("warps_chunks_done_spread_us", done_spread);
      // By SM: how many of this launch's blocks each SM ran, and when the last warp of them finished its chunks.
      std::map<unsigned, std::pair<int, double>> per_sm;  // smid -> (blocks, last chunks_done)
      for (unsigned b = 0; b < blocks; ++b) {
        auto& e = per_sm[static_cast<unsigned>(at(run, b, 0, 4))];
        e.first += 1, e.second = std::max(e.second, last_done[b]);
      }
      std::map<int, std::vector<double>> by_count;  // blocks on the SM -> its last chunks_done
      for (auto& [sm, e] : per_sm) by_count[e.first].push_back(e.second);
      std::printf(", \"sms_used\": %zu, \"by_blocks_per_sm\": {", per_sm.size());
      bool first = true;
      for (auto& [count, done] : by_count) {
        std::printf("%s\"%d\": {\"sms\": %zu, \"last_done_median_us\": %.2f}", first ? "" : ", ", count, done.size(),
                    quantile(done, 0.5));
        first = false;
      }
      std::printf("}}\n");
    }
    // The marks included: compares what-if builds (QJIT_PROBE_DEFINES) with the kernel as built.
    std::printf("{\"back_to_back_us\": %.2f, \"defines\": \"%s\"}\n", probe::back_to_back_us(plan, *work, stream),
                probe::probe_defines().c_str());
    std::printf("{\"note\": \"each mark: [min, median, p90, max] over blocks, in us after the previous launch's last "
                "exit; entry .. exit are warp 0's, last_warp_* the block's last warp's\"}\n");
    runtime::driver().cuStreamDestroy(stream);
    runtime::driver().cuModuleUnload(module);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qjit_timeline_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
