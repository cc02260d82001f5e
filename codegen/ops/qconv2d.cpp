#include "codegen/ops/qconv2d.h"
#include <algorithm>
#include <cstdlib>
#include <set>
#include "codegen/error.h"
#include "codegen/json_input.h"

namespace qjit::codegen {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The kernels index x, y and the weights with 32-bit integers.
constexpr int64_t kMaxElements = (int64_t{1} << 31) - 1;

// The spec's values, read once.
struct Shape {
  int64_t n, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, block;
  int bits;
  bool nhwc, fp16, bias;
  std::string act;

  static Shape from(const OpSpec& s) {
    Shape r{};
    r.n = s.get_int("n"), r.ci = s.get_int("ci"), r.h = s.get_int("h"), r.w = s.get_int("w");
    r.co = s.get_int("co"), r.kh = s.get_int("kh"), r.kw = s.get_int("kw");
    r.sh = s.get_int("stride_h"), r.sw = s.get_int("stride_w"), r.ph = s.get_int("pad_h"), r.pw = s.get_int("pad_w");
    r.dh = s.get_int("dil_h"), r.dw = s.get_int("dil_w");
    r.oh = conv_out_size(r.h, r.kh, r.sh, r.ph, r.dh, "h");
    r.ow = conv_out_size(r.w, r.kw, r.sw, r.pw, r.dw, "w");
    r.block = s.get_int("block");
    r.bits = static_cast<int>(s.get_int("bits"));
    r.nhwc = s.get_str("layout") == "nhwc";
    r.fp16 = s.get_str("x") == "fp16";
    r.bias = s.get_str("bias") == "yes";
    r.act = s.get_str("act");
    return r;
  }
  int64_t gemm_m() const { return n * oh * ow; }
  int64_t gemm_k() const { return kh * kw * ci; }
  int x_bytes() const { return fp16 ? 2 : 4; }
};

// --- family direct: one thread per output point -----------------------------

struct DirectConfig {
  int threads;
  static DirectConfig from(const nlohmann::json& j) {
    if (!j.is_object() || j.size() != 2) throw Error("config", "qconv2d direct config needs family and threads: " + json_excerpt(j));
    return {config_int(j, "threads", "qconv2d direct config")};
  }
  nlohmann::json to_json() const { return {{"family", "direct"}, {"threads", threads}}; }
};

std::string direct_problem(const DirectConfig& c) {
  if (c.threads != 64 && c.threads != 128 && c.threads != 256 && c.threads != 512)
    return "threads must be 64, 128, 256 or 512";
  return "";
}

// --- family implicit_gemm: tensor cores --------------------------------------

struct GemmConfig {
  int bm, bn, bk;            // block tile: bm rows of M (output points) × bn output channels, bk of K per stage
  int warps_m, warps_n;      // warps along M and N; a warp owns (bm/warps_m) × (bn/warps_n)
  static GemmConfig from(const nlohmann::json& j) {
    const std::string what = "qconv2d implicit_gemm config";
    if (!j.is_object() || j.size() != 6)
      throw Error("config", what + " needs family, bm, bn, bk, warps_m, warps_n: " + json_excerpt(j));
    return {config_int(j, "bm", what), config_int(j, "bn", what), config_int(j, "bk", what),
            config_int(j, "warps_m", what), config_int(j, "warps_n", what)};
  }
  nlohmann::json to_json() const {
    return {{"family", "implicit_gemm"}, {"bm", bm}, {"bn", bn}, {"bk", bk}, {"warps_m", warps_m}, {"warps_n", warps_n}};
  }
  int threads() const { return 32 * warps_m * warps_n; }
  // Two stages of x and of the dequantised weights, fp16, rows padded by 8
  // halves (16 bytes) so that a warp's fragment reads hit 32 different banks.
  int smem_bytes() const { return 2 * (bm + bn) * (bk + 8) * 2; }
};

// Why the implicit GEMM cannot serve the spec, or "".
std::string gemm_applies(const Shape& s) {
  if (!s.fp16) return "x=fp32 (the tensor-core path multiplies fp16; the direct family serves fp32 x in fp32)";
  if (s.ci % 16) return "ci=" + str(s.ci) + " is not a multiple of 16";
  return "";
}

std::string gemm_problem(const Shape& s, const GemmConfig& c, const DeviceLimits& d) {
  if (const std::string why = gemm_applies(s); !why.empty()) return why;
  auto one_of = [](int v, std::initializer_list<int> set) { return std::find(set.begin(), set.end(), v) != set.end(); };
  if (!one_of(c.bm, {32, 64, 128})) return "bm must be 32, 64 or 128";
  if (!one_of(c.bn, {32, 64, 128})) return "bn must be 32, 64 or 128";
  if (!one_of(c.bk, {16, 32, 64})) return "bk must be 16, 32 or 64";
  if (!one_of(c.warps_m, {1, 2, 4}) || !one_of(c.warps_n, {1, 2, 4})) return "warps_m and warps_n must be 1, 2 or 4";
  if (s.ci % c.bk) return "bk=" + str(c.bk) + " does not divide ci=" + str(s.ci) + " (a stage reads one filter tap)";
  const int wtm = c.bm / c.warps_m, wtn = c.bn / c.warps_n;
  if (wtm < 16 || wtm % 16 || wtn < 8 || wtn % 8) return "a warp's tile must be a multiple of 16 × 8";
  if ((wtm / 16) * (wtn / 8) > 16) return "a warp's tile holds more than 64 accumulators";
  // x is loaded as 16-byte vectors (nhwc) or single halves (nchw): every
  // thread the same number. nchw: at most 16 halves held in registers, each
  // with its own index arithmetic (32 spilled at 255 registers on sm_90).
  const int a_items = s.nhwc ? c.bm * c.bk / 8 : c.bm * c.bk;
  if (a_items % c.threads()) return "the threads do not split the x tile evenly";
  if (!s.nhwc && a_items / c.threads() > 16) return "more than 16 halves of x per thread (nchw)";
  if (c.smem_bytes() > d.smem_per_block()) return "shared memory exceeds the device's";
  return "";
}

// --- family igemm_ring: cp.async ring, ldmatrix, split-K (nhwc) --------------

struct RingConfig {
  int bm, bn, bk;         // block tile: bm output points × bn output channels, chunks of bk channels of one tap
  int warps_m, warps_n;   // warps along M and N
  int stages;             // cp.async ring depth
  int split;              // blocks per output tile along K (1: none), summed in order by the last one
  // 1: the weights dequantised once per call by a step before (into the workspace), the ring copying fp16
  // tiles; 0: each block dequantises its tiles. A key added later: left out of the JSON at 0.
  int predeq = 0;
  // 1: the multiply on Hopper's wgmma (sm_90a) instead of mma.sync, a warpgroup per 64 rows of the
  // tile by all its columns (warps_m = bm / 16, warps_n = 1, bk = 64). Left out of the JSON at 0.
  int wgmma = 0;
  // (wgmma only) 1: a chunk's wgmma left running across the next iteration's barrier (waited for one
  // iteration later); the ring then refills a slot one chunk later and keeps three dequantised B tiles.
  int inflight = 0;
  static RingConfig from(const nlohmann::json& j) {
    const std::string what = "qconv2d igemm_ring config";
    const auto optional = [&](const char* key) { return j.is_object() && j.contains(key) ? 1u : 0u; };
    if (!j.is_object() || j.size() != 8u + optional("predeq") + optional("wgmma") + optional("inflight"))
      throw Error("config", what + " needs family, bm, bn, bk, warps_m, warps_n, stages, split (and predeq, wgmma, "
                                   "inflight): " + json_excerpt(j));
    const auto key_or_0 = [&](const char* key) { return optional(key) ? config_int(j, key, what) : 0; };
    return {config_int(j, "bm", what),      config_int(j, "bn", what),      config_int(j, "bk", what),
            config_int(j, "warps_m", what), config_int(j, "warps_n", what), config_int(j, "stages", what),
            config_int(j, "split", what),   key_or_0("predeq"),             key_or_0("wgmma"),
            key_or_0("inflight")};
  }
  nlohmann::json to_json() const {
    nlohmann::json j = {{"family", "igemm_ring"}, {"bm", bm},         {"bn", bn},         {"bk", bk},
                        {"warps_m", warps_m},     {"warps_n", warps_n}, {"stages", stages}, {"split", split}};
    if (predeq) j["predeq"] = predeq;
    if (wgmma) j["wgmma"] = wgmma;
    if (inflight) j["inflight"] = inflight;
    return j;
  }
  int threads() const { return 32 * warps_m * warps_n; }
  // The ring's slots (an fp16 A tile and the raw packed B tile each), then
  // two dequantised fp16 B tiles; with predeq, slots of both tiles in fp16
  // (templates/qconv2d/qconv2d_igemm_ring.cu). wgmma: 1024 bytes more, to
  // start the ring on the swizzle atoms' 1024-byte boundary.
  int smem_bytes(int bits) const {
    const int align = wgmma ? 1024 : 0;
    if (predeq) return stages * (bm * bk * 2 + bn * bk * 2) + align;
    return stages * (bm * bk * 2 + bn * bk * bits / 8) + (2 + inflight) * bn * bk * 2 + align;
  }
  int64_t tiles(const Shape& s) const { return ((s.gemm_m() + bm - 1) / bm) * ((s.co + bn - 1) / bn); }
};

std::string ring_applies(const Shape& s) {
  if (!s.fp16) return "x=fp32 (the tensor-core path multiplies fp16)";
  if (s.ci % 32) return "ci=" + str(s.ci) + " is not a multiple of 32";
  if (!s.nhwc && s.n > 65535) return "n=" + str(s.n) + " images: nchw x's transpose has a grid row per image (at most 65535)";
  return "";
}

std::string ring_problem(const Shape& s, const RingConfig& c, const DeviceLimits& d) {
  if (const std::string why = ring_applies(s); !why.empty()) return why;
  auto one_of = [](int v, std::initializer_list<int> set) { return std::find(set.begin(), set.end(), v) != set.end(); };
  // Both multiplies (mma.sync, or wgmma with "wgmma":1).
  if (c.predeq != 0 && c.predeq != 1) return "predeq must be 0 or 1";
  if (c.wgmma != 0 && c.wgmma != 1) return "wgmma must be 0 or 1";
  if (c.inflight != 0 && c.inflight != 1) return "inflight must be 0 or 1";
  if (c.inflight && (!c.wgmma || c.stages < 4)) return "inflight needs wgmma and 4 or more stages";
  if (!one_of(c.stages, {3, 4, 5})) return "stages must be 3, 4 or 5";
  if (c.split < 1 || c.split > 64) return "split must be 1 to 64";
  if (!one_of(c.bk, {32, 64})) return "bk must be 32 or 64";
  if (s.ci % c.bk) return "bk=" + str(c.bk) + " does not divide ci=" + str(s.ci) + " (a chunk reads one filter tap)";
  const int64_t chunks = s.gemm_k() / c.bk;
  if (c.split > chunks) return "split=" + str(c.split) + " exceeds the " + str(chunks) + " chunks of K";
  if (c.smem_bytes(s.bits) > d.smem_per_block()) return "shared memory exceeds the device's";
  if (c.wgmma) {
    // (templates/qconv2d/qconv2d_igemm_ring.cu, "wgmma")
    if (d.arch != "sm_90") return "wgmma runs on compute capability 9.0 only";
    if (c.bk != 64) return "wgmma reads rows of 64 channels (bk=64)";
    if (c.bm != 64 && c.bm != 128) return "wgmma needs bm 64 or 128 (a warpgroup per 64 rows)";
    if (c.bn != 64 && c.bn != 128 && c.bn != 256) return "wgmma needs bn 64, 128 or 256";
    if (c.warps_m != c.bm / 16 || c.warps_n != 1) return "wgmma needs warps_m = bm / 16 and warps_n = 1";
    if (chunks % c.split) return "wgmma needs split to divide the " + str(chunks) + " chunks";
    return "";
  }
  if (!one_of(c.bm, {32, 64, 128})) return "bm must be 32, 64 or 128";
  if (!one_of(c.bn, {32, 64, 128})) return "bn must be 32, 64 or 128";
  if (!one_of(c.warps_m, {1, 2, 4}) || !one_of(c.warps_n, {1, 2, 4})) return "warps_m and warps_n must be 1, 2 or 4";
  const int wtm = c.bm / c.warps_m, wtn = c.bn / c.warps_n;
  if (wtm < 16 || wtm % 16 || wtn < 16 || wtn % 16) return "a warp's tile must be a multiple of 16 × 16";
  if ((wtm / 16) * (wtn / 8) > 16) return "a warp's tile holds more than 64 accumulators";
  if ((c.bm * c.bk / 8) % c.threads()) return "the threads do not split the x tile's 16-byte pieces evenly";
  return "";
}

// Split-K copies of an unsplit ring config c, where its output tiles leave
// SMs idle: about one and about two blocks per SM, each split at least 4
// chunks, at most 16; the wgmma ring's rounded down to a divisor of the
// chunks (every block the same constant count). Legal ones only.
void push_splits(const Shape& s, RingConfig c, int64_t chunks, const DeviceLimits& device,
                 std::vector<nlohmann::json>& out) {
  const int64_t tiles = c.tiles(s);
  if (tiles >= device.sm_count) return;
  std::set<int64_t> splits;
  for (int64_t per_sm : {1, 2}) {
    int64_t sp = std::min<int64_t>({per_sm * device.sm_count / tiles, 16, chunks / 4});
    while (c.wgmma && sp >= 2 && chunks % sp) --sp;
    if (sp >= 2) splits.insert(sp);
  }
  for (int64_t sp : splits) {
    c.split = static_cast<int>(sp);
    if (ring_problem(s, c, device).empty()) out.push_back(c.to_json());
  }
}

// --- the family table ----------------------------------------------------------

bool is_gemm(const nlohmann::json& config) { return config_family(config) == "implicit_gemm"; }
bool is_ring(const nlohmann::json& config) { return config_family(config) == "igemm_ring"; }
bool is_wgmma_ring(const nlohmann::json& config) { return is_ring(config) && config.value("wgmma", 0) == 1; }

void check_family(const nlohmann::json& config) {
  const std::string f = config_family(config);
  if (f != "direct" && f != "implicit_gemm" && f != "igemm_ring")
    throw Error("config", "qconv2d config " + json_excerpt(config) + ": unknown family '" + f +
                              "' (expected direct, implicit_gemm or igemm_ring)");
}

}  // namespace

int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, const char* axis) {
  const std::string a = axis;
  if (stride < 1) throw Error("spec", "qconv2d: stride_" + a + "=" + str(stride) + " (need ≥ 1)");
  if (pad < 0) throw Error("spec", "qconv2d: pad_" + a + "=" + str(pad) + " (need ≥ 0)");
  if (dil < 1) throw Error("spec", "qconv2d: dil_" + a + "=" + str(dil) + " (need ≥ 1)");
  if (k < 1) throw Error("spec", "qconv2d: kernel " + a + "=" + str(k) + " (need ≥ 1)");
  if (in < 1) throw Error("spec", "qconv2d: input " + a + "=" + str(in) + " (need ≥ 1)");
  const int64_t span = dil * (k - 1) + 1;  // input extent one output point reads
  if (in + 2 * pad < span)
    throw Error("spec", "qconv2d: the output is empty along " + a + ": input " + str(in) + " + 2·pad " + str(pad) +
                            " < dilated kernel " + str(span) + " (dil " + str(dil) + ", kernel " + str(k) + ")");
  return (in + 2 * pad - span) / stride + 1;
}

std::vector<ParamDef> QConv2dOp::params() const {
  const int64_t big = int64_t{1} << 16;
  return {
      {"n", "batch", 1, {}, 1, big},
      {"ci", "input channels (even for bits=4)", nullptr, {}, 1, big},
      {"h", "input height", nullptr, {}, 1, big},
      {"w", "input width", nullptr, {}, 1, big},
      {"co", "output channels", nullptr, {}, 1, big},
      {"kh", "kernel height", 3, {}, 1, 64},
      {"kw", "kernel width", 3, {}, 1, 64},
      {"stride_h", "vertical stride", 1, {}, 1, 64},
      {"stride_w", "horizontal stride", 1, {}, 1, 64},
      {"pad_h", "zero padding above and below", 0, {}, 0, 64},
      {"pad_w", "zero padding left and right", 0, {}, 0, 64},
      {"dil_h", "vertical dilation", 1, {}, 1, 64},
      {"dil_w", "horizontal dilation", 1, {}, 1, 64},
      {"layout", "x and y: nchw [n][c][h][w] or nhwc [n][h][w][c]", "nchw", {"nchw", "nhwc"}},
      {"bits", "weight bits: 4 or 8", 4, {}, 4, 8},
      {"block", "input channels per (scale, offset) pair; divides ci (ci: per channel)", 32, {}, 1, big},
      {"x", "type of x and y", "fp16", {"fp16", "fp32"}},
      {"bias", "add bias[co] (float32) before the clamp", "no", {"no", "yes"}},
      {"act", "clamp after the bias: none, relu [0, inf), relu6 [0, 6]", "none", {"none", "relu", "relu6"}},
  };
}

void QConv2dOp::validate(const nlohmann::json& p) const {
  auto get = [&](const char* k) { return p.at(k).get<int64_t>(); };
  const int64_t n = get("n"), ci = get("ci"), co = get("co"), kh = get("kh"), kw = get("kw"), bits = get("bits"),
                block = get("block");
  const int64_t oh = conv_out_size(get("h"), kh, get("stride_h"), get("pad_h"), get("dil_h"), "h");
  const int64_t ow = conv_out_size(get("w"), kw, get("stride_w"), get("pad_w"), get("dil_w"), "w");
  if (bits != 4 && bits != 8) throw Error("spec", "qconv2d: bits=" + str(bits) + " (expected 4 or 8)");
  if (ci % block) throw Error("spec", "qconv2d: block=" + str(block) + " does not divide ci=" + str(ci));
  if (bits == 4 && ci % 2)
    throw Error("spec", "qconv2d: int4 weights need an even ci (two channels per byte); ci=" + str(ci));
  if (bits == 4 && block % 2)
    throw Error("spec", "qconv2d: int4 needs an even block (a byte holds two channels); block=" + str(block));
  auto limit = [&](const char* what, int64_t elements) {
    if (elements > kMaxElements)
      throw Error("spec", std::string("qconv2d: ") + what + " has " + str(elements) + " elements (at most 2^31 - 1)");
  };
  limit("x", n * ci * get("h") * get("w"));
  limit("y", n * co * oh * ow);
  limit("the weights", co * kh * kw * ci);
}

std::string QConv2dOp::template_path(const nlohmann::json& config) const {
  check_family(config);
  if (is_ring(config)) return "templates/qconv2d/qconv2d_igemm_ring.cu";
  return is_gemm(config) ? "templates/qconv2d/qconv2d_implicit_gemm.cu" : "templates/qconv2d/qconv2d_direct.cu";
}

bool QConv2dOp::needs_sm90a(const nlohmann::json& config) const { return is_wgmma_ring(config); }

std::vector<ArgDef> QConv2dOp::args() const {
  return {{"x"}, {"qweight"}, {"scales"}, {"offsets"}, {"bias"}, {"y"}};
}

std::vector<nlohmann::json> QConv2dOp::candidates(const OpSpec& spec, const DeviceLimits& device) const {
  const Shape s = Shape::from(spec);
  std::vector<nlohmann::json> out;
  for (int threads : {64, 128, 256, 512}) out.push_back(DirectConfig{threads}.to_json());
  if (!gemm_applies(s).empty()) return out;
  const int64_t m = s.gemm_m();
  for (int bm : {32, 64, 128})
    for (int bn : {32, 64, 128})
      for (int bk : {16, 32, 64})
        for (auto [wm, wn] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{2, 4}, std::pair{1, 2}, std::pair{2, 1}}) {
          const GemmConfig c{bm, bn, bk, wm, wn};
          if (!gemm_problem(s, c, device).empty()) continue;
          // Named prune rules: a tile at least twice the problem along an
          // axis wastes half its work; bk 16 only where ci has no 32; four
          // warps for tiles of at most 64 × 64, eight above.
          if ((bm > 32 && m * 2 <= bm) || (bn > 32 && s.co * 2 <= bn)) continue;
          if (bk == 16 && s.ci % 32 == 0) continue;
          if ((bm * bn <= 64 * 64) != (wm * wn <= 4)) continue;
          out.push_back(c.to_json());
        }
  if (!ring_applies(s).empty()) return out;
  const int64_t chunks_per_bk[2] = {s.gemm_k() / 32, s.gemm_k() / 64};
  for (int bm : {32, 64, 128})
    for (int bn : {32, 64, 128})
      for (int bk : {32, 64})
        for (int warps : {4, 8})
          for (int stages : {3, 4}) {
            // Named prune rules: four warps for tiles up to 128 × 64, eight
            // from there; of the warp grids, the one whose warp tile is the
            // most square (fewest ldmatrix per mma; the taller on a tie); a
            // warp's tile of at least 4 mma tiles; a tile at least twice the
            // problem along an axis is dropped; 32-channel chunks only with
            // a 4-deep ring (half the mma work per wait to cover).
            if ((bm * bn < 128 * 64 && warps != 4) || (bm * bn > 128 * 64 && warps != 8)) continue;
            int wm = 0;
            for (int m : {1, 2, 4}) {
              const int wtm = bm / m, wtn = bn / (warps / m);
              if (warps % m || wtm < 16 || wtn < 16 || warps / m > 4) continue;
              if (wm == 0 || std::abs(wtm - wtn) < std::abs(bm / wm - bn / (warps / wm))) wm = m;
            }
            if (wm == 0) continue;
            const int wn = warps / wm;
            RingConfig c{bm, bn, bk, wm, wn, stages, 1};
            if (!ring_problem(s, c, device).empty()) continue;
            if ((bm > 32 && s.gemm_m() * 2 <= bm) || (bn > 32 && s.co * 2 <= bn)) continue;
            if ((bm / wm / 16) * (bn / wn / 8) < 4) continue;
            if (bk == 32 && stages != 4) continue;
            out.push_back(c.to_json());
            // The weights dequantised once per call instead of once per block (tiles along M do it again
            // each): for tiles of one split.
            RingConfig pre = c;
            pre.predeq = 1;
            if (ring_problem(s, pre, device).empty()) out.push_back(pre.to_json());
            push_splits(s, c, chunks_per_bk[bk == 64], device, out);
          }
  // The ring on wgmma (sm_90a): a warpgroup per 64 rows, bk 64. Named prune
  // rules as above (no tile twice the problem; bn at most twice bm); split-k
  // as above, rounded down to a divisor of the chunks (push_splits).
  if (device.arch == "sm_90" && s.ci % 64 == 0) {
    const int64_t chunks = s.gemm_k() / 64;
    // (with a chunk in flight a ring of s stages loads as far ahead as s − 1 stages without: 4 and 5)
    for (int bm : {64, 128})
      for (int bn : {64, 128, 256})
        for (auto [stages, inflight] : {std::pair{3, 0}, std::pair{4, 0}, std::pair{4, 1}, std::pair{5, 1}})
          for (int predeq : {0, 1}) {
            RingConfig c{bm, bn, 64, bm / 16, 1, stages, 1, predeq, 1, inflight};
            if (!ring_problem(s, c, device).empty()) continue;
            if (bn > 2 * bm) continue;  // 64 × 256 warpgroup tiles of one warpgroup: 255 registers and spills
            if ((bm > 64 && s.gemm_m() * 2 <= bm) || (bn > 64 && s.co * 2 <= bn)) continue;
            out.push_back(c.to_json());
            // (bn 256 with split-k's epilogue spills: 255 registers, ptxas of CUDA 13.0)
            if (bn != 256) push_splits(s, c, chunks, device, out);
          }
  }
  return out;
}

nlohmann::json QConv2dOp::default_config(const OpSpec& spec) const {
  const Shape s = Shape::from(spec);
  if (gemm_applies(s).empty()) {
    const int bk = s.ci % 32 == 0 ? 32 : 16;
    const GemmConfig c{64, s.co <= 32 ? 32 : 64, bk, 2, 2};
    if (gemm_problem(s, c, DeviceLimits{}).empty()) return c.to_json();
  }
  return DirectConfig{128}.to_json();
}

void QConv2dOp::validate_config(const OpSpec& spec, const nlohmann::json& config) const {
  check_family(config);
  const Shape s = Shape::from(spec);
  const std::string p = is_ring(config)   ? ring_problem(s, RingConfig::from(config), DeviceLimits{})
                        : is_gemm(config) ? gemm_problem(s, GemmConfig::from(config), DeviceLimits{})
                                          : direct_problem(DirectConfig::from(config));
  if (!p.empty()) throw Error("config", "qconv2d config " + json_excerpt(config) + " is illegal for " + spec.label() + ": " + p);
}

std::vector<Constant> QConv2dOp::constants(const OpSpec& spec, const nlohmann::json& config) const {
  const Shape s = Shape::from(spec);
  std::vector<Constant> c = {
      {"using", "TX", s.fp16 ? "qjit::half_t" : "float", "type of x and y"},
      {"int", "kBatch", str(s.n), "batch"},
      {"int", "kCi", str(s.ci), "input channels"},
      {"int", "kH", str(s.h), "input height"},
      {"int", "kW", str(s.w), "input width"},
      {"int", "kCo", str(s.co), "output channels"},
      {"int", "kKh", str(s.kh), "kernel height"},
      {"int", "kKw", str(s.kw), "kernel width"},
      {"int", "kStrideH", str(s.sh), "vertical stride"},
      {"int", "kStrideW", str(s.sw), "horizontal stride"},
      {"int", "kPadH", str(s.ph), "zero padding above and below"},
      {"int", "kPadW", str(s.pw), "zero padding left and right"},
      {"int", "kDilH", str(s.dh), "vertical dilation"},
      {"int", "kDilW", str(s.dw), "horizontal dilation"},
      {"int", "kOh", str(s.oh), "output height"},
      {"int", "kOw", str(s.ow), "output width"},
      {"bool", "kNhwc", s.nhwc ? "true" : "false", "x and y channels-last (else nchw)"},
      {"int", "kBits", str(s.bits), "weight bits (4: two channels per byte, channel 2j high)"},
      {"int", "kBlock", str(s.block), "input channels per (scale, offset)"},
      {"bool", "kHasBias", s.bias ? "true" : "false", "add bias[co]"},
      {"int", "kAct", s.act == "none" ? "0" : s.act == "relu" ? "1" : "2", "0 none, 1 relu, 2 relu6"},
  };
  if (is_ring(config)) {
    const RingConfig r = RingConfig::from(config);
    c.push_back({"int", "kBM", str(r.bm), "tunable: output points per block (GEMM rows)"});
    c.push_back({"int", "kBN", str(r.bn), "tunable: output channels per block (GEMM columns)"});
    c.push_back({"int", "kBK", str(r.bk), "tunable: input channels of one filter tap per chunk"});
    c.push_back({"int", "kWarpsM", str(r.warps_m), "tunable: warps along the rows"});
    c.push_back({"int", "kWarpsN", str(r.warps_n), "tunable: warps along the columns"});
    c.push_back({"int", "kStages", str(r.stages), "tunable: cp.async ring depth"});
    c.push_back({"int", "kSplit", str(r.split), "tunable: blocks per output tile along K"});
    c.push_back({"bool", "kPreDequant", r.predeq ? "true" : "false",
                 "tunable: the weights dequantised once per call by a step before (fp16 in the workspace)"});
    c.push_back({"bool", "kWgmma", r.wgmma ? "true" : "false", "tunable: the multiply on wgmma (sm_90a)"});
    c.push_back({"bool", "kInflight", r.inflight ? "true" : "false",
                 "tunable: (wgmma) a chunk's wgmma left running across the next barrier"});
  } else if (is_gemm(config)) {
    const GemmConfig g = GemmConfig::from(config);
    c.push_back({"int", "kBM", str(g.bm), "tunable: output points per block (GEMM rows)"});
    c.push_back({"int", "kBN", str(g.bn), "tunable: output channels per block (GEMM columns)"});
    c.push_back({"int", "kBK", str(g.bk), "tunable: input channels of one filter tap per stage"});
    c.push_back({"int", "kWarpsM", str(g.warps_m), "tunable: warps along the rows"});
    c.push_back({"int", "kWarpsN", str(g.warps_n), "tunable: warps along the columns"});
  } else {
    c.push_back({"int", "kThreads", str(DirectConfig::from(config).threads), "tunable: threads per block"});
  }
  return c;
}

Plan QConv2dOp::plan(const OpSpec& spec, const nlohmann::json& config) const {
  const Shape s = Shape::from(spec);
  const bool no_bias = !s.bias;
  const auto params = arg_params({"x", "qweight", "scales", "offsets", "bias", "y"});
  LaunchGeometry g;
  if (is_ring(config)) {
    const RingConfig c = RingConfig::from(config);
    const int64_t tiles_m = (s.gemm_m() + c.bm - 1) / c.bm, tiles_n = (s.co + c.bn - 1) / c.bn;
    g.grid[0] = static_cast<unsigned>(tiles_m);  // fastest: blocks running together share their weights
    g.grid[1] = static_cast<unsigned>(tiles_n);
    g.grid[2] = static_cast<unsigned>(c.split);
    g.block[0] = static_cast<unsigned>(c.threads());
    g.dynamic_smem = static_cast<unsigned>(c.smem_bytes(s.bits));
    // nchw x: a first step transposes it to nhwc at the workspace's start,
    // which the ring reads instead of x; predeq: a step dequantises the
    // weights to fp16 after that, which the ring reads instead of qweight
    // (templates/qconv2d/qconv2d_igemm_ring.cu). Then the ring's own workspace.
    const size_t xt_bytes = s.nhwc ? 0 : static_cast<size_t>(s.n * s.h * s.w * s.ci * 2 + 255) / 256 * 256;
    const size_t wh_bytes = c.predeq ? static_cast<size_t>(s.co * s.gemm_k() * 2 + 255) / 256 * 256 : 0;
    auto ring_params = params;
    if (!s.nhwc) ring_params[0] = workspace_param(0);
    if (c.predeq) ring_params[1] = workspace_param(xt_bytes);
    ring_params.push_back(workspace_param(xt_bytes + wh_bytes));
    Plan p = single_kernel_plan("qjit_qconv2d_igemm_ring", g, ring_params,
                                {{"x", s.nhwc ? 16 : 2}, {"qweight", 16}, {"scales", 4}, {"offsets", 4},
                                 {"bias", 4, no_bias}, {"y", s.nhwc && s.co % 2 == 0 ? 4 : 2}});
    p.workspace_fixed = xt_bytes + wh_bytes;
    if (c.split > 1) {
      // The ring's own workspace after that: a counter per output tile
      // (256-byte rounded), then bm·bn floats per block (which the runtime
      // places after the fixed part, where the template looks for them).
      p.workspace_fixed += static_cast<size_t>((tiles_m * tiles_n * 4 + 255) / 256 * 256);
      p.kernels[0].geometry.workspace_per_block = static_cast<size_t>(c.bm) * c.bn * 4;
    }
    std::vector<KernelDef> before;  // the steps ahead of the ring, in order
    if (!s.nhwc) {
      KernelDef to_nhwc{"qjit_qconv2d_to_nhwc", KernelDef::Role::step, {}, {arg_param("x"), workspace_param(0)}, {}};
      to_nhwc.geometry.block[0] = 256;
      to_nhwc.geometry.grid[0] = static_cast<unsigned>((s.h * s.w + 31) / 32);
      to_nhwc.geometry.grid[1] = static_cast<unsigned>((s.ci + 31) / 32);
      to_nhwc.geometry.grid[2] = static_cast<unsigned>(s.n);
      before.push_back(to_nhwc);
    }
    if (c.predeq) {
      KernelDef dequant{"qjit_qconv2d_dequant_w", KernelDef::Role::step, {}, {}, {}};
      dequant.params = {arg_param("qweight"), arg_param("scales"), arg_param("offsets"), workspace_param(xt_bytes)};
      dequant.geometry.block[0] = 256;
      dequant.geometry.grid[0] = static_cast<unsigned>((s.co * s.gemm_k() / 8 + 255) / 256);
      before.push_back(dequant);
    }
    p.kernels.insert(p.kernels.begin(), before.begin(), before.end());
    p.steps.clear();
    for (size_t k = 0; k < p.kernels.size(); ++k) p.steps.push_back({PlanStep::Kind::kernel, static_cast<int>(k), {}});
    return p;
  }
  if (is_gemm(config)) {
    const GemmConfig c = GemmConfig::from(config);
    g.grid[0] = static_cast<unsigned>((s.gemm_m() + c.bm - 1) / c.bm);
    g.grid[1] = static_cast<unsigned>((s.co + c.bn - 1) / c.bn);
    g.block[0] = static_cast<unsigned>(c.threads());
    g.dynamic_smem = static_cast<unsigned>(c.smem_bytes());
    // nhwc x is read as 16-byte vectors; a weight row as 8-byte pieces
    // (ci % 16 == 0 makes every row of kh·kw·ci·bits/8 bytes a multiple of 8).
    return single_kernel_plan("qjit_qconv2d_implicit_gemm", g, params,
                              {{"x", s.nhwc ? 16 : 2}, {"qweight", 8}, {"scales", 4}, {"offsets", 4},
                               {"bias", 4, no_bias}, {"y", 2}});
  }
  const DirectConfig c = DirectConfig::from(config);
  const int64_t points = s.n * s.co * s.oh * s.ow;
  g.grid[0] = static_cast<unsigned>((points + c.threads - 1) / c.threads);
  g.block[0] = static_cast<unsigned>(c.threads);
  return single_kernel_plan("qjit_qconv2d_direct", g, params,
                            {{"x", s.x_bytes()}, {"qweight", 1}, {"scales", 4}, {"offsets", 4}, {"bias", 4, no_bias},
                             {"y", s.x_bytes()}});
}

Traffic QConv2dOp::traffic(const OpSpec& spec) const {
  const Shape s = Shape::from(spec);
  const double xb = s.x_bytes();
  const double x = static_cast<double>(s.n * s.ci * s.h * s.w) * xb;
  const double w = static_cast<double>(s.co * s.gemm_k()) * s.bits / 8;
  const double quant = static_cast<double>(s.co * (s.ci / s.block)) * 8 + (s.bias ? 4.0 * s.co : 0);
  const double y = static_cast<double>(s.n * s.co * s.oh * s.ow) * xb;
  return {x + w + quant + y, 2.0 * static_cast<double>(s.gemm_m()) * static_cast<double>(s.co * s.gemm_k())};
}

const OpDef& qconv2d_op() {
  static const QConv2dOp op;
  return op;
}

}  // namespace qjit::codegen
