// Test main: the [gpu] cases exit 77 (CTest: skipped) when there is no usable
// CUDA device, instead of passing vacuously. A run selects them with a test
// spec that starts with the tag: "[gpu]", or a part of them such as
// "[gpu]wq_gemm*" or "[gpu]~wq_gemm*" ("~[gpu]" is every other case).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstring>
#include <iostream>
#include "runtime/device.h"

int main(int argc, char** argv) {
  bool gpu_only = false;
  for (int i = 1; i < argc; ++i) gpu_only |= std::strncmp(argv[i], "[gpu]", 5) == 0;
  std::string why;
  if (gpu_only && !qjit::runtime::gpu_available(&why)) {
    std::cout << "SKIPPED: the [gpu] tests need a CUDA device: " << why << "\n";
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
