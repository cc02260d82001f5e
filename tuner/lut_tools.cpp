#include "tuner/lut_tools.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include "codegen/error.h"
#include "codegen/numeric.h"
#include "tuner/reference/fp_lut.h"

namespace qjit::tuner {
namespace lut = codegen::lut;

namespace {

// Every finite fp16 value and f there, computed once per function.
struct Inputs {
  std::vector<float> x;
  std::vector<double> f;
};
const Inputs& inputs_for(const std::string& fn) {
  static std::string cached_fn;
  static Inputs cached;
  if (cached_fn != fn) {
    cached = {};
    for (uint32_t b = 0; b < 0x10000; ++b) {
      const float x = half_to_float(static_cast<uint16_t>(b));
      if (!std::isfinite(x)) continue;
      cached.x.push_back(x);
      cached.f.push_back(std::fmax(-65504.0, std::fmin(65504.0, lut::reference_fn(fn, x))));
    }
    cached_fn = fn;
  }
  return cached;
}

// fp16 values in increasing order <-> integers, so "one step" is one fp16 ulp.
int ordered(float v) {
  const uint16_t b = float_to_half(v);
  return (b & 0x8000) ? -static_cast<int>(b & 0x7fff) : static_cast<int>(b);
}
float from_ordered(int o) { return half_to_float(o < 0 ? static_cast<uint16_t>(0x8000 | -o) : static_cast<uint16_t>(o)); }

}  // namespace

LutError lut_error(const lut::Table& t) {
  if (t.fn == "custom") throw Error("spec", "a custom table has no function to measure against");
  const Inputs& in = inputs_for(t.fn);
  LutError e;
  e.inputs = static_cast<int>(in.x.size());
  for (size_t i = 0; i < in.x.size(); ++i) {
    const double y = lut_apply(t, in.x[i]), abs = std::fabs(y - in.f[i]);
    const double rel = abs / std::fmax(std::fabs(in.f[i]), 6.103515625e-05);
    if (!(abs <= e.max_abs)) e.max_abs = abs, e.worst_abs_x = in.x[i];
    if (!(rel <= e.max_rel)) e.max_rel = rel, e.worst_rel_x = in.x[i];
    if (std::fabs(in.f[i]) <= 1.0 && !(abs <= e.max_abs_small)) e.max_abs_small = abs, e.worst_abs_small_x = in.x[i];
  }
  return e;
}

double lut_objective(const LutError& e, const std::string& metric) { return metric == "rel" ? e.max_rel : e.max_abs; }

bool lut_better(const LutError& a, const LutError& b, const std::string& metric) {
  const double pa = lut_objective(a, metric), pb = lut_objective(b, metric);
  return pa < pb || (pa == pb && a.max_abs_small < b.max_abs_small);
}

lut::Table fit_cuts(const std::string& fn, const std::array<float, 11>& start, const FitOptions& opt) {
  if (opt.metric != "abs" && opt.metric != "rel")
    throw Error("argument", "--metric '" + opt.metric + "' (expected abs or rel)");
  const auto t0 = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > opt.seconds;
  };
  std::array<int, 11> o{};
  for (int i = 0; i < 11; ++i) o[i] = ordered(start[i]);
  auto table_of = [&](const std::array<int, 11>& ord) {
    std::array<float, 11> c{};
    for (int i = 0; i < 11; ++i) c[i] = from_ordered(ord[i]);
    return lut::build(fn, c);
  };
  lut::Table best = table_of(o);
  LutError best_err = lut_error(best);
  // Guard rails: the abs error where |f| <= 1 never grows, and the other
  // metric (rel for an abs fit, abs for a rel fit) may not grow past 1.25x
  // its start; otherwise a fit trades the error where the table's shape
  // matters for the fp32 rounding tail, or the relative error near f = 0.
  const LutError start_err = best_err;
  auto acceptable = [&](const LutError& e) {
    if (e.max_abs_small > start_err.max_abs_small) return false;
    return opt.metric == "abs" ? e.max_rel <= 1.25 * start_err.max_rel : e.max_abs <= 1.25 * start_err.max_abs;
  };
  auto try_cut = [&](int k, int value) {
    std::array<int, 11> trial = o;
    trial[k] = value;
    if (trial[k] <= trial[k - 1] || trial[k] >= trial[k + 1] || !std::isfinite(from_ordered(trial[k]))) return false;
    lut::Table t = table_of(trial);
    const LutError err = lut_error(t);
    if (!acceptable(err) || !lut_better(err, best_err, opt.metric)) return false;
    best_err = err, best = t, o = trial;
    return true;
  };
  for (int sweep = 1; !out_of_time(); ++sweep) {
    bool improved = false;
    // Coarse: up to 1024 evenly spaced fp16 values between each cut's
    // neighbours (the error is jagged in the cuts: rounding of the scales).
    for (int k = 1; k <= 9 && !out_of_time(); ++k) {
      const int lo = o[k - 1] + 1, hi = o[k + 1] - 1, n = std::min(1024, hi - lo + 1);
      for (int i = 0; i < n && !out_of_time(); ++i) improved |= try_cut(k, lo + static_cast<int>(int64_t{hi - lo} * i / std::max(1, n - 1)));
    }
    // Fine: moves of 1024, 512, ..., 1 fp16 steps.
    for (int step = 1024; step >= 1 && !out_of_time(); step /= 2)
      for (int k = 1; k <= 9 && !out_of_time(); ++k)
        for (int dir : {-1, 1}) improved |= try_cut(k, o[k] + dir * step);
    if (opt.progress) opt.progress(sweep, lut_objective(best_err, opt.metric), best_err.max_abs_small);
    if (!improved) break;
  }
  return best;
}

// ---- PNG: 8-bit RGB, zlib "stored" blocks (no compression library needed) ----
namespace {
uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}
void put32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
}
void chunk(std::ofstream& f, const char* type, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> c;
  put32(c, static_cast<uint32_t>(data.size()));
  c.insert(c.end(), type, type + 4);
  c.insert(c.end(), data.begin(), data.end());
  put32(c, crc32(c.data() + 4, c.size() - 4));
  f.write(reinterpret_cast<const char*>(c.data()), static_cast<std::streamsize>(c.size()));
}
}  // namespace

void write_error_png(const std::string& path, const std::vector<lut::Table>& tables, float x_lo, float x_hi, int width,
                     int height) {
  // Curves: max abs error per pixel column, one color per table; grey axes;
  // cut points of the first table as light vertical lines.
  std::vector<uint8_t> img(static_cast<size_t>(width) * height * 3, 255);
  auto px = [&](int x, int y, uint8_t r, uint8_t g, uint8_t b) {
    if (x < 0 || y < 0 || x >= width || y >= height) return;
    uint8_t* p = &img[(static_cast<size_t>(y) * width + x) * 3];
    p[0] = r, p[1] = g, p[2] = b;
  };
  std::vector<std::vector<double>> cols(tables.size(), std::vector<double>(width, 0));
  double ymax = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    const Inputs& in = inputs_for(tables[t].fn);
    for (size_t i = 0; i < in.x.size(); ++i) {
      if (in.x[i] < x_lo || in.x[i] > x_hi) continue;
      const int c = std::min(width - 1, static_cast<int>((in.x[i] - x_lo) / (x_hi - x_lo) * (width - 1)));
      cols[t][c] = std::max(cols[t][c], std::fabs(lut_apply(tables[t], in.x[i]) - in.f[i]));
    }
    for (double v : cols[t]) ymax = std::max(ymax, v);
  }
  if (ymax <= 0) ymax = 1;
  if (!tables.empty())
    for (float c : tables[0].cuts)
      if (c >= x_lo && c <= x_hi)
        for (int y = 0; y < height; ++y)
          px(static_cast<int>((c - x_lo) / (x_hi - x_lo) * (width - 1)), y, 225, 225, 225);
  if (x_lo < 0 && x_hi > 0)
    for (int y = 0; y < height; ++y) px(static_cast<int>(-x_lo / (x_hi - x_lo) * (width - 1)), y, 160, 160, 160);
  for (int x = 0; x < width; ++x) px(x, height - 1, 160, 160, 160);
  const uint8_t colors[][3] = {{200, 30, 30}, {30, 90, 200}, {30, 150, 60}, {150, 60, 170}};
  for (size_t t = 0; t < tables.size(); ++t) {
    const auto* col = colors[t % 4];
    int prev = -1;
    for (int x = 0; x < width; ++x) {
      const int y = height - 1 - static_cast<int>(cols[t][x] / ymax * (height - 10));
      const int from = prev < 0 ? y : prev;
      for (int yy = std::min(from, y); yy <= std::max(from, y); ++yy) px(x, yy, col[0], col[1], col[2]);
      prev = y;
    }
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("argument", "cannot write PNG '" + path + "'");
  const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  f.write(reinterpret_cast<const char*>(sig), 8);
  std::vector<uint8_t> ihdr;
  put32(ihdr, static_cast<uint32_t>(width));
  put32(ihdr, static_cast<uint32_t>(height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit, RGB, deflate, no filter, no interlace
  chunk(f, "IHDR", ihdr);
  // Raw scanlines (filter byte 0 each) wrapped in zlib stored blocks.
  std::vector<uint8_t> raw;
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), img.begin() + static_cast<long>(y) * width * 3, img.begin() + static_cast<long>(y + 1) * width * 3);
  }
  std::vector<uint8_t> z = {0x78, 0x01};
  for (size_t pos = 0; pos < raw.size();) {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    z.push_back(pos + n == raw.size() ? 1 : 0);
    z.push_back(static_cast<uint8_t>(n)), z.push_back(static_cast<uint8_t>(n >> 8));
    z.push_back(static_cast<uint8_t>(~n)), z.push_back(static_cast<uint8_t>(~n >> 8));
    z.insert(z.end(), raw.begin() + static_cast<long>(pos), raw.begin() + static_cast<long>(pos + n));
    pos += n;
  }
  uint32_t a = 1, b = 0;  // Adler-32 of the raw data
  for (uint8_t v : raw) a = (a + v) % 65521, b = (b + a) % 65521;
  put32(z, (b << 16) | a);
  chunk(f, "IDAT", z);
  chunk(f, "IEND", {});
  if (!f) throw Error("argument", "cannot write PNG '" + path + "'");
}

}  // namespace qjit::tuner
