// Partial sums (or maxima) kept in an array of lanes (several vector registers' worth, so that consecutive
// adds do not wait on each other) and their pairwise total: a tree of halvings, which GCC turns
// into vector adds and shuffles instead of a serial chain of scalar adds.
#pragma once
#include <cstdint>
#include <limits>

namespace fg {

// The N lanes of `partial` combined pairwise, halving the width each round (overwritten).
// Unrolled: as a loop GCC keeps the halvings as a counted loop with scalar tails, which costs a
// short row (a layer_norm row of 128 floats) as much as its sums.
template <int N, class T, class Combine>
inline T lane_tree(T* partial, Combine combine) {
  static_assert((N & (N - 1)) == 0, "N must be a power of two");
#pragma GCC unroll 8
  for (int width = N / 2; width > 0; width /= 2)
#pragma GCC unroll 32
    for (int j = 0; j < width; ++j) partial[j] = combine(partial[j], partial[j + width]);
  return partial[0];
}

template <int N, class T>
inline T lane_total(T* partial) {  // (N) partial sums, overwritten
  return lane_tree<N>(partial, [](T a, T b) { return a + b; });
}

// The largest of N partial maxima (a NaN lane is passed over, as by `v > m ? v : m`).
template <int N, class T>
inline T lane_max(T* partial) {  // (N) partial maxima, overwritten
  return lane_tree<N>(partial, [](T a, T b) { return b > a ? b : a; });
}

// The largest of v[0, n) (-inf when n is 0; a NaN is passed over, as by `v > m ? v : m`), kept in N
// lanes: a plain running max compiles to a serial chain of scalar maxima (4 cycles an element).
template <int N, class T>
inline T row_max(const T* __restrict v, int64_t n) {
  T lanes[N];
  for (int j = 0; j < N; ++j) lanes[j] = -std::numeric_limits<T>::infinity();
  int64_t k = 0;
  for (; k + N <= n; k += N)
    for (int j = 0; j < N; ++j) lanes[j] = v[k + j] > lanes[j] ? v[k + j] : lanes[j];
  T m = lane_max<N>(lanes);
  for (; k < n; ++k) m = v[k] > m ? v[k] : m;
  return m;
}

}  // namespace fg
