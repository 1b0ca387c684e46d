#include <vector>

#include "flowgrad/base/parallel.h"
#include "kernels/index/index_add.h"

namespace fg {

void index_add_cpu(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t outer, int64_t d,
                   int64_t n, int64_t inner, void* out) {
  if (outer * n * inner == 0) return;
  // Group the positions by the row they add to (a stable counting sort): each output row is then
  // written by one worker only, adding its sources in index order.
  std::vector<int64_t> start(d + 1, 0), order(n);
  for (int64_t i = 0; i < n; ++i) ++start[idx[i] + 1];
  for (int64_t r = 0; r < d; ++r) start[r + 1] += start[r];
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) order[next[idx[i]]++] = i;
  int64_t work_per_row = n * inner / (d ? d : 1) + inner / 8 + 1;
  visit_compute_dtype(dtype, "index_add", [&](auto tag) {
    using T = decltype(tag);
    const T* ss = static_cast<const T*>(src);
    T* ys = static_cast<T*>(out);
    parallel_for(outer * d, kParallelGrain / work_per_row + 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t o = r / d, row = r % d;
        T* dst = ys + r * inner;
        for (int64_t k = start[row]; k < start[row + 1]; ++k) {
          const T* s = ss + (o * n + order[k]) * inner;
          for (int64_t j = 0; j < inner; ++j) {
            if constexpr (std::is_same_v<T, bool>) dst[j] = dst[j] || s[j];
            else dst[j] += s[j];
          }
        }
      }
    });
  });
}

}  // namespace fg
