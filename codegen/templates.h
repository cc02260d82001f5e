// The CUDA templates and common headers, embedded at build time
// (cmake/embed_run.cmake generates the table).
#pragma once
#include <string>
#include <vector>

namespace qjit::codegen {

struct EmbeddedFile {
  std::string path;  // "templates/common/qjit_common.cuh"
  std::string text;
};

const std::vector<EmbeddedFile>& embedded_templates();
// Throws qjit::Error("codegen", ...) when no such file was embedded.
const std::string& embedded_template(const std::string& path);

}  // namespace qjit::codegen
