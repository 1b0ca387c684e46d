// Op functions, bound both as fg.<name>(...) and as Tensor methods where PyTorch has one.
#include <functional>
#include <tuple>

#include "common.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/nn/layers.h"

namespace fg::py_bind {
namespace {

using Cls = py::class_<Tensor>;

template <class Fn, class... Extra>
void both(py::module_& m, Cls& cls, const char* name, Fn&& fn, const Extra&... extra) {
  m.def(name, named(name, fn), py::arg("input"), extra...);
  cls.def(name, named(name, std::forward<Fn>(fn)), extra...);
}

// fg.return_types.<op>: named tuples (values, indices), like torch.return_types.
using ValuesIndices = std::function<py::object(const std::pair<Tensor, Tensor>&)>;
ValuesIndices values_indices(py::module_& m, const char* op) {
  py::module_ types = py::hasattr(m, "return_types")
      ? py::reinterpret_borrow<py::module_>(m.attr("return_types"))
      : m.def_submodule("return_types", "Named tuples (values, indices) that max/min with a dim, "
                                        "sort, topk and kthvalue return, like torch.return_types.");
  py::object type = py::module_::import("collections").attr("namedtuple")(
      op, py::make_tuple("values", "indices"), py::arg("module") = "flowgrad.return_types");
  type.attr("__doc__") = std::string("(values, indices) returned by ") + op + ".";
  types.attr(op) = type;
  return [type](const std::pair<Tensor, Tensor>& p) { return type(p.first, p.second); };
}

Tensor creation(Tensor t, bool requires_grad) {
  if (requires_grad) set_requires_grad(t, true);
  return t;
}

DType scalar_dtype(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return DType::Bool;
  if (py::isinstance<py::int_>(v)) return DType::Int64;
  return default_float_dtype();
}

void bind_elementwise(py::module_& m, Cls& cls) {
  // The op table's rows whose api is Generated or Bound (ops.def), and the logical composites.
  using Unary = Tensor (*)(const Tensor&);
  const std::tuple<const char*, Unary, const char*> unary[] = {
#define FG_UNARY(name, Functor, groups, autocast, api, saved, doc) FG_BIND_##api(name, doc)
#define FG_BINARY(name, Functor, groups, autocast, api, saved, doc)
#define FG_BIND_Generated(name, doc) {#name, name, doc},
#define FG_BIND_Bound FG_BIND_Generated
#define FG_BIND_Hand(name, doc)
#include "flowgrad/base/ops.def"
      {"logical_not", logical_not, "Elementwise logical NOT: True where input is zero (any dtype)."}};
  for (const auto& [name, fn, doc] : unary)
    both(m, cls, name, [fn = fn](const Tensor& x) { return fn(x); }, doc, ReleaseGil());
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  const std::tuple<const char*, Binary, const char*> binary[] = {
#define FG_BINARY(name, Functor, groups, autocast, api, saved, doc) FG_BIND_##api(name, doc)
#include "flowgrad/base/ops.def"
#undef FG_BIND_Generated
#undef FG_BIND_Bound
#undef FG_BIND_Hand
      {"logical_and", logical_and, "Elementwise logical AND of input and other (any dtype, nonzero is True)."},
      {"logical_or", logical_or, "Elementwise logical OR of input and other (any dtype, nonzero is True)."},
      {"logical_xor", logical_xor, "Elementwise logical XOR of input and other (any dtype, nonzero is True)."}};
  for (const auto& [name, fn, doc] : binary) {
    std::string with_broadcasting = std::string(doc) + " Operands broadcast as in NumPy.";
    auto call = [fn = fn](const py::object& a, const py::object& b) {
      std::pair<Tensor, Tensor> operands = binary_operands(a, b);  // no structured binding: lambdas capture it
      return released([&] { return fn(operands.first, operands.second); });
    };
    m.def(name, named(name, call), py::arg("input"), py::arg("other"), with_broadcasting.c_str());
    cls.def(name, named(name, call), py::arg("other"), with_broadcasting.c_str());
  }
  both(m, cls, "gelu", [](const Tensor& x, const std::string& approximate) {
    FG_CHECK(approximate == "none" || approximate == "tanh", Value,
             "gelu: approximate must be 'none' or 'tanh', got '", approximate, "'");
    return gelu(x, approximate == "tanh");
  }, py::arg("approximate") = "none", "GELU, exact (erf) or tanh-approximated.");
  both(m, cls, "clamp", [](const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
    return clamp(x, lo, hi);
  }, py::arg("min") = py::none(), py::arg("max") = py::none(),
     "Limits values to [min, max]; either bound may be None.");
  def_op(m, "where", [](const Tensor& cond, const py::object& a, const py::object& b) {
    Tensor ta = py::isinstance<Tensor>(a) ? a.cast<Tensor>() : Tensor();
    Tensor tb = py::isinstance<Tensor>(b) ? b.cast<Tensor>() : Tensor();
    const Tensor* like = ta.defined() ? &ta : (tb.defined() ? &tb : nullptr);
    return where(cond, ta.defined() ? ta : as_tensor(a, like), tb.defined() ? tb : as_tensor(b, like));
  }, py::arg("condition"), py::arg("input"), py::arg("other"),
     "Elementwise choice: input where condition is True, else other (broadcast).");
}

void bind_reductions(py::module_& m, Cls& cls) {
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  using Reduce = Tensor (*)(const Tensor&, const Dims&, bool);
  const std::pair<const char*, Reduce> reductions[] = {
      {"sum", sum}, {"mean", mean}, {"logsumexp", logsumexp}, {"amax", amax}, {"amin", amin}};
  for (const auto& [name, fn] : reductions) {
    std::string doc = std::string(name) + " over dim (None: every dim); keepdim keeps reduced dims as 1.";
    both(m, cls, name, [fn = fn](const Tensor& x, const py::object& dim, bool keepdim) {
      Dims dims = dims_arg(dim);
      return released([&] { return fn(x, dims, keepdim); });
    }, py::arg("dim") = py::none(), py::arg("keepdim") = false, doc.c_str());
  }
  using ByDim = std::pair<Tensor, Tensor> (*)(const Tensor&, int64_t, bool);
  const std::tuple<const char*, Reduce, ByDim, Binary> extremes[] = {
      {"max", amax, max_dim, maximum}, {"min", amin, min_dim, minimum}};
  for (const auto& [name, reduce, by_dim, elementwise] : extremes) {
    std::string doc = std::string(name) + " over dim. An int dim gives a named tuple (values, indices) "
                      "(fg.return_types." + name + "); None or a tuple of dims gives the values; "
                      "a tensor gives the elementwise " + (name[1] == 'a' ? "maximum" : "minimum") + ".";
    both(m, cls, name, [reduce = reduce, by_dim = by_dim, elementwise = elementwise,
                        result = values_indices(m, name)](const Tensor& x, const py::object& dim, bool keepdim) {
      if (py::isinstance<Tensor>(dim)) return py::cast(elementwise(x, dim.cast<Tensor>()));
      if (py::isinstance<py::int_>(dim)) return result(by_dim(x, dim.cast<int64_t>(), keepdim));
      return py::cast(reduce(x, dims_arg(dim), keepdim));
    }, py::arg("dim") = py::none(), py::arg("keepdim") = false, doc.c_str());
  }
  both(m, cls, "cumsum", [](const Tensor& x, int64_t dim) { return released([&] { return cumsum(x, dim); }); },
       py::arg("dim"), "Running sums along dim, added in double: in order within chunks of 1024 "
       "elements, each chunk from the in-order sum of the chunks before it (one order on every device, so CPU "
       "and CUDA agree bitwise; lines of at most 1024 are the plain running sum). int64 for integer and bool "
       "input; differentiable.");
  both(m, cls, "var", [](const Tensor& x, const py::object& dim, bool keepdim, double correction) {
    return var(x, dims_arg(dim), keepdim, correction);
  }, py::arg("dim") = py::none(), py::arg("keepdim") = false,
     py::arg("correction") = 1.0, "Variance with divisor N - correction.");
  both(m, cls, "std", [](const Tensor& x, const py::object& dim, bool keepdim, double correction) {
    return std_dev(x, dims_arg(dim), keepdim, correction);
  }, py::arg("dim") = py::none(), py::arg("keepdim") = false,
     py::arg("correction") = 1.0, "Standard deviation with divisor N - correction.");
  both(m, cls, "argmax", [](const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
    return argmax(x, dim, keepdim);
  }, py::arg("dim") = py::none(), py::arg("keepdim") = false,
     "Index of the first maximum (over the flattened tensor when dim is None).");
  both(m, cls, "argmin", [](const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
    return argmin(x, dim, keepdim);
  }, py::arg("dim") = py::none(), py::arg("keepdim") = false,
     "Index of the first minimum (over the flattened tensor when dim is None).");
  both(m, cls, "matmul", [](const Tensor& a, const py::object& b) {
    Tensor tb = as_tensor(b, &a);
    return released([&] { return matmul(a, tb); });
  },
       py::arg("other"), "Matrix product with NumPy's matmul semantics.");
}

void bind_shape(py::module_& m, Cls& cls) {
  both(m, cls, "reshape", [](const Tensor& x, const py::args& shape) { return reshape(x, shape_args(shape).vec()); },
       "The same elements in a new shape (a view when possible; one -1 allowed).");
  def_op(cls, "view", [](const Tensor& x, const py::args& shape) { return view(x, shape_args(shape).vec()); },
          "A view with a new shape; ShapeError when the strides do not allow one.");
  both(m, cls, "permute", [](const Tensor& x, const py::args& dims) { return permute(x, shape_args(dims, "dims").vec()); },
       "A view with the dims reordered.");
  both(m, cls, "transpose", &transpose, py::arg("dim0"), py::arg("dim1"),
       "A view with two dims swapped.");
  both(m, cls, "t", [](const Tensor& x) {
    FG_CHECK(x.ndim() <= 2, Shape, "t: expects a tensor of at most 2 dims, got ", to_string(x.shape()));
    return x.ndim() < 2 ? x : transpose(x, 0, 1);
  }, "Transpose of a 2-D tensor.");
  both(m, cls, "contiguous", &contiguous, "A row-major copy, or self when already so.");
  both(m, cls, "squeeze", &squeeze, py::arg("dim") = py::none(),
       "Removes size-1 dims (all, or the one given).");
  both(m, cls, "unsqueeze", &unsqueeze, py::arg("dim"), "Inserts a size-1 dim.");
  both(m, cls, "expand", [](const Tensor& x, const py::args& shape) { return expand(x, shape_args(shape).vec()); },
       "A broadcast view (-1 keeps a dim).");
  both(m, cls, "broadcast_to", [](const Tensor& x, const py::object& shape) { return expand(x, int_list(shape, "shape")); },
       py::arg("shape"), "A broadcast view with the given shape.");
  both(m, cls, "flatten", &flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1,
       "Merges dims start_dim..end_dim into one.");
  both(m, cls, "narrow", &narrow, py::arg("dim"), py::arg("start"), py::arg("length"),
       "A view of `length` entries from `start` along dim.");
  def_op(m, "cat", &cat, py::arg("tensors"), py::arg("dim") = 0, "Concatenates tensors along an existing dim.");
  def_op(m, "stack", &stack, py::arg("tensors"), py::arg("dim") = 0, "Stacks equal-shaped tensors along a new dim.");
  both(m, cls, "split", [](const Tensor& x, const py::object& size, int64_t dim) {
    std::vector<int64_t> sizes = int_list(size, "split_size_or_sections");
    return py::isinstance<py::sequence>(size) ? split(x, sizes, dim) : split_size(x, sizes[0], dim);
  }, py::arg("split_size_or_sections"), py::arg("dim") = 0,
     "Views of equal-size pieces (int) or of the given sizes (list).");
  both(m, cls, "chunk", &chunk, py::arg("chunks"), py::arg("dim") = 0,
       "Splits into `chunks` nearly equal views.");
  both(m, cls, "pad", [](const Tensor& x, const py::object& pads, double value) {
    return pad(x, int_list(pads, "pad"), value);
  }, py::arg("pad"), py::arg("value") = 0.0,
     "Constant padding; (left, right) pairs starting from the last dim.");
  both(m, cls, "repeat", [](const Tensor& x, const py::args& reps) { return repeat(x, shape_args(reps, "repeats").vec()); },
       "Tiles the tensor (like numpy.tile).");
  both(m, cls, "flip", [](const Tensor& x, const py::object& dims) { return flip(x, int_list(dims, "dims")); },
       py::arg("dims"), "Reverses the order along the given dims.");
}

void bind_indexing(py::module_& m, Cls& cls) {
  both(m, cls, "gather", &gather, py::arg("dim"), py::arg("index"),
       "out[i][j] = input[index[i][j]][j] (for dim 0); index matches input except in dim.");
  both(m, cls, "index_select", &index_select, py::arg("dim"), py::arg("index"),
       "Entries of input at a 1-D index along dim.");
  both(m, cls, "index_add", &index_add, py::arg("dim"), py::arg("index"), py::arg("src"),
       "A copy of input with src's slices added at a 1-D index along dim (repeats accumulate).");
  both(m, cls, "scatter_add", &scatter_add, py::arg("dim"), py::arg("index"), py::arg("src"),
       "A copy of input with src added at index along dim.");
  both(m, cls, "masked_fill", &masked_fill, py::arg("mask"), py::arg("value"),
       "A copy of input with value where mask is True.");
  def_op(m, "one_hot", &one_hot, py::arg("index"), py::arg("num_classes"),
        "int64 one-hot encoding with a new last dim of num_classes.");
  both(m, cls, "nonzero", &nonzero, "Coordinates of the True elements, (count, ndim).");
  both(m, cls, "topk", [result = values_indices(m, "topk")](const Tensor& x, int64_t k, int64_t dim, bool largest) {
    return result(topk(x, k, dim, largest));
  }, py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true,
     "Named tuple (values, indices) of the k largest (or smallest) entries along dim, sorted.");
  both(m, cls, "sort", [result = values_indices(m, "sort")](const Tensor& x, int64_t dim, bool descending) {
    return result(sort(x, dim, descending));
  }, py::arg("dim") = -1, py::arg("descending") = false,
     "Named tuple (values, indices) sorted along dim (stable; NaN last).");
  both(m, cls, "kthvalue", [result = values_indices(m, "kthvalue")](const Tensor& x, int64_t k, int64_t dim,
                                                                    bool keepdim) {
    return result(kthvalue(x, k, dim, keepdim));
  }, py::arg("k"), py::arg("dim") = -1, py::arg("keepdim") = false,
     "Named tuple (values, indices) of the k-th smallest entry along dim (k counts from 1).");
  both(m, cls, "argsort", [](const Tensor& x, int64_t dim, bool descending) { return sort(x, dim, descending).second; },
       py::arg("dim") = -1, py::arg("descending") = false, "Indices that sort along dim.");
}

void bind_conversion(Cls& cls) {
  auto to = [](const Tensor& t, const py::object& a, const py::object& device, const py::object& dtype) {
    Device dev = t.device();
    std::optional<DType> dt = dtype_arg(dtype);
    if (!a.is_none()) {  // t.to(fg.float64) or t.to("cpu")
      if (py::isinstance<DType>(a)) dt = a.cast<DType>();
      else dev = device_arg(a);
    }
    dev = device_arg(device, dev);
    if (t.device().is_cpu()) return to_device(dt ? cast(t, *dt) : t, dev);  // cast where the kernels are
    Tensor moved = to_device(t, dev);
    return dt ? cast(moved, *dt) : moved;
  };
  def_op(cls, "to", to, py::arg("target") = py::none(), py::arg("device") = py::none(), py::arg("dtype") = py::none(),
          "A tensor on another device and/or with another dtype (self when nothing changes).");
  cls.def("cpu", [to](const Tensor& t) { return to(t, py::str("cpu"), py::none(), py::none()); },
          "A copy on the CPU (self when already there).");
  cls.def("cuda", [to](const Tensor& t) { return to(t, py::str("cuda"), py::none(), py::none()); },
          "A copy on the current CUDA device.");
  const std::pair<const char*, DType> casts[] = {
      {"float", DType::Float32}, {"double", DType::Float64}, {"long", DType::Int64},
      {"int", DType::Int32}, {"bool", DType::Bool}, {"half", DType::Float16}, {"bfloat16", DType::BFloat16},
      {"short", DType::Int16}, {"char", DType::Int8}, {"byte", DType::UInt8}};
  for (const auto& [name, dt] : casts) {
    std::string doc = std::string("Cast to ") + dtype_name(dt) + ".";
    cls.def(name, [dt = dt](const Tensor& t) { return cast(t, dt); }, doc.c_str());
  }
}

void bind_creation(py::module_& m) {
  auto filled = [](double v) {
    return [v](const py::args& shape, const py::object& dtype, const py::object& device, bool rg) {
      return creation(full(shape_args(shape), v, dtype_arg(dtype).value_or(default_float_dtype()), device_arg(device)), rg);
    };
  };
  def_op(m, "zeros", filled(0.0), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("requires_grad") = false, "A tensor of zeros: fg.zeros(2, 3) or fg.zeros((2, 3)).");
  def_op(m, "ones", filled(1.0), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("requires_grad") = false, "A tensor of ones.");
  def_op(m, "empty", [](const py::args& shape, const py::object& dtype, const py::object& device, bool rg) {
    return creation(Tensor::empty(shape_args(shape), dtype_arg(dtype).value_or(default_float_dtype()), device_arg(device)), rg);
  }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("requires_grad") = false,
     "A tensor with uninitialised values.");
  def_op(m, "full", [](const py::object& shape, const py::object& value, const py::object& dtype,
                   const py::object& device, bool rg) {
    DType dt = dtype_arg(dtype).value_or(scalar_dtype(value));
    return creation(full(Dims(int_list(shape, "shape")), float_arg(value, "fill_value"), dt, device_arg(device)), rg);
  }, py::arg("shape"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
     py::arg("device") = py::none(), py::arg("requires_grad") = false,
     "A tensor filled with a value; the dtype follows the value (float32, int64, bool) by default.");
  def_op(m, "arange", [](const py::object& start, const py::object& end, const py::object& step,
                     const py::object& dtype, const py::object& device, bool rg) {
    auto is_float = [](const py::object& v) { return py::isinstance<py::float_>(v); };
    bool ints = !is_float(start) && (end.is_none() || !is_float(end)) && !is_float(step);
    double lo = end.is_none() ? 0.0 : float_arg(start, "start");
    double hi = end.is_none() ? float_arg(start, "end") : float_arg(end, "end");
    DType dt = dtype_arg(dtype).value_or(ints ? DType::Int64 : default_float_dtype());
    return creation(arange(lo, hi, float_arg(step, "step"), dt, device_arg(device)), rg);
  }, py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1, py::kw_only(),
     py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("requires_grad") = false,
     "Values start, start+step, ... below end (int64 for integer arguments, else float32).");
  def_op(m, "linspace", [](double a, double b, int64_t n, const py::object& dtype, const py::object& device, bool rg) {
    return creation(linspace(a, b, n, dtype_arg(dtype).value_or(default_float_dtype()), device_arg(device)), rg);
  }, py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(), py::arg("dtype") = py::none(),
     py::arg("device") = py::none(), py::arg("requires_grad") = false, "`steps` evenly spaced values from start to end.");
  def_op(m, "eye", [](int64_t n, std::optional<int64_t> cols, const py::object& dtype, const py::object& device, bool rg) {
    return creation(eye(n, cols.value_or(n), dtype_arg(dtype).value_or(default_float_dtype()), device_arg(device)), rg);
  }, py::arg("n"), py::arg("m") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
     py::arg("device") = py::none(), py::arg("requires_grad") = false, "The identity matrix (n x m).");
  using Random = Tensor (*)(const Dims&, DType, Device);
  const std::pair<const char*, Random> randoms[] = {{"rand", rand}, {"randn", randn}};
  for (const auto& [name, fn] : randoms) {
    def_op(m, name, [fn = fn](const py::args& shape, const py::object& dtype, const py::object& device, bool rg) {
      return creation(fn(shape_args(shape), dtype_arg(dtype).value_or(default_float_dtype()), device_arg(device)), rg);
    }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("requires_grad") = false,
       name[4] == 'n' ? "Standard normal samples (Philox; fixed by fg.manual_seed)."
                      : "Uniform samples in [0, 1) (Philox; fixed by fg.manual_seed).");
  }
  def_op(m, "randperm", [](int64_t n, std::optional<uint64_t> seed, uint64_t offset, const py::object& device) {
    uint64_t s = seed ? *seed : rng_state().seed;
    uint64_t o = seed ? offset : rng_reserve(static_cast<uint64_t>(std::max<int64_t>(n, 0)));
    return randperm(n, s, o, device_arg(device));
  }, py::arg("n"), py::kw_only(), py::arg("seed") = py::none(), py::arg("offset") = 0, py::arg("device") = py::none(),
     "A random permutation of 0..n-1 (int64); with seed it depends on (seed, offset) only.");
  def_op(m, "randint", [](int64_t low, const py::object& high, const py::object& shape, const py::object& dtype,
                      const py::object& device) {
    int64_t lo = high.is_none() ? 0 : low, hi = high.is_none() ? low : int_arg(high, "high");
    return randint(lo, hi, Dims(int_list(shape, "size")), dtype_arg(dtype).value_or(DType::Int64), device_arg(device));
  }, py::arg("low"), py::arg("high") = py::none(), py::arg("size") = py::tuple(), py::kw_only(),
     py::arg("dtype") = py::none(), py::arg("device") = py::none(), "Uniform integers in [low, high).");
}

void bind_functional(py::module_& m) {
  auto nn = m.def_submodule("functional", "Neural-network functions (fg.nn.functional).");
  def_op(nn, "softmax", &softmax, py::arg("input"), py::arg("dim"), "Softmax along dim (max-subtracted).", ReleaseGil());
  def_op(nn, "log_softmax", &log_softmax, py::arg("input"), py::arg("dim"), "log(softmax) along dim, computed stably.",
         ReleaseGil());
  def_op(nn, "layer_norm", [](const Tensor& x, const py::object& shape, std::optional<Tensor> w,
                          std::optional<Tensor> b, double eps) {
    Dims dims = dims_arg(shape);
    return released([&] { return layer_norm(x, dims, w.value_or(Tensor()), b.value_or(Tensor()), eps); });
  }, py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
     py::arg("eps") = 1e-5, "Layer normalisation over the trailing normalized_shape dims.");
  def_op(nn, "add_layer_norm", [](const Tensor& x, const Tensor& residual, const py::object& shape,
                              std::optional<Tensor> w, std::optional<Tensor> b, double eps) {
    Dims dims = dims_arg(shape);
    Tensors out = released([&] { return add_layer_norm(x, residual, dims, w.value_or(Tensor()), b.value_or(Tensor()), eps); });
    return std::tuple<Tensor, Tensor>{out[0], out[1]};
  }, py::arg("input"), py::arg("residual"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
     py::arg("bias") = py::none(), py::arg("eps") = 1e-5,
     "(s, y): the residual sum s = input + residual (same shape and dtype) and y = layer_norm(s), in one pass over "
     "each row. The pre-norm transformer's x = x + f(x); h = layer_norm(x).");
  def_op(nn, "rms_norm", [](const Tensor& x, const py::object& shape, std::optional<Tensor> w, double eps) {
    Dims dims = dims_arg(shape);
    return released([&] { return rms_norm(x, dims, w.value_or(Tensor()), eps); });
  }, py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("eps") = 1e-6,
     "RMS normalisation over the trailing normalized_shape dims.");
  def_op(nn, "dropout", &dropout, py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true,
         "Zeroes entries with probability p and scales the rest by 1/(1-p) (Philox mask).");
  def_op(nn, "embedding", &embedding, py::arg("input"), py::arg("weight"), py::arg("padding_idx") = py::none(),
         "Rows of weight at integer indices; positions holding padding_idx send their row no gradient.");
  def_op(nn, "linear", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
    return linear(x, w, b.value_or(Tensor()));
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(),
     "x @ weight.T + bias over any leading dims of x, as one op: the bias is written into the result and one "
     "GEMM adds the product onto it (weight is read transposed in place, never copied).", ReleaseGil());
  def_op(nn, "conv2d", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b, int64_t stride, int64_t padding) {
    return conv2d(x, w, b.value_or(Tensor()), stride, padding);
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
     py::arg("padding") = 0, "2-D convolution (cross-correlation), NCHW.", ReleaseGil());
  auto pair_arg = [](const py::object& v) {
    std::vector<int64_t> k = int_list(v, "size");
    FG_CHECK(k.size() == 1 || k.size() == 2, Value, "expected an int or a pair of ints, got ", k.size(), " values");
    return k.size() == 1 ? std::pair{k[0], k[0]} : std::pair{k[0], k[1]};
  };
  def_op(nn, "unfold", [pair_arg](const Tensor& x, const py::object& kernel, int64_t padding, int64_t stride) {
    auto [kh, kw] = pair_arg(kernel);
    return im2col(x, kh, kw, stride, padding);
  }, py::arg("input"), py::arg("kernel_size"), py::arg("padding") = 0, py::arg("stride") = 1,
     "im2col: sliding (kH, kW) patches of (N, C, H, W) as columns (N, C*kH*kW, L).");
  def_op(nn, "fold", [pair_arg](const Tensor& cols, const py::object& output_size, const py::object& kernel,
                            int64_t padding, int64_t stride) {
    auto [kh, kw] = pair_arg(kernel);
    auto [h, w] = pair_arg(output_size);
    FG_CHECK(cols.ndim() == 3 && kh * kw > 0 && cols.shape()[1] % (kh * kw) == 0, Shape,
             "fold: columns ", to_string(cols.shape()), " are not (N, C*", kh, "*", kw, ", L)");
    Dims image{cols.shape()[0], cols.shape()[1] / (kh * kw), h, w};
    return col2im(cols, image, kh, kw, stride, padding);
  }, py::arg("input"), py::arg("output_size"), py::arg("kernel_size"), py::arg("padding") = 0,
     py::arg("stride") = 1, "col2im: sums columns (N, C*kH*kW, L) back into images (N, C, H, W).");
  def_op(nn, "max_pool2d", [](const Tensor& x, int64_t k, std::optional<int64_t> s) { return max_pool2d(x, k, s.value_or(k)); },
         py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), "2-D max pooling.");
  def_op(nn, "avg_pool2d", [](const Tensor& x, int64_t k, std::optional<int64_t> s) { return avg_pool2d(x, k, s.value_or(k)); },
         py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), "2-D average pooling.");
  def_op(nn, "scaled_dot_product_attention", [](const Tensor& q, const Tensor& k, const Tensor& v,
                                            std::optional<Tensor> mask, bool causal) {
    return nn::attention(q, k, v, mask.value_or(Tensor()), causal);
  }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
     py::arg("is_causal") = false,
     "softmax(q k^T / sqrt(E) + mask) v over q (..., L, E), k (..., S, E), v (..., S, Ev).\n\n"
     "attn_mask broadcasts to (..., L, S): bool marks the positions that take part, a float mask is "
     "added to the scores; is_causal masks key j > query i. A query row with every key masked gives "
     "NaN. Runs the fused flash_attention op (online softmax, no (L, S) scores stored; on the CPU "
     "one exact-softmax tile per head up to L, S = 128, and strided views read in place; on cuda "
     "float32/bfloat16/float16 with head dims up to 128) when q, k, v share their batch dims, S > 0 "
     "and a float mask does not require grad; otherwise the composite "
     "scaled_dot_product_attention_reference. On the CPU, head-permuted q, k, v (a (B, T, H, E) "
     "tensor transposed to (B, H, T, E)) give an output stored (B, T, H, Ev) and returned as its "
     "(B, H, T, Ev) view, so merging the heads back copies nothing. Raises ShapeError (ranks, E or S differ), DTypeError "
     "(q, k, v not one floating dtype; mask neither bool nor floating), DeviceError (devices differ).",
     ReleaseGil());
  def_op(nn, "scaled_dot_product_attention_packed", [](const Tensor& qkv, int64_t heads, std::optional<Tensor> mask,
                                                   bool causal) {
    return nn::attention_packed(qkv, heads, mask.value_or(Tensor()), causal);
  }, py::arg("qkv"), py::arg("heads"), py::arg("attn_mask") = py::none(), py::arg("is_causal") = false,
     "scaled_dot_product_attention of the q, k, v packed side by side in qkv (..., T, 3 * heads * D), "
     "as one projection makes them (MultiheadAttention's self-attention): returns (..., heads, T, D).\n\n"
     "On the CPU one flash_attention_packed op reads the three head views in place and writes their "
     "gradient into one (..., T, 3 * heads * D) buffer; on cuda, or where the fused kernels do not "
     "apply (or a float mask requires grad), scaled_dot_product_attention on the head views. "
     "attn_mask and is_causal as in scaled_dot_product_attention. Raises ShapeError (qkv not (..., T, 3 * heads * D), heads < 1) "
     "and scaled_dot_product_attention's errors.",
     ReleaseGil());
  def_op(nn, "scaled_dot_product_attention_reference", [](const Tensor& q, const Tensor& k, const Tensor& v,
                                                      std::optional<Tensor> mask, bool causal) {
    return scaled_dot_product_attention_composite(q, k, v, mask.value_or(Tensor()), causal);
  }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
     py::arg("is_causal") = false,
     "scaled_dot_product_attention as matmul + softmax (materialises the (..., L, S) scores): the "
     "reference the fused kernels are tested against; same arguments and errors.",
     ReleaseGil());
  def_op(nn, "cross_entropy", [](const Tensor& x, const Tensor& t, int64_t ignore, double smoothing, const std::string& r) {
    return cross_entropy(x, t, ignore, smoothing, reduction_from_name(r, "cross_entropy"));
  }, py::arg("input"), py::arg("target"), py::arg("ignore_index") = -100, py::arg("label_smoothing") = 0.0,
     py::arg("reduction") = "mean", "Cross entropy of logits (N, C, ...) against class indices or probabilities.",
     ReleaseGil());
  def_op(nn, "_cross_entropy_composite", [](const Tensor& x, const Tensor& t, int64_t ignore, double smoothing,
                                           const std::string& r) {
    return cross_entropy_composite(x, t, ignore, smoothing, reduction_from_name(r, "cross_entropy"));
  }, py::arg("input"), py::arg("target"), py::arg("ignore_index") = -100, py::arg("label_smoothing") = 0.0,
     py::arg("reduction") = "mean", "cross_entropy from log_softmax and gather (the fused op's test reference).");
  def_op(nn, "nll_loss", [](const Tensor& x, const Tensor& t, int64_t ignore, const std::string& r) {
    return nll_loss(x, t, ignore, reduction_from_name(r, "nll_loss"));
  }, py::arg("input"), py::arg("target"), py::arg("ignore_index") = -100, py::arg("reduction") = "mean",
     "Negative log-likelihood of log-probabilities (N, C, ...).");
  def_op(nn, "mse_loss", [](const Tensor& x, const Tensor& y, const std::string& r) {
    return mse_loss(x, y, reduction_from_name(r, "mse_loss"));
  }, py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", "Mean squared error.");
  def_op(nn, "l1_loss", [](const Tensor& x, const Tensor& y, const std::string& r) {
    return l1_loss(x, y, reduction_from_name(r, "l1_loss"));
  }, py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", "Mean absolute error.");
  def_op(nn, "huber_loss", [](const Tensor& x, const Tensor& y, const std::string& r, double delta) {
    return huber_loss(x, y, delta, reduction_from_name(r, "huber_loss"));
  }, py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", py::arg("delta") = 1.0,
     "Quadratic below delta, linear above.");
  def_op(nn, "binary_cross_entropy_with_logits", [](const Tensor& x, const Tensor& y, const std::string& r) {
    return bce_with_logits(x, y, reduction_from_name(r, "binary_cross_entropy_with_logits"));
  }, py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", "Sigmoid + binary cross entropy, stably.");
}

}  // namespace

void bind_ops(py::module_& m) {
  Cls cls = py::reinterpret_borrow<Cls>(m.attr("Tensor"));
  bind_elementwise(m, cls);
  bind_reductions(m, cls);
  bind_shape(m, cls);
  bind_indexing(m, cls);
  bind_conversion(cls);
  bind_creation(m);
  bind_functional(m);
}

}  // namespace fg::py_bind
