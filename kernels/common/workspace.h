// Memory a CPU kernel needs while it runs (per-task buffers of a tiled loop): from the launch's
// scratch block when it has room (a compiled plan's: no allocation once the plan has measured
// it), else a storage from the caching CPU allocator (counted like every allocation), freed with
// the workspace. Kernels take their workspace through their KernelEnv, never from a thread-local
// cache.
#pragma once
#include <cstddef>
#include <memory>

#include "flowgrad/base/kernel_env.h"
#include "flowgrad/core/allocator.h"
#include "flowgrad/core/storage.h"

namespace fg {

class CpuWorkspace {
 public:
  CpuWorkspace(const KernelEnv& env, size_t bytes) {
    if (env.scratch && env.scratch->device.is_cpu()) data_ = env.scratch->take(bytes);
    if (!data_ && bytes > 0) {
      owned_ = Storage::allocate(bytes, cpu_device());
      data_ = owned_->data();
    }
  }
  void* data() const { return data_; }  // 64-byte aligned

 private:
  void* data_ = nullptr;
  std::shared_ptr<Storage> owned_;
};

}  // namespace fg
