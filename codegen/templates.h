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
// The embedded files, then those a program registered (register_template).
std::vector<EmbeddedFile> all_templates();
// Throws qjit::Error("codegen", ...) when no such file was embedded or registered.
const std::string& embedded_template(const std::string& path);
// A template the build does not embed, for an op a program registers itself
// (a test's toy op): `path` must be new ("templates/<op>/<file>.cu").
void register_template(const std::string& path, const std::string& text);

}  // namespace qjit::codegen
