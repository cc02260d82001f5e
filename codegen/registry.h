// The op registry: every op of codegen/op_list.h, plus ops a program
// registers itself (a test's toy op).
#pragma once
#include <string>
#include <vector>
#include "codegen/op.h"

namespace qjit::codegen {

// Throws qjit::Error("spec", "unknown op 'x'; known ops: ...").
const OpDef& find_op(const std::string& name);
std::vector<const OpDef*> all_ops();
// Adds an op the registry does not ship (it must outlive its use); throws
// qjit::Error("spec", ...) when an op of that name exists.
void register_op(const OpDef& op);

}  // namespace qjit::codegen
