// Devices: "cpu" and "cuda:N".
#pragma once
#include <cstdint>
#include <string>

namespace fg {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:1"; DeviceError otherwise
};

inline Device cpu_device() { return Device{}; }

}  // namespace fg
