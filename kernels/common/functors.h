// Elementwise math written once, for the CPU kernels and the CUDA kernels alike.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fg_hd.h"

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

struct Neg { template <class T> FG_HD T operator()(T x) const { return -x; } };
struct Abs { template <class T> FG_HD T operator()(T x) const { return x < T(0) ? -x : x; } };
struct Square { template <class T> FG_HD T operator()(T x) const { return x * x; } };
struct Sign {
  template <class T> FG_HD T operator()(T x) const { return T((x > T(0)) - (x < T(0))); }
};
struct Relu {
  template <class T> FG_HD T operator()(T x) const { return x > T(0) || is_nan(x) ? x : T(0); }
};
struct Exp { template <class T> FG_HD T operator()(T x) const { return exp(x); } };
struct Log { template <class T> FG_HD T operator()(T x) const { return log(x); } };
struct Sqrt { template <class T> FG_HD T operator()(T x) const { return sqrt(x); } };
struct Rsqrt { template <class T> FG_HD T operator()(T x) const { return T(1) / sqrt(x); } };
struct Sin { template <class T> FG_HD T operator()(T x) const { return sin(x); } };
struct Cos { template <class T> FG_HD T operator()(T x) const { return cos(x); } };
struct Tanh { template <class T> FG_HD T operator()(T x) const { return tanh(x); } };
struct Erf { template <class T> FG_HD T operator()(T x) const { return erf(x); } };
struct Sigmoid {
  template <class T> FG_HD T operator()(T x) const {
    // Branches keep exp's argument <= 0: no overflow for large |x|.
    if (x >= T(0)) return T(1) / (T(1) + exp(-x));
    T e = exp(x);
    return e / (T(1) + e);
  }
};
struct Silu { template <class T> FG_HD T operator()(T x) const { return x * Sigmoid{}(x); } };
struct Softplus {  // log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
  template <class T> FG_HD T operator()(T x) const {
    return (x > T(0) ? x : T(0)) + log1p(exp(-abs(x)));
  }
};
struct Gelu {  // x * Phi(x)
  template <class T> FG_HD T operator()(T x) const {
    return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
  }
};
struct GeluTanh {
  template <class T> FG_HD T operator()(T x) const {
    const T k = T(0.79788456080286535588);  // sqrt(2 / pi)
    return T(0.5) * x * (T(1) + tanh(k * (x + T(0.044715) * x * x * x)));
  }
};
struct Clamp {
  double lo, hi;  // NaN bound = no bound
  template <class T> FG_HD T operator()(T x) const {
    if (!is_nan(lo) && x < T(lo)) x = T(lo);
    if (!is_nan(hi) && x > T(hi)) x = T(hi);
    return x;
  }
};

struct Add { template <class T> FG_HD T operator()(T a, T b) const { return a + b; } };
struct Sub { template <class T> FG_HD T operator()(T a, T b) const { return a - b; } };
struct Mul { template <class T> FG_HD T operator()(T a, T b) const { return a * b; } };
struct Div { template <class T> FG_HD T operator()(T a, T b) const { return a / b; } };
struct Pow {
  template <class T> FG_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(a, b);
    } else {  // integer power by squaring; negative exponents give 0 except for bases +-1
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
struct Eq { template <class T> FG_HD bool operator()(T a, T b) const { return a == b; } };
struct Ne { template <class T> FG_HD bool operator()(T a, T b) const { return a != b; } };
struct Lt { template <class T> FG_HD bool operator()(T a, T b) const { return a < b; } };
struct Le { template <class T> FG_HD bool operator()(T a, T b) const { return a <= b; } };
struct Gt { template <class T> FG_HD bool operator()(T a, T b) const { return a > b; } };
struct Ge { template <class T> FG_HD bool operator()(T a, T b) const { return a >= b; } };

}  // namespace fg::fn
