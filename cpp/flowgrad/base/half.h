// bfloat16 and float16 storage types. Arithmetic happens in float32: these types only convert.
#pragma once
#include <cstdint>
#include <cstring>

#include "flowgrad/base/fg_hd.h"

namespace fg {

FG_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
FG_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  FG_HD bfloat16(float f) {  // round to nearest even; NaN stays NaN
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
    } else {
      bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
  FG_HD operator float() const { return bits_float(static_cast<uint32_t>(bits) << 16); }
};

struct float16 {
  uint16_t bits = 0;
  float16() = default;
  FG_HD float16(float f) {  // IEEE binary16, round to nearest even
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) {
      bits = static_cast<uint16_t>(sign | 0x7e00u);
    } else if (mag >= 0x477ff000u) {  // rounds to >= 65520: infinity
      bits = static_cast<uint16_t>(sign | 0x7c00u);
    } else if (mag < 0x38800000u) {  // subnormal half (or zero)
      float a = bits_float(mag) + 0.5f;  // the FPU rounds the low bits for us
      bits = static_cast<uint16_t>(sign | (float_bits(a) - 0x3f000000u));
    } else {
      uint32_t odd = (mag >> 13) & 1u;
      mag += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round
      bits = static_cast<uint16_t>(sign | (mag >> 13));
    }
  }
  FG_HD operator float() const {
    uint32_t sign = (bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu;
    uint32_t man = bits & 0x3ffu;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {  // zero or subnormal: man * 2^-24
      float v = static_cast<float>(man) * 5.9604644775390625e-08f;
      return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 112) << 23) | (man << 13));
  }
};

}  // namespace fg
