// qjit_ws_probe: where the cycles of one warp-specialised wgmma stage go
// (wq_gemm wgmma family, ws = 1), warpgroup by warpgroup.
//
// It compiles the config with QJIT_WS_CLOCKS defined, so that lane 0 of the
// first warp of each warpgroup records %clock64 at the events of every stage
// (templates/wq_gemm/wq_wgmma_ws.cuh), launches it a few times to warm up,
// then once alone (or QJIT_PROBE_REPEAT times, probe_module.h), and prints, per warpgroup, the median cycles of each span
// of a stage over the blocks and stages (the first two of each block left
// out: the ring is filling):
//   consumer  issue (its wgmma issued), wgmma_wait (until its previous
//             stage's wgmma are done), full_wait (until the next stage's
//             copies landed), dequant (the next stage's A), period
//   producer  empty_wait (until the slot is free), issue (its copies; of
//             which the weights, scales and zeros), period
// the offset of the second consumer's stages behind the first's, and the
// blocks' timelines (print_timeline).
//
// Usage: qjit_ws_probe SHAPE CONFIG
//   e.g. qjit_ws_probe k=4096,n=11008,m=256 '{"family":"wgmma","groups":2,"rows":256,"stages":4,"chunks":1,
//        "producer":1,"a_quad":1,"ws":1}'
#include <algorithm>
#include <cstdio>
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

constexpr int kBlocks = 1024, kStages = 96, kEvents = 4;  // the template's qjit_ws_clocks[kBlocks][groups + 1][..][..]

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The blocks' timelines (qjit_ws_block, qjit_ws_pieces in the template): the
// launch's span in ns from the global timer, and per block, in cycles, where
// consumer 0's time went: the start (entry to its first stage's A ready), each
// kind of piece's mainloop per stage and its finish (sums stored to the
// workspace, or pieces added and y stored), and the first stage of every
// piece after the first (its wait and dequantisation, not overlapped), and
// the start's steps (the producer's first copies, the wait for the previous
// grid, consumer 0 seeing stage 0 land).
struct Marks {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
};

Marks marks_of(CUmodule module, const char* name) {
  Marks m;
  QJIT_CU(cuModuleGetGlobal(&m.ptr, &m.bytes, module, name));
  return m;
}

std::vector<long long> read_marks(const Marks& m) {
  std::vector<long long> v(m.bytes / sizeof(long long));
  QJIT_CU(cuMemcpyDtoH(v.data(), m.ptr, m.bytes));
  return v;
}

void print_timeline(const Marks& block_marks, const Marks& piece_marks, const std::vector<long long>& stage_clocks,
                    int groups, unsigned blocks) {
  constexpr int kPieces = 8, kPieceEvents = 8;
  const std::vector<long long> bl = read_marks(block_marks), pc = read_marks(piece_marks);
  auto ready = [&](unsigned b, long long q) {  // consumer 0's stage q: its A ready
    return q < kStages ? stage_clocks[((static_cast<size_t>(b) * (groups + 1)) * kStages + q) * kEvents] : 0;
  };
  long long first_entry = 0, last_entry = 0, first_exit = 0, last_exit = 0;
  std::vector<double> ghz, start, tail, later_head, per_stage[3], finish[3];
  std::vector<double> steps[3][3];  // a part's finish in three steps (the template's events 6 and 7)
  std::vector<double> past_barrier, scheduled, weights_issued, previous_grid, x_issued, landed;  // the start's steps, from entry
  std::vector<double> past_move, first_weights;
  std::vector<double> pieces_per_block;
  // Exits by the block's mix of parts: bit 0 it stored a part, bit 1 it completed one.
  std::vector<std::pair<int, long long>> exit_by_mix;
  for (unsigned b = 0; b < blocks; ++b) {
    const long long* m = &bl[12 * b];
    if (m[2] == 0 || m[3] == 0) continue;  // a block without units records no exit
    first_entry = first_entry ? std::min(first_entry, m[2]) : m[2], last_entry = std::max(last_entry, m[2]);
    first_exit = first_exit ? std::min(first_exit, m[3]) : m[3], last_exit = std::max(last_exit, m[3]);
    if (m[3] > m[2]) ghz.push_back(static_cast<double>(m[1] - m[0]) / static_cast<double>(m[3] - m[2]));
    if (m[4] && m[5] && m[6] && m[7] && m[8] && m[9]) {
      past_barrier.push_back(static_cast<double>(m[8] - m[0])), scheduled.push_back(static_cast<double>(m[9] - m[0]));
      weights_issued.push_back(static_cast<double>(m[4] - m[0])), previous_grid.push_back(static_cast<double>(m[5] - m[0]));
      x_issued.push_back(static_cast<double>(m[6] - m[0])), landed.push_back(static_cast<double>(m[7] - m[0]));
      if (m[10]) past_move.push_back(static_cast<double>(m[10] - m[0]));
      if (m[11]) first_weights.push_back(static_cast<double>(m[11] - m[0]));
    }
    int n = 0, mix = 0;
    long long last_finished = 0;
    for (int p = 0; p < kPieces; ++p) {
      const long long* e = &pc[(static_cast<size_t>(b) * kPieces + p) * kPieceEvents];
      if (e[0] == 0) break;
      ++n, last_finished = e[2];
      const int kind = static_cast<int>(e[3]);
      if (kind == 1 || kind == 2) mix |= kind;
      const long long first_ready = ready(b, e[4]);
      if (kind < 0 || kind > 2 || first_ready == 0) continue;
      if (p == 0) start.push_back(static_cast<double>(first_ready - m[0]));
      else later_head.push_back(static_cast<double>(first_ready - e[0]));
      per_stage[kind].push_back(static_cast<double>(e[1] - first_ready) / static_cast<double>(e[5]));
      finish[kind].push_back(static_cast<double>(e[2] - e[1]));
      if (kind > 0 && e[6] && e[7]) {
        steps[kind][0].push_back(static_cast<double>(e[6] - e[1]));
        steps[kind][1].push_back(static_cast<double>(e[7] - e[6]));
        steps[kind][2].push_back(static_cast<double>(e[2] - e[7]));
      }
    }
    pieces_per_block.push_back(n);
    exit_by_mix.emplace_back(mix, m[3]);
    if (last_finished) tail.push_back(static_cast<double>(m[1] - last_finished));
  }
  std::printf("{\"timeline\": {\"launch_us\": %.2f, \"entries_spread_us\": %.2f, \"exits_spread_us\": %.2f, "
              "\"ghz\": %.3f, \"pieces_per_block\": %.0f, \"start\": %.0f, \"later_piece_head\": %.0f, \"tail\": %.0f}}\n",
              (last_exit - first_entry) / 1e3, (last_entry - first_entry) / 1e3, (last_exit - first_exit) / 1e3,
              median(ghz), median(pieces_per_block), median(start), median(later_head), median(tail));
  std::printf("{\"start_steps\": {\"producer_past_barrier\": %.0f, \"past_register_move\": %.0f, \"schedule_done\": %.0f, "
              "\"first_stage_weights_issued\": %.0f, \"weights_issued\": %.0f, \"previous_grid_done\": %.0f, "
              "\"x_issued\": %.0f, \"stage_0_landed\": %.0f}}\n",
              median(past_barrier), median(past_move), median(scheduled), median(first_weights), median(weights_issued),
              median(previous_grid), median(x_issued), median(landed));
  const char* mixes[4] = {"whole tiles", "stored a part", "completed a part", "stored and completed"};
  for (int mix = 0; mix < 4; ++mix) {
    std::vector<double> v;
    for (const auto& [m, exit] : exit_by_mix)
      if (m == mix) v.push_back(static_cast<double>(exit - first_entry) / 1e3);
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    std::printf("{\"blocks_that\": \"%s\", \"count\": %zu, \"exit_us\": [%.2f, %.2f, %.2f]}\n", mixes[mix], v.size(),
                v.front(), median(v), v.back());
  }
  const char* kinds[3] = {"whole tile", "part stored", "part completing"};
  // A stored part: its stores issued, the finishers' barrier, the release. A completing part: the
  // wait for the flag (since the parts go through the ring: for the first part to land), the other
  // parts read and added, y stored.
  const char* step_names[3][3] = {{"", "", ""}, {"stores", "barrier", "release"}, {"acquire", "add", "store_y"}};
  for (int k = 0; k < 3; ++k) {
    if (finish[k].empty()) continue;
    std::printf("{\"piece\": \"%s\", \"count\": %zu, \"per_stage\": %.0f, \"finish\": %.0f", kinds[k],
                finish[k].size(), median(per_stage[k]), median(finish[k]));
    for (int i = 0; i < 3 && k > 0 && !steps[k][i].empty(); ++i) {
      std::vector<double> v = steps[k][i];
      std::sort(v.begin(), v.end());
      std::printf(", \"%s\": [%.0f, %.0f]", step_names[k][i], median(v), v[v.size() * 9 / 10]);
    }
    std::printf("}\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: qjit_ws_probe SHAPE CONFIG (a wq_gemm shape and a wgmma config with ws = 1)\n");
    return 2;
  }
  try {
    const auto& dev = runtime::current_device();
    const auto spec = codegen::parse_spec("wq_gemm", argv[1]);
    const auto config = nlohmann::json::parse(argv[2]);
    if (config.value("ws", 0) != 1) throw Error("argument", "the stage clocks are in the ws pipeline only (ws = 1)");
    const int groups = config.at("groups").get<int>();
    auto marked = probe::load_marked_wq_gemm(spec, config, "QJIT_WS_CLOCKS", "qjit_ws_clocks");
    const runtime::LoadedPlan& plan = marked.plan;
    const CUmodule module = plan.module;
    const CUdeviceptr clocks = marked.marks;
    const size_t clocks_bytes = marked.marks_bytes;
    const auto& g = plan.kernels.at(0).def.geometry;
    const unsigned blocks = std::min<unsigned>(g.grid[0] * g.grid[1], kBlocks);

    auto work = tuner::make_workload(spec, std::random_device{}(), dev.l2_bytes);
    CUstream stream = nullptr;
    QJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 6; ++i) probe::run_wq_gemm(plan, work->args(i % work->copies()), stream);
    const Marks block_marks = marks_of(module, "qjit_ws_block"), piece_marks = marks_of(module, "qjit_ws_pieces");
    QJIT_CU(cuMemsetD8Async(clocks, 0, clocks_bytes, stream));
    QJIT_CU(cuMemsetD8Async(block_marks.ptr, 0, block_marks.bytes, stream));
    QJIT_CU(cuMemsetD8Async(piece_marks.ptr, 0, piece_marks.bytes, stream));
    const int repeat = probe::probe_repeat();
    for (int i = 0; i < repeat; ++i) probe::run_wq_gemm(plan, work->args(0), stream);
    QJIT_CU(cuStreamSynchronize(stream));
    std::vector<long long> t(clocks_bytes / sizeof(long long));
    QJIT_CU(cuMemcpyDtoH(t.data(), clocks, clocks_bytes));
    auto at = [&](unsigned b, int role, int q, int e) {
      return t[((static_cast<size_t>(b) * (groups + 1) + role) * kStages + q) * kEvents + e];
    };
    std::printf("{\"device\": \"%s\", \"shape\": \"%s\", \"config\": %s, \"blocks\": %u}\n", dev.identity.name.c_str(),
                argv[1], config.dump().c_str(), g.grid[0] * g.grid[1]);
    for (int role = 0; role <= groups; ++role) {
      const bool producer = role == groups;
      std::vector<double> span[5];
      for (unsigned b = 0; b < blocks; ++b)
        for (int q = 2; q + 1 < kStages; ++q) {
          const int last = producer ? 2 : 3;
          if (at(b, role, q, 0) == 0 || at(b, role, q, last) == 0 || at(b, role, q + 1, 0) == 0) continue;
          for (int e = 0; e < last; ++e) span[e].push_back(static_cast<double>(at(b, role, q, e + 1) - at(b, role, q, e)));
          if (!producer) span[3].push_back(static_cast<double>(at(b, role, q + 1, 0) - at(b, role, q, 3)));
          else if (at(b, role, q, 3)) span[2].push_back(static_cast<double>(at(b, role, q, 3) - at(b, role, q, 1)));
          span[4].push_back(static_cast<double>(at(b, role, q + 1, 0) - at(b, role, q, 0)));
        }
      if (producer)
        std::printf("{\"warpgroup\": \"producer\", \"stages\": %zu, \"empty_wait\": %.0f, \"issue\": %.0f, "
                    "\"of_which_weights\": %.0f, \"period\": %.0f}\n",
                    span[4].size(), median(span[0]), median(span[1]), median(span[2]), median(span[4]));
      else
        std::printf("{\"warpgroup\": \"consumer %d\", \"stages\": %zu, \"issue\": %.0f, \"wgmma_wait\": %.0f, "
                    "\"full_wait\": %.0f, \"dequant\": %.0f, \"period\": %.0f}\n",
                    role, span[4].size(), median(span[0]), median(span[1]), median(span[2]), median(span[3]),
                    median(span[4]));
    }
    {
      // Consumer 0 of each block from its stage 2 to its last: the cycles, and how many of them went to
      // stages longer than 1.5 × the median period (a tile's first stage, the stream schedule's fix-up).
      std::vector<double> periods, spans, excess, slow;
      for (unsigned b = 0; b < blocks; ++b)
        for (int q = 2; q + 1 < kStages && at(b, 0, q + 1, 0); ++q)
          periods.push_back(static_cast<double>(at(b, 0, q + 1, 0) - at(b, 0, q, 0)));
      const double typical = median(periods);
      for (unsigned b = 0; b < blocks; ++b) {
        int last = 2;
        double over = 0;
        int n_slow = 0;
        for (int q = 2; q + 1 < kStages && at(b, 0, q + 1, 0); ++q, ++last) {
          const double p = static_cast<double>(at(b, 0, q + 1, 0) - at(b, 0, q, 0));
          if (p > 1.5 * typical) over += p - typical, ++n_slow;
        }
        if (last > 2) {
          spans.push_back(static_cast<double>(at(b, 0, last, 0) - at(b, 0, 2, 0)));
          excess.push_back(over);
          slow.push_back(n_slow);
        }
      }
      std::printf("{\"consumer_0_per_block\": {\"span\": %.0f, \"in_slow_stages\": %.0f, \"slow_stages\": %.0f}}\n",
                  median(spans), median(excess), median(slow));
    }
    if (groups == 2) {  // the second consumer's stage behind the first's (ready-to-issue to ready-to-issue)
      std::vector<double> offset;
      for (unsigned b = 0; b < blocks; ++b)
        for (int q = 2; q < kStages; ++q)
          if (at(b, 0, q, 0) && at(b, 1, q, 0)) offset.push_back(static_cast<double>(at(b, 1, q, 0) - at(b, 0, q, 0)));
      std::printf("{\"consumer_1_behind_0\": %.0f}\n", median(offset));
    }
    print_timeline(block_marks, piece_marks, t, groups, blocks);
    std::printf("{\"back_to_back_us\": %.2f, \"defines\": \"%s\", \"repeat\": %d}\n",
                probe::back_to_back_us(plan, *work, stream), probe::probe_defines().c_str(), repeat);
    std::printf("{\"note\": \"cycles (%%clock64), medians over blocks and stages 2 on\"}\n");
    runtime::driver().cuStreamDestroy(stream);
    runtime::driver().cuModuleUnload(module);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qjit_ws_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
