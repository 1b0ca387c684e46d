#include "kernels/nn/fused.h"

#include <algorithm>
#include <vector>

#include "flowgrad/base/errors.h"
#include "flowgrad/base/parallel.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/reduce/reduce.h"

namespace fg {
namespace {

constexpr int64_t kBlockBytes = 32 << 10;  // one block's dx: well inside L2

constexpr int64_t kSlices = 8;               // row ranges with partial sums of their own

template <class T>
void colsum_typed(const KernelEnv& env, BinaryFn fn, DType dtype, const T* g, const T* x, T* dx, T* db, int64_t rows, int64_t n) {
  const int64_t block = std::max<int64_t>(1, kBlockBytes / static_cast<int64_t>(n * sizeof(T)));
  const int64_t slices = std::clamp<int64_t>(rows / block, 1, kSlices);
  std::vector<double> partial(static_cast<size_t>(slices * n), 0.0);  // added as the sum op adds
  const int64_t grain = rows * n < kParallelGrain ? slices : 1;
  parallel_for(slices, grain, [&](int64_t s0, int64_t s1) {
    for (int64_t slice = s0; slice < s1; ++slice) {
      double* sum = partial.data() + slice * n;
      for (int64_t r0 = rows * slice / slices, end = rows * (slice + 1) / slices; r0 < end; r0 += block) {
        const int64_t r1 = std::min(end, r0 + block);
        Strided<3> s;  // (dx, g, x) over the block's rows as one flat range
        s.ndim = 1;
        s.shape[0] = (r1 - r0) * n;
        const T* from[3] = {dx, g, x};
        for (int k = 0; k < 3; ++k) {
          s.data[k] = reinterpret_cast<char*>(const_cast<T*>(from[k] + r0 * n));
          s.strides[k][0] = sizeof(T);
        }
        binary_cpu(env, fn, dtype, s);
        add_rows_cpu(sum, dx + r0 * n, r1 - r0, n, n);
      }
    }
  });
  for (int64_t j = 0; j < n; ++j) {
    double total = 0;
    for (int64_t slice = 0; slice < slices; ++slice) total += partial[slice * n + j];
    db[j] = static_cast<T>(total);
  }
}

}  // namespace

void act_backward_colsum_cpu(const KernelEnv& env, BinaryFn fn, DType dtype, const void* g, const void* x, void* dx, void* db, int64_t rows,
                             int64_t n) {
  if (n == 0) return;
  if (dtype == DType::Float64)
    return colsum_typed(env, fn, dtype, static_cast<const double*>(g), static_cast<const double*>(x),
                        static_cast<double*>(dx), static_cast<double*>(db), rows, n);
  FG_ASSERT(dtype == DType::Float32);
  colsum_typed(env, fn, dtype, static_cast<const float*>(g), static_cast<const float*>(x), static_cast<float*>(dx),
               static_cast<float*>(db), rows, n);
}

}  // namespace fg
