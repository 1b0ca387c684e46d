// oneDNN's forward convolution (kernels/nn/nn.h), in builds that found it (FLOWGRAD_ONEDNN), for
// the shapes where it beats flowgrad's own (kernels/nn/conv_cpu.cpp). Its blocked direct kernels
// put output channels in the vector lanes and keep a block of them in registers; ours multiply
// NCHW columns. Measured per shape (benchmarks/bench_conv.py, docs/benchmarks.md), it wins at avx2
// on kernels larger than 1x1, and at avx512 on strides above 1 and kernels larger than 3x3; a
// single image, and every shape at generic (below oneDNN's SSE4.1), runs ours.
//
// The images are split over the pool's threads as conv_cpu.cpp splits them, and each thread runs
// oneDNN on its images alone (OpenMP held to one thread there), so no second pool of threads spins
// beside ours. An image's values do not depend on how many images a primitive takes (checked by
// tests/ops/test_conv_onednn.py), so the bits do not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "flowgrad/base/errors.h"
#include "flowgrad/base/parallel.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/workspace.h"
#include "kernels/nn/nn.h"

#if FLOWGRAD_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
extern "C" {  // the OpenMP runtime oneDNN runs on (libgomp with Debian's libdnnl)
int omp_get_max_threads(void);
void omp_set_num_threads(int);
}
#endif
#endif

namespace fg {

namespace {
std::atomic<ConvKernel>& conv_choice() {
  static std::atomic<ConvKernel> choice{ConvKernel::Auto};
  return choice;
}
}  // namespace

ConvKernel set_conv_kernel(ConvKernel which) {
  conv_choice() = which;
  return which;
}

ConvKernel conv_kernel_in_use() { return conv_choice(); }

ConvKernel conv_kernel_named(const std::string& name) {
  if (name == "auto") return ConvKernel::Auto;
  if (name == "own") return ConvKernel::Own;
  FG_CHECK(name == "onednn", Value, "conv kernel '", name, "' is not 'auto', 'own' or 'onednn'");
  return ConvKernel::OneDnn;
}

std::string conv_kernel_name(ConvKernel which) {
  return which == ConvKernel::Auto ? "auto" : which == ConvKernel::Own ? "own" : "onednn";
}

#if !FLOWGRAD_HAVE_ONEDNN

std::string onednn_version() { return ""; }
bool conv2d_takes_onednn(DType, const Conv2dGeometry&, int64_t) { return false; }
bool conv2d_onednn_cpu(const KernelEnv&, DType, const Conv2dGeometry&, int64_t, const void*, const void*, const void*,
                       void*) {
  return false;
}

#else

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

// The level oneDNN generates code for, fixed by its first primitive (dnnl::set_max_cpu_isa works
// only before): the level in force then. oneDNN runs only while cpu_isa() is that level.
// Generic (never) when the level could not be set: another user of the library in this process
// made code first.
Isa onednn_level() {
  static const Isa level = [] {
    const Isa isa = cpu_isa();
    try {
      if (isa == Isa::Avx2) dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
    } catch (const dnnl::error&) {
      return Isa::Generic;
    }
    return isa;
  }();
  return level;
}

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// OpenMP held to one thread on the calling thread while oneDNN runs there (or plans a call: it
// reads the thread count then), then restored.
class OneThread {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
 public:
  OneThread() : before_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(before_); }

 private:
  int before_;
#endif
};

// A convolution of n images of the geometry's shape: the primitive and the reorders between
// flowgrad's layouts (NCHW, OIHW) and the blocked ones it chose, each null where none is needed.
struct Prepared {
  dnnl::convolution_forward conv;
  memory::desc src, weights, dst, scratch, user_src, user_weights, user_dst;
  std::unique_ptr<dnnl::reorder> to_src, to_weights, from_dst;
};

memory::dims dims(std::initializer_list<int64_t> v) { return memory::dims(v); }

std::unique_ptr<Prepared> prepare(const Conv2dGeometry& g, int64_t out_ch, int64_t n, bool bias) {
  auto p = std::make_unique<Prepared>();
  const memory::dims src = dims({n, g.c, g.h, g.w}), weights = dims({out_ch, g.c, g.kh, g.kw}),
                     dst = dims({n, out_ch, g.out_h, g.out_w}), strides = dims({g.stride_h, g.stride_w}),
                     pad = dims({g.pad_h, g.pad_w});
  const memory::desc any_src(src, kF32, Tag::any), any_weights(weights, kF32, Tag::any),
      any_dst(dst, kF32, Tag::any), bias_desc = bias ? memory::desc(dims({out_ch}), kF32, Tag::x) : memory::desc();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // from the kernel's workspace
#if DNNL_VERSION_MAJOR >= 3
  const dnnl::convolution_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference,
                                                     dnnl::algorithm::convolution_direct, any_src, any_weights,
                                                     bias_desc, any_dst, strides, pad, pad, attr);
#else
  const dnnl::convolution_forward::desc op(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           any_src, any_weights, bias_desc, any_dst, strides, pad, pad);
  const dnnl::convolution_forward::primitive_desc pd(op, attr, engine());
#endif
  p->conv = dnnl::convolution_forward(pd);
  p->src = pd.src_desc(), p->weights = pd.weights_desc(), p->dst = pd.dst_desc();
  p->user_src = memory::desc(src, kF32, Tag::nchw);
  p->user_weights = memory::desc(weights, kF32, Tag::oihw);
  p->user_dst = memory::desc(dst, kF32, Tag::nchw);
  p->scratch = pd.scratchpad_desc();
  auto reorder = [](const memory::desc& from, const memory::desc& to) {
    return from == to ? nullptr : std::make_unique<dnnl::reorder>(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
  };
  p->to_src = reorder(p->user_src, p->src);
  p->to_weights = reorder(p->user_weights, p->weights);
  p->from_dst = reorder(p->dst, p->user_dst);
  return p;
}

// Prepared convolutions by shape, made once (oneDNN generates their code) and kept, up to
// kKeptShapes of them (past that, one is dropped for each new one; a caller still running it holds
// it): null where oneDNN has none, so that shape keeps flowgrad's own.
constexpr size_t kKeptShapes = 256;
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, bool>;
std::shared_ptr<const Prepared> prepared(const Conv2dGeometry& g, int64_t out_ch, int64_t n, bool bias) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const Prepared>> made;
  const Key key{n, g.c, g.h, g.w, out_ch, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w, bias};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = made.find(key);
  if (it == made.end()) {
    std::shared_ptr<const Prepared> p;
    try {
      [[maybe_unused]] const OneThread one;
      p = prepare(g, out_ch, n, bias);
    } catch (const dnnl::error&) {  // no implementation for this shape: ours runs it
    }
    if (made.size() >= kKeptShapes) made.erase(made.begin());
    it = made.emplace(key, std::move(p)).first;
  }
  return it->second;
}

// The bytes of a region of the workspace, rounded up to keep the next one 64-byte aligned.
size_t padded(size_t bytes) { return (bytes + 63) / 64 * 64; }

// What a thread needs for a call of p: its blocked input and output, and oneDNN's scratchpad.
size_t chunk_bytes(const Prepared& p) {
  return (p.to_src ? padded(p.src.get_size()) : 0) + (p.from_dst ? padded(p.dst.get_size()) : 0) +
         padded(p.scratch.get_size());
}

// One call: images [n0, n0 + count) of x into y, with the weights already in p's layout and
// `space` (chunk_bytes(p)) for the blocked copies.
void run(const Prepared& p, const Conv2dGeometry& g, int64_t out_ch, const float* x, void* weights,
         const float* bias, float* y, int64_t n0, char* space, dnnl::stream& stream) {
  auto take = [&](const memory::desc& d, bool needed, const float* user) -> void* {
    if (!needed) return const_cast<float*>(user);
    void* at = space;
    space += padded(d.get_size());
    return at;
  };
  const int64_t image = g.c * g.h * g.w, out = out_ch * g.out_h * g.out_w;
  memory user_src(p.user_src, engine(), const_cast<float*>(x + n0 * image));
  memory user_dst(p.user_dst, engine(), y + n0 * out);
  memory src(p.src, engine(), take(p.src, p.to_src != nullptr, x + n0 * image));
  memory dst(p.dst, engine(), take(p.dst, p.from_dst != nullptr, y + n0 * out));
  memory scratch(p.scratch, engine(), space);
  if (p.to_src) p.to_src->execute(stream, user_src, src);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src},
      {DNNL_ARG_WEIGHTS, memory(p.weights, engine(), weights)},
      {DNNL_ARG_DST, dst},
      {DNNL_ARG_SCRATCHPAD, scratch}};
  if (bias)
    args.emplace(DNNL_ARG_BIAS,
                 memory(memory::desc(dims({out_ch}), kF32, Tag::x), engine(), const_cast<float*>(bias)));
  p.conv.execute(stream, args);
  if (p.from_dst) p.from_dst->execute(stream, dst, user_dst);
}

}  // namespace

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

// Measured per shape (FLOWGRAD_CONV=own against onednn, 2 threads, a 2-core Xeon, 2026-12-07; the
// table in docs/benchmarks.md): at avx2 oneDNN took 0.64-0.85x our time on 3x3 and 5x5 kernels,
// stride 1 and 2, and 1.15-1.19x on 1x1; at avx512 it won stride 2 (0.57-0.65x) and 5x5
// (0.89-0.93x), took 0.92-1.10x on 3x3 at stride 1 (a tie: ours stays) and lost 1x1 (1.37-1.54x).
// Below 2^22 multiply-adds (a fixed cost of tens of us a call) it lost at avx2 and was mixed at
// avx512. A single image runs ours, whose products spread over the threads. The choice depends on
// the shape alone, never on the thread count, so the bits do not.
bool conv2d_takes_onednn(DType dtype, const Conv2dGeometry& g, int64_t out_ch) {
  const ConvKernel choice = conv_kernel_in_use();
  if (choice == ConvKernel::Own || dtype != DType::Float32 || cpu_isa() == Isa::Generic || g.n < 2 ||
      onednn_level() != cpu_isa())
    return false;
  if (choice == ConvKernel::OneDnn) return true;
  if (g.n * out_ch * g.out_h * g.out_w * g.c * g.kh * g.kw < (int64_t{1} << 22)) return false;
  return cpu_isa() == Isa::Avx2 ? g.kh * g.kw > 1 : g.stride_h > 1 || g.stride_w > 1 || g.kh * g.kw > 9;
}

bool conv2d_onednn_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch, const void* x,
                       const void* w, const void* b, void* y) {
  if (!conv2d_takes_onednn(dtype, g, out_ch)) return false;
  // The images in chunks of n / threads or one more, each thread's in calls of `per` images (and
  // one of the rest): all of them unless their blocked copies would pass kCallBytes (a large image:
  // channels padded to blocks of 16, input and output). At most three shapes of call, each prepared
  // once. (In calls of 8 images the 3 -> 16 channel layer of bench_conv.py took 1.04 ms at avx512
  // instead of 0.60 in one, 2 threads, 2026-12-07.) With fewer images than threads, some wait.
  constexpr int64_t kCallBytes = int64_t{32} << 20;
  const int chunks = static_cast<int>(std::min<int64_t>(g.n, in_parallel_region() ? 1 : pool_threads()));
  const auto blocked = [](int64_t channels) { return (channels + 15) / 16 * 16; };
  const int64_t image_bytes = 4 * (blocked(g.c) * g.h * g.w + blocked(out_ch) * g.out_h * g.out_w);
  const int64_t small = g.n / chunks, per = std::clamp<int64_t>(kCallBytes / image_bytes, 1, small + (g.n % chunks > 0));
  // By image count: the call's primitive and its weights, reordered into its layout once, here.
  struct Call {
    std::shared_ptr<const Prepared> p;
    void* weights;
  };
  std::map<int64_t, Call> calls;
  size_t space = 0, weight_bytes = 0;
  for (int64_t count : {per, small % per, (small + 1) % per}) {
    if (count == 0 || calls.count(count)) continue;
    auto p = prepared(g, out_ch, count, b != nullptr);
    if (!p) return false;
    space = std::max(space, chunk_bytes(*p));
    if (p->to_weights) weight_bytes += padded(p->weights.get_size());
    calls.emplace(count, Call{std::move(p), const_cast<void*>(w)});
  }
  CpuWorkspace ws(env, weight_bytes + space * chunks);
  char* const chunk_space = static_cast<char*>(ws.data()) + weight_bytes;
  std::mutex failed_mutex;
  std::string failed;  // what oneDNN threw (on this thread or a pool thread), raised here
  auto guarded = [&](auto&& work) {
    try {
      [[maybe_unused]] const OneThread one;
      dnnl::stream stream(engine());
      work(stream);
      stream.wait();
    } catch (const dnnl::error& e) {
      std::lock_guard<std::mutex> lock(failed_mutex);
      failed = e.what();
    }
  };
  guarded([&](dnnl::stream& stream) {
    char* at = static_cast<char*>(ws.data());
    for (auto& [count, call] : calls) {
      if (!call.p->to_weights) continue;
      memory user(call.p->user_weights, engine(), const_cast<void*>(w)), into(call.p->weights, engine(), at);
      call.p->to_weights->execute(stream, user, into);
      call.weights = at;
      at += padded(call.p->weights.get_size());
    }
  });
  if (failed.empty())
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      guarded([&](dnnl::stream& stream) {
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t n1 = g.n * (c + 1) / chunks;
          for (int64_t n = g.n * c / chunks; n < n1; n += per) {
            const Call& call = calls.at(std::min(per, n1 - n));
            run(*call.p, g, out_ch, static_cast<const float*>(x), call.weights, static_cast<const float*>(b),
                static_cast<float*>(y), n, chunk_space + c * space, stream);
          }
        }
      });
    });
  FG_CHECK(failed.empty(), Runtime, "conv2d: oneDNN ", onednn_version(), " failed on input ", g.n, "x", g.c, "x", g.h,
           "x", g.w, ", ", out_ch, " output channels, kernel ", g.kh, "x", g.kw, ": ", failed);
  return true;
}

#endif  // FLOWGRAD_HAVE_ONEDNN

}  // namespace fg
