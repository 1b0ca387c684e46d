// CPU attention at every sequence length: register-blocked products (8 rows by one or two vectors
// of accumulators, one register of the instruction-set level in force wide: attention_tile_vec.h;
// FMA along the inner dim) on copies of the head padded to whole vectors, so no block needs a
// tail. The forward takes 8 query rows at a time against all their keys (exact softmax, no online
// rescale; an 8-row block of scores stays in L1). The backward takes chunks of query rows whose
// probabilities and score gradients fit in L2 (the whole head up to 128 x 128), dQ finished per
// chunk, dK and dV summed over the chunks. Under a causal mask a block of query rows stops at its
// last row's key and a block of keys starts at its first query, so the blocks above the diagonal
// are never computed. Every product runs on this one micro-kernel at each level: the flash loop
// this replaced called the BLAS per 64 x 64 block, whose packing and call overhead made it slower
// than PyTorch's SDPA at avx2 from T = 160 on and left a 2x step at T = 128 -> 160.
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/attention/attention_cpu_rows.h"
#include "kernels/attention/attention_tile_vec.h"
#include "kernels/common/workspace.h"
#include "flowgrad/base/parallel.h"

namespace fg {
namespace {

// Rows of a block of scores, n (a multiple of kLane) columns each, ld apart; row r's keys from
// valid[r] on are cut (-inf). Loops run over whole vectors (fixed inner trip counts vectorise
// without tails), one call per block.

// Row x (n columns, a multiple of kLane) made scores in place: times scale, -inf from `valid` on;
// its lane-wise max into top (the row's max is its lanes' max; by reference: a 64-byte vector by
// value draws GCC's ABI note). Whole vectors only: a scalar or peeled store followed by a vector
// load of the same bytes stalls store forwarding.
template <class Index, std::size_t... I>
inline __attribute__((always_inline)) void lane_numbers(Index& idx, std::index_sequence<I...>) {
  idx = Index{I...};  // a constant: lane by lane it was a masked broadcast per lane and row
}
template <class T, int W>
inline __attribute__((always_inline)) void cut_row(T* x, int64_t n, int64_t valid, T scale, Vec<T, W>& top) {
  using Unaligned = typename VecOf<T, W>::unaligned;
  using Index = typename VecOf<T, W>::index;
  Unaligned* xv = reinterpret_cast<Unaligned*>(x);
  using Lane = std::remove_reference_t<decltype(Index{}[0])>;
  Index idx;
  lane_numbers(idx, std::make_index_sequence<kLane<T, W>>{});
  const Vec<T, W> neg_inf = Vec<T, W>{} - T(INFINITY);
  top = neg_inf;
  for (int64_t v = 0; v < n / kLane<T, W>; ++v, idx += kLane<T, W>) {
    Vec<T, W> y = idx < Index{} + static_cast<Lane>(valid) ? xv[v] * scale : neg_inf;
    xv[v] = y;
    top = y > top ? y : top;
  }
}

// exp_nonpositive over a vector (scores less their row's max, or NaN): float32 as whole vectors,
// where the lane loop was left scalar at avx2 (a compare and a branch per lane: vucomiss, ja in
// objdump) and at generic; float64 lane by lane (libm).
// In place (by reference: a vector by value draws GCC's ABI note).
template <class T, int W>
inline __attribute__((always_inline)) void exp_lanes(Vec<T, W>& x) {
  if constexpr (std::is_same_v<T, float>) {
    using Index = typename VecOf<T, W>::index;
    const Vec<T, W> low = Vec<T, W>{} - 86.0f, zero = Vec<T, W>{};
    const Vec<T, W> c = x < low ? low : x;  // NaN stays NaN
    const Vec<T, W> k = (c * 1.44269504f + 12582912.0f) - 12582912.0f;  // as fn::exp_poly_f32
    const Vec<T, W> r = (c - k * 0.693359375f) + k * 2.12194440e-4f;
    Vec<T, W> p = zero + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const Index bits = (__builtin_convertvector(k, Index) + 127) << 23;  // 2^k, k in [-125, 0]
    const Vec<T, W> e = p * (Vec<T, W>)bits;  // a vector cast keeps the bits
    x = x < low ? zero : e;
  } else {
    for (int j = 0; j < kLane<T, W>; ++j) x[j] = exp_nonpositive(x[j]);
  }
}

// Forward over a block of rows <= kRows: x = exp(scale x - max), unnormalised (the output divides
// by the sum); each row's max (0 while all -inf) into m, its sum into l. The block's maxima and
// sums are reduced across lanes together (reduce_rows).
template <class T, int W>
FG_CPU_KERNEL void softmax_block(T* __restrict x, int64_t ld, int64_t rows, int64_t n, const int64_t* valid, T scale,
                                 T (&m)[kRows], T (&l)[kRows]) {
  using Unaligned = typename VecOf<T, W>::unaligned;
  constexpr int64_t lane = kLane<T, W>;
  Vec<T, W> top[kRows], sum[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {  // unrolled, so that top and sum stay in registers
    top[r] = sum[r] = Vec<T, W>{};
    if (r < rows) cut_row<T, W>(x + r * ld, n, valid[r], scale, top[r]);
  }
  reduce_rows<Reduce::Max, T, W>(top, m);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    Unaligned* xv = reinterpret_cast<Unaligned*>(x + r * ld);
    T base = finite_max(m[r]);
    for (int64_t v = 0; v < n / lane; ++v) {
      Vec<T, W> y = xv[v] - base;
      exp_lanes<T, W>(y);
      xv[v] = y;
      sum[r] += y;
    }
  }
  reduce_rows<Reduce::Sum, T, W>(sum, l);
}

// Backward over a block of rows <= kRows: p = exp(scale x - max - log l) from the row statistics
// (x overwritten), D = rowsum(p * dp) and ds = ds_scale p (dp - D) over dp. D is the composite's
// (and equals rowsum(dO * O), as O = P V and dP = dO V^T) from the two blocks in cache: no pass
// over dO and O, whose rows the backward would otherwise fetch from memory for D alone.
template <class T, int W>
FG_CPU_KERNEL void probs_block(T* __restrict x, T* __restrict dp, int64_t ld, int64_t rows, int64_t n,
                               const int64_t* valid, T scale, const T* __restrict stats, T ds_scale) {
  using Unaligned = typename VecOf<T, W>::unaligned;
  constexpr int64_t lane = kLane<T, W>;
  Vec<T, W> dot[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {  // unrolled, so that dot stays in registers
    dot[r] = Vec<T, W>{};
    if (r >= rows) continue;
    T *row = x + r * ld, m = stats[2 * r], log_l = stats[2 * r + 1];
    Vec<T, W> top;
    cut_row<T, W>(row, n, valid[r], scale, top);
    Unaligned* xv = reinterpret_cast<Unaligned*>(row);
    const Unaligned* dpv = reinterpret_cast<const Unaligned*>(dp + r * ld);
    for (int64_t v = 0; v < n / lane; ++v) {
      Vec<T, W> y = (xv[v] - m) - log_l;  // log l = -inf: NaN, as the composite
      exp_lanes<T, W>(y);
      xv[v] = y;
      dot[r] += y * dpv[v];
    }
  }
  T d[kRows];
  reduce_rows<Reduce::Sum, T, W>(dot, d);
  for (int64_t r = 0; r < rows; ++r) {
    Unaligned *xv = reinterpret_cast<Unaligned*>(x + r * ld), *dpv = reinterpret_cast<Unaligned*>(dp + r * ld);
    for (int64_t v = 0; v < n / lane; ++v) dpv[v] = ds_scale * xv[v] * (dpv[v] - d[r]);
  }
}

// The score scale and cut of rows [i0, i0 + rows) as softmax_block and probs_block take them: with
// a mask the scores are made here (scale, mask, cut) and those functions take them as they are.
template <class T>
T prepare_scores(const AttentionShape& s, const AttentionMask& mask, int64_t bh, int64_t i0, int64_t rows, T* x,
                 int64_t ld, int64_t n, int64_t* valid) {
  for (int64_t r = 0; r < rows; ++r) valid[r] = attention_key_end(i0 + r + 1, s.S, s.causal);
  if (mask.kind == MaskKind::None) return static_cast<T>(s.scale);
  for (int64_t r = 0; r < rows; ++r) {
    mask_scores_row(mask, bh, i0 + r, 0, x + r * ld, n, static_cast<T>(s.scale), valid[r]);
    valid[r] = n;
  }
  return T(1);
}

// Query rows per backward chunk: its probabilities and score gradients, two (rows, Sp) blocks, at
// most kChunkElements each (128 KiB of float32, both in L2 beside the head's copies), so the whole
// head up to 128 x 128 (one chunk, nothing summed) and never fewer than kMinChunk rows (each chunk
// adds a pass over dK and dV, a 1 / rows share of their products).
constexpr int64_t kChunkElements = 32768, kMinChunk = 32;

// The row stride of the key-wide buffers (kt, vt, p, ds; dk and dv's row count): the padded keys,
// a cache line more when that is a multiple of 256 bytes. The products read p and ds down their
// columns (dK, dV); a stride of 2^n bytes put every row of such a column in a few of the L1 cache's
// 64 sets, which evicted each line before the next key block read its other half: on a Zen 5 EPYC
// at avx2 the backward took 36% longer per multiply-add at T = 1024 and 2048 than at 800 and 1600.
template <class T, int W>
int64_t key_stride(int64_t S) {
  const int64_t n = padded<T, W>(S);
  return n * static_cast<int64_t>(sizeof(T)) % 256 == 0 ? n + 64 / static_cast<int64_t>(sizeof(T)) : n;
}
template <class T, int W>
int64_t chunk_rows(const AttentionShape& s) {
  int64_t rows = std::max(kMinChunk, kChunkElements / padded<T, W>(s.S) / kRows * kRows);
  return rows >= s.L ? s.L : rows;
}

// One head's padded copies and products; rows and columns past the real ones are zero (q, k, kt,
// v, vt, dout: pack() writes them) or are never read (p and ds past a block's last key), so the
// arena, a part of the launch's workspace (over_heads), is never cleared. The forward's p is one
// block of kRows query rows; the backward's p and ds one chunk of `chunk` rows, and dk, dv sum
// the chunks (when there are several).
template <class T, int W>
struct Tile {
  int64_t L, S, E, Ev, Lp, Sp, Ep, Evp, chunk;
  T *q, *k, *kt, *v, *vt, *dout, *p, *ds, *dk, *dv;
  Mat<const T> qm, km, vm, doutm;  // q, k, v, dout as the products read them (operand())
  Tile(const AttentionShape& s, bool backward, T* arena)
      : L(s.L), S(s.S), E(s.E), Ev(s.Ev), Lp(padded<T, W>(s.L)), Sp(key_stride<T, W>(s.S)), Ep(padded<T, W>(s.E)),
        Evp(padded<T, W>(s.Ev)), chunk(chunk_rows<T, W>(s)) {
    T** parts[] = {&q, &k, &kt, &v, &vt, &dout, &p, &ds, &dk, &dv};
    T* at = arena + kLine;  // the arena is 64-byte aligned
    const std::array<int64_t, 10> n = sizes(s, backward);
    for (int i = 0; i < 10; ++i, at += kLine) *parts[i] = at, at += n[i];
  }
  // Elements of its arena: every buffer 64-byte aligned (a vector split over two cache lines cost
  // a second access and stalled store forwarding) and a vector further apart than its size (no two
  // buffers at the same offset modulo 4 KB, whose accesses the CPU would take for overlapping ones).
  static int64_t elements(const AttentionShape& s, bool backward) {
    int64_t total = 2 * kLine;
    for (int64_t n : sizes(s, backward)) total += n + kLine;
    return total;
  }

 private:
  static constexpr int64_t kLine = 64 / sizeof(T);  // a cache line of T (every size below is a multiple of it)
  // Elements of q, k, kt, v, vt, dout, p, ds, dk and dv (vt, dout, ds, dk, dv only for the backward,
  // dk and dv only over several chunks).
  static std::array<int64_t, 10> sizes(const AttentionShape& s, bool backward) {
    const int64_t Lp = padded<T, W>(s.L), Sp = key_stride<T, W>(s.S), Ep = padded<T, W>(s.E), Evp = padded<T, W>(s.Ev);
    const int64_t rows = backward ? padded<T, W>(chunk_rows<T, W>(s)) : kRows;
    const bool sums = backward && chunk_rows<T, W>(s) < s.L;
    return {Lp * Ep, Sp * Ep, Ep * Sp, Sp * Evp, backward ? Evp * Sp : 0, backward ? Lp * Evp : 0, rows * Sp,
            backward ? rows * Sp : 0, sums ? Sp * Ep : 0, sums ? Sp * Evp : 0};
  }
};

// dst (padded rows, ld) = src (rows, cols) and zeros past them.
template <class T, int W>
void pack(Mat<const T> src, int64_t rows, int64_t cols, T* dst, int64_t ld) {
  FG_AT_WIDTH(W, copy_rows<T, W>(src.data, src.ld, dst, ld, rows, cols));
  for (int64_t r = 0; r < rows; ++r) std::fill(dst + r * ld + cols, dst + (r + 1) * ld, T(0));
  std::fill(dst + rows * ld, dst + padded<T, W>(rows) * ld, T(0));
}
// Matrix m (rows, cols) of the head as the products read it: in place where whole row blocks and
// whole vectors cover it (every read stays inside), else its copy in the zero-padded buffer.
template <class T, int W>
Mat<const T> operand(Mat<const T> m, int64_t rows, int64_t cols, T* buf, int64_t ld) {
  if (rows % kRows == 0 && cols % kLane<T, W> == 0) return m;
  pack<T, W>(m, rows, cols, buf, ld);
  return {buf, ld};
}
// Its transpose (cols, padded rows) into dst, from m in place where whole kLane x kLane blocks
// cover it and its rows need no padding, else through the padded buffer. (At generic, 4 lanes
// and 8-row padding, 100 rows were transposed in place and columns 100-103 of dst left as the
// arena had them: a NaN there reached dP, and through D every dQ and dK of the head.)
template <class T, int W>
void transpose_of(Mat<const T> m, int64_t rows, int64_t cols, T* buf, int64_t ld, T* dst, int64_t ld_t) {
  if (rows == padded<T, W>(rows) && cols % kLane<T, W> == 0)
    return FG_AT_WIDTH(W, transpose_padded<T, W>(m.data, m.ld, rows, cols, dst, ld_t));
  pack<T, W>(m, rows, cols, buf, ld);
  FG_AT_WIDTH(W, transpose_padded<T, W>(buf, ld, padded<T, W>(rows), ld, dst, ld_t));
}

thread_local AttentionCpuWork work_done;  // this thread's, since attention_cpu_work_take

// rows_product at the level of W, counted into work_done.
// Returns the columns it computed.
template <class T, int W>
int64_t product(int64_t K, const T* a, int64_t a_row, int64_t a_k, const T* b, int64_t ldb, int64_t width,
                const Dest<T>& d) {
  thread_local std::vector<T> spread;  // generic's spread A block (rows_product)
  const int64_t cols = FG_AT_WIDTH(W, rows_product<T, W>(K, a, a_row, a_k, b, ldb, width, d, spread));
  work_done.products += 1, work_done.multiply_adds += K * kRows * cols;
  return cols;
}

// Keys [0, key_end) that query rows [i0, i0 + kRows) can see when blocks skip the causal cut.
int64_t block_key_end(int64_t i0, int64_t S, bool skip) { return skip ? std::min(i0 + kRows, S) : S; }

template <class T, int W>
void forward_head(const AttentionShape& s, const AttentionMask& mask, int64_t bh, const Head<T>& h, T* stats,
                  int64_t row_begin, int64_t row_end, Tile<T, W>& t) {  // query rows [row_begin, row_end)
  t.qm = operand<T, W>(h.q, s.L, s.E, t.q, t.Ep), t.vm = operand<T, W>(h.v, s.S, s.Ev, t.v, t.Evp);
  transpose_of<T, W>(h.k, s.S, s.E, t.k, t.Ep, t.kt, t.Sp);
  for (int64_t i0 = row_begin; i0 < row_end; i0 += kRows) {
    int64_t key_end = block_key_end(i0, s.S, s.causal), cols = padded<T, W>(key_end);
    T* p = t.p;  // columns [key_end, cols) may stay unwritten: softmax_block cuts them to -inf
    product<T, W>(s.E, t.qm.row(i0), t.qm.ld, 1, t.kt, t.Sp, key_end, whole(p, t.Sp, cols));
    int64_t rows = std::min(kRows, s.L - i0), valid[kRows];
    T m[kRows], l[kRows], log_l[kRows], inv[kRows];
    T scale = prepare_scores(s, mask, bh, i0, rows, p, t.Sp, cols, valid);
    FG_AT_WIDTH(W, softmax_block<T, W>(p, t.Sp, rows, cols, valid, scale, m, l));
    FG_AT_WIDTH(W, log_rows(l, log_l));
    for (int64_t r = 0; r < rows; ++r) {
      store_row_stats(stats, i0 + r, m[r], log_l[r]);
      inv[r] = T(1) / l[r];  // a fully masked row: 0 * (1 / 0) = NaN, as the composite
    }
    product<T, W>(key_end, p, t.Sp, 1, t.vm.data, t.vm.ld, t.Evp, Dest<T>{h.out_w.row(i0), h.out_w.ld, rows, s.Ev, inv});
  }
}

// Probabilities P and dS = scale P (dP - D) of query rows [c0, c_end) (t.p, t.ds, row c0 first)
// and their dQ = dS K.
template <class T, int W>
void backward_rows(const AttentionShape& s, const AttentionMask& mask, int64_t bh, const Head<T>& h,
                   const T* stats, bool skip, int64_t c0, int64_t c_end, Tile<T, W>& t) {
  T scale = static_cast<T>(s.scale);
  for (int64_t i0 = c0; i0 < c_end; i0 += kRows) {
    int64_t key_end = block_key_end(i0, s.S, skip), cols = padded<T, W>(key_end);
    T *p = t.p + (i0 - c0) * t.Sp, *ds = t.ds + (i0 - c0) * t.Sp;
    // Columns [key_end, cols) may stay unwritten: probs_block cuts p's to -inf (p = 0), and dP's
    // are zeroed, so that ds = p (dP - D) is 0 there, not 0 times whatever the arena held.
    product<T, W>(s.E, t.qm.row(i0), t.qm.ld, 1, t.kt, t.Sp, key_end, whole(p, t.Sp, cols));
    const int64_t done = product<T, W>(s.Ev, t.doutm.row(i0), t.doutm.ld, 1, t.vt, t.Sp, key_end, whole(ds, t.Sp, cols));
    for (int64_t r = 0; r < kRows && done < cols; ++r) std::fill(ds + r * t.Sp + done, ds + r * t.Sp + cols, T(0));
    int64_t rows = std::min(kRows, c_end - i0), valid[kRows];
    T score_scale = prepare_scores(s, mask, bh, i0, rows, p, t.Sp, cols, valid);
    FG_AT_WIDTH(W, probs_block<T, W>(p, ds, t.Sp, rows, cols, valid, score_scale, stats + 2 * i0, scale));
    product<T, W>(key_end, ds, t.Sp, 1, t.km.data, t.km.ld, t.Ep, Dest<T>{h.dq.row(i0), h.dq.ld, rows, s.E});
  }
}

// dV = P^T dO and dK = dS^T Q of keys [j0, j0 + kRows) over query rows [first, c_end) of the chunk
// that starts at c0: into dv, dk (added) over several chunks, else into the head's outputs.
template <class T, int W>
void key_block_grads(const AttentionShape& s, const Head<T>& h, int64_t j0, int64_t first, int64_t c0,
                     int64_t c_end, Tile<T, W>& t) {
  const T *p = t.p + (first - c0) * t.Sp + j0, *ds = t.ds + (first - c0) * t.Sp + j0;
  const bool sums = t.chunk < s.L;
  const int64_t rows = std::min(kRows, s.S - j0);
  Dest<T> dv = sums ? Dest<T>{t.dv + j0 * t.Evp, t.Evp, kRows, t.Evp, nullptr, Into::Add}
                    : Dest<T>{h.dv.row(j0), h.dv.ld, rows, s.Ev};
  Dest<T> dk = sums ? Dest<T>{t.dk + j0 * t.Ep, t.Ep, kRows, t.Ep, nullptr, Into::Add}
                    : Dest<T>{h.dk.row(j0), h.dk.ld, rows, s.E};
  product<T, W>(c_end - first, p, 1, t.Sp, t.doutm.row(first), t.doutm.ld, t.Evp, dv);
  product<T, W>(c_end - first, ds, 1, t.Sp, t.qm.row(first), t.qm.ld, t.Ep, dk);
}

template <class T, int W>
void backward_head(const AttentionShape& s, const AttentionMask& mask, int64_t bh, const Head<T>& h,
                   const T* stats, Tile<T, W>& t) {
  t.qm = operand<T, W>(h.q, s.L, s.E, t.q, t.Ep), t.km = operand<T, W>(h.k, s.S, s.E, t.k, t.Ep);
  t.doutm = operand<T, W>(h.dout, s.L, s.Ev, t.dout, t.Evp);
  transpose_of<T, W>(h.k, s.S, s.E, t.k, t.Ep, t.kt, t.Sp), transpose_of<T, W>(h.v, s.S, s.Ev, t.v, t.Evp, t.vt, t.Sp);
  // A fully masked row (log l = -inf) is NaN over every key, as the composite: no block skipping.
  bool skip = s.causal;
  for (int64_t i = 0; i < s.L; ++i) skip = skip && stats[2 * i + 1] != -INFINITY;
  const bool sums = t.chunk < s.L;
  if (sums) std::fill(t.dk, t.dk + t.Sp * t.Ep, T(0)), std::fill(t.dv, t.dv + t.Sp * t.Evp, T(0));
  for (int64_t c0 = 0; c0 < s.L; c0 += t.chunk) {
    const int64_t c_end = std::min(c0 + t.chunk, s.L);
    backward_rows<T, W>(s, mask, bh, h, stats, skip, c0, c_end, t);
    // Keys the chunk's rows see (all of them but for the causal cut); rows i < j0 see no key >= j0.
    const int64_t key_end = sums && skip ? std::min(c_end, s.S) : s.S;
    for (int64_t j0 = 0; j0 < key_end; j0 += kRows)
      key_block_grads<T, W>(s, h, j0, skip ? std::clamp(j0, c0, c_end) : c0, c0, c_end, t);
  }
  if (!sums) return;
  FG_AT_WIDTH(W, copy_rows<T, W>(t.dv, t.Evp, h.dv.data, h.dv.ld, s.S, s.Ev));
  FG_AT_WIDTH(W, copy_rows<T, W>(t.dk, t.Ep, h.dk.data, h.dk.ld, s.S, s.E));
}

// Prefetches (into L2) the rows of head bh that its kernel reads from memory, one head ahead: q,
// k, v and, in the backward, dO. A head's rows lie a row of the packed projection apart, a few
// cache lines each, a stride the hardware prefetchers did not follow.
template <class T>
void prefetch_head(const AttentionShape& s, const AttentionOperands& x, int64_t bh, bool backward) {
  if (bh >= s.bh) return;
  const Head<T> h = head_of<T>(x, bh);
  auto fetch = [](Mat<const T> m, int64_t rows, int64_t cols) {
    constexpr int64_t line = 64 / sizeof(T);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t c = 0; c < cols; c += line) __builtin_prefetch(m.row(i) + c, 0, 2);
      __builtin_prefetch(m.row(i) + cols - 1, 0, 2);  // a row that straddles one more line
    }
  };
  fetch(h.q, s.L, s.E), fetch(h.k, s.S, s.E), fetch(h.v, s.S, s.Ev);
  if (backward) fetch(h.dout, s.L, s.Ev);
}

// Heads per task: enough products to be worth a thread.
int64_t heads_per_task(const AttentionShape& s) { return kParallelGrain / (s.L * s.S * (s.E + s.Ev) + 1) + 1; }

// Runs fn(tile, bh, part) over every batch*head and each of its `parts` parts, split into one task
// per thread (enough products per task to be worth one), each task with its own tile arena in one
// workspace.
template <class T, int W, class Fn>
void over_heads(const KernelEnv& env, const AttentionShape& s, bool backward, int64_t parts, Fn&& fn) {
  const int64_t per = Tile<T, W>::elements(s, backward), units = s.bh * parts;
  const int64_t wanted = (s.bh + heads_per_task(s) - 1) / heads_per_task(s) * parts;
  const int64_t tasks = std::max<int64_t>(1, in_parallel_region() ? 1 : std::min<int64_t>(pool_threads(), wanted));
  CpuWorkspace arena(env, static_cast<size_t>(tasks * per) * sizeof(T));
  parallel_for(tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      Tile<T, W> tile(s, backward, static_cast<T*>(arena.data()) + task * per);
      for (int64_t u = units * task / tasks; u < units * (task + 1) / tasks; ++u) fn(tile, u / parts, u % parts);
    }
  });
}

// Parts of each head's query rows in the forward: 1, or, with fewer heads than threads and heads of
// a task's worth of products each, enough for every thread (64 rows at least; each part packs its
// head's keys and values again, O(S E) beside its O(rows S E) products). The backward sums dK
// and dV over all of a head's rows, so one worker takes a head whole.
int64_t forward_parts(const AttentionShape& s) {
  const int64_t threads = in_parallel_region() ? 1 : pool_threads();
  if (s.bh >= threads || heads_per_task(s) > 1) return 1;
  return std::clamp<int64_t>((threads + s.bh - 1) / s.bh, 1, (s.L + 63) / 64);
}

template <class T, int W>
void tile_forward(const KernelEnv& env, const AttentionShape& s, const AttentionMask& mask, const AttentionOperands& x,
                  T* stats) {
  const int64_t parts = forward_parts(s);
  over_heads<T, W>(env, s, false, parts, [&](Tile<T, W>& tile, int64_t bh, int64_t part) {
    if (part == 0) prefetch_head<T>(s, x, bh + 1, false);
    const int64_t begin = s.L * part / parts / kRows * kRows, end = s.L * (part + 1) / parts / kRows * kRows;
    forward_head<T, W>(s, mask, bh, head_of<T>(x, bh), stats + bh * s.L * 2, begin, part + 1 == parts ? s.L : end, tile);
  });
}

template <class T, int W>
void tile_backward(const KernelEnv& env, const AttentionShape& s, const AttentionMask& mask, const AttentionOperands& x,
                   const T* stats) {
  over_heads<T, W>(env, s, true, 1, [&](Tile<T, W>& tile, int64_t bh, int64_t) {
    prefetch_head<T>(s, x, bh + 1, true);
    backward_head<T, W>(s, mask, bh, head_of<T>(x, bh), stats + bh * s.L * 2, tile);
  });
}

}  // namespace

AttentionCpuWork attention_cpu_work_take() { return std::exchange(work_done, AttentionCpuWork{}); }

template <class T>
void attention_tile_forward(const KernelEnv& env, const AttentionShape& s, const AttentionMask& mask,
                            const AttentionOperands& x, T* stats) {
  switch (isa_vector_bytes()) {
    case 64: return tile_forward<T, 64>(env, s, mask, x, stats);
    case 32: return tile_forward<T, 32>(env, s, mask, x, stats);
    default: return tile_forward<T, 16>(env, s, mask, x, stats);
  }
}

template <class T>
void attention_tile_backward(const KernelEnv& env, const AttentionShape& s, const AttentionMask& mask,
                             const AttentionOperands& x, const T* stats) {
  switch (isa_vector_bytes()) {
    case 64: return tile_backward<T, 64>(env, s, mask, x, stats);
    case 32: return tile_backward<T, 32>(env, s, mask, x, stats);
    default: return tile_backward<T, 16>(env, s, mask, x, stats);
  }
}

template void attention_tile_forward<float>(const KernelEnv&, const AttentionShape&, const AttentionMask&,
                                            const AttentionOperands&, float*);
template void attention_tile_forward<double>(const KernelEnv&, const AttentionShape&, const AttentionMask&,
                                             const AttentionOperands&, double*);
template void attention_tile_backward<float>(const KernelEnv&, const AttentionShape&, const AttentionMask&,
                                             const AttentionOperands&, const float*);
template void attention_tile_backward<double>(const KernelEnv&, const AttentionShape&, const AttentionMask&,
                                              const AttentionOperands&, const double*);

}  // namespace fg
