// Builds configured with FLOWGRAD_CUDA=OFF (or without nvcc) have no GPU runtime.
#include "flowgrad/cuda/runtime.h"

namespace fg::cuda {

bool built_with_cuda() { return false; }

int device_count(std::string* why) {
  if (why) *why = "flowgrad was built without CUDA (FLOWGRAD_CUDA=OFF or no nvcc at build time)";
  return 0;
}

void synchronize() {}

}  // namespace fg::cuda
