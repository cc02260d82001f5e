#include "codegen/spec.h"
#include <cctype>
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/registry.h"

namespace qjit::codegen {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "4096" -> 4096, "4k" -> 4096; anything else stays a string.
nlohmann::json parse_value(const std::string& v) {
  std::string digits = v;
  int64_t mult = 1;
  if (!v.empty() && (v.back() == 'k' || v.back() == 'K')) {
    digits = v.substr(0, v.size() - 1);
    mult = 1024;
  }
  bool numeric = !digits.empty() && digits.size() <= 15;
  for (size_t i = 0; i < digits.size(); ++i)
    numeric &= std::isdigit(static_cast<unsigned char>(digits[i])) || (i == 0 && digits[i] == '-');
  if (numeric && digits != "-") return std::stoll(digits) * mult;
  return v;
}

std::string describe(const ParamDef& p) {
  if (!p.choices.empty()) {
    std::string s;
    for (auto& c : p.choices) s += (s.empty() ? "" : "|") + c;
    return s;
  }
  return "integer in [" + std::to_string(p.min) + ", " +
         (p.max == INT64_MAX ? std::string("inf") : std::to_string(p.max)) + "]";
}

}  // namespace

nlohmann::json parse_kv_list(const std::string& text) {
  nlohmann::json out = nlohmann::json::object();
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = trim(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.empty()) {
      if (text.empty() || comma == std::string::npos) break;
      throw Error("spec", "empty item in '" + text + "' (expected key=value,key=value)");
    }
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw Error("spec", "malformed item '" + item + "' in '" + text + "' (expected key=value)");
    std::string key = trim(item.substr(0, eq)), val = trim(item.substr(eq + 1));
    if (out.contains(key)) throw Error("spec", "key '" + key + "' given twice in '" + text + "'");
    out[key] = parse_value(val);
  }
  return out;
}

OpSpec make_spec(const std::string& op_name, const nlohmann::json& raw) {
  const OpDef& op = find_op(op_name);
  if (!raw.is_object()) throw Error("spec", "parameters of " + op_name + " must be a JSON object");
  const auto defs = op.params();
  for (auto& [key, value] : raw.items()) {
    bool known = false;
    for (auto& d : defs) known |= d.name == key;
    if (!known) {
      std::string names;
      for (auto& d : defs) names += (names.empty() ? "" : ", ") + d.name;
      throw Error("spec", "unknown parameter '" + key + "' for " + op_name + "; parameters: " + names);
    }
  }
  OpSpec spec{op_name, nlohmann::json::object()};
  for (auto& d : defs) {
    if (!raw.contains(d.name)) {
      if (d.default_value.is_null())
        throw Error("spec", op_name + " needs '" + d.name + "' (" + d.doc + ", " + describe(d) + ")");
      spec.params[d.name] = d.default_value;
      continue;
    }
    const auto& v = raw.at(d.name);
    if (d.free_string) {
      if (!v.is_string()) throw Error("spec", "bad " + d.name + "=" + v.dump() + " for " + op_name + "; expected a string");
      spec.params[d.name] = v;
    } else if (!d.choices.empty()) {
      bool ok = v.is_string();
      if (ok) {
        ok = false;
        for (auto& c : d.choices) ok |= c == v.get<std::string>();
      }
      if (!ok) throw Error("spec", "bad " + d.name + "=" + (v.is_string() ? v.get<std::string>() : v.dump()) +
                                       " for " + op_name + "; expected " + describe(d));
      spec.params[d.name] = v;
    } else {
      if (!v.is_number_integer())
        throw Error("spec", "bad " + d.name + "=" + (v.is_string() ? v.get<std::string>() : v.dump()) +
                                " for " + op_name + "; expected an " + describe(d));
      if (!json_int_within(v, d.min, d.max))
        throw Error("spec", "bad " + d.name + "=" + v.dump() + " for " + op_name + "; expected an " + describe(d));
      spec.params[d.name] = v.get<int64_t>();
    }
  }
  op.validate(spec.params);
  return spec;
}

OpSpec parse_spec(const std::string& op, const std::string& shape_kv) {
  return make_spec(op, parse_kv_list(shape_kv));
}

OpSpec spec_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("op") || !j["op"].is_string())
    throw Error("spec", "a spec must be a JSON object with a string \"op\": " + json_excerpt(j));
  nlohmann::json params = j;
  params.erase("op");
  return make_spec(j["op"].get<std::string>(), params);
}

// The parameters that name the spec: all of them, less those marked
// omit_default that hold their default (keys added to an op later leave the
// specs written before them, and their cache keys, as they were) and those
// that do not apply to it (ParamDef::applies_if).
nlohmann::json OpSpec::key_params() const {
  nlohmann::json j = params;
  for (const auto& d : find_op(op).params()) {
    if (d.omit_default && j.contains(d.name) && j[d.name] == d.default_value) j.erase(d.name);
    const auto& [key, value] = d.applies_if;
    if (!key.empty() && !(params.contains(key) && params[key] == value)) j.erase(d.name);
  }
  return j;
}

std::string OpSpec::canonical_json() const {
  nlohmann::json j = key_params();
  j["op"] = op;
  return j.dump();  // nlohmann::json keeps object keys sorted
}

// Empty strings (an unset optional text parameter) are left out of both forms.
std::string OpSpec::shape_string() const {
  std::string s;
  const nlohmann::json shown = key_params();  // the loop's items() would not keep a temporary alive
  for (auto& [k, v] : shown.items())
    if (!(v.is_string() && v.get<std::string>().empty()))
      s += (s.empty() ? "" : ",") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  return s;
}

std::string OpSpec::label() const {
  std::string s = op;
  const nlohmann::json shown = key_params();
  for (auto& [k, v] : shown.items())
    if (!(v.is_string() && v.get<std::string>().empty()))
      s += " " + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  return s;
}

int64_t OpSpec::get_int(const std::string& key) const { return params.at(key).get<int64_t>(); }
std::string OpSpec::get_str(const std::string& key) const { return params.at(key).get<std::string>(); }

}  // namespace qjit::codegen
