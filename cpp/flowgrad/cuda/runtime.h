// CUDA runtime queries. Builds without CUDA answer "no devices" with the reason.
#pragma once
#include <string>

namespace fg::cuda {

bool built_with_cuda();
// Number of usable GPUs; 0 with *why set when there are none (no driver, no device, ...).
int device_count(std::string* why);
void synchronize();

}  // namespace fg::cuda
