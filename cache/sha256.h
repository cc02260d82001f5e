// SHA-256 (FIPS 180-4), used for cache keys, template hashes and the blob
// checksum that is verified before a cached cubin is ever loaded.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace qjit::cache {

std::string sha256_hex(std::string_view data);
inline std::string sha256_hex(const void* data, size_t n) {
  return sha256_hex(std::string_view(static_cast<const char*>(data), n));
}

}  // namespace qjit::cache
