// JSON read from outside qjit (--config, import lines, LUT tables, rows of a
// cache file): parsed with a nesting limit, so that no later recursive walk
// (dump, comparison, a message quoting the value) can run out of stack, and
// quoted in messages by a short excerpt, never whole.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace qjit {

// Deeper than any document qjit reads (a LUT table is 3 levels, a record 4).
constexpr int kMaxJsonDepth = 32;

// Parses text; throws Error(stage, "<what> is not valid JSON: ...") naming
// an excerpt of the text, or "... nests deeper than 32 levels".
nlohmann::json parse_json_input(std::string_view text, const std::string& what, const std::string& stage = "argument");

// At most max_chars of s, with "... (N bytes)" when cut.
std::string excerpt(std::string_view s, size_t max_chars = 120);
// j.dump(), cut the same way (named apart: a std::string converts to both).
std::string json_excerpt(const nlohmann::json& j, size_t max_chars = 120);

// An integer member of a config that fits an int: throws Error("config",
// "<what> needs integer '<key>'") when missing or not an integer, and
// "... '<key>' = <value> is out of range" when it would not fit (a value is
// never wrapped).
int config_int(const nlohmann::json& config, const char* key, const std::string& what);

// Whether v is a JSON integer in [lo, hi]: an unsigned value above INT64_MAX
// is out of range, never read back negative.
bool json_int_within(const nlohmann::json& v, int64_t lo, int64_t hi);

// A config's "family" when it is a string member, else "" (never throws).
std::string config_family(const nlohmann::json& config);

}  // namespace qjit
