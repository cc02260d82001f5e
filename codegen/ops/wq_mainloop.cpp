#include "codegen/ops/wq_mainloop.h"
#include <algorithm>
#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::codegen {
namespace {

const char* type_of(const std::string& t) {
  return t == "fp32" ? "float" : t == "bf16" ? "qjit::bf16_t" : "qjit::half_t";
}
int bytes_of(const std::string& t) { return t == "fp32" ? 4 : 2; }

bool one_of(int v, std::initializer_list<int> set) {
  for (int s : set)
    if (v == s) return true;
  return false;
}

// Shared memory of the split-k reduction: one fp32 per accumulator per warp.
int64_t reduction_bytes(const WqConfig& c) {
  return c.split_k > 1 ? int64_t{c.warps} * c.tiles * c.mtiles * 4 * 32 * 4 : 0;
}

// One slot of the cp.async ring (the template's kSlotWords): a warp's chunk
// (with pair, two chunks) of weights, its scales and zeros (one group's,
// shared by a pair), and the pass's rows of x for those k (not with x_regs).
int64_t slot_bytes(const WqShape& s, const WqConfig& c) {
  const int64_t groups = s.g < 64 ? 64 / s.g : 1, zero_bytes = s.zero == "int" ? 1 : s.zero == "float" ? 2 : 0;
  const int64_t x_rows = c.x_regs ? 0 : std::min<int64_t>(s.m, 8 * c.mtiles), chunks = c.pair ? 2 : 1;
  return chunks * c.tiles * s.bits * 32 * 4 + c.tiles * groups * 16 * (2 + zero_bytes) +
         chunks * x_rows * 64 * bytes_of(s.x);
}

// The cp.async ring of a block: the template's kRingBytes (dynamic shared memory).
int64_t ring_bytes(const WqShape& s, const WqConfig& c) { return int64_t{c.warps} * c.stages * slot_bytes(s, c); }

// Where the mma may take the magic values and subtract the zero after it
// (the template's kZeroAfter): fp16, one scale per chunk (g >= 64, an
// integer zero) and one shift per row (4 or 8 bits).
bool zero_after_applies(const WqShape& s) {
  return s.scales == "fp16" && s.g >= 64 && s.zero != "float" && (s.bits == 4 || s.bits == 8);
}

// The register pipeline loads x with the weights (ahead of the mma) for at
// most two tiles of x (the template's kXAhead).
bool x_ahead_of(const WqConfig& c) { return c.stages == 0 && c.mtiles <= 2; }

}  // namespace

WqConfig WqConfig::from(const nlohmann::json& j, const std::string& op, size_t extra_keys) {
  auto get = [&](const char* k) { return config_int(j, k, op + " config"); };
  auto has = [&](const char* k) { return j.is_object() && j.contains(k); };
  const bool l2ahead = has("l2ahead"), zero_after = has("zero_after"), balance = has("balance"),
             min_blocks = has("min_blocks"), x_regs = has("x_regs"), spread = has("spread"), pair = has("pair");
  if (!j.is_object() || j.size() != 6 + extra_keys + l2ahead + zero_after + balance + min_blocks + x_regs + spread + pair)
    throw Error("config", op + " config needs warps, split_k, tiles, mtiles, unroll and stages (and may have l2ahead, "
                               "zero_after, balance, min_blocks, x_regs, spread, pair): " + j.dump());
  return {get("warps"),
          get("split_k"),
          get("tiles"),
          get("mtiles"),
          get("unroll"),
          get("stages"),
          l2ahead ? get("l2ahead") : 0,
          zero_after ? get("zero_after") : 0,
          balance ? get("balance") : 0,
          min_blocks ? get("min_blocks") : 0,
          x_regs ? get("x_regs") : 0,
          spread ? get("spread") : 0,
          pair ? get("pair") : 0};
}

nlohmann::json WqConfig::to_json() const {
  nlohmann::json j = {{"warps", warps},   {"split_k", split_k}, {"tiles", tiles},
                      {"mtiles", mtiles}, {"unroll", unroll},   {"stages", stages}};
  if (l2ahead > 0) j["l2ahead"] = l2ahead;
  if (zero_after > 0) j["zero_after"] = zero_after;
  if (balance > 0) j["balance"] = balance;
  if (min_blocks > 0) j["min_blocks"] = min_blocks;
  if (x_regs > 0) j["x_regs"] = x_regs;
  if (spread > 0) j["spread"] = spread;
  if (pair > 0) j["pair"] = pair;
  return j;
}

int wq_mtiles_needed(int64_t m) { return static_cast<int>(std::min<int64_t>((m + 7) / 8, 8)); }

std::string wq_config_problem(const WqShape& s, const WqConfig& c) {
  if (!one_of(c.warps, {2, 4, 8, 16})) return "warps must be 2, 4, 8 or 16";
  if (!one_of(c.split_k, {1, 2, 4, 8, 16}) || c.warps % c.split_k) return "split_k must divide warps";
  if (!one_of(c.tiles, {1, 2, 4})) return "tiles must be 1, 2 or 4";
  if (c.tiles % s.matrices) return "tiles must be a multiple of the " + std::to_string(s.matrices) + " matrices";
  if (!one_of(c.mtiles, {1, 2, 4, 8})) return "mtiles must be 1, 2, 4 or 8";
  if (!one_of(c.unroll, {1, 2, 3, 4})) return "unroll must be 1, 2, 3 or 4";
  if (!one_of(c.stages, {0, 2, 3, 4, 8})) return "stages must be 0, 2, 3, 4 or 8";
  if (c.stages > 0 && c.unroll != 1) return "the cp.async ring (stages > 0) takes unroll 1";
  if (!one_of(c.l2ahead, {0, 2, 4, 8})) return "l2ahead must be 0, 2, 4 or 8";
  if (!one_of(c.zero_after, {0, 1})) return "zero_after must be 0 or 1";
  if (c.zero_after && !zero_after_applies(s))
    return "zero_after needs fp16 scales, an integer or symmetric zero, g >= 64 and 4 or 8 bits";
  if (!one_of(c.balance, {0, 1, 2, 3, 4})) return "balance must be 0 (a block per row group) or 1 to 4 blocks per SM";
  if (!one_of(c.min_blocks, {0, 1})) return "min_blocks must be 0 or 1";
  if (c.min_blocks && s.matrices != 1) return "min_blocks is for one matrix (wq_gemm)";
  if (c.min_blocks && c.balance) return "balance names its own blocks per SM (min_blocks must be 0)";
  if (!one_of(c.x_regs, {0, 1})) return "x_regs must be 0 or 1";
  if (c.x_regs && c.stages == 0) return "x_regs is a mode of the cp.async ring (stages > 0)";
  if (!one_of(c.spread, {0, 1})) return "spread must be 0 or 1";
  if (c.spread && s.matrices != 1) return "spread is for one matrix (wq_gemm)";
  if (c.spread && c.balance) return "balance places its own blocks (spread must be 0)";
  if (!one_of(c.pair, {0, 1})) return "pair must be 0 or 1";
  if (c.pair) {
    // wq_mma_mainloop.cuh's kPair: two chunks of 64 k share one group's
    // scale, applied after the mma.
    if (s.g % 128 != 0 || s.zero == "float") return "pair needs g a multiple of 128 and an integer or symmetric zero";
    if (c.stages == 0 || c.l2ahead || c.balance)
      return "pair is a mode of the cp.async ring (stages > 0; no l2ahead or balance)";
  }
  if (c.balance) {
    if (s.matrices != 1) return "balance is for one matrix (wq_gemm)";
    if (s.m > 16) return "balance is for m <= 16 (one pass over the rows of x)";
    if (c.split_k != c.warps) return "balance takes one row group per block (split_k = warps)";
    if (c.mtiles != wq_mtiles_needed(s.m)) return "balance covers the bucket's rows in one pass (mtiles " +
                                                  std::to_string(wq_mtiles_needed(s.m)) + ")";
  }
  // Chunks in flight matter where loads, not the mma, set the pace: small M.
  if (c.unroll > 2 && c.mtiles > 2) return "unroll above 2 is for at most 2 tiles of x";
  if (x_ahead_of(c) && (c.unroll + 1) * c.tiles > 8) return "more than 8 tile-chunks of weights live in registers";
  if (c.mtiles > wq_mtiles_needed(s.m)) return "mtiles covers more rows than the bucket m=" + std::to_string(s.m);
  if (s.k / 64 < c.split_k) return "split_k exceeds the number of 64-wide chunks of k";
  if (16 * c.tiles / s.matrices > s.n) return "tiles cover more than n";
  // The split-k reduction is static shared memory (48 KB at most), the
  // cp.async ring dynamic: together at most kPortableSmemPerBlock (codegen/op.h). The balanced schedule
  // pads each block to its share of the SM (runtime), which holds 48 KB.
  const int64_t sums = reduction_bytes(c), smem = sums + ring_bytes(s, c);
  if (sums > 48 * 1024) return "the split-k reduction needs more than 48 KB of shared memory";
  if (c.balance && smem > 48 * 1024)
    return "balance: split-k reduction and cp.async ring need more than 48 KB of shared memory";
  if (smem > kPortableSmemPerBlock)
    return "split-k reduction and cp.async ring need " + std::to_string(smem / 1024) + " KB of shared memory (limit " +
           std::to_string(kPortableSmemPerBlock / 1024) + ")";
  // Registers per lane, fitted to ptxas on sm_90 (within ~20%, on the high
  // side): addresses and indices, accumulators, x fragments, and the chunks
  // live at once: with x loaded ahead (mtiles <= 2) unroll + 1 rotating
  // buffers of weights, raw scales and x; else groups of unroll chunks, the
  // one multiplied and the one in flight (and the copy between them); the
  // ring holds its chunks in shared memory (two in registers with pair).
  const int x_words = s.x == "fp32" ? 16 : 8;
  const bool x_ahead = x_ahead_of(c);
  const int buffers = c.stages > 0 ? (c.pair ? 2 : 1) : x_ahead ? c.unroll + 1 : 3 * c.unroll;
  // (x_regs with pair: two pairs' fragments, the current and the next.)
  const int x_live = x_ahead                 ? buffers * c.mtiles
                     : c.x_regs && c.pair     ? 4 * c.mtiles
                     : c.x_regs || c.pair     ? 2 * c.mtiles
                                              : c.mtiles;
  const int chains = 2 * 4 * c.mtiles;  // mma_chunk's two partial-sum chains of one tile
  const int regs = 40 + 4 * c.tiles * c.mtiles + chains + x_words * x_live + buffers * c.tiles * (s.bits + 4);
  const int limit = std::min(255, 65536 / (32 * c.warps));  // ptxas's ceiling at this block size
  if (regs > limit)
    return "about " + std::to_string(regs) + " registers per lane (limit " + std::to_string(limit) + " at " +
           std::to_string(c.warps) + " warps)";
  // A persistent grid must be resident at once: a block that waits for
  // another's SM would run its whole share after the rest.
  if (c.balance && int64_t{regs} * 32 * c.warps * c.balance > 65536)
    return "balance " + std::to_string(c.balance) + " blocks of " + std::to_string(c.warps) + " warps at about " +
           std::to_string(regs) + " registers per lane do not fit one SM's 65536 registers";
  return "";
}

std::vector<WqConfig> wq_tunable_space(const WqShape& s) {
  std::vector<WqConfig> out;
  const int need = wq_mtiles_needed(s.m);
  for (int warps : {4, 8, 16})
    for (int split : {1, 2, 4, 8, 16})
      // Not 4 tiles of one matrix, though legal: a warp would read half as
      // much x per weight at m = 16, but it took 241 registers and lost to
      // 2 tiles by 2 µs at 4096 × 11008, M = 16 (H100; docs/wq_gemm_small_m.md).
      for (int per_matrix : {1, 2})
        for (int mt : {1, 2, 4, 8}) {
          // Fewer x tiles than the bucket needs means re-reading W per pass: only worth it at large m.
          if (mt != need && (mt < need / 2 || need < 4)) continue;
          // 3 stages from m = 8 on, where x's rows fill much of a slot: at
          // m = 16, 8 warps of 4 stages need 118 KB with the reduction (one
          // block per SM), of 3 stages 93 KB (two).
          for (int stages : {0, 3, 4, 8})
            for (int unroll : {1, 2, 3, 4}) {
              if (stages == 3 && s.m < 8) continue;
              // 16 warps only to split k further: a 16-warp block of row groups is an 8-warp one twice.
              if (warps == 16 && split < 8) continue;
              const WqConfig c{warps, split, per_matrix * s.matrices, mt, unroll, stages};
              if (!wq_config_problem(s, c).empty()) continue;
              out.push_back(c);
              // Where issuing instructions sets the pace (small M), the
              // ring's chunks also in pairs sharing a group's scale (twins
              // of the plain ring and of its zero after the mma). A pair's
              // slot holds two chunks: the twins of 4 stages have 2 or 3
              // slots (the plain ring's shared memory, or 1.5 times it and
              // a pair more in flight), of 8 stages 4.
              const auto add_pair_twin = [&](WqConfig a) {
                if (s.m > 16) return;
                a.pair = 1;
                const std::vector<int> slots = a.stages == 4 ? std::vector<int>{2, 3}
                                               : a.stages == 8 ? std::vector<int>{4}
                                                               : std::vector<int>{};
                for (int n : slots) {
                  a.stages = n;
                  if (wq_config_problem(s, a).empty()) out.push_back(a);
                }
              };
              // From m = 4 on the ring's slots are mostly x, copied by every
              // warp; x_regs loads it into registers instead, as the
              // register pipeline does (without the L2 look-ahead or the
              // zero after the mma: x's rows are what it tries), also in
              // pairs.
              if (stages > 0 && s.m >= 4 && s.m <= 16) {
                WqConfig a = c;
                a.x_regs = 1;
                if (wq_config_problem(s, a).empty()) out.push_back(a);
                add_pair_twin(a);
              }
              add_pair_twin(c);
              // Where loads and the instructions between them set the pace
              // (the small-M buckets): the L2 look-ahead (2 chunks: 4 and 8
              // were never more than 0.05 us better on an H100) and the zero
              // after the mma.
              if (s.m <= 16)
                for (int ahead : {0, 2})
                  for (int after : {0, 1}) {
                    if ((ahead == 0 && after == 0) || (after && !zero_after_applies(s))) continue;
                    WqConfig a = c;
                    a.l2ahead = ahead, a.zero_after = after;
                    out.push_back(a);
                    add_pair_twin(a);
                  }
            }
        }
  // Every small-M config of one matrix again with min_blocks (the launch
  // bounds name one block per SM; see QJIT_WQ_BOUNDS in wq_constants), and
  // the plain rings (no look-ahead, no zero after) also spread: their blocks
  // are small enough that an SM holds more of them than the grid's average,
  // and the ones that get the most set the time.
  if (s.m <= 16 && s.matrices == 1) {
    const size_t plain = out.size();
    for (size_t i = 0; i < plain; ++i) {
      WqConfig c = out[i];
      c.min_blocks = 1;
      out.push_back(c);
    }
    const size_t bounded = out.size();
    for (size_t i = 0; i < bounded; ++i) {
      WqConfig c = out[i];
      if (c.stages == 0 || c.l2ahead || c.zero_after) continue;
      c.spread = 1;
      out.push_back(c);
    }
  }
  // Not searched: the balanced schedule (balance > 0). It is legal, and the
  // [gpu] tests verify it, but it lost to a block per row group at every
  // small-M shape it was tuned on (docs/wq_gemm_small_m.md): 12.8 against
  // 10.3 µs at 4096 × 11008, M = 1 (H100). Each block refills its pipeline for
  // every piece of its run, and completing a split row group waits for the
  // blocks before it.
  return out;
}

WqConfig wq_default_config(const WqShape& s) {
  // The usual winner at small m in the H100 tunes (docs/wq_gemm_small_m.md), and far
  // from the register ceiling.
  for (int split : {4, 2, 1}) {
    const WqConfig c{4, split, s.matrices, wq_mtiles_needed(s.m), 1, 0};
    if (wq_config_problem(s, c).empty()) return c;
  }
  const auto space = wq_tunable_space(s);
  if (space.empty()) throw Error("config", "no legal config for the quantized mainloop");
  return space.front();
}

std::vector<Constant> wq_shape_constants(const WqShape& s) {
  auto num = [](int64_t v) { return std::to_string(v); };
  return {
      {"using", "TX", type_of(s.x), "type of x and y"},
      {"using", "TS", type_of(s.scales), "type of scales and offsets; the mma input type"},
      {"int", "kK", num(s.k), "input features (k)"},
      {"int", "kN", num(s.n), "output features (rows of each W)"},
      {"int", "kBucketM", num(s.m), "rows of x this kernel is tuned for"},
      {"int", "kMatrices", num(s.matrices), "quantized matrices multiplied by the same x"},
      {"int", "kBits", num(s.bits), "bits per weight"},
      {"int", "kGroup", num(s.g), "k per scale group"},
      {"int", "kZeroMode", s.zero == "sym" ? "0" : s.zero == "int" ? "1" : "2",
       "0 sym, 1 int zero bytes, 2 float offsets"},
  };
}

std::vector<Constant> wq_constants(const WqShape& s, const WqConfig& c) {
  auto num = [](int64_t v) { return std::to_string(v); };
  auto out = wq_shape_constants(s);
  const std::vector<Constant> tunables = {
      {"int", "kWarps", num(c.warps), "tunable: warps per block"},
      {"int", "kSplitK", num(c.split_k), "tunable: warps sharing a row group's k"},
      {"int", "kTiles", num(c.tiles), "tunable: 16-row tile slots per row group (all matrices)"},
      {"int", "kMTiles", num(c.mtiles), "tunable: 8-row tiles of x per pass"},
      {"int", "kUnroll", num(c.unroll), "tunable: chunks of 64 k in flight ahead of the mma (register pipeline)"},
      {"int", "kStages", num(c.stages), "tunable: 0 register pipeline, else cp.async ring depth"},
      {"int", "kL2Ahead", num(c.l2ahead), "tunable: chunks beyond the loads whose weights are prefetched to L2"},
      {"int", "kZeroAfter", num(c.zero_after), "tunable: 1 multiplies the magic values, the zero subtracted after"},
      {"int", "kBalance", num(c.balance), "tunable: 0 a block per row group, else blocks per SM of the balanced schedule"},
      {"int", "kXRegs", num(c.x_regs), "tunable: 1 loads x into registers a chunk ahead instead of through the ring"},
      {"int", "kPair", num(c.pair), "tunable: 1 takes chunks in pairs of one scale group, scaled once"},
      // A persistent grid must be resident at once, so ptxas keeps the
      // registers within what kBalance blocks per SM leave. Otherwise naming
      // one block (min_blocks) lets ptxas take up to twice the registers
      // (62 -> 128 for 16 warps, 1 tile, unroll 3): 4096² at M = 1 lost
      // 0.4 µs with it on an H100, 4096 × 11008 and 11008 × 4096 ran 0.2 to
      // 0.6 µs faster (docs/wq_gemm_small_m.md). A tuning key, then.
      {"macro", "QJIT_WQ_BOUNDS",
       c.balance      ? "__launch_bounds__(kThreads, kBalance)"
       : c.min_blocks ? "__launch_bounds__(kThreads, 1)"
                      : "__launch_bounds__(kThreads)",
       "the mma kernels' launch bounds"},
  };
  out.insert(out.end(), tunables.begin(), tunables.end());
  return out;
}

WqLaunch wq_launch(const WqShape& s, const WqConfig& c) {
  const int64_t rows_per_block = int64_t{16} * (c.tiles / s.matrices) * (c.warps / c.split_k);
  WqLaunch l;
  LaunchGeometry& g = l.geometry;
  if (c.balance) {
    // wq_balanced.cuh's workspace: a flag per row group, then two partial
    // sums (kTiles·kMTiles·4 floats per lane of warp 0) per block.
    const int64_t row_groups = (s.n / 16 + c.tiles - 1) / c.tiles;
    g.grid_per_sm = static_cast<unsigned>(c.balance);
    g.block[0] = static_cast<unsigned>(c.warps * 32);
    l.workspace_fixed = static_cast<size_t>((row_groups * 4 + 255) / 256 * 256);
    g.workspace_per_block = size_t{2} * c.tiles * c.mtiles * 4 * 32 * 4;
    g.programmatic = true;
    return l;
  }
  g.grid[0] = static_cast<unsigned>((s.n + rows_per_block - 1) / rows_per_block);
  g.grid[1] = static_cast<unsigned>((s.m + 8 * c.mtiles - 1) / (8 * c.mtiles));
  g.block[0] = static_cast<unsigned>(c.warps * 32);
  g.dynamic_smem = static_cast<unsigned>(ring_bytes(s, c));
  g.spread = c.spread != 0;
  g.programmatic = true;  // the mainloop waits for the previous grid before reading x
  return l;
}

WqAlign wq_alignment(const WqShape& s, const WqConfig& c) {
  const bool ring = c.stages > 0;
  return {4 * (s.bits % 4 == 0 ? 4 : s.bits == 2 ? 2 : 1), ring ? 16 : 2, ring ? 16 : s.zero == "float" ? 2 : 1};
}

double wq_weight_bytes(const WqShape& s) {
  const double k = static_cast<double>(s.k), n = static_cast<double>(s.n), groups = (k / s.g) * n;
  const double zeros = s.zero == "sym" ? 0 : s.zero == "int" ? groups : 2 * groups;
  return k * n * s.bits / 8 + 2 * groups + zeros;
}

}  // namespace qjit::codegen
