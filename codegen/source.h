// Source assembly: header comment + a namespace of named constexpr values +
// the op's template. The common headers are handed to NVRTC as named headers
// ("qjit/<file>.cuh"), so the generated file reads like hand-written code.
#pragma once
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/spec.h"

namespace qjit::codegen {

inline constexpr int kCodegenVersion = 1;  // bump when generated code changes meaning

struct GeneratedSource {
  std::string file_name;      // "fused_ffn.cu", the name NVRTC reports errors under
  std::string text;           // the whole generated translation unit
  std::string kernel_name;    // extern "C" entry point
  std::string template_path;  // "templates/fused_ffn/fused_ffn.cu"
  int template_first_line = 1;  // line of `text` where the template body starts

  // "fused_ffn.cu:57" -> "templates/fused_ffn/fused_ffn.cu:12" (or the
  // preamble) for error messages.
  std::string origin_of_line(int line) const;
};

// Throws qjit::Error("config", ...) for an illegal config.
GeneratedSource generate_source(const OpSpec& spec, const nlohmann::json& config);

// The common headers as NVRTC include names -> text ("qjit/qjit_common.cuh").
const std::vector<std::pair<std::string, std::string>>& nvrtc_headers();

}  // namespace qjit::codegen
