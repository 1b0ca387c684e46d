#include "flowgrad/core/dtype.h"

#include <string>

namespace fg {

size_t itemsize(DType dt) {
  switch (dt) {
    case DType::Bool: return 1;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
  }
  return 0;
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::Bool: return "bool";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType dt : {DType::Bool, DType::Int32, DType::Int64, DType::Float16, DType::BFloat16,
                   DType::Float32, DType::Float64})
    if (name == dtype_name(dt)) return dt;
  fail(ErrorKind::DType, "unknown dtype '", name,
       "' (expected bool, int32, int64, float16, bfloat16, float32 or float64)");
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a > b) std::swap(a, b);  // now a < b in the enum order
  if (a == DType::Bool) return b;
  if (is_integral(a) && is_integral(b)) return DType::Int64;
  if (is_integral(a)) return DType::Float64;  // NumPy: the float must hold every integer
  // two different floating types
  if (a == DType::Float16 && b == DType::BFloat16) return DType::Float32;
  return b;
}

}  // namespace fg
