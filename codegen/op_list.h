// Every op qjit ships, one line each. Op `name` lives in four places, each
// defining one function the registries below reach it by:
//   templates/<name>/             its kernels' CUDA templates;
//   codegen/ops/<name>.{h,cpp}    const codegen::OpDef& codegen::<name>_op();
//   tuner/reference/<name>*       std::unique_ptr<tuner::Workload>
//                                   tuner::make_<name>_workload(spec, seed, l2_bytes)
//                                   (and the CPU reference it verifies against);
//   runtime/ops/<name>.cpp        the typed entry point and
//                                   CUresult runtime::run_<name>(plan, args, stream)
//                                   (one call's launches on the caller's stream).
// docs/adding_an_op.md is the checklist.
#pragma once

#define QJIT_OPS(X) \
  X(fused_ffn)      \
  X(fp_lut)         \
  X(awq_dequant)    \
  X(wq_gemm)        \
  X(gru_quant)      \
  X(w8a8_gemm)      \
  X(qconv2d)
