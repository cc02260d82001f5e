#include "codegen/op.h"
#include <sstream>

namespace qjit::codegen {

bool Plan::needs_cublas() const {
  for (const auto& s : steps)
    if (s.kind == PlanStep::Kind::cublas_gemm) return true;
  return false;
}

bool Plan::needs_cublaslt() const {
  for (const auto& s : steps)
    if (s.kind == PlanStep::Kind::cublaslt_fp8_gemm) return true;
  return false;
}

const KernelDef& Plan::main_kernel() const {
  for (const auto& s : steps)
    if (s.kind == PlanStep::Kind::kernel) return kernels.at(static_cast<size_t>(s.kernel));
  throw Error("codegen", "the plan launches no kernel");
}

std::string Plan::describe() const {
  std::ostringstream out;
  for (const auto& k : kernels)
    if (k.role == KernelDef::Role::init)
      out << "on load: " << k.symbol << "() on " << k.geometry.grid[0] << " blocks of " << k.geometry.block[0]
          << " threads\n";
  int i = 0;
  for (const auto& s : steps) {
    out << ++i << ". ";
    if (s.kind == PlanStep::Kind::kernel) {
      const auto& k = kernels.at(static_cast<size_t>(s.kernel));
      const auto& g = k.geometry;
      if (s.repeat > 1) out << s.repeat << " times, step = 0.." << s.repeat - 1 << ": ";
      out << k.symbol << "(";
      for (size_t p = 0; p < k.params.size(); ++p)
        out << (p ? ", " : "")
            << (k.params[p].kind == KernelParam::Kind::arg         ? k.params[p].arg
                : k.params[p].kind == KernelParam::Kind::iteration ? std::string("step")
                                                                   : "workspace+" + std::to_string(k.params[p].offset));
      for (const auto& m : k.tensor_maps)
        out << ", map(" << (m.in_workspace ? "workspace+" + std::to_string(m.workspace_offset) : m.source) << ")";
      out << ") on ";
      if (g.grid_per_sm) out << g.grid_per_sm << " blocks per SM";
      else out << g.grid[0] << "x" << g.grid[1] << "x" << g.grid[2] << " blocks";
      out << " of " << g.block[0] << " threads, " << g.dynamic_smem << " B shared" << (g.programmatic ? ", PDL" : "")
          << "\n";
    } else if (s.kind == PlanStep::Kind::cublaslt_fp8_gemm) {
      const auto& c = s.lt;
      const char* out_type = c.out == CublasLtFp8Gemm::Out::f32 ? "fp32" : c.out == CublasLtFp8Gemm::Out::bf16 ? "bf16" : "fp16";
      out << "cuBLASLt e4m3 GEMM, 1x128 and 128x128 block scales (algo " << c.algo << "): " << c.y << "[" << c.rows
          << "][" << c.n << "] " << out_type << " = codes at workspace+" << c.x_offset << " (scales +" << c.x_scale_offset
          << ") x " << c.w << "^T (tile scales at workspace+" << c.w_scale_offset << ")";
      if (!c.bias.empty()) out << " + " << c.bias;
      if (c.relu) out << ", relu";
      out << "\n";
    } else {
      const auto& c = s.gemm;
      const std::string rows = c.rows.empty() ? std::to_string(c.fixed_rows) : c.rows;
      out << "cuBLAS " << (c.bf16 ? "bf16" : "fp16") << " GEMM: " << (c.to_sums ? "fp32 sums" : c.y) << "[" << rows
          << "][" << c.n << "] = " << c.x << "[" << rows << "][" << c.k << "] x " << (c.w.empty() ? "W" : c.w)
          << "^T";
      if (c.w.empty()) out << ", W at workspace+" << c.w_offset;
      if (c.to_sums) out << ", sums at workspace+" << c.sums_offset;
      if (c.epilogue >= 0)
        out << ", per " << c.slab_rows << " rows: fp32 sums at workspace+" << c.sums_offset << ", then "
            << kernels.at(static_cast<size_t>(c.epilogue)).symbol;
      out << "\n";
    }
  }
  return out.str();
}

std::vector<KernelParam> arg_params(std::initializer_list<const char*> names) {
  std::vector<KernelParam> out;
  for (const char* n : names) out.push_back(arg_param(n));
  return out;
}

void OpDef::check_arch(const OpSpec& spec, int compute_capability) const {
  const ArchNeed need = arch_need(spec);
  if (compute_capability < need.compute_capability)
    throw Error("spec", need.why + ": it needs compute capability " + std::to_string(need.compute_capability / 10) +
                            "." + std::to_string(need.compute_capability % 10) + " or newer, not " +
                            std::to_string(compute_capability / 10) + "." + std::to_string(compute_capability % 10));
}

int pow2_bucket(int64_t m, int top) {
  int b = 1;
  while (b < m && b < top) b *= 2;
  return b;
}

std::vector<int64_t> pow2_buckets(int64_t lo, int64_t hi, int top) {
  std::vector<int64_t> v;
  for (int64_t b = pow2_bucket(lo, top); b <= pow2_bucket(hi, top); b *= 2) v.push_back(b);
  return v;
}

Plan single_kernel_plan(std::string symbol, LaunchGeometry geometry, std::vector<KernelParam> params,
                        std::vector<PointerArg> pointers) {
  Plan p;
  p.kernels.push_back({std::move(symbol), KernelDef::Role::step, geometry, std::move(params), {}});
  p.steps.push_back({PlanStep::Kind::kernel, 0, {}});
  p.pointers = std::move(pointers);
  return p;
}

}  // namespace qjit::codegen
