// float64 log, sin and cos that give the same bits on the CPU and on CUDA. libm and CUDA's
// libdevice differ in the last bit for some inputs, which broke "same seed, same values on every
// device" for float64 normals. These follow fdlibm's algorithms (Sun Microsystems, 1993; the
// same polynomial coefficients) written so that every rounding is pinned: each product that is
// added to something is an explicit fma, and the one rounded product that feeds two sums goes
// through exact_mul, which neither nvcc (-fmad) nor GCC (-ffp-contract=fast) may fuse. Division
// and sqrt are correctly rounded on both devices. Error: under 1 ulp for log on (0, inf) and for
// sin/cos on |x| <= 1e6 (Cody-Waite reduction with a three-part pi/2); beyond that the results
// are still identical on both devices but lose accuracy as |x| grows.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "flowgrad/base/fg_hd.h"

namespace fg {

FG_HD uint64_t double_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}
FG_HD double bits_double(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}

// a * b rounded once and never fused into a following add or subtract.
FG_HD double exact_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  volatile double p = a * b;
  return p;
#endif
}

// Natural log (fdlibm e_log.c): x = 2^k (1 + f) with 1 + f in [sqrt(2)/2, sqrt(2)), then
// log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)) with s = f / (2 + f).
FG_HD double exact_log(double x) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kLg1 = 6.666666666666735130e-01, kLg2 = 3.999999999940941908e-01,
                   kLg3 = 2.857142874366239149e-01, kLg4 = 2.222219843214978396e-01,
                   kLg5 = 1.818357216161805012e-01, kLg6 = 1.531383769920937332e-01,
                   kLg7 = 1.479819860511658591e-01;
  if (x != x || x < 0) return bits_double(0x7ff8000000000000ull);  // NaN, log(-inf) included
  if (x == 0) return bits_double(0xfff0000000000000ull);              // -inf for +0 and -0
  if (x > 1.7976931348623157e308) return x;                          // +inf
  int k = 0;
  if (x < 2.2250738585072014e-308) {  // subnormal: scale into the normal range (exact)
    x *= 18014398509481984.0;          // 2^54
    k = -54;
  }
  uint64_t bits = double_bits(x);
  int32_t hx = static_cast<int32_t>(bits >> 32);
  k += (hx >> 20) - 1023;
  hx &= 0x000fffff;
  int32_t i = (hx + 0x95f64) & 0x100000;  // mantissa above sqrt(2): halve it, k + 1
  bits = (static_cast<uint64_t>(static_cast<uint32_t>(hx | (i ^ 0x3ff00000))) << 32) | (bits & 0xffffffffu);
  k += i >> 20;
  double f = bits_double(bits) - 1.0;
  double dk = static_cast<double>(k);
  double s = f / (2.0 + f);
  double z = s * s, w = z * z;
  double t2 = z * ::fma(w, ::fma(w, ::fma(w, kLg7, kLg5), kLg3), kLg1);
  double r = ::fma(w, ::fma(w, ::fma(w, kLg6, kLg4), kLg2), t2);
  if (((hx - 0x6147a) | (0x6b851 - hx)) > 0) {
    double hfsq = exact_mul(0.5 * f, f);
    double inner = ::fma(s, hfsq + r, dk * kLn2Lo);
    return dk * kLn2Hi - ((hfsq - inner) - f);  // dk * kLn2Hi is exact: fusing it changes nothing
  }
  return dk * kLn2Hi - (::fma(s, f - r, -(dk * kLn2Lo)) - f);
}

// sin(x + y) and cos(x + y) for |x + y| <= pi/4, y a tail below ulp(x) (fdlibm k_sin.c, k_cos.c).
FG_HD double sin_kernel(double x, double y) {
  constexpr double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03,
                   kS3 = -1.98412698298579493134e-04, kS4 = 2.75573137070700676789e-06,
                   kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
  double z = x * x, v = z * x;
  double r = ::fma(z, ::fma(z, ::fma(z, ::fma(z, kS6, kS5), kS4), kS3), kS2);
  double tail = ::fma(z, ::fma(-v, r, 0.5 * y), -y);
  return x - ::fma(-v, kS1, tail);
}
FG_HD double cos_kernel(double x, double y) {
  constexpr double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03,
                   kC3 = 2.48015872894767294178e-05, kC4 = -2.75573143513906633035e-07,
                   kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;
  double z = x * x, w = z * z;
  double r = ::fma(z, ::fma(z, ::fma(z, kC3, kC2), kC1), (w * w) * ::fma(z, ::fma(z, kC6, kC5), kC4));
  double hz = 0.5 * z;  // exact
  double one_minus = 1.0 - hz;
  return one_minus + (((1.0 - one_minus) - hz) + ::fma(z, r, -(x * y)));
}

struct SinCos {
  double sin, cos;
};

// x = n pi/2 + (y0 + y1), the remainder as a double-double, and n mod 4.
struct Reduced {
  double y0, y1;
  int quadrant;
};
FG_HD Reduced reduce_pio2(double x) {
  constexpr double kTwoOverPi = 6.36619772367581382433e-01;
  constexpr double kPio2Hi = 1.5707963267948966, kPio2Mid = 6.123233995736766e-17,
                   kPio2Lo = -1.4973849048591698e-33;
  double n = ::rint(x * kTwoOverPi);
  double a = ::fma(-n, kPio2Hi, x);
  double b = exact_mul(n, kPio2Mid);
  double b_err = ::fma(n, kPio2Mid, -b);
  double hi = a - b;  // two-sum: hi + err == a - b exactly
  double b_part = hi - a;
  double err = (a - (hi - b_part)) + (-b - b_part);
  double lo = ::fma(-n, kPio2Lo, err - b_err);
  double y0 = hi + lo;
  return {y0, (hi - y0) + lo, static_cast<int>(n - 4.0 * ::floor(n * 0.25))};
}

constexpr double kTiny = 7.450580596923828e-09;  // 2^-27: sin x == x and cos x == 1 below it

FG_HD SinCos exact_sincos(double x) {
  double nan = bits_double(0x7ff8000000000000ull);
  if (x != x || x - x != 0) return {nan, nan};  // NaN, +-inf
  if (x > -kTiny && x < kTiny) return {x, 1.0};
  Reduced r = reduce_pio2(x);
  double s = sin_kernel(r.y0, r.y1), c = cos_kernel(r.y0, r.y1);
  switch (r.quadrant) {
    case 0: return {s, c};
    case 1: return {c, -s};
    case 2: return {-s, -c};
    default: return {-c, s};
  }
}

// exact_sincos(x).cos, bit for bit, evaluating only the kernel that quadrant needs.
FG_HD double exact_cos(double x) {
  if (x != x || x - x != 0) return bits_double(0x7ff8000000000000ull);
  if (x > -kTiny && x < kTiny) return 1.0;
  Reduced r = reduce_pio2(x);
  switch (r.quadrant) {
    case 0: return cos_kernel(r.y0, r.y1);
    case 1: return -sin_kernel(r.y0, r.y1);
    case 2: return -cos_kernel(r.y0, r.y1);
    default: return sin_kernel(r.y0, r.y1);
  }
}

}  // namespace fg
