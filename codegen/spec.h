// OpSpec: an operation plus its exact configuration (shape, dtypes, quant
// constants). Everything in an OpSpec is baked into the generated kernel.
//
// Specs are written on the command line as "key=value,key=value"
// (`--shape d=4096,h=11008,m=1,dtype=fp16`); the op's definition validates the
// keys, fills defaults and produces the canonical JSON that enters the cache key.
#pragma once
#include <string>
#include <nlohmann/json.hpp>

namespace qjit::codegen {

struct OpSpec {
  std::string op;
  nlohmann::json params;  // canonical: every parameter present, validated

  // {"op": ..., <params>} with sorted keys and integers as integers.
  std::string canonical_json() const;
  // "d=4096,dtype=fp16,h=11008,m=1" — the same order as the JSON.
  std::string shape_string() const;
  // A one-line label for tables: "fused_ffn d=4096 dtype=fp16 h=11008 m=1".
  std::string label() const;
  // params less the omit_default ones at their default: what the three forms above show.
  nlohmann::json key_params() const;
  int64_t get_int(const std::string& key) const;
  std::string get_str(const std::string& key) const;
};

// Parses "k=v,k=v". Integers (optionally with a k/K suffix meaning ×1024) become
// JSON integers, anything else strings. Throws qjit::Error("spec", ...) naming
// the malformed piece. Duplicate keys are an error.
nlohmann::json parse_kv_list(const std::string& text);

// Looks the op up, validates and canonicalises. Throws qjit::Error("spec", ...)
// naming the unknown op / key / bad value and listing what is allowed.
OpSpec make_spec(const std::string& op, const nlohmann::json& raw_params);
OpSpec parse_spec(const std::string& op, const std::string& shape_kv);
OpSpec spec_from_json(const nlohmann::json& j);  // {"op": ..., params...}

}  // namespace qjit::codegen
