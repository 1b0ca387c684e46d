// Data types, their sizes and names, NumPy-style promotion, and a visitor that maps a runtime
// DType to its C++ type.
#pragma once
#include <cstddef>
#include <cstdint>

#include "flowgrad/base/errors.h"
#include "flowgrad/base/half.h"

namespace fg {

// The order matters: integers sit between Bool and the floats (see is_integral, promote).
enum class DType : uint8_t { Bool, UInt8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64 };
inline constexpr DType kAllDTypes[] = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int16,
                                       DType::Int32,   DType::Int64,    DType::Float16, DType::BFloat16,
                                       DType::Float32, DType::Float64};

size_t itemsize(DType dt);
const char* dtype_name(DType dt);
DType dtype_from_name(const std::string& name);  // raises DTypeError for unknown names
inline bool is_floating(DType dt) { return dt >= DType::Float16; }
inline bool is_half(DType dt) { return dt == DType::Float16 || dt == DType::BFloat16; }
inline bool is_integral(DType dt) { return dt >= DType::UInt8 && dt <= DType::Int64; }
// NumPy's promotion for the supported types: uint8 with int8 gives int16, int8/uint8/int16 with
// float32 give float32, int32/int64 with float32 give float64.
DType promote(DType a, DType b);
// The float dtype that integer true division, mean, exp, ... return and Python floats become
// (PyTorch's default dtype): float32 unless set_default_dtype says float64.
DType default_float_dtype();
void set_default_float_dtype(DType dt);  // DTypeError unless float32 or float64
// The dtype a float-valued op (exp, mean, true division) returns for this input dtype.
inline DType float_result(DType dt) { return is_floating(dt) ? dt : default_float_dtype(); }

template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<float16> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };

// Calls fn(T{}) with T the C++ type of dt.
template <class Fn>
decltype(auto) visit_dtype(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::Bool: return fn(bool{});
    case DType::UInt8: return fn(uint8_t{});
    case DType::Int8: return fn(int8_t{});
    case DType::Int16: return fn(int16_t{});
    case DType::Int32: return fn(int32_t{});
    case DType::Int64: return fn(int64_t{});
    case DType::Float16: return fn(float16{});
    case DType::BFloat16: return fn(bfloat16{});
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
  }
  FG_ASSERT(false);
}

// Like visit_dtype for the types kernels compute in (no half types: those go through float32).
template <class Fn>
decltype(auto) visit_compute_dtype(DType dt, const char* op, Fn&& fn) {
  switch (dt) {
    case DType::Bool: return fn(bool{});
    case DType::UInt8: return fn(uint8_t{});
    case DType::Int8: return fn(int8_t{});
    case DType::Int16: return fn(int16_t{});
    case DType::Int32: return fn(int32_t{});
    case DType::Int64: return fn(int64_t{});
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    default: fail(ErrorKind::DType, op, ": no kernel for dtype ", dtype_name(dt));
  }
}

// float32/float64 only (kernels that compute in floating point); `op` names the caller.
template <class Fn>
decltype(auto) visit_float_dtype(DType dt, const char* op, Fn&& fn) {
  if (dt == DType::Float32) return fn(float{});
  if (dt == DType::Float64) return fn(double{});
  fail(ErrorKind::DType, op, ": expected float32 or float64, got ", dtype_name(dt));
}

}  // namespace fg
