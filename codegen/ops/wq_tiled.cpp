#include "codegen/ops/wq_tiled.h"
#include <algorithm>
#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::codegen {
namespace {

bool one_of(int v, std::initializer_list<int> set) { return std::find(set.begin(), set.end(), v) != set.end(); }

}  // namespace

int64_t wq_stage_bytes(const WqShape& s, int64_t tiles, int64_t rows, int64_t chunks, int64_t align) {
  const int64_t groups = s.g < 64 ? 64 / s.g : 1, zero_pieces = s.zero == "int" ? 1 : s.zero == "float" ? 2 : 0;
  const int64_t pieces = tiles * (8 * s.bits + groups * (2 + zero_pieces)) + rows * 9;
  return chunks * ((pieces + align - 1) / align * align) * 16;
}

bool WqTiledConfig::is_tiled(const nlohmann::json& j) { return config_family(j) == "tiled"; }

WqTiledConfig WqTiledConfig::from(const nlohmann::json& j) {
  auto get = [&](const char* k) { return config_int(j, k, "wq_gemm tiled config"); };
  if (!is_tiled(j) || j.size() != 7)
    throw Error("config", "wq_gemm tiled config needs family, warps_n, warps_m, warps_k, wn, wm and stages: " + j.dump());
  return {get("warps_n"), get("warps_m"), get("warps_k"), get("wn"), get("wm"), get("stages")};
}

nlohmann::json WqTiledConfig::to_json() const {
  return {{"family", "tiled"}, {"warps_n", warps_n}, {"warps_m", warps_m}, {"warps_k", warps_k},
          {"wn", wn},          {"wm", wm},           {"stages", stages}};
}

int64_t wq_tiled_smem_bytes(const WqShape& s, const WqTiledConfig& c) {
  // The ring, then two stages' weights dequantised (16 bytes per lane, step and tile).
  const int64_t ring = c.stages * wq_stage_bytes(s, c.block_tiles(), c.block_rows(), c.warps_k) +
                       2 * int64_t{c.warps_k} * c.block_tiles() * 4 * 32 * 16;
  const int64_t sums = int64_t{c.warps_k - 1} * c.warps_n * c.warps_m * c.wn * c.wm * 4 * 32 * 4;
  return std::max(ring, sums);
}

std::string wq_tiled_problem(const WqShape& s, const WqTiledConfig& c) {
  if (s.x == "fp32") return "the tiled family stages 16-bit x (fp16 or bf16)";
  if (s.matrices != 1) return "the tiled family multiplies one matrix";
  if (!one_of(c.warps_n, {1, 2, 4}) || !one_of(c.warps_m, {1, 2, 4}) || !one_of(c.warps_k, {1, 2, 4}))
    return "warps_n, warps_m and warps_k must be 1, 2 or 4";
  if (c.warps() < 2 || c.warps() > 16) return "a block has 2 to 16 warps";
  if (!one_of(c.wn, {1, 2, 4})) return "wn must be 1, 2 or 4";
  if (!one_of(c.wm, {1, 2, 4, 8})) return "wm must be 1, 2, 4 or 8";
  if (!one_of(c.stages, {3, 4})) return "stages must be 3 or 4";
  if (c.block_rows() > s.m) return "a block covers more rows of x than the bucket m=" + std::to_string(s.m);
  if (16 * c.block_tiles() > s.n) return "a block covers more than n";
  if (s.k / 64 < c.warps_k) return "warps_k exceeds the number of 64-wide chunks of k";
  // (kPortableSmemPerBlock, codegen/op.h: within the A100's opt-in limit and the H100's)
  const int64_t smem = wq_tiled_smem_bytes(s, c);
  if (smem > kPortableSmemPerBlock)
    return "needs " + std::to_string(smem / 1024) + " KB of shared memory (limit " +
           std::to_string(kPortableSmemPerBlock / 1024) + ")";
  // Registers per lane, fitted to ptxas on sm_90 (within ~20%): addresses and
  // indices, accumulators, B fragments of two steps, A fragments of one step
  // per tile, and the dequantisation's words and row terms.
  const int regs = 56 + 4 * c.wn * c.wm + 4 * c.wm + 4 * c.wn + s.bits;
  const int limit = std::min(255, 65536 / (32 * c.warps()));
  if (regs > limit)
    return "about " + std::to_string(regs) + " registers per lane (limit " + std::to_string(limit) + " at " +
           std::to_string(c.warps()) + " warps)";
  return "";
}

std::vector<WqTiledConfig> wq_tiled_space(const WqShape& s) {
  std::vector<WqTiledConfig> out;
  if (s.m < 32) return out;  // below, the small-M mainloop reads W faster than this one multiplies
  for (int warps_n : {1, 2, 4})
    for (int warps_m : {1, 2, 4})
      for (int warps_k : {1, 2, 4})
        for (int wn : {2, 4})  // wn = 1 reads 256 bytes of shared x per mma: shared-memory bound
          for (int wm : {2, 4, 8})
            for (int stages : {3, 4}) {
              const WqTiledConfig c{warps_n, warps_m, warps_k, wn, wm, stages};
              if (c.warps() != 4 && c.warps() != 8) continue;
              if (wq_tiled_problem(s, c).empty()) out.push_back(c);
            }
  return out;
}

std::optional<WqTiledConfig> wq_tiled_default(const WqShape& s) {
  // From m = 256: there the tiled kernel beat the small-M one by 15-30% on
  // 4096 x 11008 on the H100; at m = 64 it lost (docs/wq_gemm.md).
  // Portable mma.sync, not wgmma: a default must run on any GPU.
  if (s.m < 256) return std::nullopt;
  // 4 warps, 2 × 2 of 4 tiles of 16 n × 32 rows of x each; narrower for small n.
  for (const WqTiledConfig c : {WqTiledConfig{2, 2, 1, 4, 4, 3}, WqTiledConfig{1, 2, 2, 2, 4, 3},
                                WqTiledConfig{1, 2, 2, 1, 4, 3}})
    if (wq_tiled_problem(s, c).empty()) return c;
  return std::nullopt;
}

std::vector<Constant> wq_tiled_constants(const WqShape& s, const WqTiledConfig& c) {
  auto out = wq_shape_constants(s);
  auto num = [](int v) { return std::to_string(v); };
  out.push_back({"int", "kWarpsN", num(c.warps_n), "tunable: warps across n"});
  out.push_back({"int", "kWarpsM", num(c.warps_m), "tunable: warps across rows of x"});
  out.push_back({"int", "kWarpsK", num(c.warps_k), "tunable: warps splitting k"});
  out.push_back({"int", "kWN", num(c.wn), "tunable: 16-row tiles of n per warp"});
  out.push_back({"int", "kWM", num(c.wm), "tunable: 8-row tiles of x per warp"});
  out.push_back({"int", "kStages", num(c.stages), "tunable: cp.async ring depth"});
  return out;
}

WqLaunch wq_tiled_launch(const WqShape& s, const WqTiledConfig& c) {
  const int64_t rows = 16 * c.block_tiles();
  WqLaunch l;
  LaunchGeometry& g = l.geometry;
  g.grid[0] = static_cast<unsigned>((s.m + c.block_rows() - 1) / c.block_rows());
  g.grid[1] = static_cast<unsigned>((s.n + rows - 1) / rows);
  g.block[0] = static_cast<unsigned>(c.warps() * 32);
  g.dynamic_smem = static_cast<unsigned>(wq_tiled_smem_bytes(s, c));
  g.programmatic = true;  // weights are copied before waiting for the previous grid, x after
  return l;
}

}  // namespace qjit::codegen
