#include "flowgrad/core/storage.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "flowgrad/core/allocator.h"
#include "flowgrad/base/errors.h"

namespace fg {
namespace {
std::atomic<uint64_t> g_allocations{0};

DeviceAllocatorHooks& cuda_hooks() {
  static DeviceAllocatorHooks hooks;
  return hooks;
}
}  // namespace

uint64_t storage_allocations() { return g_allocations.load(std::memory_order_relaxed); }

void set_cuda_allocator(DeviceAllocatorHooks hooks) { cuda_hooks() = hooks; }

Storage::Storage(Key) {
  static std::atomic<uint64_t> next{1};
  serial_ = next.fetch_add(1, std::memory_order_relaxed);
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  auto s = std::make_shared<Storage>(Key{});
  s->bytes_ = bytes;
  s->device_ = device;
  if (device.is_cpu()) {
    s->data_ = CpuAllocator::get().allocate(bytes, &s->granted_);
  } else {
    FG_CHECK(cuda_hooks().allocate, Device, "cannot allocate on ", device.str(),
             ": this build of flowgrad has no CUDA runtime (fg.cuda.is_available() is False)");
    s->data_ = cuda_hooks().allocate(bytes, device.index, &s->granted_);
  }
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t bytes, Device device,
                                       std::function<void()> release) {
  auto s = std::make_shared<Storage>(Key{});
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  s->release_ = std::move(release);
  return s;
}

std::shared_ptr<Storage> Storage::shape_only(size_t bytes, Device device) {
  auto s = std::make_shared<Storage>(Key{});
  s->bytes_ = bytes;
  s->device_ = device;
  s->shape_only_ = true;
  return s;
}

void Storage::fail_shape_only() const {
  fail(ErrorKind::Value, "compile: a value computed from the step's inputs (", bytes_, " bytes on ", device_.str(),
       ") has no data while fg.compile traces the step (shape-only tracing runs no kernel); read values after "
       "compiling, outside the step");
}

Storage::~Storage() {
  if (release_) {
    release_();
  } else if (granted_) {
    if (device_.is_cpu())
      CpuAllocator::get().release(data_, granted_);
    else
      cuda_hooks().release(data_, granted_, device_.index);
  }
}

}  // namespace fg
