// Reductions over any set of dims (empty = all), with keepdim.
#include <algorithm>

#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/reduce/reduce.h"

namespace fg {
namespace {

const char* reduce_name(ReduceFn fn) {
  static const char* names[] = {"sum", "mean", "max", "min", "argmax", "argmin", "var", "logsumexp"};
  return names[static_cast<int>(fn)];
}

// Sorted, unique, non-negative reduced dims; every dim when the list is empty.
Dims reduced_dims(const Tensor& x, const Attrs& attrs, const char* op) {
  const Dims& raw = attrs.dims("dims");
  bool seen[Dims::kMaxRank] = {};
  if (raw.empty())
    for (int d = 0; d < x.ndim(); ++d) seen[d] = true;
  for (int64_t d : raw) {
    int w = wrap_dim(d, x.ndim(), op, ScalarDim::AsSingleElement);
    FG_CHECK(!seen[w] || x.ndim() == 0, Shape, op, ": dim ", d, " appears twice in ", to_string(raw));
    if (x.ndim() > 0) seen[w] = true;
  }
  Dims dims;
  for (int d = 0; d < x.ndim(); ++d)
    if (seen[d]) dims.push_back(d);
  return dims;
}

bool contains(const Dims& dims, int d) {
  for (int64_t v : dims)
    if (v == d) return true;
  return false;
}

DType reduce_dtype(ReduceFn fn, DType in) {
  switch (fn) {
    case ReduceFn::Sum: return is_floating(in) ? in : DType::Int64;
    case ReduceFn::Max:
    case ReduceFn::Min: return in;
    case ReduceFn::ArgMax:
    case ReduceFn::ArgMin: return DType::Int64;
    default: return float_result(in);
  }
}

template <ReduceFn Fn>
Specs reduce_shape(TensorList in, const Attrs& attrs) {
  const Tensor& x = in[0];
  Dims dims = reduced_dims(x, attrs, reduce_name(Fn));
  bool needs_values = Fn == ReduceFn::Max || Fn == ReduceFn::Min || Fn == ReduceFn::ArgMax ||
                      Fn == ReduceFn::ArgMin;
  Dims out;
  for (int d = 0; d < x.ndim(); ++d) {
    if (!contains(dims, d)) {
      out.push_back(x.shape()[d]);
      continue;
    }
    FG_CHECK(!(needs_values && x.shape()[d] == 0), Value, reduce_name(Fn),
             ": cannot reduce over dim ", d, " of size 0 in ", describe(x));
    if (attrs.b("keepdim")) out.push_back(1);
  }
  return {{out, reduce_dtype(Fn, x.dtype())}};
}

template <ReduceFn Fn, decltype(&reduce_cpu) Run>
void reduce_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = in[0];
  Dims dims = reduced_dims(x, attrs, reduce_name(Fn));
  double correction = Fn == ReduceFn::Var ? attrs.f("correction") : 0.0;
  int64_t outer, r, inner;
  bool consecutive = !dims.empty() && dims.back() - dims[0] + 1 == dims.size();
  if constexpr (Run == &reduce_cpu) {
    // Sum/Mean over a leading and a trailing run of dims (a bias gradient over (0, 2, 3)):
    // straight from x, where moving the kept dims first copies all of it.
    int64_t lead = 0;
    while (lead < static_cast<int64_t>(dims.size()) && dims[lead] == lead) ++lead;
    const bool ends = lead > 0 && lead < static_cast<int64_t>(dims.size()) && dims.back() == x.ndim() - 1 &&
                      dims.back() - dims[lead] + 1 == static_cast<int64_t>(dims.size()) - lead;
    if ((Fn == ReduceFn::Sum || Fn == ReduceFn::Mean) && ends && x.is_contiguous() && x.numel() > 0) {
      const int64_t r1 = raw::span(x.shape(), 0, static_cast<int>(lead));
      const int64_t kept = raw::span(x.shape(), static_cast<int>(lead), static_cast<int>(dims[lead]));
      const int64_t r2 = raw::span(x.shape(), static_cast<int>(dims[lead]), x.ndim());
      sum_ends_cpu(env, Fn, x.dtype(), out[0].dtype(), x.data_ptr(), r1, kept, r2, out[0].data_ptr());
      return;
    }
  }
  if (x.is_contiguous() && (consecutive || dims.empty())) {
    int lo = dims.empty() ? 0 : static_cast<int>(dims[0]);
    int hi = dims.empty() ? 0 : static_cast<int>(dims.back()) + 1;
    outer = raw::span(x.shape(), 0, lo);
    r = raw::span(x.shape(), lo, hi);
    inner = raw::span(x.shape(), hi, x.ndim());
  } else {  // move kept dims first, reduced dims last, then read rows
    Dims shape, strides;
    for (int pass = 0; pass < 2; ++pass)
      for (int d = 0; d < x.ndim(); ++d)
        if (contains(dims, d) == (pass == 1)) {
          shape.push_back(x.shape()[d]);
          strides.push_back(x.strides()[d]);
        }
    x = raw::contiguous(env, x.alias(shape, strides, x.offset()));
    r = 1;
    for (int64_t d : dims) r *= in[0].shape()[d];
    outer = r == 0 ? out[0].numel() : x.numel() / r;
    inner = 1;
  }
  Run(env, Fn, x.dtype(), out[0].dtype(), x.data_ptr(), outer, r, inner, out[0].data_ptr(), correction);
}

// The gradient of a reduced tensor, broadcast back to the input's shape.
Tensor expand_back(const Tensor& g, const BackwardCtx& c, const char* op) {
  const Dims& in_shape = c.input_specs[0].shape;
  Dims dims;
  {
    const Dims& raw = c.attrs.dims("dims");
    if (raw.empty()) {
      for (int d = 0; d < in_shape.size(); ++d) dims.push_back(d);
    } else {
      for (int64_t d : raw) dims.push_back(wrap_dim(d, in_shape.size(), op, ScalarDim::AsSingleElement));
    }
  }
  Tensor k = g;
  if (!c.attrs.b("keepdim")) {
    std::vector<int64_t> kept;
    for (int d = 0; d < in_shape.size(); ++d) kept.push_back(contains(dims, d) ? 1 : in_shape[d]);
    k = reshape(g, kept);
  }
  return expand(k, in_shape.vec());
}

int64_t reduced_count(const BackwardCtx& c) {
  const Dims& in_shape = c.input_specs[0].shape;
  int64_t n = std::max<int64_t>(in_shape.numel(), 0);
  int64_t kept = 1;
  const Dims& raw = c.attrs.dims("dims");
  if (raw.empty()) return n;
  for (int d = 0; d < in_shape.size(); ++d) {
    bool reduced = false;
    for (int64_t v : raw) reduced |= wrap_dim(v, in_shape.size(), "reduce", ScalarDim::AsSingleElement) == d;
    if (!reduced) kept *= in_shape[d];
  }
  return kept == 0 ? 0 : n / kept;
}

Tensors sum_backward(const BackwardCtx& c) { return {expand_back(c.grads[0], c, "sum")}; }
Tensors mean_backward(const BackwardCtx& c) {
  return {expand_back(c.grads[0], c, "mean") / static_cast<double>(reduced_count(c))};
}
Tensors extreme_backward(const BackwardCtx& c) {  // max/min: split evenly among ties
  const Tensor& x = c.inputs[0];
  Tensor hit = cast(eq(x, expand_back(c.outputs[0], c, "max")), c.grads[0].dtype());
  Tensor count = expand_back(sum(hit, c.attrs.dims("dims"), true), c, "max");
  Tensor g = expand_back(c.grads[0], c, "max");
  return {g * hit / count};
}
Tensors var_backward(const BackwardCtx& c) {
  const Tensor& x = c.inputs[0];
  double n = static_cast<double>(reduced_count(c));
  Tensor centered = x - mean(x, c.attrs.dims("dims"), true);
  return {expand_back(c.grads[0], c, "var") * centered * (2.0 / std::max(0.0, n - c.attrs.f("correction")))};
}
Tensors logsumexp_backward(const BackwardCtx& c) {
  const Tensor& x = c.inputs[0];
  return {expand_back(c.grads[0], c, "logsumexp") * exp(x - expand_back(c.outputs[0], c, "logsumexp"))};
}

const OpDef k_sum{.id = OpId::sum, .name = "sum", .family = Family::Reduce, .shape_rule = reduce_shape<ReduceFn::Sum>,
                  .cpu = reduce_kernel<ReduceFn::Sum, reduce_cpu>,
                  .cuda = FG_CUDA((reduce_kernel<ReduceFn::Sum, reduce_cuda>)), .backward = sum_backward};
const OpDef k_mean{.id = OpId::mean, .name = "mean", .family = Family::Reduce,
                   .shape_rule = reduce_shape<ReduceFn::Mean>,
                   .cpu = reduce_kernel<ReduceFn::Mean, reduce_cpu>,
                  .cuda = FG_CUDA((reduce_kernel<ReduceFn::Mean, reduce_cuda>)), .backward = mean_backward};
const OpDef k_max{.id = OpId::max, .name = "max", .family = Family::Reduce, .shape_rule = reduce_shape<ReduceFn::Max>,
                  .cpu = reduce_kernel<ReduceFn::Max, reduce_cpu>,
                  .cuda = FG_CUDA((reduce_kernel<ReduceFn::Max, reduce_cuda>)), .backward = extreme_backward,
                  .saved = Saved::InputsAndOutputs};
const OpDef k_min{.id = OpId::min, .name = "min", .family = Family::Reduce, .shape_rule = reduce_shape<ReduceFn::Min>,
                  .cpu = reduce_kernel<ReduceFn::Min, reduce_cpu>,
                  .cuda = FG_CUDA((reduce_kernel<ReduceFn::Min, reduce_cuda>)), .backward = extreme_backward,
                  .saved = Saved::InputsAndOutputs};
const OpDef k_argmax{.id = OpId::argmax, .name = "argmax", .family = Family::Reduce,
                     .shape_rule = reduce_shape<ReduceFn::ArgMax>, .cpu = reduce_kernel<ReduceFn::ArgMax, reduce_cpu>,
                  .cuda = FG_CUDA((reduce_kernel<ReduceFn::ArgMax, reduce_cuda>)),
                     .not_differentiable = "returns indices"};
const OpDef k_argmin{.id = OpId::argmin, .name = "argmin", .family = Family::Reduce,
                     .shape_rule = reduce_shape<ReduceFn::ArgMin>, .cpu = reduce_kernel<ReduceFn::ArgMin, reduce_cpu>,
                  .cuda = FG_CUDA((reduce_kernel<ReduceFn::ArgMin, reduce_cuda>)),
                     .not_differentiable = "returns indices"};
const OpDef k_var{.id = OpId::var, .name = "var", .family = Family::Reduce, .shape_rule = reduce_shape<ReduceFn::Var>,
                  .cpu = reduce_kernel<ReduceFn::Var, reduce_cpu>,
                  .cuda = FG_CUDA((reduce_kernel<ReduceFn::Var, reduce_cuda>)), .backward = var_backward, .saved = Saved::Inputs};
const OpDef k_logsumexp{.id = OpId::logsumexp, .name = "logsumexp", .family = Family::Reduce,
                        .shape_rule = reduce_shape<ReduceFn::LogSumExp>,
                        .cpu = reduce_kernel<ReduceFn::LogSumExp, reduce_cpu>,
                  .cuda = FG_CUDA((reduce_kernel<ReduceFn::LogSumExp, reduce_cuda>)), .backward = logsumexp_backward,
                        .saved = Saved::InputsAndOutputs};

// ---- cumsum: running sums along one dim, in order (kernels/reduce/reduce_line.h) ----
Specs cumsum_shape(TensorList in, const Attrs& attrs) {
  wrap_dim(attrs.i("dim"), in[0].ndim(), "cumsum", ScalarDim::AsSingleElement);
  return {{in[0].shape(), is_floating(in[0].dtype()) ? in[0].dtype() : DType::Int64}};
}
template <decltype(&cumsum_cpu) Run>
void cumsum_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]);
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), "cumsum", ScalarDim::AsSingleElement);
  int64_t r = x.ndim() ? x.shape()[dim] : 1;
  Run(env, x.dtype(), x.data_ptr(), raw::span(x.shape(), 0, dim), r, raw::span(x.shape(), dim + 1, x.ndim()),
      out[0].data_ptr());
}
Tensors cumsum_backward(const BackwardCtx& c) {
  const std::vector<int64_t> dim{c.attrs.i("dim")};
  return {flip(cumsum(flip(c.grads[0], dim), dim[0]), dim)};
}
const OpDef k_cumsum{.id = OpId::cumsum, .name = "cumsum", .family = Family::Reduce, .shape_rule = cumsum_shape,
                     .cpu = cumsum_kernel<cumsum_cpu>, .cuda = FG_CUDA(cumsum_kernel<cumsum_cuda>),
                     .backward = cumsum_backward};

Attrs reduce_attrs(const Dims& dims, bool keepdim) { return {{"dims", dims}, {"keepdim", keepdim}}; }

Tensor arg_reduce(const OpDef& op, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (dim) return run_op1(op, {x}, reduce_attrs(Dims{*dim}, keepdim));
  Tensor flat = run_op1(op, {reshape(x, {-1})}, reduce_attrs(Dims{0}, false));
  if (!keepdim) return flat;
  return reshape(flat, std::vector<int64_t>(x.ndim(), 1));
}

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(sum);
FG_REGISTER(mean);
FG_REGISTER(max);
FG_REGISTER(min);
FG_REGISTER(argmax);
FG_REGISTER(argmin);
FG_REGISTER(var);
FG_REGISTER(logsumexp);
FG_REGISTER(cumsum);

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  return run_op1(k_sum, {x}, reduce_attrs(dims, keepdim));
}
Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  return run_op1(k_mean, {x}, reduce_attrs(dims, keepdim));
}
Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) {
  return run_op1(k_max, {x}, reduce_attrs(dims, keepdim));
}
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) {
  return run_op1(k_min, {x}, reduce_attrs(dims, keepdim));
}
Tensor var(const Tensor& x, const Dims& dims, bool keepdim, double correction) {
  return run_op1(k_var, {x}, {{"dims", dims}, {"keepdim", keepdim}, {"correction", correction}});
}
Tensor std_dev(const Tensor& x, const Dims& dims, bool keepdim, double correction) {
  return sqrt(var(x, dims, keepdim, correction));
}
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  return run_op1(k_logsumexp, {x}, reduce_attrs(dims, keepdim));
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce(k_argmax, x, dim, keepdim);
}
Tensor cumsum(const Tensor& x, int64_t dim) { return run_op1(k_cumsum, {x}, {{"dim", dim}}); }
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce(k_argmin, x, dim, keepdim);
}

namespace {
// The values are gathered at the arg-index, so the gradient goes to that one entry (PyTorch's
// rule for max(x, dim)); amax/amin without indices split it among ties instead.
std::pair<Tensor, Tensor> extreme_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  if (x.ndim() == 0) {  // PyTorch allows dim 0 or -1 of a 0-d tensor
    wrap_dim(dim, 1, is_max ? "max" : "min");
    return {x, zeros(Dims{}, DType::Int64, x.device())};
  }
  Tensor index = is_max ? argmax(x, dim, true) : argmin(x, dim, true);
  Tensor values = gather(x, dim, index);
  if (keepdim) return {values, index};
  return {squeeze(values, dim), squeeze(index, dim)};
}
}  // namespace

std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, true);
}
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, false);
}

Tensor sum_to(const Tensor& g, const Dims& shape) {
  if (g.shape() == shape) return g;
  int lead = g.ndim() - shape.size();
  FG_ASSERT(lead >= 0);
  Dims dims;
  for (int d = 0; d < lead; ++d) dims.push_back(d);
  for (int i = 0; i < shape.size(); ++i)
    if (shape[i] == 1 && g.shape()[lead + i] != 1) dims.push_back(lead + i);
  Tensor s = dims.empty() ? g : sum(g, dims, true);
  return reshape(s, shape.vec());
}

}  // namespace fg
