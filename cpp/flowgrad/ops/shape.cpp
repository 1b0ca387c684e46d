// Shape and view ops. Views (view, permute, expand, slice) share storage; copies (contiguous,
// cat, flip, pad, slice_backward) write new tensors. Composite helpers are built on both.
#include <algorithm>
#include <numeric>

#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/elementwise/elementwise.h"

namespace fg {
namespace {

// Strides that let `shape` alias a tensor of old shape/strides, if any exist (as PyTorch's
// view): dims may only be merged or split within runs that are contiguous in memory.
std::optional<Dims> view_strides(const Dims& old_shape, const Dims& old_strides, const Dims& shape) {
  Dims strides = Dims::filled(shape.size(), 1);
  if (old_shape.numel() == 0 || old_shape.empty()) return contiguous_strides(shape);
  int view_d = shape.size() - 1;
  int64_t chunk_stride = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int d = old_shape.size() - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_stride = old_strides[d - 1];
        tensor_numel = view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

// Resolves one -1 in a requested shape; ShapeError when the element counts differ.
Dims infer_shape(const std::vector<int64_t>& req, int64_t numel, const char* op) {
  Dims shape;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < req.size(); ++i) {
    if (req[i] == -1) {
      FG_CHECK(infer_at < 0, Shape, op, ": only one dimension can be -1");
      infer_at = static_cast<int>(i);
      shape.push_back(1);
    } else {
      FG_CHECK(req[i] >= 0, Shape, op, ": invalid size ", req[i]);
      shape.push_back(req[i]);
      known *= req[i];
    }
  }
  if (infer_at >= 0) {
    FG_CHECK(known != 0 && numel % known == 0, Shape, op, ": cannot infer -1 for ",
             numel, " elements from ", to_string(Dims(req)));
    shape[infer_at] = numel / known;
  }
  FG_CHECK(shape.numel() == numel, Shape, op, ": shape ", to_string(shape),
           " is invalid for a tensor of ", numel, " elements");
  return shape;
}

// ---- view ----
Specs view_shape(TensorList in, const Attrs& attrs) {
  const Dims& shape = attrs.dims("shape");
  FG_CHECK(shape.numel() == in[0].numel(), Shape, "view: shape ", to_string(shape),
           " is invalid for a tensor of shape ", to_string(in[0].shape()));
  FG_CHECK(view_strides(in[0].shape(), in[0].strides(), shape), Shape, "view: shape ",
           to_string(shape), " is not compatible with the strides of ", describe(in[0]),
           "; use reshape (which copies)");
  return {{shape, in[0].dtype()}};
}
Tensor view_alias(const Tensor& x, const TensorSpec& spec, const Attrs&) {
  return x.alias(spec.shape, *view_strides(x.shape(), x.strides(), spec.shape), x.offset());
}
Tensors view_backward(const BackwardCtx& c) { return {reshape(c.grads[0], c.input_specs[0].shape.vec())}; }
const OpDef k_view{.id = OpId::view, .name = "view", .family = Family::Movement,
                   .shape_rule = view_shape, .view = view_alias, .backward = view_backward};

// ---- permute ----
Specs permute_shape(TensorList in, const Attrs& attrs) {
  const Dims& dims = attrs.dims("dims");
  const Tensor& x = in[0];
  FG_CHECK(dims.size() == x.ndim(), Shape, "permute: ", to_string(dims), " has ", dims.size(),
           " dims but the tensor has ", x.ndim());
  bool seen[Dims::kMaxRank] = {};
  Dims shape;
  for (int64_t d : dims) {
    int w = wrap_dim(d, x.ndim(), "permute");
    FG_CHECK(!seen[w], Shape, "permute: dim ", d, " repeats in ", to_string(dims));
    seen[w] = true;
    shape.push_back(x.shape()[w]);
  }
  return {{shape, x.dtype()}};
}
Tensor permute_alias(const Tensor& x, const TensorSpec& spec, const Attrs& attrs) {
  Dims strides;
  for (int64_t d : attrs.dims("dims")) strides.push_back(x.strides()[wrap_dim(d, x.ndim(), "permute")]);
  return x.alias(spec.shape, strides, x.offset());
}
Tensors permute_backward(const BackwardCtx& c) {
  const Dims& dims = c.attrs.dims("dims");
  std::vector<int64_t> inverse(dims.size());
  for (int i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], dims.size(), "permute")] = i;
  return {permute(c.grads[0], inverse)};
}
const OpDef k_permute{.id = OpId::permute, .name = "permute", .family = Family::Movement,
                      .shape_rule = permute_shape, .view = permute_alias, .backward = permute_backward};

// ---- expand ----
Specs expand_shape(TensorList in, const Attrs& attrs) {
  const Dims& req = attrs.dims("shape");
  const Tensor& x = in[0];
  FG_CHECK(req.size() >= x.ndim(), Shape, "expand: cannot expand ", to_string(x.shape()),
           " to fewer dims ", to_string(req));
  Dims shape;
  int lead = req.size() - x.ndim();
  for (int d = 0; d < req.size(); ++d) {
    int64_t have = d >= lead ? x.shape()[d - lead] : 1;
    int64_t want = req[d] == -1 && d >= lead ? have : req[d];
    FG_CHECK(want >= 0 && (have == want || have == 1), Shape, "expand: cannot expand ",
             to_string(x.shape()), " to ", to_string(req), " (dim ", d, ": ", have, " vs ", req[d], ")");
    shape.push_back(want);
  }
  return {{shape, x.dtype()}};
}
Tensor expand_alias(const Tensor& x, const TensorSpec& spec, const Attrs&) {
  Dims strides;
  int lead = spec.shape.size() - x.ndim();
  for (int d = 0; d < spec.shape.size(); ++d) {
    bool broadcast = d < lead || (x.shape()[d - lead] == 1 && spec.shape[d] != 1);
    strides.push_back(broadcast ? 0 : x.strides()[d - lead]);
  }
  return x.alias(spec.shape, strides, x.offset());
}
Tensors expand_backward(const BackwardCtx& c) { return {sum_to(c.grads[0], c.input_specs[0].shape)}; }
const OpDef k_expand{.id = OpId::expand, .name = "expand", .family = Family::Movement,
                     .shape_rule = expand_shape, .view = expand_alias, .backward = expand_backward};

// ---- slice: [start:stop:step] along dim, already clamped by the public function ----
Specs slice_shape(TensorList in, const Attrs& attrs) {
  const Tensor& x = in[0];
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), "slice");
  int64_t start = attrs.i("start"), stop = attrs.i("stop"), step = attrs.i("step");
  FG_CHECK(step > 0, Value, "slice: step must be positive, got ", step);
  FG_CHECK(0 <= start && start <= stop && stop <= x.shape()[dim], Index, "slice: range [", start,
           ":", stop, "] is outside dim ", dim, " of size ", x.shape()[dim]);
  Dims shape = x.shape();
  shape[dim] = (stop - start + step - 1) / step;
  return {{shape, x.dtype()}};
}
Tensor slice_alias(const Tensor& x, const TensorSpec& spec, const Attrs& attrs) {
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), "slice");
  Dims strides = x.strides();
  strides[dim] *= attrs.i("step");
  return x.alias(spec.shape, strides, x.offset() + attrs.i("start") * x.strides()[dim]);
}
Tensors slice_backward_rule(const BackwardCtx& c) {
  return {slice_backward(c.grads[0], c.input_specs[0].shape, c.attrs.i("dim"), c.attrs.i("start"),
                         c.attrs.i("stop"), c.attrs.i("step"))};
}
const OpDef k_slice{.id = OpId::slice, .name = "slice", .family = Family::Movement,
                    .shape_rule = slice_shape, .view = slice_alias, .backward = slice_backward_rule};

// ---- slice_backward: g into zeros of `shape` ----
Specs slice_backward_shape(TensorList in, const Attrs& attrs) {
  return {{attrs.dims("shape"), in[0].dtype()}};
}
void slice_backward_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  raw::fill(env, out[0], 0.0);
  TensorSpec spec{in[0].shape(), in[0].dtype()};
  raw::copy_into(env, slice_alias(out[0], spec, attrs), in[0]);
}
Tensors slice_backward_backward(const BackwardCtx& c) {
  return {slice(c.grads[0], c.attrs.i("dim"), c.attrs.i("start"), c.attrs.i("stop"), c.attrs.i("step"))};
}
const OpDef k_slice_backward{.id = OpId::slice_backward, .name = "slice_backward", .family = Family::Copy,
                             .flags = kHalfNative,
                             .shape_rule = slice_backward_shape, .cpu = slice_backward_kernel,
                             .cuda = FG_CUDA(slice_backward_kernel),
                             .backward = slice_backward_backward};

// ---- contiguous ----
Specs same_shape(TensorList in, const Attrs&) { return {{in[0].shape(), in[0].dtype()}}; }
void copy_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs&) { raw::copy_into(env, out[0], in[0]); }
Tensors identity_backward(const BackwardCtx& c) { return {c.grads[0]}; }
const OpDef k_contiguous{.id = OpId::contiguous, .name = "contiguous", .family = Family::Copy, .flags = kHalfNative,
                         .shape_rule = same_shape, .cpu = copy_kernel, .cuda = FG_CUDA(copy_kernel),
                         .backward = identity_backward};

// ---- cat ----
Specs cat_shape(TensorList in, const Attrs& attrs) {
  FG_CHECK(!in.empty(), Value, "cat: expected a non-empty list of tensors");
  const Tensor& first = in[0];
  FG_CHECK(first.ndim() > 0, Shape, "cat: zero-dimensional tensors cannot be concatenated");
  int dim = wrap_dim(attrs.i("dim"), first.ndim(), "cat");
  Dims shape = first.shape();
  DType dt = first.dtype();
  for (size_t i = 1; i < in.size(); ++i) {
    const Tensor& t = in[i];
    FG_CHECK(t.ndim() == first.ndim(), Shape, "cat: tensor 0 has shape ", to_string(first.shape()),
             " but tensor ", i, " has shape ", to_string(t.shape()), " (ranks differ)");
    for (int d = 0; d < t.ndim(); ++d)
      FG_CHECK(d == dim || t.shape()[d] == first.shape()[d], Shape, "cat: tensor 0 has shape ",
               to_string(first.shape()), " but tensor ", i, " has shape ", to_string(t.shape()),
               " (they must match except in dim ", dim, ")");
    shape[dim] += t.shape()[dim];
    dt = promote(dt, t.dtype());
  }
  return {{shape, dt}};
}
void cat_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  int dim = wrap_dim(attrs.i("dim"), out[0].ndim(), "cat");
  int64_t at = 0;
  for (const Tensor& t : in) {
    Dims strides = out[0].strides();
    raw::copy_into(env, out[0].alias(t.shape(), strides, out[0].offset() + at * strides[dim]), t);
    at += t.shape()[dim];
  }
}
Tensors cat_backward(const BackwardCtx& c) {
  int dim = wrap_dim(c.attrs.i("dim"), c.input_specs[0].shape.size(), "cat");
  Tensors grads;
  int64_t at = 0;
  for (const TensorSpec& s : c.input_specs) {
    grads.push_back(narrow(c.grads[0], dim, at, s.shape[dim]));
    at += s.shape[dim];
  }
  return grads;
}
const OpDef k_cat{.id = OpId::cat, .name = "cat", .family = Family::Copy, .flags = kHalfNative,
                  .shape_rule = cat_shape, .cpu = cat_kernel, .cuda = FG_CUDA(cat_kernel),
                  .backward = cat_backward};

// ---- flip: a negative-stride alias, copied ----
Specs flip_shape(TensorList in, const Attrs& attrs) {
  for (int64_t d : attrs.dims("dims")) wrap_dim(d, in[0].ndim(), "flip", ScalarDim::AsSingleElement);
  return same_shape(in, attrs);
}
void flip_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Dims strides = x.strides();
  int64_t offset = x.offset();
  bool flipped[Dims::kMaxRank] = {};
  for (int64_t d : attrs.dims("dims")) flipped[wrap_dim(d, x.ndim(), "flip", ScalarDim::AsSingleElement)] ^= true;
  for (int d = 0; d < x.ndim(); ++d) {
    if (!flipped[d] || x.shape()[d] == 0) continue;
    offset += (x.shape()[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  raw::copy_into(env, out[0], x.alias(x.shape(), strides, offset));
}
Tensors flip_backward(const BackwardCtx& c) { return {flip(c.grads[0], c.attrs.dims("dims").vec())}; }
const OpDef k_flip{.id = OpId::flip, .name = "flip", .family = Family::Copy, .flags = kHalfNative,
                   .shape_rule = flip_shape, .cpu = flip_kernel, .cuda = FG_CUDA(flip_kernel),
                   .backward = flip_backward};

// ---- pad: (left, right) pairs starting from the last dim, like torch.nn.functional.pad ----
Specs pad_shape(TensorList in, const Attrs& attrs) {
  const Dims& pads = attrs.dims("pads");
  const Tensor& x = in[0];
  FG_CHECK(pads.size() % 2 == 0 && pads.size() / 2 <= x.ndim(), Shape, "pad: ", to_string(pads),
           " must hold (left, right) pairs for at most ", x.ndim(), " dims");
  Dims shape = x.shape();
  for (int i = 0; i < pads.size() / 2; ++i) {
    int d = x.ndim() - 1 - i;
    FG_CHECK(pads[2 * i] >= 0 && pads[2 * i + 1] >= 0, Value, "pad: negative padding ",
             to_string(pads), " is not supported");
    shape[d] += pads[2 * i] + pads[2 * i + 1];
  }
  return {{shape, x.dtype()}};
}
Tensor pad_interior(const Tensor& out, const Tensor& x, const Dims& pads) {
  int64_t offset = out.offset();
  for (int i = 0; i < pads.size() / 2; ++i) offset += pads[2 * i] * out.strides()[x.ndim() - 1 - i];
  return out.alias(x.shape(), out.strides(), offset);
}
void pad_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  raw::fill(env, out[0], attrs.f("value"));
  raw::copy_into(env, pad_interior(out[0], in[0], attrs.dims("pads")), in[0]);
}
Tensors pad_backward(const BackwardCtx& c) {
  const Dims& pads = c.attrs.dims("pads");
  const Dims& shape = c.input_specs[0].shape;
  Tensor g = c.grads[0];
  for (int i = 0; i < pads.size() / 2; ++i) {
    int d = shape.size() - 1 - i;
    g = narrow(g, d, pads[2 * i], shape[d]);
  }
  return {g};
}
const OpDef k_pad{.id = OpId::pad, .name = "pad", .family = Family::Copy, .flags = kHalfNative,
                  .shape_rule = pad_shape, .cpu = pad_kernel, .cuda = FG_CUDA(pad_kernel),
                  .backward = pad_backward};

int64_t clamp_index(int64_t i, int64_t size) {
  if (i < 0) i += size;
  return std::clamp<int64_t>(i, 0, size);
}

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(view);
FG_REGISTER(permute);
FG_REGISTER(expand);
FG_REGISTER(slice);
FG_REGISTER(slice_backward);
FG_REGISTER(contiguous);
FG_REGISTER(cat);
FG_REGISTER(flip);
FG_REGISTER(pad);

Tensor view(const Tensor& x, const std::vector<int64_t>& shape) {
  Dims s = infer_shape(shape, x.numel(), "view");
  if (s == x.shape()) return x;
  return run_op1(k_view, {x}, {{"shape", s}});
}
Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape) {
  Dims s = infer_shape(shape, x.numel(), "reshape");
  if (s == x.shape()) return x;
  Tensor base = view_strides(x.shape(), x.strides(), s) ? x : contiguous(x);
  return run_op1(k_view, {base}, {{"shape", s}});
}
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  return run_op1(k_permute, {x}, {{"dims", Dims(dims)}});
}
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  int a = wrap_dim(d0, x.ndim(), "transpose", ScalarDim::AsSingleElement);
  int b = wrap_dim(d1, x.ndim(), "transpose", ScalarDim::AsSingleElement);
  if (x.ndim() == 0) return x;  // like PyTorch: swapping the only "dim" of a scalar
  std::vector<int64_t> dims(x.ndim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[a], dims[b]);
  return permute(x, dims);
}
Tensor expand(const Tensor& x, const std::vector<int64_t>& shape) {
  if (Dims(shape) == x.shape()) return x;
  return run_op1(k_expand, {x}, {{"shape", Dims(shape)}});
}
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  std::vector<int64_t> shape;
  int target = dim ? wrap_dim(*dim, x.ndim(), "squeeze", ScalarDim::AsSingleElement) : -1;
  for (int d = 0; d < x.ndim(); ++d)
    if (!(x.shape()[d] == 1 && (target < 0 || target == d))) shape.push_back(x.shape()[d]);
  return reshape(x, shape);
}
Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int d = wrap_dim(dim, x.ndim() + 1, "unsqueeze");
  std::vector<int64_t> shape = x.shape().vec();
  shape.insert(shape.begin() + d, 1);
  return reshape(x, shape);
}
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.ndim() == 0) return reshape(x, {1});
  int s = wrap_dim(start_dim, x.ndim(), "flatten"), e = wrap_dim(end_dim, x.ndim(), "flatten");
  FG_CHECK(s <= e, Value, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + s);
  shape.push_back(raw::span(x.shape(), s, e + 1));
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, shape);
}
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t stop, int64_t step) {
  int d = wrap_dim(dim, x.ndim(), "slice");
  int64_t size = x.shape()[d];
  start = clamp_index(start, size);
  stop = std::max(start, clamp_index(stop, size));
  if (start == 0 && stop == size && step == 1) return x;
  return run_op1(k_slice, {x}, {{"dim", int64_t{d}}, {"start", start}, {"stop", stop}, {"step", step}});
}
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  int d = wrap_dim(dim, x.ndim(), "narrow");
  int64_t size = x.shape()[d];
  if (start < 0) start += size;
  FG_CHECK(start >= 0 && start <= size && length >= 0 && length <= size - start, Index, "narrow: start ",
           start, " and length ", length, " exceed dim ", d, " of size ", x.shape()[d]);
  return slice(x, d, start, start + length, 1);
}
Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  int d = wrap_dim(dim, x.ndim(), "select");
  int64_t size = x.shape()[d];
  FG_CHECK(index >= -size && index < size, Index, "index ", index,
           " is out of range for dim ", d, " of size ", size);
  if (index < 0) index += size;
  std::vector<int64_t> shape = x.shape().vec();
  shape.erase(shape.begin() + d);
  return reshape(run_op1(k_slice, {x}, {{"dim", int64_t{d}}, {"start", index}, {"stop", index + 1},
                                        {"step", int64_t{1}}}), shape);
}
Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return run_op1(k_contiguous, {x});
}
Tensor clone(const Tensor& x) { return run_op1(k_contiguous, {x}); }
Tensor cat(const Tensors& ts, int64_t dim) { return run_op1(k_cat, ts, {{"dim", dim}}); }
Tensor stack(const Tensors& ts, int64_t dim) {
  FG_CHECK(!ts.empty(), Value, "stack: expected a non-empty list of tensors");
  for (size_t i = 1; i < ts.size(); ++i)
    FG_CHECK(ts[i].shape() == ts[0].shape(), Shape, "stack: tensor 0 has shape ",
             to_string(ts[0].shape()), " but tensor ", i, " has shape ", to_string(ts[i].shape()));
  Tensors parts;
  int d = wrap_dim(dim, ts[0].ndim() + 1, "stack");
  for (const Tensor& t : ts) parts.push_back(unsqueeze(t, d));
  return cat(parts, d);
}
Tensors split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  int d = wrap_dim(dim, x.ndim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  FG_CHECK(total == x.shape()[d], Shape, "split: sizes ", to_string(Dims(sizes)), " sum to ",
           total, " but dim ", d, " has size ", x.shape()[d]);
  Tensors parts;
  int64_t at = 0;
  for (int64_t s : sizes) {
    parts.push_back(narrow(x, d, at, s));
    at += s;
  }
  return parts;
}
Tensors split_size(const Tensor& x, int64_t size, int64_t dim) {
  FG_CHECK(size > 0, Value, "split: split_size must be positive, got ", size);
  int d = wrap_dim(dim, x.ndim(), "split");
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < x.shape()[d]; at += size) sizes.push_back(std::min(size, x.shape()[d] - at));
  if (sizes.empty()) sizes.push_back(0);  // like PyTorch: an empty dim splits into one empty piece
  return split(x, sizes, d);
}
Tensors chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  FG_CHECK(chunks > 0, Value, "chunk: chunks must be positive, got ", chunks);
  int d = wrap_dim(dim, x.ndim(), "chunk");
  int64_t size = std::max<int64_t>(1, (x.shape()[d] + chunks - 1) / chunks);
  return split_size(x, size, d);
}
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  return run_op1(k_flip, {x}, {{"dims", Dims(dims)}});
}
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  return run_op1(k_pad, {x}, {{"pads", Dims(pads)}, {"value", value}});
}
Tensor repeat(const Tensor& x, const std::vector<int64_t>& reps) {
  FG_CHECK(reps.size() >= static_cast<size_t>(x.ndim()), Shape, "repeat: ", reps.size(),
           " repeat counts for a tensor of ", x.ndim(), " dims");
  size_t lead = reps.size() - x.ndim();
  std::vector<int64_t> interleaved, expanded, out;
  for (size_t i = 0; i < reps.size(); ++i) {
    FG_CHECK(reps[i] >= 0, Value, "repeat: counts must be >= 0, got ", reps[i]);
    int64_t s = i < lead ? 1 : x.shape()[static_cast<int>(i - lead)];
    interleaved.insert(interleaved.end(), {1, s});
    expanded.insert(expanded.end(), {reps[i], s});
    out.push_back(reps[i] * s);
  }
  // clone: a tensor of its own, as PyTorch's repeat (a reshaped expand can stay a view of x, with
  // zero strides that a later in-place op refuses)
  return reshape(clone(expand(reshape(x, interleaved), expanded)), out);
}
Tensor slice_backward(const Tensor& g, const Dims& shape, int64_t dim, int64_t start,
                      int64_t stop, int64_t step) {
  return run_op1(k_slice_backward, {g}, {{"shape", shape}, {"dim", dim}, {"start", start},
                                         {"stop", stop}, {"step", step}});
}

}  // namespace fg
