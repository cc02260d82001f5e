#include "codegen/json_input.h"

#include <climits>

#include "codegen/error.h"

namespace qjit {

std::string excerpt(std::string_view s, size_t max_chars) {
  if (s.size() <= max_chars) return std::string(s);
  return std::string(s.substr(0, max_chars)) + "... (" + std::to_string(s.size()) + " bytes)";
}

std::string json_excerpt(const nlohmann::json& j, size_t max_chars) {
  // Values come from parse_json_input or from qjit itself, so dump's
  // recursion is bounded; invalid UTF-8 in a string is replaced, not thrown.
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return excerpt(std::string_view(text), max_chars);
}

nlohmann::json parse_json_input(std::string_view text, const std::string& what, const std::string& stage) {
  // The parser itself is iterative; the callback sees each value's depth
  // before the value is built, so a deep document stops at level 33.
  bool too_deep = false;
  const nlohmann::json::parser_callback_t limit = [&](int depth, nlohmann::json::parse_event_t,
                                                      nlohmann::json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), limit);
  } catch (const nlohmann::json::exception& e) {
    if (!too_deep) throw Error(stage, what + " is not valid JSON: " + e.what() + " in '" + excerpt(text) + "'");
  }
  if (too_deep)
    throw Error(stage, what + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels: '" + excerpt(text, 60) +
                           "'");
  return j;
}

int config_int(const nlohmann::json& config, const char* key, const std::string& what) {
  if (!config.is_object() || !config.contains(key) || !config[key].is_number_integer())
    throw Error("config", what + " needs integer '" + key + "': " + json_excerpt(config));
  const nlohmann::json& v = config[key];
  if (!json_int_within(v, INT_MIN, INT_MAX)) throw Error("config", what + " '" + key + "' = " + v.dump() + " is out of range");
  return v.get<int>();
}

bool json_int_within(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
  return v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

std::string config_family(const nlohmann::json& config) {
  if (!config.is_object()) return "";
  const auto it = config.find("family");
  return it != config.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace qjit
