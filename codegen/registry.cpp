#include "codegen/registry.h"
#include <mutex>
#include "codegen/error.h"
#include "codegen/op_list.h"

namespace qjit::codegen {

#define QJIT_DECLARE_OP(name) const OpDef& name##_op();
QJIT_OPS(QJIT_DECLARE_OP)
#undef QJIT_DECLARE_OP

namespace {

std::mutex mu;

std::vector<const OpDef*>& table() {
#define QJIT_OP_ENTRY(name) &name##_op(),
  static std::vector<const OpDef*> ops = {QJIT_OPS(QJIT_OP_ENTRY)};
#undef QJIT_OP_ENTRY
  return ops;
}

}  // namespace

std::vector<const OpDef*> all_ops() {
  std::lock_guard<std::mutex> lock(mu);
  return table();
}

const OpDef& find_op(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu);
  std::string known;
  for (const OpDef* op : table()) {
    if (op->name() == name) return *op;
    known += (known.empty() ? "" : ", ") + op->name();
  }
  throw Error("spec", "unknown op '" + name + "'; known ops: " + known);
}

void register_op(const OpDef& op) {
  std::lock_guard<std::mutex> lock(mu);
  for (const OpDef* o : table())
    if (o->name() == op.name()) throw Error("spec", "an op named '" + op.name() + "' is registered already");
  table().push_back(&op);
}

}  // namespace qjit::codegen
