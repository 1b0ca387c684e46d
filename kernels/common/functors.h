// Elementwise math written once, for the CPU kernels and the CUDA kernels alike.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "flowgrad/base/fg_hd.h"

namespace fg::fn {

using std::abs;
using std::cos;
using std::erf;
using std::exp;
using std::log;
using std::log1p;
using std::sin;
using std::sqrt;
using std::tanh;

template <class T> FG_HD bool is_nan(T x) { return x != x; }

// float32 exp without a libm call, so loops over it vectorise: exp(x) = 2^k exp(r) with
// Cody-Waite reduction and Cephes' degree-6 polynomial for exp(r), |r| <= ln(2)/2.
// expm1_poly_f32 returns exp(r) - 1, exp_poly_f32 exp(r); k = round(x / ln 2).
FG_HD float expm1_poly_f32(float x, float& k) {
  k = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest integer
  float r = x - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r;
}
FG_HD float exp_poly_f32(float x, float& k) { return expm1_poly_f32(x, k) + 1.0f; }
FG_HD float pow2i_f32(int32_t k) {  // 2^k for k in [-126, 127]
  uint32_t bits = static_cast<uint32_t>(k + 127) << 23;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
// For x in [-87, 88] only (no inf, NaN or denormal result): the inner loops that know their range.
FG_HD float exp_normal_f32(float x) {
  float k;
  float p = exp_poly_f32(x, k);
  return p * pow2i_f32(static_cast<int32_t>(k));
}
// e^x - 1 for x in [-87, 0], without cancellation near 0: 2^k (e^r - 1) + (2^k - 1).
FG_HD float expm1_nonpositive_f32(float x) {
  float k;
  float em = expm1_poly_f32(x, k), s = pow2i_f32(static_cast<int32_t>(k));
  return s * em + (s - 1.0f);
}
// e^x for x <= 0 (or NaN) where no value below e^-86 (5e-38, under any sum's rounding) matters:
// a logit or score less its row's maximum (softmax, cross-entropy, attention). No lane ever makes
// a denormal, each of which costs a microcode assist of about 150 cycles: past -86 the argument
// -88.03 makes 2^k exactly 0 (k = -127), with no select after it that a compiler could move
// behind a multiplication. Softmax over 1024 x 512 logits spread over +-90 (N(0, 30)) ran 9x
// slower with exp_f32's denormals at avx2. float64: libm.
FG_HD float exp_nonpositive_f32(float x) { return exp_normal_f32(x < -86.0f ? -88.03f : x); }
template <class T> FG_HD T exp_nonpositive(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_nonpositive_f32(x);
  else return exp(x);
}
// All floats: 2^k is applied as two factors, so results in the denormal range come out graded
// (not flushed to 0), and large x overflows to inf. Error <= 1 ulp against float64 over all floats
// (tests/ops/test_float32_math.py). float64 uses libm.
FG_HD float exp_f32(float x) {
  float c = x > 89.0f ? 89.0f : (x < -104.0f ? -104.0f : x);  // beyond: inf, 0 (exact after rounding)
  c = x == x ? c : 0.0f;
  float k;
  float p = exp_poly_f32(c, k);
  int32_t k1 = static_cast<int32_t>(k) >> 1, k2 = static_cast<int32_t>(k) - k1;  // k in [-150, 128]
  return x == x ? p * pow2i_f32(k1) * pow2i_f32(k2) : x;
}
template <class T> FG_HD T exp_any(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x);
  else return exp(x);
}
// float32 tanh: an odd Taylor polynomial near 0 (no cancellation), 1 - 2 / (e^2|x| + 1) beyond.
template <class T> FG_HD T tanh_any(T x) {
  if constexpr (std::is_same_v<T, float>) {
    float a = x < 0 ? -x : x;
    float z = x * x;
    float small = x + x * z * (-0.333333333f + z * (0.133333333f + z * (-0.0539682540f + z * (0.0218694885f + z * -0.00886323552f))));
    float a2 = 2.0f * a < 40.0f ? 2.0f * a : 40.0f;  // tanh rounds to 1 from 9.01 on
    float large = 1.0f - 2.0f / (exp_normal_f32(a2) + 1.0f);
    large = x < 0 ? -large : large;
    return a < 0.4f || x != x ? small : large;
  } else {
    return tanh(x);
  }
}
// float32 erf without a division or libm call, given e = exp(-x^2) (below 1e-37 where
// x^2 > 86): x + x R(x^2) for |x| <= 0.875, 1 - e E(|x|) beyond, E a fit of erfc(t) e^(t^2) on
// [0.875, 4] (erf rounds to 1 from 3.92 on). Both polynomials are least-squares fits made for
// flowgrad. Error <= 2 ulp against float64 over all floats (tests/ops/test_float32_math.py).
FG_HD float erf_given_exp_f32(float x, float e) {
  float a = x < 0 ? -x : x;
  float s = x * x;
  float r = -6.229429273e-4f;
  r = r * s + 5.037018564e-3f;
  r = r * s - 2.679457515e-2f;
  r = r * s + 1.128253639e-1f;
  r = r * s - 3.761255741e-1f;
  r = r * s + 1.283791512e-1f;
  float small = x + x * r;
  float t = a < 4.0f ? a : 4.0f;
  float q = 1.216523306e-4f;
  q = q * t - 2.142443787e-3f;
  q = q * t + 1.683346368e-2f;
  q = q * t - 7.842025161e-2f;
  q = q * t + 2.433238924e-1f;
  q = q * t - 5.367940068e-1f;
  q = q * t + 8.781018257e-1f;
  q = q * t - 1.087205410e+0f;
  q = q * t + 9.937648177e-1f;
  float large = 1.0f - e * q;
  large = x < 0 ? -large : large;
  return a <= 0.875f || x != x ? small : large;
}
FG_HD float exp_minus_square_f32(float x) {  // exp(-x^2), flushed below 1e-37
  float s = x * x;
  return s < 86.0f ? exp_normal_f32(-s) : 0.0f;
}
FG_HD float erf_f32(float x) { return erf_given_exp_f32(x, exp_minus_square_f32(x)); }
template <class T> FG_HD T erf_any(T x) {
  if constexpr (std::is_same_v<T, float>) return erf_f32(x);
  else return erf(x);
}

// Functors whose work per element is many times an add's (polynomials, exp): the CPU kernels
// split a range over threads from this many fewer elements (kParallelGrain / kCost).
struct Costly { static constexpr int kCost = 16; };

struct Neg { template <class T> FG_HD T operator()(T x) const { return -x; } };
struct Abs {
  template <class T> FG_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? -x : x;
  }
};
struct Square {
  template <class T> FG_HD T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return x;  // x * x would multiply as int
    else return x * x;
  }
};
struct Sign {
  template <class T> FG_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return T(x != T(0));
    else return T((x > T(0)) - (x < T(0)));
  }
};
struct Relu {
  template <class T> FG_HD T operator()(T x) const { return x > T(0) || is_nan(x) ? x : T(0); }
};
struct Exp : Costly { template <class T> FG_HD T operator()(T x) const { return exp_any(x); } };
struct Log : Costly { template <class T> FG_HD T operator()(T x) const { return log(x); } };
struct Sqrt { template <class T> FG_HD T operator()(T x) const { return sqrt(x); } };
struct Rsqrt { template <class T> FG_HD T operator()(T x) const { return T(1) / sqrt(x); } };
struct Sin : Costly { template <class T> FG_HD T operator()(T x) const { return sin(x); } };
struct Cos : Costly { template <class T> FG_HD T operator()(T x) const { return cos(x); } };
struct Tanh : Costly { template <class T> FG_HD T operator()(T x) const { return tanh_any(x); } };
struct Erf : Costly { template <class T> FG_HD T operator()(T x) const { return erf_any(x); } };
struct Log1p : Costly { template <class T> FG_HD T operator()(T x) const { return log1p(x); } };
// e^x - 1 without the cancellation near 0 (Kahan): (u - 1) * x / log(u) with u = e^x; the error of
// u cancels in the ratio. Only exp and log, which NVRTC's prelude (cuda_fusion.cpp) provides.
struct Expm1 : Costly {
  template <class T> FG_HD T operator()(T x) const {
    T u = exp_any(x);
    if (u == T(1)) return x;
    T um1 = u - T(1);
    if (um1 == T(-1) || um1 - um1 != T(0)) return um1;  // -1 (x very negative), inf or NaN
    return um1 * x / log(u);
  }
};
// The inverse error function. A first guess from Giles' single-precision approximation ("Approximating
// the erfinv function", GPU Computing Gems, 2011: two polynomials in w = -log(1 - x^2)), good to a
// few float32 ulp; float64 refines it with Newton steps on erf(y) = |x|, and for |x| >= 0.5 on
// log erfc(y) = log(1 - |x|), where erf(y) - x would cancel.
struct Erfinv : Costly {
  template <class T> FG_HD T operator()(T x) const {
    // +-1 / +0 is +-inf; sqrt of a negative (|x| > 1, +-inf) or of NaN is NaN.
    if (!(x > T(-1) && x < T(1))) return x == T(1) || x == T(-1) ? x / (T(1) - abs(x)) : sqrt(T(1) - x * x);
    // Horner over each polynomial's coefficients, highest degree first.
    const T small[] = {T(2.81022636e-08), T(3.43273939e-07), T(-3.5233877e-06), T(-4.39150654e-06), T(0.00021858087),
                       T(-0.00125372503), T(-0.00417768164), T(0.246640727), T(1.50140941)};
    const T large[] = {T(-0.000200214257), T(0.000100950558), T(0.00134934322), T(-0.00367342844), T(0.00573950773),
                       T(-0.0076224613), T(0.00943887047), T(1.00167406), T(2.83297682)};
    T w = -log((T(1) - x) * (T(1) + x));
    const bool central = w < T(5);  // |x| below about 0.9966
    const T* c = central ? small : large;
    w = central ? w - T(2.5) : sqrt(w) - T(3);
    T p = c[0];
    for (int i = 1; i < 9; ++i) p = c[i] + p * w;
    T y = p * x;
    if constexpr (std::is_same_v<T, double>) {
      const T a = abs(x), c2 = T(1.1283791670955126);  // erf'(b) = c2 e^(-b^2)
      T b = abs(y);
      if (a < T(0.5)) {
        for (int i = 0; i < 3; ++i) b -= (erf(b) - a) / (c2 * exp(-b * b));
      } else {  // Newton on log erfc(b) = log(1 - a): nearly linear in the tail, so the seed
        const T target = log(T(1) - a);  // from past float32's range converges too; 1 - a is exact
        for (int i = 0; i < 5; ++i) {
          T e = erfc(b);
          b += (log(e) - target) * e / (c2 * exp(-b * b));
        }
      }
      y = x < T(0) ? -b : b;
    }
    return y;
  }
};
struct Sigmoid : Costly {
  template <class T> FG_HD T operator()(T x) const {
    // Branches keep exp's argument <= 0: no overflow for large |x|.
    T e = exp_any(x >= T(0) ? -x : x);  // exp of -|x| never overflows
    return x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
  }
};
struct Silu : Costly { template <class T> FG_HD T operator()(T x) const { return x * Sigmoid{}(x); } };
struct Softplus : Costly {  // log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
  template <class T> FG_HD T operator()(T x) const {
    return (x > T(0) ? x : T(0)) + log1p(exp(-abs(x)));
  }
};
// float32 Phi(x), the standard normal's distribution function, for GELU, in one branch (erf_f32
// has two, and its argument's rounding cost the tail: 1 + erf(x/sqrt2) for x < 0 cancelled):
// h = erfc(|x|/sqrt2)/2 = e Q / 2, Phi = 1 - h (x >= 0) or h, with e = exp(-x^2/2) (x^2's rounding
// error, from an fma, corrects it to first order) and Q = erfcx(|x|/sqrt2) a degree-10 fit in
// t = 1/(1 + |x|/(2 sqrt2)) made for flowgrad. Q is within 5 ulp, Phi's tail (x < 0) keeps its
// relative accuracy down to |x| = 13.11 (then 0, where it is below 1e-38). NaN in, NaN out.
struct NormalCdf {
  float cdf, e;  // Phi(x), exp(-x^2/2): GELU's backward shares e with the density
};
// x * x - sq exactly, sq = x * x rounded (Dekker's product over Veltkamp's 12-bit halves, whose
// products are exact): fmaf(x, x, -sq)'s value without fmaf, which on a level without FMA
// (generic) is a libm call per element that also left the loop scalar (gelu 17% of a generic
// transformer step). NaN for |x| > 8e34, where GELU's callers no longer read it.
FG_HD float square_error_f32(float x, float sq) {
  float c = x * 4097.0f, hi = c - (c - x), lo = x - hi;
  return ((hi * hi - sq) + 2.0f * hi * lo) + lo * lo;
}
FG_HD NormalCdf normal_cdf_f32(float x) {
  float a = (x < 0 ? -x : x) * 0.70710678118654752440f;
  float t = 1.0f / (a * 0.5f + 1.0f);
  float q = 2.981062606e-02f;
  q = q * t - 2.216860354e-01f;
  q = q * t + 6.701418161e-01f;
  q = q * t - 1.008843780e+00f;
  q = q * t + 7.226050496e-01f;
  q = q * t - 2.751609981e-01f;
  q = q * t + 2.947342098e-01f;
  q = q * t + 2.208599299e-01f;
  q = q * t + 2.857266068e-01f;
  q = q * t + 2.818022668e-01f;
  q = q * t + 1.030724070e-05f;
  // Past half_sq = 86 the tail is cut to 0, and e is computed as exactly 0 (the argument -88.03
  // makes 2^k 0: k = -127), not as e^-87 zeroed by the select below: GCC multiplied e by 0.5
  // before that select at avx2 and generic, and a denormal result costs a microcode assist per
  // lane (gelu of 1024 x 512 values of 20 took 1.7 ms against 0.24 for values of 1).
  float sq = x * x, half_sq = 0.5f * sq;
  float e = exp_normal_f32(half_sq < 86.0f ? -half_sq : -88.03f);
  // exp(-(sq + err)/2) ~ exp(-sq/2) (1 - err/2): one fma where the level has it (contracted, as
  // every a * b + c here), two roundings at generic; the device has fmaf as one instruction.
#ifdef __CUDA_ARCH__
  e = fmaf(e, -0.5f * fmaf(x, x, -sq), e);
#else
  e = e * (-0.5f * square_error_f32(x, sq)) + e;
#endif
  e = half_sq < 86.0f ? e : 0.0f;  // square_error_f32's NaN beyond 8e34
  float h = 0.5f * e * q;
  return {x >= 0 ? 1.0f - h : h, e};
}
// float32 1 / (1 + exp(-2u)) = (1 + tanh(u)) / 2 in one branch (tanh_any has two): no
// cancellation where tanh(u) is near -1; exp_f32 overflows to inf there, which gives 0.
FG_HD float half_one_plus_tanh_f32(float u) { return 1.0f / (1.0f + exp_f32(-2.0f * u)); }

struct Gelu : Costly {  // x * Phi(x)
  template <class T> FG_HD T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return x * normal_cdf_f32(x).cdf;
    else return T(0.5) * x * (T(1) + erf_any(x * T(0.70710678118654752440)));
  }
};
struct GeluTanh : Costly {  // x (1 + tanh(u)) / 2, u = k (x + 0.044715 x^3)
  template <class T> FG_HD T operator()(T x) const {
    const T k = T(0.79788456080286535588);  // sqrt(2 / pi)
    if constexpr (std::is_same_v<T, float>) return x * half_one_plus_tanh_f32(k * (x + 0.044715f * x * x * x));
    else return T(0.5) * x * (T(1) + tanh_any(k * (x + T(0.044715) * x * x * x)));
  }
};
// g * d/dx gelu(x) = g * (Phi(x) + x phi(x)), for the fused backward (first-order gradients only).
// GeluGrad, GeluTanhGrad and SiluGrad are g times a derivative computed from x alone, so
// g * Grad(1, x) is the same bits as Grad(g, x): a compiled linear_<act> keeps Grad(1, x) for its
// backward, which then only multiplies (plan/passes/fuse_epilogues.cpp).
struct GeluGrad : Costly {
  template <class T> FG_HD T operator()(T g, T x) const {
    if constexpr (std::is_same_v<T, float>) {  // Phi and the density share one exp
      NormalCdf n = normal_cdf_f32(x);
      return g * (n.cdf + x * (n.e * 0.39894228040143267794f));
    } else {
      T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
      T pdf = exp(T(-0.5) * x * x) * T(0.39894228040143267794);
      return g * (cdf + x * pdf);
    }
  }
};
// With s = (1 + tanh(u)) / 2: d/dx x s = s + x s (1 - s) 2u' (= the tanh form's (1 + t)/2 +
// x (1 - t^2) u' / 2).
struct GeluTanhGrad : Costly {
  template <class T> FG_HD T operator()(T g, T x) const {
    const T k = T(0.79788456080286535588), a = T(0.044715);
    if constexpr (std::is_same_v<T, float>) {
      float s = half_one_plus_tanh_f32(k * (x + a * x * x * x));
      return g * (s + x * (s * (1.0f - s)) * (2.0f * k * (1.0f + 3.0f * a * x * x)));
    } else {
      T t = tanh_any(k * (x + a * x * x * x));
      return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * a * x * x));
    }
  }
};
// Activation gradients g * f'(.) for the fused first-order backward, each from what its forward
// saves: the input x (relu, silu) or the output y (tanh, sigmoid).
struct ReluGrad {  // the gradient passes where x > 0 (not for NaN x), as PyTorch's threshold_backward
  template <class T> FG_HD T operator()(T g, T x) const { return x > T(0) ? g : T(0); }
};
struct TanhGrad { template <class T> FG_HD T operator()(T g, T y) const { return g * (T(1) - y * y); } };
struct SigmoidGrad { template <class T> FG_HD T operator()(T g, T y) const { return g * y * (T(1) - y); } };
struct SiluGrad : Costly {  // d/dx x s(x) = s (1 + x (1 - s))
  template <class T> FG_HD T operator()(T g, T x) const {
    T s = Sigmoid{}(x);
    return g * (s * (T(1) + x * (T(1) - s)));
  }
};
struct Clamp {
  double lo, hi;  // NaN bound = no bound
  template <class T> FG_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {  // in double: a bound outside T's range must not wrap
      double v = static_cast<double>(x);
      if (!is_nan(lo) && v < lo) v = lo;
      if (!is_nan(hi) && v > hi) v = hi;
      using L = std::numeric_limits<T>;
      if (v <= static_cast<double>(L::lowest())) return L::lowest();
      return v >= static_cast<double>(L::max()) ? L::max() : static_cast<T>(v);
    }
    if (!is_nan(lo) && x < T(lo)) x = T(lo);
    if (!is_nan(hi) && x > T(hi)) x = T(hi);
    return x;
  }
};

struct Add { template <class T> FG_HD T operator()(T a, T b) const { return a + b; } };
struct Sub { template <class T> FG_HD T operator()(T a, T b) const { return a - b; } };
struct Mul { template <class T> FG_HD T operator()(T a, T b) const { return a * b; } };
struct Div { template <class T> FG_HD T operator()(T a, T b) const { return a / b; } };
struct Pow : Costly {
  template <class T> FG_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(a, b);
    } else {  // integer power by squaring; negative exponents give 0 except for bases +-1
      if constexpr (std::is_signed_v<T>)
        if (b < 0) return a == 1 ? T(1) : a == -1 ? (b % 2 ? T(-1) : T(1)) : T(0);
      T result = 1;
      while (b) {
        if (b & 1) result *= a;
        a *= a;
        b >>= 1;
      }
      return result;
    }
  }
};
struct Maximum {  // propagates NaN, like numpy.maximum
  template <class T> FG_HD T operator()(T a, T b) const {
    return is_nan(a) ? a : (is_nan(b) ? b : (a > b ? a : b));
  }
};
struct Minimum {
  template <class T> FG_HD T operator()(T a, T b) const {
    return is_nan(a) ? a : (is_nan(b) ? b : (a < b ? a : b));
  }
};
// Bitwise ops for bool and integer types (bool stays 0/1: ~ on bool is logical not).
struct BitwiseAnd { template <class T> FG_HD T operator()(T a, T b) const { return T(a & b); } };
struct BitwiseOr { template <class T> FG_HD T operator()(T a, T b) const { return T(a | b); } };
struct BitwiseXor { template <class T> FG_HD T operator()(T a, T b) const { return T(a ^ b); } };
struct BitwiseNot {
  template <class T> FG_HD T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return !x;
    else return T(~x);
  }
};
struct Eq { template <class T> FG_HD bool operator()(T a, T b) const { return a == b; } };
struct Ne { template <class T> FG_HD bool operator()(T a, T b) const { return a != b; } };
struct Lt { template <class T> FG_HD bool operator()(T a, T b) const { return a < b; } };
struct Le { template <class T> FG_HD bool operator()(T a, T b) const { return a <= b; } };
struct Gt { template <class T> FG_HD bool operator()(T a, T b) const { return a > b; } };
struct Ge { template <class T> FG_HD bool operator()(T a, T b) const { return a >= b; } };

}  // namespace fg::fn
