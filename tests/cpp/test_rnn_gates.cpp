// The float32 gate activations of the recurrent kernels (kernels/rnn/rnn_cells.h) against float64
// over a sweep of every float's bit patterns, both signs: the error bounds their comment states,
// NaN and the infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/rnn/rnn_cells.h"

namespace fg {
namespace {

// |got - want| in units of the last place of want rounded to float.
double ulps(float got, double want) {
  const float w = std::fabs(static_cast<float>(want));
  const float step = std::nextafter(w, std::numeric_limits<float>::infinity()) - w;
  return std::fabs(static_cast<double>(got) - want) / step;
}

template <class Check>
void sweep(Check check) {
  for (uint64_t bits = 0; bits < 0x7F800000u; bits += 241) {  // every finite positive float's range
    float x;
    const uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&x, &b, sizeof x);
    check(x);
    check(-x);
  }
}

TEST(RnnGates, SigmoidWithinItsBound) {
  double worst = 0;
  float at = 0;
  sweep([&](float x) {
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    const float got = rnn::gate_sigmoid(x);
    ASSERT_TRUE(got >= 0.0f && got <= 1.0f) << x;
    if (want > 1e-37) {
      if (ulps(got, want) > worst) worst = ulps(got, want), at = x;
    } else {
      ASSERT_LE(got, x < -87.0f ? 1.7e-38f : 1.01e-37f) << x;  // below -87, e^-87 stands for all
    }
  });
  EXPECT_LE(worst, 2.4) << "at " << at;
}

TEST(RnnGates, TanhWithinItsBound) {
  double worst = 0;
  float at = 0;
  sweep([&](float x) {
    const float got = rnn::gate_tanh(x);
    const double want = std::tanh(static_cast<double>(x));
    if (x == 0.0f) {
      ASSERT_EQ(got, 0.0f);
      ASSERT_EQ(std::signbit(got), std::signbit(x));
      return;
    }
    if (ulps(got, want) > worst) worst = ulps(got, want), at = x;
  });
  EXPECT_LE(worst, 2.5) << "at " << at;
}

TEST(RnnGates, NanAndInfinities) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(rnn::gate_sigmoid(nan)));
  EXPECT_TRUE(std::isnan(rnn::gate_tanh(nan)));
  EXPECT_EQ(rnn::gate_sigmoid(inf), 1.0f);
  EXPECT_LE(rnn::gate_sigmoid(-inf), 1.7e-38f);
  EXPECT_EQ(rnn::gate_tanh(inf), 1.0f);
  EXPECT_EQ(rnn::gate_tanh(-inf), -1.0f);
}

TEST(RnnGates, Float64IsFns) {
  for (double x : {-50.0, -3.5, -0.3, 0.0, 0.2, 1.7, 30.0}) {
    EXPECT_EQ(rnn::gate_sigmoid(x), fn::Sigmoid{}(x));
    EXPECT_EQ(rnn::gate_tanh(x), fn::Tanh{}(x));
  }
}

}  // namespace
}  // namespace fg
