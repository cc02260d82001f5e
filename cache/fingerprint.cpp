#include "cache/fingerprint.h"

#include "cache/sha256.h"
#include "codegen/error.h"

namespace qjit::cache {

nlohmann::json Fingerprint::to_json() const {
  return {
      {"op", op},
      {"spec_json", spec_json},
      {"device",
       {{"name", device.name},
        {"compute_capability", device.compute_capability},
        {"sm_count", device.sm_count},
        {"driver_version", device.driver_version}}},
      {"nvrtc_version", nvrtc_version},
      {"templates_hash", templates_hash},
      {"qjit_version", qjit_version},
      {"codegen_version", codegen_version},
  };
}

Fingerprint Fingerprint::from_json(const nlohmann::json& j) {
  try {
    Fingerprint fp;
    fp.op = j.at("op").get<std::string>();
    fp.spec_json = j.at("spec_json").get<std::string>();
    const auto& d = j.at("device");
    fp.device.name = d.at("name").get<std::string>();
    fp.device.compute_capability = d.at("compute_capability").get<std::string>();
    fp.device.sm_count = d.at("sm_count").get<int>();
    fp.device.driver_version = d.at("driver_version").get<int>();
    fp.nvrtc_version = j.at("nvrtc_version").get<std::string>();
    fp.templates_hash = j.at("templates_hash").get<std::string>();
    fp.qjit_version = j.at("qjit_version").get<std::string>();
    fp.codegen_version = j.at("codegen_version").get<int>();
    return fp;
  } catch (const nlohmann::json::exception& e) {
    throw Error("cache", std::string("malformed fingerprint JSON: ") + e.what(), j.dump());
  }
}

// nlohmann::json keeps object keys sorted, so dump() is canonical: equal
// fingerprints always hash to the same key, whatever order fields were set in.
std::string Fingerprint::key() const { return sha256_hex(to_json().dump()); }

}  // namespace qjit::cache
