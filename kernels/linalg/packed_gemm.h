// Products that share one B across many calls of few rows each: the per-step products of a
// recurrence (h_{t-1} W_hh^T forward, dgates_t W_hh backward; kernels/rnn), and a convolution's
// per-image products at avx2 and avx512 (kernels/nn), which read the image's columns in place
// from the padded image (in_place_b, a RowsA with row offsets) instead of making them. B is packed
// once into column panels of the level's vector width (FLOWGRAD_ISA), and each product then streams
// the panels against a block of A's rows held in registers: nothing is packed per call, where a
// GEMM packs B again every time. At generic (SSE2, no broadcast from memory) A's values are first
// spread over whole vectors, once per product instead of once per panel.
// A product covers a range of panels on the calling thread, so that a caller spreading a step
// over threads gives each its own columns (a recurrence's hidden units) and what it does with
// them next. float32 and float64. Deterministic: every value sums its K products in order, however
// the panels are split.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace fg {

// B (K, N) in panels of `width` columns from a 64-byte boundary, panel p's rows contiguous (K x
// width values, panel p at panels + p * K * width). The N columns form `groups` equal groups (a
// recurrence's gates), each starting a panel, so that panel u of every group holds the same
// columns within it; a group's last panel's missing columns are zero.
// A B read in place (in_place_b) has no panels: its row k is the N values from rows + offsets[k].
template <class T>
struct PackedB {
  int64_t K = 0, N = 0, groups = 1, width = 0, vector_bytes = 0;
  T* panels = nullptr;
  std::vector<T> own;  // the panels when larger than the thread's kept buffer
  const T* rows = nullptr;
  const int64_t* offsets = nullptr;
  int64_t group_columns() const { return N / groups; }
  int64_t group_panels() const { return (group_columns() + width - 1) / width; }
};

// Packs B (K, N), stored (N, K) with trans_b (x W^T), rows ldb apart, in `groups` groups (N a
// multiple of it), for the level in force: into `into` when given (packed_size(K, N, groups)
// values), else into the calling thread's packing buffer, kept for the next call up to 2 MiB (as
// sgemm.h's; a 1024 x 256 float32 W_hh), so the result is valid until this thread packs again,
// and larger ones into `own`.
template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T* B, int64_t ldb, int64_t groups = 1,
                  T* into = nullptr);
// The columns of a panel at the level in force.
template <class T>
int64_t panel_width();
// The values pack_b(.., K, N, .., groups, into) writes at the level in force, alignment included.
template <class T>
int64_t packed_size(int64_t K, int64_t N, int64_t groups = 1);
// B's panels laid out as pack_b lays them, not yet filled: for a B its caller writes into the
// panels itself (a convolution's columns) or packs with pack_rows.
template <class T>
PackedB<T> packed_layout(int64_t K, int64_t N, int64_t groups = 1, T* into = nullptr);
// Rows [k0, k0 + count) of B (N values each, rows ld apart from `rows`) into b's panels, panel
// by panel, each panel's part written in order.
template <class T>
void pack_rows(const PackedB<T>& b, int64_t k0, int64_t count, const T* rows, int64_t ld);

// B (K, N) read where it lies, row k the N values from rows + offsets[k], a panel's width at a
// time: the memory after each row holds panel_width() - 1 more readable values (their products
// are not stored). A convolution's columns at stride 1 are rows of its padded image.
template <class T>
PackedB<T> in_place_b(int64_t K, int64_t N, const T* rows, const int64_t* offsets);

// A (M, K, row-major, rows lda apart) made ready for products with b's panels: at generic each
// value spread over a vector, in the calling thread's kept buffer (valid until it prepares again;
// larger than 2 MiB in `own`); elsewhere A itself.
template <class T>
struct RowsA {
  const T* a = nullptr;
  int64_t M = 0, lda = 0;
  const int64_t* offsets = nullptr;  // row i at a + offsets[i] (null: a + i * lda)
  const void* spread = nullptr;
  std::vector<T> own;
};
template <class T>
RowsA<T> prepare_a(const PackedB<T>& b, int64_t M, const T* A, int64_t lda);
// The same for rows anywhere: row i the K values from A + offsets[i].
template <class T>
RowsA<T> prepare_a(const PackedB<T>& b, int64_t M, const T* A, const int64_t* offsets);

enum class Store { Overwrite, Accumulate };

// Units of a product (panels or rows, `work` multiply-adds each) per thread for parallel_for:
// below 2^18 multiply-adds a thread's share is not worth waking it.
inline int64_t product_grain(int64_t work) {
  return std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, work));
}

// Where C's columns go. By default column j at C + j. Wide: the columns form lines of `stride` of
// which the first `keep` are stored, line after line (column j at C + j / stride * keep + j %
// stride when j % stride < keep, else dropped): a stride-1 convolution read in place computes its
// output rows as wide as the padded image's (kernels/nn/conv_cpu.cpp). No bias with wide columns.
struct Columns {
  int64_t keep = 0, stride = 0;  // 0: every column where it is
};

// C (M, N) = A @ B + bias (N values broadcast over the rows; null: none) at the columns of panels
// [p0, p1) (panel p: group p / group_panels()), written over C or (Store::Accumulate) added to
// it, on the calling thread, at the level b was packed for.
template <class T>
void packed_gemm(const PackedB<T>& b, const RowsA<T>& a, const T* bias, Store store, T* C, int64_t ldc, int64_t p0,
                 int64_t p1, Columns columns = {});

}  // namespace fg
