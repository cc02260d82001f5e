#include "cli/common.h"
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/ops/gru_quant.h"
#include "codegen/registry.h"

namespace qjit::cli {

void SpecOptions::add_to(CLI::App* app, bool shape_required) {
  std::string ops;
  for (const auto* o : codegen::all_ops()) ops += (ops.empty() ? "" : ", ") + o->name();
  app->add_option("--op", op, "operation: " + ops)->capture_default_str();
  auto* s = app->add_option("--shape", shape, "parameters as key=value,... e.g. d=4096,h=11008 (m, dtype may go here too)");
  if (shape_required) s->required();
  app->add_option("--dtype", dtype, "element types: fp16|bf16|fp32|mixed (same as dtype= in --shape)");
  app->add_option("--m", m,
                  "rows of x: one value, a list 1,2,4 or a range 1-8 (one kernel each; for wq_gemm a range "
                  "means the buckets that serve it: 1-1024 tunes all eleven)");
}

std::vector<codegen::OpSpec> SpecOptions::specs() const {
  nlohmann::json params = codegen::parse_kv_list(shape);
  // gru_quant's params document comes from a file (params=@FILE), canonicalised.
  if (params.contains("params") && params["params"].is_string()) {
    const std::string v = params["params"].get<std::string>();
    if (!v.empty() && v[0] == '@')
      params["params"] = codegen::gru::canonical_params(
          parse_json_input(read_input_file("--shape params=@", v.substr(1)), "params " + v.substr(1)));
  }
  if (!dtype.empty()) {
    if (params.contains("dtype")) throw Error("spec", "dtype given both in --shape and --dtype");
    params["dtype"] = dtype;
  }
  std::vector<int64_t> ms;
  if (!m.empty()) {
    if (params.contains("m")) throw Error("spec", "m given both in --shape and --m");
    auto bad = [&] { return Error("spec", "malformed --m '" + m + "' (expected 4, 1,2,4 or 1-8)"); };
    try {
      size_t dash = m.find('-');
      if (dash != std::string::npos) {
        size_t p1 = 0, p2 = 0;
        int64_t a = std::stoll(m.substr(0, dash), &p1), b = std::stoll(m.substr(dash + 1), &p2);
        if (p1 != dash || p2 != m.size() - dash - 1 || a < 1 || a > b) throw bad();
        ms = codegen::find_op(op).m_values_for_rows(a, b);
      } else {
        size_t pos = 0;
        while (pos <= m.size()) {
          size_t comma = m.find(',', pos), used = 0;
          std::string item = m.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
          ms.push_back(std::stoll(item, &used));
          if (used != item.size()) throw bad();
          if (comma == std::string::npos) break;
          pos = comma + 1;
        }
      }
    } catch (const std::logic_error&) {
      throw bad();
    }
  }
  std::vector<codegen::OpSpec> out;
  if (ms.empty()) return {codegen::make_spec(op, params)};
  for (int64_t v : ms) {
    params["m"] = v;
    out.push_back(codegen::make_spec(op, params));
  }
  return out;
}

void CacheOption::add_to(CLI::App* app) {
  app->add_option("--cache", path, "cache file (default: $QJIT_CACHE or ~/.cache/qjit/kernels.db)");
}

std::string fmt(const char* format, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  return buf;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  return fmt(u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
}

std::string read_input_file(const std::string& option, const std::string& path) {
  if (path.empty()) throw Error("argument", option + " is an empty path");
  std::ostringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
    return text.str();
  }
  std::error_code ec;
  // A folder opens as a stream that reads nothing: refuse it by name.
  if (std::filesystem::is_directory(path, ec)) throw Error("argument", option + " " + path + " is a folder, not a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("argument", option + " " + path + ": cannot read (" + std::strerror(errno) + ")");
  text << f.rdbuf();
  if (f.bad()) throw Error("argument", option + " " + path + ": read failed");
  return text.str();
}

}  // namespace qjit::cli
