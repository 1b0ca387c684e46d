// Builds configured with FLOWGRAD_CUDA=OFF (or without nvcc) have no GPU runtime.
#include "flowgrad/core/errors.h"
#include "flowgrad/cuda/runtime.h"

namespace fg::cuda {

namespace {
const char* kWhy = "flowgrad was built without CUDA (FLOWGRAD_CUDA=OFF or no nvcc at build time)";
}

bool built_with_cuda() { return false; }

int device_count(std::string* why) {
  if (why) *why = kWhy;
  return 0;
}

void synchronize() {}
void install() {}
MemoryStats memory_stats(int) { return {}; }
void reset_peak_memory_stats(int) {}
void empty_cache() {}

void copy_bytes(void*, Device dst_device, const void*, Device src_device, size_t) {
  fail(ErrorKind::Device, "copy from ", src_device.str(), " to ", dst_device.str(), ": ", kWhy);
}

}  // namespace fg::cuda
