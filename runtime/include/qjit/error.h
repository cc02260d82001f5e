// qjit's one exception type, part of the public API: every failure carries
// the stage that failed (spec, codegen, nvrtc, driver, cache, tuner, cli) so
// that a message read in a log says where to look, and a detail block
// (compiler log, SQL, ...).
#pragma once
#include <stdexcept>
#include <string>

namespace qjit {

class Error : public std::runtime_error {
 public:
  Error(std::string stage, std::string message, std::string detail = {})
      : std::runtime_error(stage + ": " + message),
        stage_(std::move(stage)),
        detail_(std::move(detail)) {}
  const std::string& stage() const { return stage_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string stage_;
  std::string detail_;
};

}  // namespace qjit
