#include "flowgrad/base/dtype.h"

#include <atomic>
#include <string>

namespace fg {

size_t itemsize(DType dt) {
  switch (dt) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::Int16:
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
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
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
  for (DType dt : kAllDTypes)
    if (name == dtype_name(dt)) return dt;
  fail(ErrorKind::DType, "unknown dtype '", name,
       "' (expected bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32 or float64)");
}

namespace {
std::atomic<DType> g_default_float{DType::Float32};

int integer_bits(DType dt) { return static_cast<int>(itemsize(dt)) * 8; }

// The smallest signed integer type that holds both (NumPy: uint8 with int8 gives int16).
DType promote_integers(DType a, DType b) {  // a < b in the enum order
  bool unsigned_with_small_signed = a == DType::UInt8 && (b == DType::Int8 || b == DType::Int16);
  return unsigned_with_small_signed ? DType::Int16 : b;
}

// The smallest float that holds every value of the integer type (NumPy's can_cast rule).
DType promote_integer_float(DType integer, DType floating) {
  if (floating == DType::Float64) return floating;
  int bits = integer_bits(integer);
  if (bits <= 8) return floating;  // float16 and bfloat16 hold every 8-bit integer
  if (bits == 16) return DType::Float32;
  return DType::Float64;
}
}  // namespace

DType default_float_dtype() { return g_default_float.load(std::memory_order_relaxed); }

void set_default_float_dtype(DType dt) {
  FG_CHECK(dt == DType::Float32 || dt == DType::Float64, DType,
           "set_default_dtype: expected float32 or float64, got ", dtype_name(dt));
  g_default_float.store(dt, std::memory_order_relaxed);
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a > b) std::swap(a, b);  // now a < b in the enum order
  if (a == DType::Bool) return b;
  if (is_integral(a) && is_integral(b)) return promote_integers(a, b);
  if (is_integral(a)) return promote_integer_float(a, b);
  // two different floating types
  if (a == DType::Float16 && b == DType::BFloat16) return DType::Float32;
  return b;
}

}  // namespace fg
