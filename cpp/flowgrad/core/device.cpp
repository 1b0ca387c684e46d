#include "flowgrad/core/device.h"

#include "flowgrad/base/errors.h"

namespace fg {

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return Device{};
  if (s == "cuda") return Device{DeviceType::CUDA, 0};
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 &&
      s.find_first_not_of("0123456789", 5) == std::string::npos && s.size() < 10)
    return Device{DeviceType::CUDA, std::stoi(s.substr(5))};
  fail(ErrorKind::Device, "unknown device '", s, "' (expected 'cpu', 'cuda' or 'cuda:N')");
}

}  // namespace fg
