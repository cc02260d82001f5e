// The op registry: the one place that lists every op.
#pragma once
#include <string>
#include <vector>
#include "codegen/op.h"

namespace qjit::codegen {

// Throws qjit::Error("spec", "unknown op 'x'; known ops: ...").
const OpDef& find_op(const std::string& name);
std::vector<const OpDef*> all_ops();

}  // namespace qjit::codegen
