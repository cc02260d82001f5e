#include "codegen/ops/w8a8_gemm.h"

#include <algorithm>

#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::codegen {
namespace {

std::string num(int64_t v) { return std::to_string(v); }
// format=e4m3's block and W tile edge (DeepGEMM's 1×128 activation and 128×128 weight scales).
constexpr int64_t kFp8Tile = 128;
int bytes_of(const std::string& t) { return t == "fp32" ? 4 : 2; }

// The mma.sync family: a block owns bm rows × bn columns of y, warps_m ×
// warps_n warps of (bm/warps_m) × (bn/warps_n) each, a ring of `stages`
// k-tiles of bk codes filled by cp.async.
struct TiledConfig {
  int bm, bn, bk, warps_m, warps_n, stages;
  static constexpr const char* kFamily = "tiled";
  static TiledConfig from(const nlohmann::json& j) {
    auto get = [&](const char* k) { return config_int(j, k, "w8a8_gemm tiled config"); };
    if (!j.is_object() || j.size() != 7)
      throw Error("config", "w8a8_gemm tiled config needs family, bm, bn, bk, warps_m, warps_n, stages: " + j.dump());
    return {get("bm"), get("bn"), get("bk"), get("warps_m"), get("warps_n"), get("stages")};
  }
  nlohmann::json to_json() const {
    return {{"family", kFamily}, {"bm", bm}, {"bn", bn}, {"bk", bk}, {"warps_m", warps_m}, {"warps_n", warps_n},
            {"stages", stages}};
  }
  int warps() const { return warps_m * warps_n; }
  // One stage: the codes of A and B, then per row and column of the tile its
  // block's three parameters (filled on the stage of a block's last k-tile).
  int stage_bytes() const { return bm * bk + bn * bk + 12 * bm + 12 * bn; }
  int smem() const { return stages * stage_bytes(); }
};

// The Hopper family (sm_90a): one producer warpgroup and two consumer
// warpgroups; a block owns bm rows × 128 columns of y and streams stages of
// 128 codes of k through a ring of `stages` slots by tensor copies; with
// `persistent` 1 the grid is one block per SM taking tiles in turn (the next
// tile's copies overlap the current one's epilogue). int8 (s8 wgmma, int32
// block sums) and e4m3 (e4m3 wgmma, fp32 block sums) alike.
// With `overlap` 1 a consumer issues a block's wgmma before it promotes the
// previous block (two sets of block accumulators): a key added later, left
// out of the JSON at 0 so that earlier configs keep their form.
struct WgmmaConfig {
  int bm, stages, persistent, overlap = 0;
  static constexpr const char* kFamily = "wgmma";
  static constexpr int kTileN = 128;  // 64 columns of y per consumer warpgroup
  static constexpr int kStageK = 128;  // codes of k per stage: one 128-byte row of each operand
  static WgmmaConfig from(const nlohmann::json& j) {
    auto get = [&](const char* k) { return config_int(j, k, "w8a8_gemm wgmma config"); };
    const bool with_overlap = j.is_object() && j.contains("overlap");
    if (!j.is_object() || j.size() != (with_overlap ? 5u : 4u))
      throw Error("config", "w8a8_gemm wgmma config needs family, bm, stages, persistent (and overlap): " + j.dump());
    return {get("bm"), get("stages"), get("persistent"), with_overlap ? get("overlap") : 0};
  }
  nlohmann::json to_json() const {
    nlohmann::json j = {{"family", kFamily}, {"bm", bm}, {"stages", stages}, {"persistent", persistent}};
    if (overlap) j["overlap"] = overlap;
    return j;
  }
  // One slot: W's codes (128 rows × 128 bytes), x's (bm rows), then the
  // block parameters of both (3 floats a row or column; e4m3: x's scale
  // alone, 1 float a row), up to the next 1024 bytes so that every slot's
  // boxes stay aligned for the swizzle.
  int slot_bytes(bool fp8) const {
    const int params = fp8 ? 4 * bm : 12 * (bm + kTileN);
    return kTileN * kStageK + bm * kStageK + (params + 1023) / 1024 * 1024;
  }
  // The ring, and 1024 bytes to align it (templates/w8a8_gemm/w8a8_gemm_wgmma.cu).
  int smem(bool fp8) const { return stages * slot_bytes(fp8) + 1024; }
  // With the ring's barriers (static shared memory: two of 8 bytes a slot; ptxas reports 128
  // bytes for up to 8 slots).
  int smem_total(bool fp8) const { return smem(fp8) + 128; }
};

// The obviously correct family: one thread per output element, any block.
struct SimpleConfig {
  int threads;
  static constexpr const char* kFamily = "simple";
  static SimpleConfig from(const nlohmann::json& j) {
    if (!j.is_object() || j.size() != 2)
      throw Error("config", "w8a8_gemm simple config needs family and threads: " + j.dump());
    return {config_int(j, "threads", "w8a8_gemm simple config")};
  }
  nlohmann::json to_json() const { return {{"family", kFamily}, {"threads", threads}}; }
};

// The weight-streaming family for small M (int8, blocks of 128·j): each warp
// streams kTiles tiles of 16 rows of W straight into mma fragments, kUnroll
// pieces of 128 codes ahead; a block has `warps` warps side by side in n,
// and k is split into `splits` slices between blocks (their float sums
// added in slice order by the last block of a band,
// templates/w8a8_gemm/w8a8_gemm_stream.cu).
// With `fuse` 1 (buckets of at most 16 rows) the kernel quantizes x itself,
// each block its slice of k into shared memory, and the plan is that one
// kernel; left out of the JSON at 0.
struct StreamConfig {
  int warps, tiles, splits, unroll, fuse = 0;
  static constexpr const char* kFamily = "stream";
  static constexpr int kMaxRows = 64;  // the buckets it is for: x's rows are held as mma tiles of 8
  static StreamConfig from(const nlohmann::json& j) {
    auto get = [&](const char* k) { return config_int(j, k, "w8a8_gemm stream config"); };
    const bool with_fuse = j.is_object() && j.contains("fuse");
    if (!j.is_object() || j.size() != (with_fuse ? 6u : 5u))
      throw Error("config", "w8a8_gemm stream config needs family, warps, tiles, splits, unroll (and fuse): " + j.dump());
    return {get("warps"), get("tiles"), get("splits"), get("unroll"), with_fuse ? get("fuse") : 0};
  }
  nlohmann::json to_json() const {
    nlohmann::json j = {{"family", kFamily}, {"warps", warps}, {"tiles", tiles}, {"splits", splits}, {"unroll", unroll}};
    if (fuse) j["fuse"] = fuse;
    return j;
  }
  int band_rows() const { return 16 * tiles * warps; }
  // The fused block's shared memory: x's codes (kXRows rows of the slice and
  // 16 bytes), then scale, offset and sum per row and block of the slice.
  int fused_smem(int64_t k, int64_t block, int x_rows) const {
    const int64_t slice = k / splits;
    return static_cast<int>(x_rows * (slice + 16) + 12 * (slice / block) * x_rows);
  }
};

// The library family (format=e4m3, compute capability 9.0+): the plan's
// first kernel lays x's codes and scales and W's tile scales out as
// cuBLASLt's block-scaled FP8 GEMM reads them, and the GEMM does the rest
// (bias and relu in its epilogue). `algo` picks the heuristic's answer:
// its first kAlgos are the space.
struct CublasLtConfig {
  int algo;
  static constexpr const char* kFamily = "cublaslt";
  static constexpr int kAlgos = 4;
  static CublasLtConfig from(const nlohmann::json& j) {
    if (!j.is_object() || j.size() != 2)
      throw Error("config", "w8a8_gemm cublaslt config needs family and algo: " + j.dump());
    return {config_int(j, "algo", "w8a8_gemm cublaslt config")};
  }
  nlohmann::json to_json() const { return {{"family", kFamily}, {"algo", algo}}; }
};

struct Shape {
  int64_t k, n, m, block;
  std::string x;
  bool fp8;                  // format=e4m3: symmetric e4m3 codes, x per (row, block), W per 128 × 128 tile
  bool offset_a, offset_w, bias;
  std::string act;
  int64_t blocks() const { return k / block; }
  // Columns of w_scale [k/block][·]: one scale per column (int8), per 128-column tile (e4m3).
  int64_t w_scale_cols() const { return fp8 ? n / kFp8Tile : n; }
};

Shape shape_of(const OpSpec& spec) {
  const bool fp8 = spec.get_str("format") == "e4m3";  // quant_a and quant_w do not apply to it
  return {spec.get_int("k"),
          spec.get_int("n"),
          spec.get_int("m"),
          spec.get_int("block"),
          spec.get_str("x"),
          fp8,
          !fp8 && spec.get_str("quant_a") == "offset",
          !fp8 && spec.get_str("quant_w") == "offset",
          spec.get_str("bias") == "yes",
          spec.get_str("act")};
}

constexpr int kQuantWarps = 8;  // warps per block of the quantization kernel: one warp per (row, block)

// Why the tiled family cannot run a spec, "" when it can.
std::string tiled_applies(const Shape& s) {
  if (s.block % 32) return "block=" + num(s.block) + " is not a multiple of 32 (one mma step is 32 codes of k)";
  if (s.n % 16) return "n=" + num(s.n) + " is not a multiple of 16";
  return "";
}

std::string tiled_problem(const Shape& s, const TiledConfig& c, const DeviceLimits& d = {}) {
  const std::string why = tiled_applies(s);
  if (!why.empty()) return why;
  auto one_of = [](int v, std::initializer_list<int> set) { return std::find(set.begin(), set.end(), v) != set.end(); };
  if (!one_of(c.bm, {16, 32, 64, 128})) return "bm must be 16, 32, 64 or 128";
  if (!one_of(c.bn, {16, 32, 64, 128, 256})) return "bn must be 16, 32, 64, 128 or 256";
  if (!one_of(c.bk, {32, 64, 128})) return "bk must be 32, 64 or 128";
  if (!one_of(c.warps_m, {1, 2, 4}) || !one_of(c.warps_n, {1, 2, 4, 8})) return "warps_m must be 1, 2 or 4 and warps_n 1, 2, 4 or 8";
  if (c.warps() > 8) return "at most 8 warps";
  if (c.stages < 2 || c.stages > 8) return "stages must be 2..8";
  if (s.block % c.bk) return "bk=" + num(c.bk) + " does not divide block=" + num(s.block);
  if (s.n % c.bn) return "bn=" + num(c.bn) + " does not divide n=" + num(s.n);
  const int wm = c.bm / c.warps_m, wn = c.bn / c.warps_n;
  if (c.bm % c.warps_m || wm % 16) return "a warp's rows bm/warps_m must be a multiple of 16";
  if (c.bn % c.warps_n || wn % 16) return "a warp's columns bn/warps_n must be a multiple of 16";
  if ((wm / 16) * (wn / 8) > 16) return "a warp holds at most 16 mma tiles (int32 and fp32 accumulators: 128 registers)";
  if (c.bm > std::max<int64_t>(16, s.m)) return "bm=" + num(c.bm) + " exceeds the bucket's rows m=" + num(s.m);
  if (c.smem() > d.smem_per_block()) return "shared memory " + num(c.smem()) + " bytes exceeds " + num(d.smem_per_block());
  return "";
}

// Why the wgmma family cannot run a spec, "" when it can (any device).
std::string wgmma_applies(const Shape& s) {
  if (s.fp8) {
    // A block's 128 columns are one tile of W's scales, so each block of k promotes with one W scale.
    // (validate() already demands both of an e4m3 spec.)
    if (s.block != kFp8Tile || s.n % kFp8Tile)
      return "format=e4m3 needs block=128 and n a multiple of 128 (a block's 128 columns share W's tile scale)";
    return "";
  }
  if (s.block % WgmmaConfig::kStageK)
    return "block=" + num(s.block) + " is not a multiple of 128 (a stage is 128 codes of k, one swizzled row)";
  if (s.n % 16) return "n=" + num(s.n) + " is not a multiple of 16";
  return "";
}

std::string wgmma_problem(const Shape& s, const WgmmaConfig& c, const DeviceLimits& d = {}) {
  const std::string why = wgmma_applies(s);
  if (!why.empty()) return why;
  // wgmma n = bm; the consumers hold bm / 2 block (int32 or e4m3's fp32) and bm / 2 float accumulators a
  // thread (232 registers).
  if (c.bm != 64 && c.bm != 128 && c.bm != 192) return "bm must be 64, 128 or 192";
  if (c.stages < 2 || c.stages > 8) return "stages must be 2..8";
  if (c.persistent != 0 && c.persistent != 1) return "persistent must be 0 or 1";
  if (c.overlap != 0 && c.overlap != 1) return "overlap must be 0 or 1";
  // Three sets of bm / 2 accumulators a thread: at bm 128 ptxas spills (CUDA 13.0), 192 does not fit 232 registers.
  if (c.overlap && c.bm != 64) return "overlap needs bm=64 (three sets of bm / 2 accumulators a thread)";
  if (c.overlap && c.stages < 2 * s.block / WgmmaConfig::kStageK)
    return "overlap needs stages >= " + num(2 * s.block / WgmmaConfig::kStageK) + " (two blocks' stages in the ring)";
  if (c.bm > s.m) return "bm=" + num(c.bm) + " exceeds the bucket's rows m=" + num(s.m);
  if (c.smem_total(s.fp8) > d.smem_per_block())
    return "shared memory " + num(c.smem_total(s.fp8)) + " bytes exceeds " + num(d.smem_per_block());
  return "";
}

// x's 8-row mma tiles the stream family holds for a bucket of m rows.
int stream_mtiles(int64_t m) { return static_cast<int>((std::min<int64_t>(m, StreamConfig::kMaxRows) + 7) / 8); }

// Why the stream family cannot run a spec, "" when it can.
std::string stream_applies(const Shape& s) {
  if (s.fp8) return "the stream family runs int8 codes (format=e4m3 has the tiled and cublaslt families)";
  if (s.block % 128) return "block=" + num(s.block) + " is not a multiple of 128 (a lane reads 32 codes of each 128)";
  if (s.m > StreamConfig::kMaxRows) return "m=" + num(s.m) + " is above the stream family's 64 rows";
  return "";
}

std::string stream_problem(const Shape& s, const StreamConfig& c, const DeviceLimits& d = {}) {
  const std::string why = stream_applies(s);
  if (!why.empty()) return why;
  if (c.warps != 4 && c.warps != 8) return "warps must be 4 or 8";
  if (c.tiles != 1 && c.tiles != 2) return "tiles must be 1 or 2";
  if (c.unroll != 2 && c.unroll != 4) return "unroll must be 2 or 4";
  if (c.splits < 1 || c.splits > 16 || s.blocks() % c.splits)
    return "splits=" + num(c.splits) + " must be 1..16 and divide the " + num(s.blocks()) + " blocks of k";
  // W's pieces ahead (16 registers a tile and piece) and the int32 and float sums (4 each a tile of W and of x).
  if (c.tiles * c.unroll > 4) return "tiles × unroll must be at most 4 (registers for the pieces ahead)";
  if (c.tiles * stream_mtiles(s.m) > 8) return "tiles × x's 8-row tiles must be at most 8 (registers for the sums)";
  if (c.fuse != 0 && c.fuse != 1) return "fuse must be 0 or 1";
  if (c.fuse && stream_mtiles(s.m) > 2) return "fuse needs m <= 16 (a block holds x's rows over its slice of k)";
  if (c.fuse && c.fused_smem(s.k, s.block, 8 * stream_mtiles(s.m)) > d.smem_per_block())
    return "fuse: x's slice takes " + num(c.fused_smem(s.k, s.block, 8 * stream_mtiles(s.m))) +
           " bytes of shared memory, over " + num(d.smem_per_block());
  return "";
}

// Why the cublaslt family cannot run a spec, "" when it can (any device).
std::string cublaslt_applies(const Shape& s) {
  if (!s.fp8) return "the cublaslt family runs format=e4m3 (cuBLASLt's block scales are FP8 only)";
  if (s.act == "relu6") return "cuBLASLt's epilogues have relu but not relu6";
  // (declined with CUBLAS_STATUS_NOT_SUPPORTED, H100, cuBLASLt 13.1: its FP8 GEMMs with fp32 output take a
  // bf16 bias vector)
  if (s.x == "fp32" && s.bias) return "cuBLASLt's FP8 GEMM with fp32 output takes no fp32 bias";
  return "";
}

std::string cublaslt_problem(const Shape& s, const CublasLtConfig& c) {
  const std::string why = cublaslt_applies(s);
  if (!why.empty()) return why;
  if (c.algo < 0 || c.algo >= CublasLtConfig::kAlgos)
    return "algo must be 0.." + num(CublasLtConfig::kAlgos - 1) + " (an answer of cuBLASLt's heuristic)";
  return "";
}

std::string simple_problem(const SimpleConfig& c) {
  if (c.threads != 64 && c.threads != 128 && c.threads != 256) return "threads must be 64, 128 or 256";
  return "";
}

bool is_simple(const nlohmann::json& config) { return config_family(config) == SimpleConfig::kFamily; }
bool is_wgmma(const nlohmann::json& config) { return config_family(config) == WgmmaConfig::kFamily; }
bool is_cublaslt(const nlohmann::json& config) { return config_family(config) == CublasLtConfig::kFamily; }
bool is_stream(const nlohmann::json& config) { return config_family(config) == StreamConfig::kFamily; }

void check_family(const nlohmann::json& config) {
  const std::string f = config_family(config);
  if (f != TiledConfig::kFamily && f != SimpleConfig::kFamily && f != WgmmaConfig::kFamily &&
      f != CublasLtConfig::kFamily && f != StreamConfig::kFamily)
    throw Error("config", "w8a8_gemm config " + config.dump() + ": unknown family '" + f +
                              "' (expected tiled, wgmma, stream, cublaslt or simple)");
}

// Output tiles of the wgmma family for m rows of x.
int64_t wgmma_tiles(const Shape& s, const WgmmaConfig& c, int64_t m) {
  return (m + c.bm - 1) / c.bm * ((s.n + WgmmaConfig::kTileN - 1) / WgmmaConfig::kTileN);
}

}  // namespace

int w8a8_gemm_bucket(int64_t m) { return pow2_bucket(m, 4096); }

W8a8Workspace w8a8_workspace(int64_t rows, int64_t k, int64_t block) {
  // The parameter arrays have a row for every row a tile of 128 may read.
  const int64_t padded = (rows + 127) / 128 * 128;
  const size_t params = static_cast<size_t>(k / block * padded) * 4;
  W8a8Workspace w;
  w.codes = 0;
  w.scale = (static_cast<size_t>(rows * k) + 255) / 256 * 256;
  w.offset = w.scale + params;
  w.sum = w.offset + params;
  w.total = w.sum + params;
  return w;
}

std::vector<int64_t> W8a8GemmOp::m_values_for_rows(int64_t lo, int64_t hi) const {
  return pow2_buckets(lo, hi, 4096);
}

std::vector<ParamDef> W8a8GemmOp::params() const {
  return {
      {"k", "input features (a multiple of block)", nullptr, {}, 32, int64_t{1} << 20},
      {"n", "output features", nullptr, {}, 1, int64_t{1} << 20},
      {"m", "bucket of rows of x: 1, 2, 4, ..., 4096 (a launch has M <= m; 4096 serves any M)", 1, {}, 1, 4096},
      {"block", "codes of k sharing one scale (and offset), for x and W alike: 32..512, dividing k", 128, {}, 32, 512},
      {"x", "type of x, bias and y", "fp16", {"fp16", "bf16", "fp32"}},
      added_later({"format",
                   "codes of x and W: int8 (block rules quant_a, quant_w) or e4m3 (FP8 tensor cores, sm_89+: "
                   "x per row and block of 128, W per 128 x 128 tile, scale = amax/448; block=128, n a multiple of 128)",
                   "int8",
                   {"int8", "e4m3"}}),
      only_if("format", "int8",
              {"quant_a", "x's online quantization: offset (the seed's QuantA: q·s + o) or symmetric (q·s)", "offset",
               {"offset", "symmetric"}}),
      only_if("format", "int8",
              {"quant_w", "W's block parameters: offset (q·s + o) or symmetric (q·s, no offsets)", "offset",
               {"offset", "symmetric"}}),
      {"bias", "add bias[n] before the clamp", "no", {"no", "yes"}},
      {"act", "clamp after the bias: none, relu [0, inf), relu6 [0, 6]", "none", {"none", "relu", "relu6"}},
  };
}

void W8a8GemmOp::validate(const nlohmann::json& p) const {
  const int64_t k = p.at("k").get<int64_t>(), m = p.at("m").get<int64_t>(), block = p.at("block").get<int64_t>();
  if (m & (m - 1)) throw Error("spec", "w8a8_gemm m=" + num(m) + " is not a bucket; expected 1, 2, 4, ..., 4096");
  if (k % block) throw Error("spec", "w8a8_gemm block=" + num(block) + " does not divide k=" + num(k));
  if (p.at("format") == "e4m3") {
    const int64_t n = p.at("n").get<int64_t>();
    if (block != kFp8Tile)
      throw Error("spec", "w8a8_gemm format=e4m3 takes block=128 only (x's 1x128 and W's 128x128 scales), not block=" +
                              num(block));
    if (n % kFp8Tile)
      throw Error("spec", "w8a8_gemm format=e4m3 needs n a multiple of 128 (W's scales are per 128x128 tile), not n=" +
                              num(n));
  }
}

ArchNeed W8a8GemmOp::arch_need(const OpSpec& spec) const {
  if (spec.get_str("format") != "e4m3") return {};
  return {89, "w8a8_gemm format=e4m3 runs on the FP8 tensor cores (mma.sync ... .e4m3.e4m3, cvt ... .e4m3x2)"};
}

std::vector<ArgDef> W8a8GemmOp::args() const {
  return {{"x"}, {"wq"}, {"w_scale"}, {"w_offset"}, {"w_sum"}, {"bias"}, {"y"}, {"m", ArgDef::Kind::int32}};
}

std::string W8a8GemmOp::template_path(const nlohmann::json& config) const {
  if (is_simple(config)) return "templates/w8a8_gemm/w8a8_gemm_simple.cu";
  if (is_cublaslt(config)) return "templates/w8a8_gemm/w8a8_gemm_cublaslt.cu";
  if (is_stream(config)) return "templates/w8a8_gemm/w8a8_gemm_stream.cu";
  if (is_wgmma(config)) return "templates/w8a8_gemm/w8a8_gemm_wgmma.cu";
  return "templates/w8a8_gemm/w8a8_gemm_tiled.cu";
}

bool W8a8GemmOp::needs_sm90a(const nlohmann::json& config) const { return is_wgmma(config); }

std::vector<nlohmann::json> W8a8GemmOp::candidates(const OpSpec& spec, const DeviceLimits& device) const {
  const Shape s = shape_of(spec);
  std::vector<nlohmann::json> out;
  // The library path first, so that a tune cut short has measured what a user already has.
  if (device.compute_capability >= 90 && cublaslt_applies(s).empty())
    for (int algo = 0; algo < CublasLtConfig::kAlgos; ++algo) out.push_back(CublasLtConfig{algo}.to_json());
  if (!tiled_applies(s).empty()) {
    for (int threads : {128, 256}) out.push_back(SimpleConfig{threads}.to_json());
    return out;
  }
  // The simple kernel first where it is worth timing: a tune cut short still
  // measures the plain path. From m = 128 one thread per output element runs
  // for milliseconds (K MACs each, no reuse) and would dominate the tune.
  if (s.m <= 64) out.push_back(SimpleConfig{128}.to_json());
  const int64_t rows = std::min<int64_t>(s.m, 128);
  for (int bm : {16, 32, 64, 128}) {
    if (bm > std::max<int64_t>(16, rows) || bm < std::max<int64_t>(16, rows / 4)) continue;
    for (int bn : {16, 32, 64, 128, 256})
      for (int bk : {32, 64, 128}) {
        if (bk == 32 && s.block >= 64) continue;  // 32-code tiles only where the block is that short
        for (int warps_m : {1, 2, 4})
          for (int warps_n : {1, 2, 4, 8})
            for (int stages : {3, 4, 6, 8}) {
              // Deep rings for the weight-streaming small-M tiles only.
              if (stages > 4 && bm > 32) continue;
              const TiledConfig c{bm, bn, bk, warps_m, warps_n, stages};
              if (!tiled_problem(s, c, device).empty()) continue;
              // A warp of fewer than 4 mma tiles leaves the tensor cores waiting on its fragment loads.
              const int tiles = (c.bm / warps_m / 16) * (c.bn / warps_n / 8);
              if (tiles < 4) continue;
              // e4m3 on sm_90: no FP8 mma.sync instruction there (sm_89 has QMMA.16832); ptxas unpacks each
              // fragment to f16 (F2FP) for two HMMA.16816, and a warp of 16 tiles always spills; 8 fit.
              if (s.fp8 && tiles > 8) continue;
              // ... except 32×32 warps over 128-code tiles in a 6-slot ring: ptxas spills 8-16 bytes there.
              if (s.fp8 && c.bm / warps_m == 32 && c.bn / warps_n == 32 && bk == 128 && stages > 4) continue;
              out.push_back(c.to_json());
            }
      }
  }
  // The stream family where it applies.
  if (stream_applies(s).empty())
    for (int warps : {4, 8})
      for (int tiles : {1, 2})
        for (int unroll : {2, 4})
          for (int splits : {1, 2, 4, 8})
            for (int fuse : {0, 1}) {
              const StreamConfig c{warps, tiles, splits, unroll, fuse};
              if (stream_problem(s, c, device).empty()) out.push_back(c.to_json());
            }
  // The wgmma family on compute capability 9.0, for the large-M buckets it is for (below 128 rows
  // a block's tensor work is too short for a ring of tensor copies to pay).
  if (device.arch == "sm_90" && s.m >= 128 && wgmma_applies(s).empty())
    for (int overlap : {0, 1})
      for (int bm : {64, 128, 192})
        for (int stages : {3, 4, 5, 6})
          for (int persistent : {0, 1}) {
            const WgmmaConfig c{bm, stages, persistent, overlap};
            if (wgmma_problem(s, c, device).empty()) out.push_back(c.to_json());
          }
  return out;
}

nlohmann::json W8a8GemmOp::default_config(const OpSpec& spec) const {
  const Shape s = shape_of(spec);
  if (!tiled_applies(s).empty()) return SimpleConfig{128}.to_json();
  const int bm = s.m <= 16 ? 16 : s.m <= 64 ? 32 : s.fp8 ? 64 : 128;
  for (int bn : {128, 64, 32, 16}) {
    // 8 warps of 64 × 32 (4 × 4 mma tiles) at full size; e4m3's of 32 × 32 (at most 8 tiles, see candidates).
    const int warps_m = bm >= 64 ? 2 : 1, warps_n = bn >= 128 ? 4 : bn >= 64 ? 2 : 1;
    const TiledConfig c{bm, bn, std::min<int>(64, static_cast<int>(s.block)), warps_m, warps_n, 4};
    if (tiled_problem(s, c).empty()) return c.to_json();
  }
  return SimpleConfig{128}.to_json();
}

void W8a8GemmOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  check_family(config);
  const std::string p = is_simple(config)     ? simple_problem(SimpleConfig::from(config))
                        : is_wgmma(config)    ? wgmma_problem(shape_of(spec), WgmmaConfig::from(config))
                        : is_cublaslt(config) ? cublaslt_problem(shape_of(spec), CublasLtConfig::from(config))
                        : is_stream(config)   ? stream_problem(shape_of(spec), StreamConfig::from(config))
                                              : tiled_problem(shape_of(spec), TiledConfig::from(config));
  if (!p.empty()) throw Error("config", "w8a8_gemm config " + config.dump() + " is illegal for " + spec.label() + ": " + p);
}

std::vector<Constant> W8a8GemmOp::constants(const OpSpec& spec, const nlohmann::json& config) const {
  const Shape s = shape_of(spec);
  const std::string tx = s.x == "fp32" ? "float" : s.x == "bf16" ? "qjit::bf16_t" : "qjit::half_t";
  const W8a8Workspace ws = w8a8_workspace(s.m, s.k, s.block);
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  std::vector<Constant> c = {
      {"using", "TX", tx, "type of x, bias and y"},
      {"int", "kK", num(s.k), "input features"},
      {"int", "kN", num(s.n), "output features"},
      {"int", "kBlock", num(s.block), "codes of k per quantization block"},
      {"int", "kBlocks", num(s.blocks()), "blocks per row: k / block"},
      {"int", "kParamRows", num((ws.offset - ws.scale) / 4 / s.blocks()), "rows of each block's parameter array"},
      {"bool", "kFp8", flag(s.fp8), "e4m3 codes (x per row and block, W per 128 x 128 tile), else int8"},
      {"int", "kWScaleCols", num(s.w_scale_cols()), "columns of w_scale [kBlocks][.]: n, or n/128 tiles (e4m3)"},
      {"bool", "kOffsetA", flag(s.offset_a), "x quantized with offsets (the seed's QuantA), else symmetric"},
      {"bool", "kOffsetW", flag(s.offset_w), "W has offsets, else symmetric"},
      {"bool", "kBias", flag(s.bias), "add bias[n]"},
      {"int", "kAct", s.act == "relu6" ? "2" : s.act == "relu" ? "1" : "0", "clamp: 0 none, 1 relu, 2 relu6"},
      {"int", "kQuantWarps", num(kQuantWarps), "warps per block of the quantization kernel"},
  };
  if (is_simple(config)) {
    c.push_back({"int", "kThreads", num(SimpleConfig::from(config).threads), "tunable: threads per block"});
  } else if (is_cublaslt(config)) {
    // (algo is the library's: no constant of the module)
  } else if (is_stream(config)) {
    const StreamConfig st = StreamConfig::from(config);
    c.push_back({"int", "kWarps", num(st.warps), "tunable: warps per block, side by side in n"});
    c.push_back({"int", "kTiles", num(st.tiles), "tunable: 16-row tiles of W per warp"});
    c.push_back({"int", "kSplits", num(st.splits), "tunable: slices of k, one block each"});
    c.push_back({"int", "kUnroll", num(st.unroll), "tunable: pieces of 128 codes of W loaded ahead"});
    c.push_back({"int", "kMTiles", num(stream_mtiles(s.m)), "8-row tiles of x (the bucket's rows)"});
    c.push_back({"bool", "kFuse", st.fuse ? "true" : "false", "tunable: x quantized by each block (one kernel)"});
  } else if (is_wgmma(config)) {
    const WgmmaConfig w = WgmmaConfig::from(config);
    c.push_back({"int", "kBM", num(w.bm), "tunable: rows of y per block (wgmma n)"});
    // (persistent changes only the grid: the kernel takes tiles b, b + grid, ... either way)
    c.push_back({"int", "kStages", num(w.stages), "tunable: slots of the ring (stages of 128 codes of k)"});
    c.push_back({"bool", "kOverlap", w.overlap ? "true" : "false",
                 "tunable: a block's wgmma issued before the previous block is promoted"});
  } else {
    const TiledConfig t = TiledConfig::from(config);
    c.push_back({"int", "kBM", num(t.bm), "tunable: rows of y per block"});
    c.push_back({"int", "kBN", num(t.bn), "tunable: columns of y per block"});
    c.push_back({"int", "kBK", num(t.bk), "tunable: codes of k per stage"});
    c.push_back({"int", "kWarpsM", num(t.warps_m), "tunable: warps along m"});
    c.push_back({"int", "kWarpsN", num(t.warps_n), "tunable: warps along n"});
    c.push_back({"int", "kStages", num(t.stages), "tunable: stages of the cp.async ring"});
  }
  return c;
}

namespace {

// The cublaslt family's plan: qjit_w8a8_quant_a_lt (x's codes and 1×128
// scales [k/128][M rounded up to 4], W's tile scales transposed to [n/128][k/128], after the
// workspace's other arrays), then cuBLASLt's block-scaled FP8 GEMM.
Plan cublaslt_plan(const Shape& s, const CublasLtConfig& c) {
  const W8a8Workspace ws = w8a8_workspace(s.m, s.k, s.block);
  const int xb = bytes_of(s.x);
  const size_t w_scale_t = (ws.total + 255) / 256 * 256;
  const size_t tiles = static_cast<size_t>(s.w_scale_cols() * s.blocks());
  KernelDef quant{"qjit_w8a8_quant_a_lt", KernelDef::Role::step, {}, {}, {}};
  quant.geometry.block[0] = 32 * kQuantWarps;
  // One block more than the quantization needs: the last copies W's scales.
  quant.geometry.grid[0] = static_cast<unsigned>((s.m * s.blocks() + kQuantWarps - 1) / kQuantWarps + 1);
  quant.geometry.programmatic = true;
  quant.params = {arg_param("x"), arg_param("m"), workspace_param(ws.codes), workspace_param(ws.scale),
                  arg_param("w_scale"), workspace_param(w_scale_t)};
  CublasLtFp8Gemm g;
  g.w = "wq", g.bias = s.bias ? "bias" : "", g.y = "y", g.rows = "m";
  g.k = s.k, g.n = s.n;
  g.out = s.x == "fp32" ? CublasLtFp8Gemm::Out::f32 : s.x == "bf16" ? CublasLtFp8Gemm::Out::bf16 : CublasLtFp8Gemm::Out::f16;
  g.relu = s.act == "relu";
  g.algo = c.algo;
  g.x_offset = ws.codes, g.x_scale_offset = ws.scale, g.w_scale_offset = w_scale_t;
  Plan p;
  p.kernels = {quant};
  PlanStep gemm{PlanStep::Kind::cublaslt_fp8_gemm, -1, {}};
  gemm.lt = g;
  p.steps = {{PlanStep::Kind::kernel, 0, {}}, gemm};
  // cuBLASLt's operands at 16 bytes (the heuristic is asked for that alignment, runtime/cublaslt.cpp).
  p.pointers = {{"x", xb}, {"wq", 16}, {"w_scale", 4}, {"w_offset", 1, true}, {"w_sum", 1, true},
                {"bias", 16, !s.bias}, {"y", 16}};
  p.workspace_fixed = w_scale_t + tiles * 4;
  return p;
}

}  // namespace

Plan W8a8GemmOp::plan(const OpSpec& spec, const nlohmann::json& config) const {
  const Shape s = shape_of(spec);
  if (is_cublaslt(config)) return cublaslt_plan(s, CublasLtConfig::from(config));
  const W8a8Workspace ws = w8a8_workspace(s.m, s.k, s.block);
  const int xb = bytes_of(s.x);
  Plan p;

  KernelDef quant{"qjit_w8a8_quant_a", KernelDef::Role::step, {}, {}, {}};
  quant.geometry.block[0] = 32 * kQuantWarps;
  quant.geometry.grid[0] = static_cast<unsigned>((s.m * s.blocks() + kQuantWarps - 1) / kQuantWarps);
  quant.geometry.programmatic = true;  // everything after griddepcontrol.wait
  quant.params = {arg_param("x"), arg_param("m"), workspace_param(ws.codes), workspace_param(ws.scale),
                  workspace_param(ws.offset), workspace_param(ws.sum)};

  KernelDef gemm{"qjit_w8a8_gemm", KernelDef::Role::step, {}, {}, {}};
  gemm.params = {workspace_param(ws.codes), workspace_param(ws.scale), workspace_param(ws.offset),
                 workspace_param(ws.sum),   arg_param("wq"),           arg_param("w_scale"),
                 arg_param("w_offset"),     arg_param("w_sum"),        arg_param("bias"),
                 arg_param("y"),            arg_param("m")};
  gemm.geometry.programmatic = true;
  int param_align = 4, y_align = xb;
  size_t stream_workspace = 0;  // the stream family's split sums, when it has any
  // The stream family's fuse: x quantized inside the GEMM kernel, so the plan has no quantization step.
  const bool fused = is_stream(config) && StreamConfig::from(config).fuse;
  if (is_simple(config)) {
    const SimpleConfig c = SimpleConfig::from(config);
    gemm.geometry.block[0] = static_cast<unsigned>(c.threads);
    gemm.geometry.grid[0] = static_cast<unsigned>((s.n + c.threads - 1) / c.threads);
    gemm.geometry.grid[1] = static_cast<unsigned>(s.m);
  } else if (is_stream(config)) {
    const StreamConfig c = StreamConfig::from(config);
    const int64_t bands = (s.n + c.band_rows() - 1) / c.band_rows();
    gemm.geometry.block[0] = static_cast<unsigned>(32 * c.warps);
    gemm.geometry.grid[0] = static_cast<unsigned>(bands);
    gemm.geometry.grid[1] = static_cast<unsigned>(c.splits);
    // After the quantization's arrays (none when fused): a counter per band, then each slice's float sums
    // (templates/w8a8_gemm/w8a8_gemm_stream.cu).
    const size_t base = fused ? 0 : (ws.total + 255) / 256 * 256;
    if (fused) {
      gemm.symbol = "qjit_w8a8_gemm_fused";
      gemm.params = {arg_param("x"), arg_param("wq"), arg_param("w_scale"), arg_param("w_offset"),
                     arg_param("w_sum"), arg_param("bias"),    arg_param("y"),       arg_param("m")};
      gemm.geometry.dynamic_smem = static_cast<unsigned>(c.fused_smem(s.k, s.block, 8 * stream_mtiles(s.m)));
    }
    gemm.params.push_back(workspace_param(base));
    const size_t counters = (static_cast<size_t>(bands) * 4 + 255) / 256 * 256;
    const size_t sums = static_cast<size_t>(c.splits) * bands * c.warps * c.tiles * stream_mtiles(s.m) * 4 * 32 * 4;
    stream_workspace = c.splits > 1 ? base + counters + sums : 0;
    y_align = xb;
  } else if (is_wgmma(config)) {
    const WgmmaConfig c = WgmmaConfig::from(config);
    gemm.geometry.block[0] = 384;  // two consumer warpgroups and the producer
    gemm.geometry.dynamic_smem = static_cast<unsigned>(c.smem(s.fp8));
    const unsigned tiles = static_cast<unsigned>(wgmma_tiles(s, c, s.m));
    if (c.persistent) {
      gemm.geometry.grid_per_sm = 1;
      gemm.geometry.max_grid = tiles;
    } else {
      gemm.geometry.grid[0] = tiles;  // m fastest: the blocks running together share W's tile in L2
    }
    // W's codes [n][k] and x's codes [rows][k] (the workspace, rows = the call's m) as 8-bit
    // tensors, int8 or e4m3 alike: boxes of one stage (128 bytes of k) × 128 rows of W or bm rows
    // of x, in the 128-byte swizzle wgmma reads; rows past n or m arrive as zeros. (W's e4m3 tile
    // scales [k/128][n/128] need no map: each consumer thread loads its block's one float.)
    TensorMap w;
    w.source = "wq", w.rank = 2, w.element = TensorMap::Element::u8;
    w.dims[0] = s.k, w.dims[1] = s.n, w.pitches[0] = s.k;
    w.box[0] = WgmmaConfig::kStageK, w.box[1] = WgmmaConfig::kTileN;
    w.swizzle_128 = true;
    TensorMap x = w;
    x.source = "", x.in_workspace = true, x.workspace_offset = ws.codes, x.rows_arg = "m";
    x.dims[1] = 0, x.box[1] = static_cast<unsigned>(c.bm);
    gemm.tensor_maps = {w, x};
    // The block parameters arrive by bulk copies of 16-byte pieces; e4m3's W tile scales by 4-byte loads.
    param_align = s.fp8 ? 4 : 16;
    y_align = 4;       // 16-bit y: two adjacent columns per store; fp32 one
  } else {
    const TiledConfig c = TiledConfig::from(config);
    gemm.geometry.block[0] = static_cast<unsigned>(32 * c.warps());
    // blockIdx.x runs over m (fastest), so the blocks running together share W's tiles in L2.
    gemm.geometry.grid[0] = static_cast<unsigned>((s.m + c.bm - 1) / c.bm);
    gemm.geometry.grid[1] = static_cast<unsigned>(s.n / c.bn);
    gemm.geometry.dynamic_smem = static_cast<unsigned>(c.smem());
    param_align = s.fp8 ? 4 : 16;  // a tile's parameters arrive by cp.async: 16 bytes, or W's e4m3 tile scales 4
    y_align = 2 * xb;  // a lane stores two adjacent columns
  }
  if (fused) {
    p.kernels = {gemm};  // no codes in the workspace
    p.steps = {{PlanStep::Kind::kernel, 0, {}}};
  } else {
    p.kernels = {quant, gemm};
    p.steps = {{PlanStep::Kind::kernel, 0, {}}, {PlanStep::Kind::kernel, 1, {}}};
  }
  // x is read one element per lane; W's codes by 16-byte cp.async (tiled) or 4 bytes (simple).
  p.pointers = {{"x", xb},
                {"wq", is_simple(config) ? 4 : 16},  // (wgmma: a tensor map's base, 16-byte aligned)
                {"w_scale", param_align},
                {"w_offset", param_align, !s.offset_w},
                {"w_sum", param_align, !s.offset_a},
                {"bias", xb, !s.bias},
                {"y", y_align}};
  p.workspace_fixed = fused ? stream_workspace : std::max(ws.total, stream_workspace);
  return p;
}

Traffic W8a8GemmOp::traffic(const OpSpec& spec) const {
  const Shape s = shape_of(spec);
  const double m = static_cast<double>(s.m), n = static_cast<double>(s.n), k = static_cast<double>(s.k);
  const double xb = bytes_of(s.x), blocks = static_cast<double>(s.blocks());
  const double params = blocks * static_cast<double>(s.w_scale_cols()) * 4 * (1 + (s.offset_w ? 1 : 0) + (s.offset_a ? 1 : 0));
  return {m * k * xb + n * k + params + (s.bias ? n * xb : 0) + m * n * xb, 2 * m * n * k};
}

const OpDef& w8a8_gemm_op() {
  static const W8a8GemmOp op;
  return op;
}

}  // namespace qjit::codegen
