// The cache key of DESIGN.md: a cached kernel is reused only when every field
// here matches. key() is the SHA-256 of the canonical JSON of all fields; the
// fields are also stored beside it as readable columns so `qjit list` is useful.
#pragma once
#include <string>
#include <nlohmann/json.hpp>

namespace qjit::cache {

struct DeviceIdentity {
  std::string name;                // "NVIDIA H100 80GB HBM3"
  std::string compute_capability;  // "9.0"
  int sm_count = 0;
  int driver_version = 0;          // cuDriverGetVersion, e.g. 13000
};

struct Fingerprint {
  std::string op;                  // "fused_ffn"
  std::string spec_json;           // canonical spec JSON (sorted keys)
  DeviceIdentity device;
  std::string nvrtc_version;       // "13.0"
  std::string templates_hash;      // SHA-256 over the templates and headers the op includes
  std::string qjit_version;        // QJIT_VERSION
  int codegen_version = 0;         // bumped when generated code changes meaning

  nlohmann::json to_json() const;
  static Fingerprint from_json(const nlohmann::json& j);
  std::string key() const;         // sha256_hex(to_json().dump())
};

}  // namespace qjit::cache
