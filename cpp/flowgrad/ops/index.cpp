// Indexing ops: gather, scatter_add, index_select, index_add, one_hot, sort/topk, nonzero.
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/index/index.h"
#include "kernels/index/index_add.h"
#include "kernels/sort/sort.h"

namespace fg {
namespace {

// gather/scatter_add: index must match x in every dim but `dim`.
void check_index_layout(const Tensor& x, const Tensor& index, int dim, const char* op) {
  FG_CHECK(index.ndim() == x.ndim(), Shape, op, ": index ", to_string(index.shape()),
           " must have as many dims as the input ", to_string(x.shape()));
  for (int d = 0; d < x.ndim(); ++d)
    FG_CHECK(d == dim || index.shape()[d] == x.shape()[d], Shape, op, ": index ",
             to_string(index.shape()), " must match input ", to_string(x.shape()),
             " in every dim except ", dim);
  FG_CHECK(is_integral(index.dtype()), DType, op, ": index must be int32 or int64, got ",
           dtype_name(index.dtype()));
}

Specs gather_shape(TensorList in, const Attrs& attrs) {
  int dim = wrap_dim(attrs.i("dim"), in[0].ndim(), "gather", ScalarDim::AsSingleElement);
  check_index_layout(in[0], in[1], dim, "gather");
  return {{in[1].shape(), in[0].dtype()}};
}
template <decltype(&gather_cpu) Run>
void gather_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]);
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), "gather", ScalarDim::AsSingleElement);
  int64_t d = x.ndim() ? x.shape()[dim] : 1;
  Tensor idx = raw::checked_index(env, in[1], d, "gather", dim);
  int64_t n = idx.ndim() ? idx.shape()[dim] : 1;
  Run(env, x.dtype(), x.data_ptr(), idx.data<int64_t>(), raw::span(x.shape(), 0, dim), d, n,
             raw::span(x.shape(), dim + 1, x.ndim()), out[0].data_ptr());
}
Tensors gather_backward(const BackwardCtx& c) {
  const TensorSpec& spec = c.input_specs[0];
  Tensor zero = zeros(spec.shape, c.grads[0].dtype(), c.grads[0].device());
  return {scatter_add(zero, c.attrs.i("dim"), c.inputs[1], c.grads[0]), Tensor()};
}
const OpDef k_gather{.id = OpId::gather, .name = "gather", .family = Family::Index, .flags = kHalfNative,
                     .shape_rule = gather_shape, .cpu = gather_kernel<gather_cpu>,
                     .cuda = FG_CUDA(gather_kernel<gather_cuda>), .backward = gather_backward,
                     .saved = Saved::Inputs, .nondiff_inputs = 2u};

Specs scatter_add_shape(TensorList in, const Attrs& attrs) {
  const Tensor &x = in[0], &index = in[1], &src = in[2];
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), "scatter_add", ScalarDim::AsSingleElement);
  check_index_layout(x, index, dim, "scatter_add");
  FG_CHECK(src.shape() == index.shape(), Shape, "scatter_add: src ", to_string(src.shape()),
           " must have the index's shape ", to_string(index.shape()));
  return {{x.shape(), promote(x.dtype(), src.dtype())}};
}
// scatter_add, index_add: the input and the source in the result's dtype (Promote).
Promotion source_promotion(TensorList, const Specs& specs, const Attrs&) { return {specs[0].dtype, 5u}; }
template <decltype(&scatter_add_cpu) Run>
void scatter_add_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  const Tensor& y = out[0];
  raw::copy_into(env, y, in[0]);
  int dim = wrap_dim(attrs.i("dim"), y.ndim(), "scatter_add", ScalarDim::AsSingleElement);
  int64_t d = y.ndim() ? y.shape()[dim] : 1;
  Tensor idx = raw::checked_index(env, in[1], d, "scatter_add", dim);
  Tensor src = raw::contiguous(env, in[2]);
  int64_t n = idx.ndim() ? idx.shape()[dim] : 1;
  Run(env, y.dtype(), src.data_ptr(), idx.data<int64_t>(), raw::span(y.shape(), 0, dim), d, n,
                  raw::span(y.shape(), dim + 1, y.ndim()), y.data_ptr());
}
Tensors scatter_add_backward(const BackwardCtx& c) {
  const Tensor& g = c.grads[0];
  return {g, Tensor(), c.needs_grad[2] ? gather(g, c.attrs.i("dim"), c.inputs[1]) : Tensor()};
}
const OpDef k_scatter_add{.id = OpId::scatter_add, .name = "scatter_add", .family = Family::Index,
                          .shape_rule = scatter_add_shape, .promotion = source_promotion, .cpu = scatter_add_kernel<scatter_add_cpu>,
                          .cuda = FG_CUDA(scatter_add_kernel<scatter_add_cuda>),
                          .backward = scatter_add_backward, .saved = Saved::Inputs,
                          .nondiff_inputs = 2u};

// x's shape with dim resized to the 1-D index's length.
Dims selected_shape(const Tensor& x, const Tensor& index, const Attrs& attrs, const char* op) {
  FG_CHECK(x.ndim() > 0, Shape, op, ": input must have at least one dim");
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), op);
  FG_CHECK(index.ndim() == 1, Shape, op, ": index must be 1-D, got shape ", to_string(index.shape()));
  FG_CHECK(is_integral(index.dtype()), DType, op, ": index must be int32 or int64, got ",
           dtype_name(index.dtype()));
  Dims shape = x.shape();
  shape[dim] = index.shape()[0];
  return shape;
}
Specs index_select_shape(TensorList in, const Attrs& attrs) {
  return {{selected_shape(in[0], in[1], attrs, "index_select"), in[0].dtype()}};
}
template <decltype(&index_select_cpu) Run>
void index_select_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]);
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), "index_select");
  Tensor idx = raw::checked_index(env, in[1], x.shape()[dim], "index_select", dim);
  Run(env, x.dtype(), x.data_ptr(), idx.data<int64_t>(), raw::span(x.shape(), 0, dim),
                   x.shape()[dim], idx.numel(), raw::span(x.shape(), dim + 1, x.ndim()), out[0].data_ptr());
}
Tensors index_select_backward(const BackwardCtx& c) {
  const Tensor& g = c.grads[0];
  Tensor zero = zeros(c.input_specs[0].shape, g.dtype(), g.device());
  return {index_add(zero, c.attrs.i("dim"), c.inputs[1], g), Tensor()};
}
const OpDef k_index_select{.id = OpId::index_select, .name = "index_select", .family = Family::Index,
                           .flags = kHalfNative,
                           .shape_rule = index_select_shape, .cpu = index_select_kernel<index_select_cpu>,
                           .cuda = FG_CUDA(index_select_kernel<index_select_cuda>),
                           .backward = index_select_backward, .saved = Saved::Inputs,
                           .nondiff_inputs = 2u};

// index_add: x with src's slices added at a 1-D index along dim (index_select's backward).
Specs index_add_shape(TensorList in, const Attrs& attrs) {
  const Tensor &x = in[0], &index = in[1], &src = in[2];
  Dims selected = selected_shape(x, index, attrs, "index_add");
  FG_CHECK(src.shape() == selected, Shape, "index_add: src ", to_string(src.shape()), " must be the input ",
           to_string(x.shape()), " with dim ", attrs.i("dim"), " of the index's size (", to_string(selected), ")");
  return {{x.shape(), promote(x.dtype(), src.dtype())}};
}
void index_add_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  const Tensor& y = out[0];
  raw::copy_into(env, y, in[0]);
  int dim = wrap_dim(attrs.i("dim"), y.ndim(), "index_add");
  Tensor idx = raw::checked_index(env, in[1], y.shape()[dim], "index_add", dim);
  Tensor src = raw::contiguous(env, in[2]);
  int64_t outer = raw::span(y.shape(), 0, dim), inner = raw::span(y.shape(), dim + 1, y.ndim());
#if defined(FLOWGRAD_HAVE_CUDA)
  if (y.device().is_cuda()) {
    Tensor workspace = Tensor::temporary(env, Dims{index_add_cuda_workspace(env, idx.numel(), y.shape()[dim])},
                                     DType::UInt8, y.device());
    return index_add_cuda(env, y.dtype(), src.data_ptr(), idx.data<int64_t>(), outer, y.shape()[dim],
                          idx.numel(), inner, y.data_ptr(), workspace.data_ptr());
  }
#endif
  index_add_cpu(env, y.dtype(), src.data_ptr(), idx.data<int64_t>(), outer, y.shape()[dim], idx.numel(),
                inner, y.data_ptr());
}
Tensors index_add_backward(const BackwardCtx& c) {
  const Tensor& g = c.grads[0];
  return {g, Tensor(), c.needs_grad[2] ? index_select(g, c.attrs.i("dim"), c.inputs[1]) : Tensor()};
}
const OpDef k_index_add{.id = OpId::index_add, .name = "index_add", .family = Family::Index,
                        .shape_rule = index_add_shape, .promotion = source_promotion,
                        .cpu = index_add_kernel, .cuda = FG_CUDA(index_add_kernel),
                        .backward = index_add_backward, .saved = Saved::Inputs, .nondiff_inputs = 2u};

Specs one_hot_shape(TensorList in, const Attrs& attrs) {
  FG_CHECK(is_integral(in[0].dtype()), DType, "one_hot: index must be int32 or int64, got ",
           dtype_name(in[0].dtype()));
  FG_CHECK(attrs.i("num_classes") > 0, Value, "one_hot: num_classes must be positive, got ",
           attrs.i("num_classes"));
  Dims shape = in[0].shape();
  shape.push_back(attrs.i("num_classes"));
  return {{shape, DType::Int64}};
}
void one_hot_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  int64_t classes = attrs.i("num_classes");
  Tensor idx = raw::checked_index(env, in[0], classes, "one_hot", in[0].ndim());
  int64_t* y = out[0].data<int64_t>();
#if defined(FLOWGRAD_HAVE_CUDA)
  if (idx.device().is_cuda()) return one_hot_cuda(env, idx.data<int64_t>(), idx.numel(), classes, y);
#endif
  fill_cpu(env, DType::Int64, y, out[0].numel(), 0.0);
  const int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0, n = idx.numel(); i < n; ++i) y[i * classes + p[i]] = 1;
}
const OpDef k_one_hot{.id = OpId::one_hot, .name = "one_hot", .family = Family::Index, .shape_rule = one_hot_shape,
                      .cpu = one_hot_kernel, .cuda = FG_CUDA(one_hot_kernel),
                      .not_differentiable = "returns integers"};

// sort and topk share a kernel: topk keeps the first k of a sort.
Specs sort_shape(TensorList in, const Attrs& attrs) {
  const Tensor& x = in[0];
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), "sort", ScalarDim::AsSingleElement);
  FG_CHECK(x.dtype() != DType::Bool, DType, "sort: not defined for bool tensors");
  Dims shape = x.shape();
  int64_t k = attrs.i("k");
  FG_CHECK(x.ndim() > 0 || k == 1, Index, "topk: k = ", k, " is out of range for a 0-d tensor (expected 1)");
  if (x.ndim() > 0) {
    FG_CHECK(k >= 0 && k <= x.shape()[dim], Index, "topk: k = ", k, " is out of range for dim ",
             dim, " of size ", x.shape()[dim]);
    shape[dim] = k;
  }
  return {{shape, x.dtype()}, {shape, DType::Int64}};
}
void sort_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]);
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), "sort", ScalarDim::AsSingleElement);
  int64_t d = x.ndim() ? x.shape()[dim] : 1;
  int64_t k = x.ndim() ? attrs.i("k") : 1;
  int64_t outer = raw::span(x.shape(), 0, dim), inner = raw::span(x.shape(), dim + 1, x.ndim());
#if defined(FLOWGRAD_HAVE_CUDA)
  if (x.device().is_cuda()) {
    Tensor workspace = Tensor::temporary(env, Dims{sort_cuda_workspace(env, x.dtype(), outer * inner, d)}, DType::UInt8,
                                     x.device());
    return sort_cuda(env, x.dtype(), x.data_ptr(), outer, d, inner, k, attrs.b("descending"), out[0].data_ptr(),
                     out[1].data<int64_t>(), workspace.data_ptr());
  }
#endif
  sort_cpu(env, x.dtype(), x.data_ptr(), outer, d, inner, k, attrs.b("descending"), out[0].data_ptr(),
           out[1].data<int64_t>());
}
Tensors sort_backward(const BackwardCtx& c) {
  const Tensor& g = c.grads[0];
  Tensor zero = zeros(c.input_specs[0].shape, g.dtype(), g.device());
  if (zero.ndim() == 0) return {g};
  return {scatter_add(zero, c.attrs.i("dim"), c.outputs[1], g)};
}
const OpDef k_sort{.id = OpId::sort, .name = "sort", .family = Family::Index, .shape_rule = sort_shape,
                   .cpu = sort_kernel, .cuda = FG_CUDA(sort_kernel), .backward = sort_backward,
                   .saved = Saved::Outputs};

Specs nonzero_shape(TensorList in, const Attrs&) {
  const Tensor& m = in[0];
  FG_CHECK(m.dtype() == DType::Bool, DType, "nonzero: expected a bool mask, got ", describe(m));
  Tensor c = raw::contiguous(m);
  int64_t count = 0;
#if defined(FLOWGRAD_HAVE_CUDA)
  if (c.device().is_cuda()) {  // the output's size is data: a host read (hence the DataDependent group)
    Tensor on_device = Tensor::empty(Dims{1}, DType::Int64, c.device());
    count_true_cuda(current_env(c.device()), c.data<bool>(), c.numel(), on_device.data<int64_t>());
    count = *raw::device_copy(on_device, cpu_device()).data<int64_t>();
  }
#endif
  if (c.device().is_cpu()) count = count_true_cpu(current_env(c.device()), c.data<bool>(), c.numel());
  return {{Dims{count, int64_t{m.ndim()}}, DType::Int64}};
}
void nonzero_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs&) {
  Tensor c = raw::contiguous(env, in[0]);
#if defined(FLOWGRAD_HAVE_CUDA)
  if (c.device().is_cuda()) {
    Tensor workspace = Tensor::temporary(env, Dims{nonzero_cuda_workspace(env, c.numel())}, DType::UInt8, c.device());
    return nonzero_cuda(env, c.data<bool>(), c.shape().data(), c.ndim(), out[0].data<int64_t>(), workspace.data_ptr());
  }
#endif
  nonzero_cpu(env, c.data<bool>(), c.shape().data(), c.ndim(), out[0].data<int64_t>());
}
const OpDef k_nonzero{.id = OpId::nonzero, .name = "nonzero", .family = Family::Index,
                      .shape_rule = nonzero_shape, .cpu = nonzero_kernel, .cuda = FG_CUDA(nonzero_kernel),
                      .not_differentiable = "returns indices"};

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(gather);
FG_REGISTER(scatter_add);
FG_REGISTER(index_select);
FG_REGISTER(index_add);
FG_REGISTER(one_hot);
FG_REGISTER(sort);
FG_REGISTER(nonzero);

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return run_op1(k_gather, {x, index}, {{"dim", dim}});
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return run_op1(k_scatter_add, {x, index, src}, {{"dim", dim}});
}
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return run_op1(k_index_select, {x, index}, {{"dim", dim}});
}
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return run_op1(k_index_add, {x, index, src}, {{"dim", dim}});
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  FG_CHECK(mask.dtype() == DType::Bool, DType, "masked_fill: mask must be bool, got ", describe(mask));
  return where(mask, scalar_like(x, value), x);
}
Tensor one_hot(const Tensor& index, int64_t num_classes) {
  return run_op1(k_one_hot, {index}, {{"num_classes", num_classes}});
}
Tensor nonzero(const Tensor& mask) { return run_op1(k_nonzero, {mask}); }
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  int64_t k = x.ndim() ? x.shape()[wrap_dim(dim, x.ndim(), "sort")] : 1;
  Tensors out = run_op(k_sort, {x}, {{"dim", dim}, {"k", k}, {"descending", descending}});
  return {out[0], out[1]};
}
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  Tensors out = run_op(k_sort, {x}, {{"dim", dim}, {"k", k}, {"descending", largest}});
  return {out[0], out[1]};
}

std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  int64_t size = x.ndim() ? x.shape()[wrap_dim(dim, x.ndim(), "kthvalue")] : 1;
  FG_CHECK(k >= 1 && k <= size, Index, "kthvalue: k = ", k, " is out of range for dim ", dim,
           " of size ", size, " (k counts from 1)");
  if (x.ndim() == 0) return {x, zeros(Dims{}, DType::Int64, x.device())};
  auto [values, indices] = topk(x, k, dim, false);  // the k smallest, ascending
  int w = wrap_dim(dim, x.ndim(), "kthvalue");
  values = narrow(values, w, k - 1, 1);
  indices = narrow(indices, w, k - 1, 1);
  if (keepdim) return {values, indices};
  return {squeeze(values, w), squeeze(indices, w)};
}

}  // namespace fg
