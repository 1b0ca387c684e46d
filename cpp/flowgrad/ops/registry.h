// The op registry. Every op is one row of the op table (ops.def: its id, name, groups and
// autocast policy) and one OpDef: its shape/dtype rule, its kernels, its backward rule and its
// flags. run_op is the single entry point that eager autograd and the tracer of compiled plans
// observe, so there is one implementation of each op and of its gradient.
#pragma once
#include <array>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "flowgrad/core/tensor.h"
#include "flowgrad/base/kernel_env.h"
#include "flowgrad/base/op_table.h"

namespace fg {

using Tensors = std::vector<Tensor>;
using AttrValue = std::variant<int64_t, double, bool, Dims, DType, Device>;

// Named op attributes (dims, eps, dtype, ...). Few per op, so a flat list beats a map.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const char*, AttrValue>> items) : items_(items) {}
  template <class T>
  const T& get(const char* name) const {
    for (const auto& [key, value] : items_)
      if (std::string_view(key) == name) return std::get<T>(value);
    fail(ErrorKind::Runtime, "internal error: missing op attribute '", name, "'");
  }
  int64_t i(const char* name) const { return get<int64_t>(name); }
  double f(const char* name) const { return get<double>(name); }
  bool b(const char* name) const { return get<bool>(name); }
  const Dims& dims(const char* name) const { return get<Dims>(name); }
  std::string str() const;
  // Replaces the value of an existing attribute (a pass rewriting a call: fuse_add_norm's accumulate).
  void set(const char* name, AttrValue value);

 private:
  std::vector<std::pair<const char*, AttrValue>> items_;
};

struct TensorSpec {
  Dims shape;
  DType dtype;
};

// A fixed-capacity vector stored inline: output specs are built for every op call, and no op
// has more than kMaxOutputs outputs.
template <class T, size_t N>
class InlineVec {
 public:
  InlineVec() = default;
  InlineVec(std::initializer_list<T> items) {
    for (const T& item : items) push_back(item);
  }
  void push_back(const T& item) {
    FG_ASSERT(size_ < N);
    items_[size_++] = item;
  }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return items_[i]; }
  const T& operator[](size_t i) const { return items_[i]; }
  T* begin() { return items_.data(); }
  T* end() { return items_.data() + size_; }
  const T* begin() const { return items_.data(); }
  const T* end() const { return items_.data() + size_; }

 private:
  std::array<T, N> items_;
  size_t size_ = 0;
};

constexpr size_t kMaxOutputs = 4;
using Specs = InlineVec<TensorSpec, kMaxOutputs>;  // the outputs of one op call
using SpecList = std::vector<TensorSpec>;         // any number (an op's inputs, e.g. cat)

// An op call's inputs, passed by value. A braced list ({a, b}) holds its tensors and a moved-in
// Tensors vector is kept, so a TensorList made from either stays valid as long as it lives (even
// as a variable: `TensorList in = {a, b};`). A Tensors lvalue, or another TensorList, is viewed:
// that storage must outlive the view, as a caller's arguments outlive the call.
class TensorList {
 public:
  static constexpr size_t kMaxBraced = 8;  // the longest braced list an op call passes

  TensorList() {}
  template <class... Ts>
    requires(sizeof...(Ts) > 0 && (std::is_nothrow_constructible_v<Tensor, Ts&&> && ...))
  TensorList(Ts&&... items) : size_(sizeof...(Ts)) {
    static_assert(sizeof...(Ts) <= kMaxBraced, "TensorList: raise kMaxBraced for this braced list");
    (std::construct_at(held_ + held_count_++, std::forward<Ts>(items)), ...);
    data_ = held_;
  }
  TensorList(const Tensors& items) : data_(items.data()), size_(items.size()) {}
  TensorList(Tensors&& items) : kept_(std::move(items)), data_(kept_.data()), size_(kept_.size()) {}
  TensorList(const TensorList& other) : data_(other.data_), size_(other.size_) {}  // a view
  TensorList& operator=(const TensorList&) = delete;
  ~TensorList() { std::destroy_n(held_, held_count_); }

  const Tensor& operator[](size_t i) const { return data_[i]; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Tensor* begin() const { return data_; }
  const Tensor* end() const { return data_ + size_; }
  Tensors vec() const { return Tensors(begin(), end()); }

 private:
  union {
    Tensor held_[kMaxBraced];  // the first held_count_ are alive
  };
  size_t held_count_ = 0;
  Tensors kept_;
  const Tensor* data_ = nullptr;
  size_t size_ = 0;
};

enum class Family : uint8_t { Creation, Unary, Binary, Ternary, Reduce, Linalg, Movement, Copy, Index, NN, Optim };
const char* family_name(Family f);

// How an op's kernels behave (what an op *is* is its table row's Group).
enum OpFlag : uint32_t {
  kHalfNative = 1u << 0,     // the kernels handle float16/bfloat16 themselves
  kSavesOriginal = 1u << 1,  // in place: the backward rule reads input 0 as it was before the write
  // With kHalfNative: the CUDA kernels handle float16/bfloat16, the CPU ones do not (their GEMMs
  // multiply float32), so a half call on the CPU is widened into ops (Widen, ops/decompose.h).
  kHalfWidenedOnCpu = 1u << 2,
};

// Promote (ops/decompose.h): the dtype an op's kernel computes in and the inputs (bit i: input i)
// that must have it. run_op casts the others with `cast` op calls before the kernel runs, so
// kernels never convert, and autograd and the compile tracer see the casts.
struct Promotion {
  DType dtype;
  uint32_t inputs = 0;
};
using PromoteFn = Promotion (*)(TensorList in, const Specs& specs, const Attrs& attrs);
// Whether an input `p` names does not have p's dtype: in the common case, every input already of
// the compute dtype, one comparison per named input.
inline bool promotes(const Promotion& p, TensorList in) {
  for (uint32_t bits = p.inputs; bits; bits &= bits - 1)
    if (in[static_cast<size_t>(__builtin_ctz(bits))].dtype() != p.dtype) return true;
  return false;
}

// What the backward rule may read. Built by the autograd engine.
struct BackwardCtx {
  const Attrs& attrs;
  const Tensors& inputs;        // saved inputs (empty unless the op saves them)
  const Tensors& outputs;       // saved outputs (empty unless the op saves them)
  const SpecList& input_specs;  // always available
  const Tensors& grads;         // one per output; zeros where no gradient flowed
  const std::vector<bool>& needs_grad;  // per input
  bool create_graph;  // the gradient itself will be differentiated
};

enum class Saved : uint8_t { Nothing, Inputs, Outputs, InputsAndOutputs };

// A kernel call prepared once over fixed operands (compiled plans): the dtype dispatch, the
// strided views and the attributes are resolved when it is built, and `run(args, env)` only
// launches, on the stream and scratch of the env the plan passes.
struct Launch {
  void (*run)(const void* args, const KernelEnv& env) = nullptr;
  std::shared_ptr<const void> args;
  explicit operator bool() const { return run != nullptr; }
};
using PrepareFn = Launch (*)(TensorList in, const Tensors& out, const Attrs& attrs);

// Which inputs an op's kernel writes: bit i of `head` for input i < 32, and from input `first` on,
// bit k of `each` for input first + j * period + k (multi-tensor updates: one group per parameter,
// any number of groups).
struct WrittenInputs {
  uint32_t head = 0;
  int first = 0, period = 0;
  uint32_t each = 0;

  constexpr bool operator()(size_t i) const {
    if (i < 32 && (head >> i & 1u)) return true;
    if (period <= 0 || i < static_cast<size_t>(first)) return false;
    return each >> ((i - static_cast<size_t>(first)) % static_cast<size_t>(period)) & 1u;
  }
  constexpr bool any() const { return head != 0 || (period > 0 && each != 0); }
};

struct OpDef {
  OpId id = OpId::None;  // its row in the op table
  const char* name;      // the row's name
  Family family;
  uint32_t flags = 0;
  // Validates inputs and attributes and returns the output specs. The only place that raises
  // ShapeError/DTypeError for the op.
  Specs (*shape_rule)(TensorList in, const Attrs& attrs) = nullptr;
  // Mixed-dtype calls: the dtype the kernel computes in and which inputs must have it (Promotion);
  // null where the kernel takes its inputs' dtypes as they come.
  PromoteFn promotion = nullptr;
  // Write the preallocated outputs (compute ops), on the CPU and on a CUDA device, with what
  // the caller's env gives (its stream and scratch: base/kernel_env.h).
  void (*cpu)(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) = nullptr;
  void (*cuda)(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) = nullptr;  // see FG_CUDA
  // Returns the aliasing output (view ops).
  Tensor (*view)(const Tensor& in, const TensorSpec& out, const Attrs& attrs) = nullptr;
  // Why the op has no CUDA kernel even in CUDA builds; null for ops that have one there (in
  // CPU-only builds `cuda` is null for every op: see cuda_missing_reason).
  const char* cuda_missing = nullptr;
  // Gradients of the inputs (undefined where not needed), written with public ops so they are
  // differentiable again and traceable.
  Tensors (*backward)(const BackwardCtx& ctx) = nullptr;
  const char* not_differentiable = nullptr;  // reason, when backward is null
  Saved saved = Saved::Nothing;
  uint32_t nondiff_inputs = 0;  // bit i: input i never receives a gradient (indices, masks)
  // The inputs the kernel writes (optimizer updates): run_op checks they are writable and bumps
  // their versions; compiled plans never drop or reorder such an op.
  WrittenInputs mutated_inputs = {};
  // Optional prepared launches for compiled plans (see Launch); an empty Launch, or none, means
  // the plan calls cpu/cuda. Valid as long as the operands' memory stays where it was.
  PrepareFn prepare_cpu = nullptr;
  PrepareFn prepare_cuda = nullptr;
  // Unary/Binary ops: the UnaryFn/BinaryFn (kernels/elementwise/elementwise.h) their kernel
  // applies, so a fuser can compose the functors; -1 elsewhere.
  int functor = -1;

  bool in(Group g) const { return in_group(id, g); }
};

// Whether the op writes its input i (InPlace ops write input 0, optimizer updates declare theirs).
inline bool writes_input(const OpDef& op, size_t i) { return op.mutated_inputs(i) || (i == 0 && op.in(Group::InPlace)); }
inline bool mutates_inputs(const OpDef& op) { return op.mutated_inputs.any() || op.in(Group::InPlace); }

// A CUDA kernel in CUDA builds, nothing otherwise: `.cuda = FG_CUDA(kernel)`.
#if defined(FLOWGRAD_HAVE_CUDA)
#define FG_CUDA(kernel) kernel
#else
#define FG_CUDA(kernel) nullptr
#endif

// Why `op` cannot run on a CUDA device in this build (for DeviceError messages).
const char* cuda_missing_reason(const OpDef& op);

// Every op, indexed by OpId.
std::span<const OpDef* const> all_ops();
inline const OpDef& op_def(OpId id) { return *all_ops()[static_cast<size_t>(id)]; }

// Each family file registers its OpDef `k_<name>` for table row <name> with FG_REGISTER(name),
// outside any anonymous namespace: a row without one, or with two, fails to link.
namespace op_rows {
#define FG_OP(name, groups, autocast) extern const OpDef* const name;
#include "flowgrad/base/ops.def"
}  // namespace op_rows
#define FG_REGISTER(NAME) const OpDef* const op_rows::NAME = &k_##NAME

// The env run_op hands a kernel on `device`, filled from this thread's ExecContext: the current
// stream of that CUDA device (0 on the CPU) and the running plan's scratch.
// Raw tensor work outside an op call (ops/raw.h) launches with it too.
KernelEnv current_env(Device device);

// Runs an op: device check, shape rule and kernel, inside the dispatch modes (ops/dispatch.h).
Tensors run_op(const OpDef& op, TensorList in, const Attrs& attrs = {});
inline Tensor run_op1(const OpDef& op, TensorList in, const Attrs& attrs = {}) {
  return run_op(op, in, attrs)[0];
}

// Tells the trace modes (ops/dispatch.h) that `what` reads t's values on the host (item, numpy...).
void notify_host_read(const Tensor& t, const char* what);

// How many kernels run_op has called in this process (tests check that a trace calls none).
uint64_t kernel_calls();

}  // namespace fg
