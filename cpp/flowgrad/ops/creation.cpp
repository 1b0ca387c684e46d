// Creation ops: no tensor inputs; the device comes from the attributes.
#include <cmath>

#include "flowgrad/core/runtime.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/dispatch.h"
#include "flowgrad/ops/ops.h"
#include "flowgrad/ops/rng.h"
#include "kernels/creation/creation.h"
#include "kernels/elementwise/elementwise.h"

namespace fg {
namespace {

Specs full_shape(TensorList, const Attrs& attrs) {
  checked_numel(attrs.dims("shape"));
  return {{attrs.dims("shape"), attrs.get<DType>("dtype")}};
}
template <decltype(&fill_cpu) Fill>
void full_kernel(const KernelEnv& env, TensorList, const Tensors& out, const Attrs& attrs) {
  Fill(env, out[0].dtype(), out[0].data_ptr(), out[0].numel(), attrs.f("value"));
}
const OpDef k_full{.id = OpId::full, .name = "full", .family = Family::Creation, .flags = kHalfNative,
                   .shape_rule = full_shape, .cpu = full_kernel<fill_cpu>, .cuda = FG_CUDA(full_kernel<fill_cuda>),
                   .not_differentiable = "creation op"};

Specs arange_shape(TensorList, const Attrs& attrs) {
  return {{Dims{attrs.i("n")}, attrs.get<DType>("dtype")}};
}
template <decltype(&arange_cpu) Run>
void arange_kernel(const KernelEnv& env, TensorList, const Tensors& out, const Attrs& attrs) {
  Run(env, out[0].dtype(), attrs.f("start"), attrs.f("step"), out[0].numel(), out[0].data_ptr());
}
const OpDef k_arange{.id = OpId::arange, .name = "arange", .family = Family::Creation, .shape_rule = arange_shape,
                     .cpu = arange_kernel<arange_cpu>, .cuda = FG_CUDA(arange_kernel<arange_cuda>),
                     .not_differentiable = "creation op"};

template <decltype(&linspace_cpu) Run>
void linspace_kernel(const KernelEnv& env, TensorList, const Tensors& out, const Attrs& attrs) {
  Run(env, out[0].dtype(), attrs.f("start"), attrs.f("end"), out[0].numel(), out[0].data_ptr());
}
const OpDef k_linspace{.id = OpId::linspace, .name = "linspace", .family = Family::Creation, .shape_rule = arange_shape,
                       .cpu = linspace_kernel<linspace_cpu>, .cuda = FG_CUDA(linspace_kernel<linspace_cuda>),
                       .not_differentiable = "creation op"};

template <decltype(&eye_cpu) Run>
void eye_kernel(const KernelEnv& env, TensorList, const Tensors& out, const Attrs&) {
  Run(env, out[0].dtype(), out[0].shape()[0], out[0].shape()[1], out[0].data_ptr());
}
const OpDef k_eye{.id = OpId::eye, .name = "eye", .family = Family::Creation, .flags = kHalfNative,
                  .shape_rule = full_shape, .cpu = eye_kernel<eye_cpu>, .cuda = FG_CUDA(eye_kernel<eye_cuda>),
                  .not_differentiable = "creation op"};

// A {seed, base} pair: the one input of a random op and of philox_advance_, the first of philox_derive.
void check_pair(const char* op, TensorList in, size_t max_inputs = 1) {
  const bool counted = !in.empty() && in.size() <= max_inputs;
  FG_CHECK(counted && in[0].dtype() == DType::Int64 && in[0].shape() == Dims{2} && in[0].is_contiguous(), Value, op,
           ": expected a {seed, base} pair, one contiguous int64 tensor of shape (2,); got ",
           counted ? describe(in[0]) : std::to_string(in.size()) + " inputs");
}

template <RandomKind Kind>
Specs random_shape(TensorList in, const Attrs& attrs) {
  const char* name = Kind == RandomKind::Uniform ? "rand" : Kind == RandomKind::Normal ? "randn" : "randint";
  check_pair(name, in);
  DType dt = attrs.get<DType>("dtype");
  if (Kind == RandomKind::Integer) {
    FG_CHECK(dt != DType::Bool, DType, "randint: dtype must not be bool");
    FG_CHECK(attrs.i("low") < attrs.i("high"), Value, "randint: low (", attrs.i("low"),
             ") must be less than high (", attrs.i("high"), ")");
  } else {
    FG_CHECK(is_floating(dt), DType, name, ": dtype must be floating, got ", dtype_name(dt));
  }
  return full_shape(in, attrs);
}
// Draws `offset` counters past the pair's base: a host pair (eager calls) is read here, a pair in
// the device's memory (plans) when the kernel runs.
template <RandomKind Kind, decltype(&random_cpu) Run>
void random_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  bool integer = Kind == RandomKind::Integer;
  const auto* pair = static_cast<const uint64_t*>(in[0].data_ptr());
  const auto offset = static_cast<uint64_t>(attrs.i("offset"));
  PhiloxStart start = in[0].device().is_cpu() ? PhiloxStart{pair[0], pair[1] + offset, nullptr}
                                              : PhiloxStart{0, offset, pair};
  Run(env, Kind, out[0].dtype(), start, out[0].numel(), integer ? attrs.i("low") : 0, integer ? attrs.i("high") : 0,
      out[0].data_ptr());
}
const OpDef k_rand{.id = OpId::rand, .name = "rand", .family = Family::Creation,
                   .shape_rule = random_shape<RandomKind::Uniform>,
                   .cpu = random_kernel<RandomKind::Uniform, random_cpu>,
                   .cuda = FG_CUDA((random_kernel<RandomKind::Uniform, random_cuda>)), .not_differentiable = "creation op"};
const OpDef k_randn{.id = OpId::randn, .name = "randn", .family = Family::Creation,
                    .shape_rule = random_shape<RandomKind::Normal>,
                    .cpu = random_kernel<RandomKind::Normal, random_cpu>,
                   .cuda = FG_CUDA((random_kernel<RandomKind::Normal, random_cuda>)), .not_differentiable = "creation op"};
const OpDef k_randint{.id = OpId::randint, .name = "randint", .family = Family::Creation,
                      .shape_rule = random_shape<RandomKind::Integer>,
                      .cpu = random_kernel<RandomKind::Integer, random_cpu>,
                   .cuda = FG_CUDA((random_kernel<RandomKind::Integer, random_cuda>)), .not_differentiable = "creation op"};

// The last instruction of a plan that draws: base += by on its pair, so the next run (a CUDA graph
// replay included) draws the next counters without host work.
Specs philox_advance_shape(TensorList in, const Attrs& attrs) {
  check_pair("philox_advance_", in);
  FG_CHECK(attrs.i("by") >= 0, Value, "philox_advance_: by must be >= 0, got ", attrs.i("by"));
  return {{in[0].shape(), in[0].dtype()}};
}
template <decltype(&advance_philox_cpu) Run>
void philox_advance_kernel(const KernelEnv& env, TensorList in, const Tensors&, const Attrs& attrs) {
  Run(env, static_cast<uint64_t*>(in[0].data_ptr()), static_cast<uint64_t>(attrs.i("by")));
}
const OpDef k_philox_advance_{.id = OpId::philox_advance_, .name = "philox_advance_", .family = Family::Creation,
                              .shape_rule = philox_advance_shape, .cpu = philox_advance_kernel<advance_philox_cpu>,
                              .cuda = FG_CUDA(philox_advance_kernel<advance_philox_cuda>),
                              .not_differentiable = "moves a random counter"};

// A derived stream's {seed, 0} pair (ops/rng.h): how a plan computes what derive_stream computes on
// the host. Input 1, when present, is an int64 scalar added to the key (a loop's iteration).
Specs philox_derive_shape(TensorList in, const Attrs&) {
  check_pair("philox_derive", in, 2);
  FG_CHECK(in.size() == 1 || (in[1].dtype() == DType::Int64 && in[1].numel() == 1), Value,
           "philox_derive: the index must be one int64 value, got ", describe(in[1]));
  return {{Dims{2}, DType::Int64}};
}
template <decltype(&derive_philox_cpu) Run>
void philox_derive_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Run(env, static_cast<const uint64_t*>(in[0].data_ptr()), static_cast<uint64_t>(attrs.i("offset")),
      static_cast<uint64_t>(attrs.i("key")), in.size() == 2 ? static_cast<const int64_t*>(in[1].data_ptr()) : nullptr,
      static_cast<uint64_t*>(out[0].data_ptr()));
}
const OpDef k_philox_derive{.id = OpId::philox_derive, .name = "philox_derive", .family = Family::Creation,
                            .shape_rule = philox_derive_shape, .cpu = philox_derive_kernel<derive_philox_cpu>,
                            .cuda = FG_CUDA(philox_derive_kernel<derive_philox_cuda>),
                            .not_differentiable = "derives a random stream"};

// A host pair {seed, offset}: what an eager random call reads.
Tensor host_pair(RngState at) {
  Tensor pair = Tensor::empty(Dims{2}, DType::Int64, cpu_device());
  auto* v = static_cast<uint64_t*>(pair.data_ptr());
  v[0] = at.seed;
  v[1] = at.offset;
  return pair;
}

// A random op's attributes and its pair: numel counters of this thread's stream.
std::pair<Tensor, Attrs> random_call(const Dims& shape, DType dtype, Device device, int64_t low, int64_t high) {
  RngDraw draw = rng_draw(static_cast<uint64_t>(checked_numel(shape)), device);
  return {draw.pair, {{"shape", shape}, {"dtype", dtype}, {"device", device}, {"offset", draw.offset},
                      {"low", low}, {"high", high}}};
}

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(full);
FG_REGISTER(arange);
FG_REGISTER(linspace);
FG_REGISTER(eye);
FG_REGISTER(rand);
FG_REGISTER(randn);
FG_REGISTER(randint);
FG_REGISTER(philox_advance_);
FG_REGISTER(philox_derive);

Tensor full(const Dims& shape, double value, DType dtype, Device device) {
  return run_op1(k_full, {}, {{"shape", shape}, {"value", value}, {"dtype", dtype}, {"device", device}});
}
Tensor zeros(const Dims& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Dims& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full(Dims{}, value, dtype, device); }

double item(const Tensor& x) {
  FG_CHECK(x.numel() == 1, Shape, "item: expected a one-element tensor, got shape ", to_string(x.shape()));
  notify_host_read(x, "item");
  alignas(8) unsigned char host[8];
  const void* at = x.data_ptr();
  if (!x.device().is_cpu()) {  // one element back from the device (waits for the queued work)
    cuda::copy_bytes(host, cpu_device(), at, x.device(), itemsize(x.dtype()));
    at = host;
  }
  return visit_dtype(x.dtype(), [&](auto tag) { return static_cast<double>(*static_cast<const decltype(tag)*>(at)); });
}

// Kernels without half variants (arange, linspace, random fills) compute float16/bfloat16 in
// float32 and a cast op narrows: the op stream eager code runs and plans record.
Tensor arange(double start, double end, double step, DType dtype, Device device) {
  if (is_half(dtype)) return cast(arange(start, end, step, DType::Float32, device), dtype);
  FG_CHECK(step != 0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end), Value,
           "arange: start, end and step must be finite and step non-zero (got ", start, ", ", end,
           ", ", step, ")");
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  return run_op1(k_arange, {}, {{"n", n}, {"start", start}, {"step", step}, {"dtype", dtype},
                                {"device", device}});
}
Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device) {
  if (is_half(dtype)) return cast(linspace(start, end, steps, DType::Float32, device), dtype);
  FG_CHECK(steps >= 0, Value, "linspace: steps must be >= 0, got ", steps);
  return run_op1(k_linspace, {}, {{"n", steps}, {"start", start}, {"end", end}, {"dtype", dtype},
                                  {"device", device}});
}
Tensor eye(int64_t n, int64_t m, DType dtype, Device device) {
  return run_op1(k_eye, {}, {{"shape", Dims{n, m}}, {"dtype", dtype}, {"device", device}});
}
Tensor rand(const Dims& shape, DType dtype, Device device) {
  if (is_half(dtype)) return cast(rand(shape, DType::Float32, device), dtype);
  auto [pair, attrs] = random_call(shape, dtype, device, 0, 0);
  return run_op1(k_rand, {pair}, attrs);
}
Tensor randn(const Dims& shape, DType dtype, Device device) {
  if (is_half(dtype)) return cast(randn(shape, DType::Float32, device), dtype);
  auto [pair, attrs] = random_call(shape, dtype, device, 0, 0);
  return run_op1(k_randn, {pair}, attrs);
}
Tensor randint(int64_t low, int64_t high, const Dims& shape, DType dtype, Device device) {
  if (is_half(dtype)) return cast(randint(low, high, shape, DType::Float32, device), dtype);
  auto [pair, attrs] = random_call(shape, dtype, device, low, high);
  return run_op1(k_randint, {pair}, attrs);
}

RngDraw rng_draw(uint64_t counters, Device device) {
  const RngState at{rng_state().seed, rng_reserve(counters)};
  if (auto* source = innermost_trace_as<RngSource>()) return source->pair_at(at, device);
  return {host_pair(at), 0};
}

RngState derive_stream(RngState base, uint64_t key, const Tensor& index) {
  const RngState derived{derived_seed(base.seed, base.offset, key), 0};
  if (auto* source = innermost_trace_as<RngSource>()) source->on_derived(base, key, index, derived);
  return derived;
}

RngState rng_fork() { return {rng_state().seed, rng_reserve(1)}; }

Tensor randperm(int64_t n, uint64_t seed, uint64_t offset, Device device) {
  FG_CHECK(n >= 0, Value, "randperm: n must be >= 0, got ", n);
  Attrs attrs{{"shape", Dims{n}}, {"dtype", DType::Float64}, {"device", device}, {"offset", int64_t{0}},
              {"low", int64_t{0}}, {"high", int64_t{0}}};
  return sort(run_op1(k_rand, {host_pair({seed, offset})}, attrs), 0, false).second;
}

}  // namespace fg
