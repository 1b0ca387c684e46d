// Storage: a ref-counted buffer on one device. Tensors share it through std::shared_ptr.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "flowgrad/core/device.h"

namespace fg {

class Storage {
 public:
  // A new buffer from the device's allocator (uninitialised).
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device);
  // Memory owned elsewhere (a NumPy array, a DLPack producer): `release` runs when the last
  // tensor using it goes away.
  static std::shared_ptr<Storage> wrap(void* data, size_t bytes, Device device,
                                       std::function<void()> release);
  // A buffer with a size, a device and an identity but no bytes: what fg.compile's trace makes
  // for values computed from the step's inputs (no kernel runs while tracing). data() raises.
  static std::shared_ptr<Storage> shape_only(size_t bytes, Device device);
  struct Key {  // lets make_shared build a Storage (one allocation) while others cannot
   private:
    Key() = default;
    friend class Storage;
  };
  explicit Storage(Key);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const {
    if (shape_only_) [[unlikely]] fail_shape_only();
    return data_;
  }
  bool is_shape_only() const { return shape_only_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // Increases with every Storage made in this process: tells buffers made during a compile
  // trace from those that existed before it.
  uint64_t serial() const { return serial_; }

  // Counts the in-place writes to this buffer. Views share it (they share the storage), so
  // autograd can tell that a tensor it saved for backward was modified after it was saved.
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  void set_version(uint32_t v) { version_.store(v, std::memory_order_relaxed); }
  // Memory that must not be written (a read-only NumPy array, an immutable buffer, a DLPack
  // export marked read-only): every in-place write raises instead.
  bool read_only() const { return read_only_; }
  void mark_read_only() { read_only_ = true; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t granted_ = 0;  // size class handed out by the allocator; 0 for wrapped memory
  Device device_;
  uint64_t serial_;
  std::function<void()> release_;
  std::atomic<uint32_t> version_{0};
  bool read_only_ = false;
  bool shape_only_ = false;
  [[noreturn]] void fail_shape_only() const;
};

// Device allocators other than the CPU register here (the CUDA backend does so at start-up).
struct DeviceAllocatorHooks {
  void* (*allocate)(size_t bytes, int device, size_t* granted) = nullptr;
  void (*release)(void* ptr, size_t granted, int device) = nullptr;
};
void set_cuda_allocator(DeviceAllocatorHooks hooks);

}  // namespace fg
