// Flash attention on CUDA: float32, bfloat16 and float16 storage with float32 accumulation,
// templated on the head dim padded to 32/64/96/128. Mask, causal and key-range logic are the shared
// helpers of attention.h that the CPU kernel runs too.
//
// Forward, float32 (and half types before sm_80): one block of 256 threads per (batch*head, 64
// query rows); four threads per query row, each holding a quarter of the row's output columns in
// registers; 64-key tiles, FMA on shared memory.
// Forward, bfloat16/float16 on sm_80+: tensor cores through nvcuda::wmma (16x16x16, float32
// accumulators): four warps of 16 query rows each for S = Q K^T and O += P V; the online softmax
// and the rescaled output stay in float32 shared memory. No wgmma (sm_90) path.
// Backward (FlashAttention-2): a preprocess kernel writes D = rowsum(dO * O) and zeroes the float32
// dQ sums; one block per (batch*head, 64 keys) keeps dK, dV in registers over 32-row query tiles
// and adds dQ with atomicAdd; a last kernel scales dQ and narrows it to the storage type.
#include "kernels/attention/attention.h"
#include "flowgrad/base/half.h"
#include "kernels/common/launch.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <type_traits>

namespace fg {
namespace {

constexpr int kBlockThreads = 256;
constexpr int kFwdRows = kAttentionFwdRows, kKeys = kAttentionKeys, kBwdRows = kAttentionBwdRows;

template <class T>
__device__ float load(const T* p, int64_t i) { return static_cast<float>(p[i]); }

// tile (rows, kD + 1) <- src rows [row0, row0 + rows) of a (n, width) matrix, zero outside.
template <class T, int kD>
__device__ void load_tile(float* tile, int rows, const T* src, int64_t row0, int64_t n, int64_t width) {
  for (int idx = threadIdx.x; idx < rows * kD; idx += kBlockThreads) {
    int r = idx / kD, d = idx % kD;
    int64_t row = row0 + r;
    tile[r * (kD + 1) + d] = row < n && d < width ? load(src, row * width + d) : 0.f;
  }
}

// Sum over the four consecutive lanes that share a row (or a key).
__device__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

template <class T, int kD>
__global__ void __launch_bounds__(kBlockThreads)
attention_forward_kernel(AttentionShape s, AttentionMask mask, int64_t query_blocks,
                         const T* q, const T* k, const T* v,  // (BH, L, E), (BH, S, E), (BH, S, Ev)
                         T* out, float* stats) {              // (BH, L, Ev), (BH, L, 2)
  extern __shared__ __align__(128) float smem[];
  float* qs = smem;                       // (kFwdRows, kD + 1)
  float* ks = qs + kFwdRows * (kD + 1);   // (kKeys, kD + 1)
  float* vs = ks + kKeys * (kD + 1);      // (kKeys, kD + 1)
  float* ps = vs + kKeys * (kD + 1);      // (kFwdRows, kKeys + 1)
  int64_t bh = blockIdx.x / query_blocks, q0 = blockIdx.x % query_blocks * kFwdRows;
  int r = threadIdx.x / 4, g = threadIdx.x % 4;
  int64_t i = q0 + r;
  bool row_valid = i < s.L;
  int64_t mrow = mask.kind != MaskKind::None && row_valid ? mask_row_offset(mask, bh, i) : 0;
  load_tile<T, kD>(qs, kFwdRows, q + bh * s.L * s.E, q0, s.L, s.E);
  float o[kD / 4] = {};
  float m = -INFINITY, l = 0.f, scale = static_cast<float>(s.scale);
  int64_t key_end = attention_key_end(min(q0 + kFwdRows, s.L), s.S, s.causal);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<T, kD>(ks, kKeys, k + bh * s.S * s.E, j0, s.S, s.E);
    load_tile<T, kD>(vs, kKeys, v + bh * s.S * s.Ev, j0, s.S, s.Ev);
    __syncthreads();
    float sc[kKeys / 4], block_max = -INFINITY;
#pragma unroll
    for (int t = 0; t < kKeys / 4; ++t) {
      int c = g + 4 * t;
      int64_t j = j0 + c;
      float acc = 0.f;
#pragma unroll 8
      for (int d = 0; d < kD; ++d) acc = fmaf(qs[r * (kD + 1) + d], ks[c * (kD + 1) + d], acc);
      sc[t] = row_valid && j < s.S ? acc * scale + mask_bias<float>(mask, mrow, i, j, s.causal) : -INFINITY;
      block_max = fmaxf(block_max, sc[t]);
    }
    float new_max = fmaxf(m, quad_max(block_max)), base = finite_max(new_max);
    float alpha = online_rescale(m, base, [](float x) { return expf(x); }), sum = 0.f;
#pragma unroll
    for (int t = 0; t < kKeys / 4; ++t) {
      float p = expf(sc[t] - base);
      ps[r * (kKeys + 1) + g + 4 * t] = p;
      sum += p;
    }
    l = l * alpha + quad_sum(sum);
    m = new_max;
    __syncwarp();  // a row's probabilities come from the four lanes of its quad
#pragma unroll
    for (int t = 0; t < kD / 4; ++t) o[t] *= alpha;
    for (int c = 0; c < kKeys; ++c) {
      float p = ps[r * (kKeys + 1) + c];
#pragma unroll
      for (int t = 0; t < kD / 4; ++t) o[t] = fmaf(p, vs[c * (kD + 1) + g + 4 * t], o[t]);
    }
  }
  if (!row_valid) return;
  float inv = 1.f / l;  // a fully masked row: 0 * inf = NaN, log l = -inf, as on the CPU
#pragma unroll
  for (int t = 0; t < kD / 4; ++t)
    if (g + 4 * t < s.Ev) out[(bh * s.L + i) * s.Ev + g + 4 * t] = T(o[t] * inv);
  if (g == 0) store_row_stats(stats, bh * s.L + i, m, logf(l));
}

template <class T> struct WmmaType { using type = T; };
template <> struct WmmaType<bfloat16> { using type = __nv_bfloat16; };
template <> struct WmmaType<float16> { using type = __half; };

constexpr int kTcWarps = 4, kTcRows = 16 * kTcWarps;
static_assert(kTcRows == kFwdRows, "attention_cuda_shared_bytes counts one forward tile height");

// The tensor-core forward for half types: smem holds Q, K, V tiles (half, (64, kD)), the scores
// S (float, (64, 64)), P (half, (64, 64)), the output sums O and this tile's P V (float, (64, kD))
// and each row's rescale factor.
template <class T, int kD>
__global__ void __launch_bounds__(32 * kTcWarps)
attention_forward_tc_kernel(AttentionShape s, AttentionMask mask, int64_t query_blocks,
                            const T* q, const T* k, const T* v,  // (BH, L, E), (BH, S, E), (BH, S, Ev)
                            T* out, float* stats) {              // (BH, L, Ev), (BH, L, 2)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  namespace wmma = nvcuda::wmma;
  using H = typename WmmaType<T>::type;
  extern __shared__ __align__(128) float smem[];
  float* ss = smem;                          // (kTcRows, kKeys)
  float* os = ss + kTcRows * kKeys;          // (kTcRows, kD)
  float* pvs = os + kTcRows * kD;            // (kTcRows, kD)
  float* alphas = pvs + kTcRows * kD;        // (kTcRows)
  T* qs = reinterpret_cast<T*>(alphas + kTcRows);  // (kTcRows, kD)
  T* ks = qs + kTcRows * kD;                 // (kKeys, kD)
  T* vs = ks + kKeys * kD;                   // (kKeys, kD)
  T* ps = vs + kKeys * kD;                   // (kTcRows, kKeys)
  int64_t bh = blockIdx.x / query_blocks, q0 = blockIdx.x % query_blocks * kTcRows;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int r = warp * 16 + lane / 2, half = lane % 2;  // this lane's row and half of the row's columns
  int64_t i = q0 + r;
  bool row_valid = i < s.L;
  int64_t mrow = mask.kind != MaskKind::None && row_valid ? mask_row_offset(mask, bh, i) : 0;
  auto load = [&](T* tile, int rows, const T* src, int64_t row0, int64_t n, int64_t width) {
    for (int idx = threadIdx.x; idx < rows * kD; idx += 32 * kTcWarps) {
      int rr = idx / kD, d = idx % kD;
      tile[idx] = row0 + rr < n && d < width ? src[(row0 + rr) * width + d] : T(0.f);
    }
  };
  load(qs, kTcRows, q + bh * s.L * s.E, q0, s.L, s.E);
  for (int idx = threadIdx.x; idx < kTcRows * kD; idx += 32 * kTcWarps) os[idx] = 0.f;
  float m = -INFINITY, l = 0.f, scale = static_cast<float>(s.scale);
  int64_t key_end = attention_key_end(min(q0 + kTcRows, s.L), s.S, s.causal);
  const H* qh = reinterpret_cast<const H*>(qs);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    __syncthreads();  // the previous K, V tiles are no longer read
    load(ks, kKeys, k + bh * s.S * s.E, j0, s.S, s.E);
    load(vs, kKeys, v + bh * s.S * s.Ev, j0, s.S, s.Ev);
    __syncthreads();
    for (int nt = 0; nt < kKeys / 16; ++nt) {  // this warp's 16 rows of S = Q K^T
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < kD / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::col_major> b;  // K^T
        wmma::load_matrix_sync(a, qh + warp * 16 * kD + kk * 16, kD);
        wmma::load_matrix_sync(b, reinterpret_cast<const H*>(ks) + nt * 16 * kD + kk * 16, kD);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(ss + warp * 16 * kKeys + nt * 16, acc, kKeys, wmma::mem_row_major);
    }
    __syncwarp();
    float* srow = ss + r * kKeys;
    float block_max = -INFINITY;
    for (int c = half * (kKeys / 2); c < (half + 1) * (kKeys / 2); ++c) {
      int64_t j = j0 + c;
      float x = row_valid && j < s.S ? srow[c] * scale + mask_bias<float>(mask, mrow, i, j, s.causal) : -INFINITY;
      srow[c] = x;
      block_max = fmaxf(block_max, x);
    }
    float new_max = fmaxf(m, fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1)));
    float base = finite_max(new_max), sum = 0.f;
    float alpha = online_rescale(m, base, [](float x) { return expf(x); });
    for (int c = half * (kKeys / 2); c < (half + 1) * (kKeys / 2); ++c) {
      float p = expf(srow[c] - base);
      ps[r * kKeys + c] = T(p);
      sum += p;
    }
    l = l * alpha + sum + __shfl_xor_sync(0xffffffffu, sum, 1);
    m = new_max;
    if (half == 0) alphas[r] = alpha;
    __syncwarp();
    for (int nt = 0; nt < kD / 16; ++nt) {  // this warp's 16 rows of P V
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::row_major> b;
        wmma::load_matrix_sync(a, reinterpret_cast<const H*>(ps) + warp * 16 * kKeys + kk * 16, kKeys);
        wmma::load_matrix_sync(b, reinterpret_cast<const H*>(vs) + kk * 16 * kD + nt * 16, kD);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(pvs + warp * 16 * kD + nt * 16, acc, kD, wmma::mem_row_major);
    }
    __syncwarp();
    for (int idx = lane; idx < 16 * kD; idx += 32) {
      int row = warp * 16 + idx / kD;
      os[row * kD + idx % kD] = os[row * kD + idx % kD] * alphas[row] + pvs[row * kD + idx % kD];
    }
    __syncwarp();
  }
  if (!row_valid) return;
  float inv = 1.f / l;  // a fully masked row: NaN, log l = -inf, as on the CPU
  for (int e = half * (kD / 2); e < (half + 1) * (kD / 2) && e < s.Ev; ++e)
    out[(bh * s.L + i) * s.Ev + e] = T(os[r * kD + e] * inv);
  if (half == 0) store_row_stats(stats, bh * s.L + i, m, logf(l));
#endif
}

int device_attribute(cudaDeviceAttr attr, int device) {
  int value = 0;
  cudaError_t err = cudaDeviceGetAttribute(&value, attr, device);
  FG_CHECK(err == cudaSuccess, Device, "scaled_dot_product_attention on cuda:", device, ": reading a device attribute failed: ",
           cudaGetErrorString(err));
  return value;
}

// Compute capability 8.0 or above (bf16/fp16 wmma).
bool has_tensor_cores(int device) { return device_attribute(cudaDevAttrComputeCapabilityMajor, device) >= 8; }

int current_device() {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  FG_CHECK(err == cudaSuccess, Device, "scaled_dot_product_attention on cuda: cudaGetDevice failed: ", cudaGetErrorString(err));
  return device;
}

// D = rowsum(dO * O) per query row, and the dQ sums zeroed. One thread per row.
template <class T>
__global__ void attention_backward_prepare(int64_t rows, int64_t E, int64_t Ev, const T* out, const T* dout,
                                           float* dq_sum, float* delta) {
  FG_GRID_LOOP(row, rows) {
    float d = 0.f;
    for (int64_t e = 0; e < Ev; ++e) d += load(out, row * Ev + e) * load(dout, row * Ev + e);
    delta[row] = d;
    for (int64_t e = 0; e < E; ++e) dq_sum[row * E + e] = 0.f;
  }
}

template <class T>
__global__ void attention_backward_finish(int64_t n, float scale, const float* dq_sum, T* dq) {
  FG_GRID_LOOP(idx, n) dq[idx] = T(dq_sum[idx] * scale);
}

template <class T, int kD>
__global__ void __launch_bounds__(kBlockThreads)
attention_backward_kernel(AttentionShape s, AttentionMask mask, int64_t key_blocks,
                          const T* q, const T* k, const T* v, const T* dout,  // like the forward
                          const float* stats, const float* delta,            // (BH, L, 2), (BH, L)
                          float* dq_sum, T* dk, T* dv) {                     // (BH, L, E) float32
  extern __shared__ __align__(128) float smem[];
  float* ks = smem;                         // (kKeys, kD + 1)
  float* vs = ks + kKeys * (kD + 1);        // (kKeys, kD + 1)
  float* qs = vs + kKeys * (kD + 1);        // (kBwdRows, kD + 1)
  float* dos = qs + kBwdRows * (kD + 1);    // (kBwdRows, kD + 1)
  float* ps = dos + kBwdRows * (kD + 1);    // (kKeys, kBwdRows + 1): P^T
  float* dss = ps + kKeys * (kBwdRows + 1); // (kKeys, kBwdRows + 1): dS^T
  float* row_max = dss + kKeys * (kBwdRows + 1);  // (kBwdRows)
  float* row_log_sum = row_max + kBwdRows;        // (kBwdRows)
  float* row_delta = row_log_sum + kBwdRows;      // (kBwdRows)
  int64_t bh = blockIdx.x / key_blocks, j0 = blockIdx.x % key_blocks * kKeys;
  int c = threadIdx.x / 4, g = threadIdx.x % 4;  // this thread's key and quarter of columns
  int64_t j = j0 + c;
  bool key_valid = j < s.S;
  float scale = static_cast<float>(s.scale);
  load_tile<T, kD>(ks, kKeys, k + bh * s.S * s.E, j0, s.S, s.E);
  load_tile<T, kD>(vs, kKeys, v + bh * s.S * s.Ev, j0, s.S, s.Ev);
  float dk_acc[kD / 4] = {}, dv_acc[kD / 4] = {};
  int64_t first = s.causal ? j0 / kBwdRows * kBwdRows : 0;  // rows i < j0 see none of these keys
  for (int64_t i0 = first; i0 < s.L; i0 += kBwdRows) {
    __syncthreads();  // the previous query tile is no longer read
    load_tile<T, kD>(qs, kBwdRows, q + bh * s.L * s.E, i0, s.L, s.E);
    load_tile<T, kD>(dos, kBwdRows, dout + bh * s.L * s.Ev, i0, s.L, s.Ev);
    for (int r = threadIdx.x; r < kBwdRows; r += kBlockThreads) {
      bool valid = i0 + r < s.L;  // a padding row: s = -inf, statistics 0 give p = 0
      row_max[r] = valid ? stats[2 * (bh * s.L + i0 + r)] : 0.f;
      row_log_sum[r] = valid ? stats[2 * (bh * s.L + i0 + r) + 1] : 0.f;
      row_delta[r] = valid ? delta[bh * s.L + i0 + r] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < kBwdRows / 4; ++t) {
      int r = g + 4 * t;
      int64_t i = i0 + r;
      float qk = 0.f, dp = 0.f;
#pragma unroll 8
      for (int d = 0; d < kD; ++d) {
        qk = fmaf(qs[r * (kD + 1) + d], ks[c * (kD + 1) + d], qk);
        dp = fmaf(dos[r * (kD + 1) + d], vs[c * (kD + 1) + d], dp);
      }
      float p = 0.f;
      if (key_valid && i < s.L) {
        int64_t mrow = mask.kind != MaskKind::None ? mask_row_offset(mask, bh, i) : 0;
        p = expf(qk * scale + mask_bias<float>(mask, mrow, i, j, s.causal) - row_max[r] - row_log_sum[r]);
      }
      ps[c * (kBwdRows + 1) + r] = p;
      dss[c * (kBwdRows + 1) + r] = p * (dp - row_delta[r]);
    }
    __syncthreads();  // dQ below reads every key's dS
    for (int r = 0; r < kBwdRows; ++r) {
      float p = ps[c * (kBwdRows + 1) + r], ds = dss[c * (kBwdRows + 1) + r];
#pragma unroll
      for (int t = 0; t < kD / 4; ++t) {
        dv_acc[t] = fmaf(p, dos[r * (kD + 1) + g + 4 * t], dv_acc[t]);
        dk_acc[t] = fmaf(ds, qs[r * (kD + 1) + g + 4 * t], dk_acc[t]);
      }
    }
    // dQ rows of this tile: eight threads per row, each over every eighth column
    int r = threadIdx.x / 8, g8 = threadIdx.x % 8;
    if (i0 + r < s.L) {
      for (int e = g8; e < s.E; e += 8) {
        float acc = 0.f;
        for (int cc = 0; cc < kKeys; ++cc) acc = fmaf(dss[cc * (kBwdRows + 1) + r], ks[cc * (kD + 1) + e], acc);
        atomicAdd(dq_sum + (bh * s.L + i0 + r) * s.E + e, acc);
      }
    }
  }
  if (!key_valid) return;
#pragma unroll
  for (int t = 0; t < kD / 4; ++t) {
    int e = g + 4 * t;
    if (e < s.E) dk[(bh * s.S + j) * s.E + e] = T(dk_acc[t] * scale);
    if (e < s.Ev) dv[(bh * s.S + j) * s.Ev + e] = T(dv_acc[t]);
  }
}

static_assert(kKeys * 4 == kBlockThreads && kFwdRows * 4 == kBlockThreads && kBwdRows * 8 == kBlockThreads,
              "the thread layouts above assume these tile sizes");

// Calls fn(T{}, std::integral_constant<int, kD>{}) for the storage type and the padded head dim.
template <class Fn>
void dispatch(DType dtype, int64_t head_dim, const char* what, Fn&& fn) {
  auto with_dim = [&](auto tag) {
    if (head_dim <= 32) return fn(tag, std::integral_constant<int, 32>{});
    if (head_dim <= 64) return fn(tag, std::integral_constant<int, 64>{});
    if (head_dim <= 96) return fn(tag, std::integral_constant<int, 96>{});
    return fn(tag, std::integral_constant<int, 128>{});
  };
  FG_CHECK(head_dim <= kAttentionCudaMaxHeadDim, Value, what, " on cuda: head dim ", head_dim, " above ",
           kAttentionCudaMaxHeadDim);
  if (dtype == DType::Float32) return with_dim(float{});
  if (dtype == DType::BFloat16) return with_dim(bfloat16{});
  if (dtype == DType::Float16) return with_dim(float16{});
  fail(ErrorKind::DType, what, " on cuda: expected float32, bfloat16 or float16, got ", dtype_name(dtype));
}

// Shared memory above 48 KB must be requested per kernel.
template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes, const char* what) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) cudaGetLastError();  // reported here, not again by the next launch check
  FG_CHECK(err == cudaSuccess, Device, what, " on cuda: ", bytes, " bytes of shared memory: ", cudaGetErrorString(err));
}

unsigned blocks_for(int64_t bh, int64_t tiles, const char* what) {
  FG_CHECK(bh * tiles <= INT32_MAX, Value, what, " on cuda: ", bh, " x ", tiles, " tiles exceed one launch");
  return static_cast<unsigned>(bh * tiles);
}

}  // namespace

const char* attention_cuda_device_problem(DType dtype, int64_t head_dim, int device) {
  return attention_cuda_shared_problem(dtype, head_dim, has_tensor_cores(device),
                                       device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
}

void attention_forward_cuda(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                            const void* q, const void* k, const void* v, void* out, void* stats) {
  if (s.bh == 0 || s.L == 0) return;
  const char* what = "scaled_dot_product_attention";
  dispatch(dtype, std::max(s.E, s.Ev), what, [&](auto tag, auto dim) {
    using T = decltype(tag);
    constexpr int kD = decltype(dim)::value;
    bool tensor_cores = has_tensor_cores(current_device());
    size_t bytes = attention_cuda_shared_bytes(dtype, kD, tensor_cores).forward;
    if constexpr (!std::is_same_v<T, float>) {
      if (tensor_cores) {
        auto kernel = attention_forward_tc_kernel<T, kD>;
        allow_shared(kernel, bytes, what);
        int64_t tiles = (s.L + kTcRows - 1) / kTcRows;
        kernel<<<blocks_for(s.bh, tiles, what), 32 * kTcWarps, bytes, kernel_stream(env)>>>(
            s, mask, tiles, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
            static_cast<T*>(out), static_cast<float*>(stats));
        check_launch(what);
        return;
      }
    }
    auto kernel = attention_forward_kernel<T, kD>;
    allow_shared(kernel, bytes, what);
    int64_t tiles = (s.L + kFwdRows - 1) / kFwdRows;
    kernel<<<blocks_for(s.bh, tiles, what), kBlockThreads, bytes, kernel_stream(env)>>>(
        s, mask, tiles, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
        static_cast<T*>(out), static_cast<float*>(stats));
    check_launch(what);
  });
}

void attention_backward_cuda(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                             const void* q, const void* k, const void* v, const void* out,
                             const void* dout, const void* stats, void* dq, void* dk, void* dv,
                             float* workspace) {
  if (s.bh == 0 || (s.L == 0 && s.S == 0)) return;
  const char* what = "scaled_dot_product_attention backward";
  dispatch(dtype, std::max(s.E, s.Ev), what, [&](auto tag, auto dim) {
    using T = decltype(tag);
    constexpr int kD = decltype(dim)::value;
    int64_t rows = s.bh * s.L;
    float *dq_sum = workspace, *delta = workspace + rows * s.E;
    if (rows > 0) {
      attention_backward_prepare<T><<<grid_for(rows), kThreads, 0, kernel_stream(env)>>>(rows, s.E, s.Ev, static_cast<const T*>(out),
                                                                 static_cast<const T*>(dout), dq_sum, delta);
      check_launch(what);
    }
    size_t bytes = attention_cuda_shared_bytes(dtype, kD, false).backward;
    auto kernel = attention_backward_kernel<T, kD>;
    allow_shared(kernel, bytes, what);
    int64_t tiles = (s.S + kKeys - 1) / kKeys;
    if (tiles > 0) {  // with L == 0 every key's dK, dV is written 0 by its block
      kernel<<<blocks_for(s.bh, tiles, what), kBlockThreads, bytes, kernel_stream(env)>>>(
          s, mask, tiles, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
          static_cast<const T*>(dout), static_cast<const float*>(stats), delta, dq_sum, static_cast<T*>(dk),
          static_cast<T*>(dv));
      check_launch(what);
    }
    if (rows * s.E > 0) {
      attention_backward_finish<T><<<grid_for(rows * s.E), kThreads, 0, kernel_stream(env)>>>(rows * s.E, static_cast<float>(s.scale),
                                                                        dq_sum, static_cast<T*>(dq));
      check_launch(what);
    }
  });
}

}  // namespace fg
