// Fused elementwise runs on CUDA: one generated kernel per run, compiled once per plan with NVRTC.
//
// Why generated source rather than a templated chain kernel: a run's length, op sequence, dtypes
// and operand layouts are all fixed when the plan is built, so generated source bakes them in
// (no per-element op switch, index math only for the operands that need it, values that live
// only inside the run stay in registers) and any chain length works. The ops' math is the same
// text the CPU and CUDA kernels compile (kernels/common/functors.h, embedded at build time),
// so a fused run computes what the unfused kernels do.
//
// NVRTC and the CUDA driver are opened with dlopen on first use: `import flowgrad` never needs
// them, and a machine without them (or without a GPU) runs the unfused launches instead.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>

#include "flowgrad/cuda/stream.h"
#include "flowgrad/plan/plan.h"
#include "kernels/elementwise/elementwise.h"

namespace fg::plan {
extern const char* const kFunctorsSource;  // kernels/common/functors.h (generated functors_source.cpp)

namespace {

// The functor struct of each UnaryFn / BinaryFn: the op table's rows (ops.def).
constexpr const char* kUnaryFunctors[] = {
#define FG_UNARY(name, Functor, groups, autocast, api, saved, doc) #Functor,
#include "flowgrad/base/ops.def"
};
constexpr const char* kBinaryFunctors[] = {
#define FG_BINARY(name, Functor, groups, autocast, api, saved, doc) #Functor,
#include "flowgrad/base/ops.def"
};

// What functors.h needs from the standard library, for NVRTC (which has no host headers).
constexpr const char* kPrelude = R"(#define FG_HD __device__ __forceinline__
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
namespace std {
template <class A, class B> struct is_same { static constexpr bool value = false; };
template <class A> struct is_same<A, A> { static constexpr bool value = true; };
template <class A, class B> constexpr bool is_same_v = is_same<A, B>::value;
template <class T> constexpr bool is_floating_point_v = is_same_v<T, float> || is_same_v<T, double>;
template <class T> constexpr bool is_integral_v = is_same_v<T, bool> || is_same_v<T, int> || is_same_v<T, long long>;
template <class T> constexpr bool is_signed_v = is_same_v<T, int> || is_same_v<T, long long> || is_floating_point_v<T>;
template <class T> constexpr bool is_unsigned_v = is_same_v<T, bool>;
template <class T> struct numeric_limits;
template <> struct numeric_limits<bool> {
  static constexpr __device__ bool lowest() { return false; }
  static constexpr __device__ bool max() { return true; }
};
template <> struct numeric_limits<int> {
  static constexpr __device__ int lowest() { return -2147483647 - 1; }
  static constexpr __device__ int max() { return 2147483647; }
};
template <> struct numeric_limits<long long> {
  static constexpr __device__ long long lowest() { return -9223372036854775807LL - 1; }
  static constexpr __device__ long long max() { return 9223372036854775807LL; }
};
using ::abs; using ::cos; using ::erf; using ::exp; using ::log; using ::log1p; using ::sin; using ::sqrt;
using ::tanh; using ::pow;
}  // namespace std
// Each op's result is materialised, so the compiler cannot contract a multiply of one op with
// an add of the next into an FMA that the unfused kernels never compute.
__device__ __forceinline__ float fg_keep(float x) { asm volatile("" : "+f"(x)); return x; }
__device__ __forceinline__ double fg_keep(double x) { asm volatile("" : "+d"(x)); return x; }
template <class T> __device__ __forceinline__ T fg_keep(T x) { return x; }
)";

const char* c_type(DType dt) {
  switch (dt) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Int32: return "int";
    case DType::Int64: return "long long";
    case DType::Bool: return "bool";
    default: return nullptr;
  }
}

// A double as exact C++ source (hex float; NaN and infinities through their bit patterns).
std::string literal(double x) {
  if (std::isnan(x)) return "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(x)) return x > 0 ? "__longlong_as_double(0x7ff0000000000000LL)" : "__longlong_as_double(0xfff0000000000000LL)";
  char text[64];
  std::snprintf(text, sizeof text, "%a", x);
  return text;
}

// functors.h without its #include lines (the prelude stands in for them).
std::string functors_text() {
  std::istringstream in(kFunctorsSource);
  std::ostringstream out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("#include", 0) != 0) out << line << "\n";
  return out.str();
}

}  // namespace

FusedKernel fused_kernel(const Program& p, const Instr& run, const std::vector<bool>& local, const std::string& name) {
  const Block& chain = run.blocks[0];
  const Dims& shape = chain[0].out[0].shape;
  const int rank = shape.size();
  std::vector<int> produced(p.buffers.size(), -1);  // call of the chain that writes a buffer
  for (size_t k = 0; k < chain.size(); ++k) produced[chain[k].out[0].buffer] = static_cast<int>(k);
  FusedKernel kernel;
  kernel.name = name;
  kernel.numel = shape.numel();
  std::vector<int> param_of(p.buffers.size(), -1);
  auto param = [&](int buffer) {
    if (param_of[buffer] < 0) {
      param_of[buffer] = static_cast<int>(kernel.params.size());
      kernel.params.push_back(buffer);
    }
    return "p" + std::to_string(param_of[buffer]);
  };
  auto type_of = [&](DType dt, const char* op) {
    const char* t = c_type(dt);
    FG_CHECK(t, DType, "compile: no generated CUDA code for '", op, "' on ", dtype_name(dt));
    return std::string(t);
  };
  std::ostringstream body;
  bool needs_index = false;
  int loads = 0;
  // The element of v read by the element e of the run.
  auto element = [&](const Value& v) {
    if (v.offset == 0 && v.shape == shape && v.strides == contiguous_strides(shape)) return std::string("e");
    needs_index = true;
    std::string at = std::to_string(v.offset) + "LL";
    int lead = rank - v.shape.size();
    for (int d = 0; d < v.shape.size(); ++d)
      if (v.shape[d] != 1 && v.strides[d] != 0) at += " + i" + std::to_string(d + lead) + " * " + std::to_string(v.strides[d]) + "LL";
    return at;
  };
  auto operand = [&](const Value& v, const char* op) -> std::string {
    if (produced[v.buffer] >= 0) return "t" + std::to_string(produced[v.buffer]);
    std::string var = "v" + std::to_string(loads++);
    body << "    const " << type_of(v.dtype, op) << " " << var << " = " << param(v.buffer) << "[" << element(v) << "];\n";
    return var;
  };
  for (size_t k = 0; k < chain.size(); ++k) {
    const Instr& ins = chain[k];
    const char* op = ins.op->name;
    const std::string out_t = type_of(ins.out[0].dtype, op);
    std::vector<std::string> in;
    for (const Value& v : ins.in) in.push_back(operand(v, op));
    std::string expr;
    auto as = [&](const std::string& t, size_t i) { return "static_cast<" + t + ">(" + in[i] + ")"; };
    if (ins.op->family == Family::Unary && ins.op->functor >= 0) {
      auto fn = static_cast<UnaryFn>(ins.op->functor);
      std::string functor = std::string("fg::fn::") + kUnaryFunctors[ins.op->functor];
      if (fn == UnaryFn::Clamp)
        functor += "{" + literal(ins.attrs.f("min")) + ", " + literal(ins.attrs.f("max")) + "}";
      else
        functor += "{}";
      expr = functor + "(" + as(out_t, 0) + ")";
    } else if (ins.op->family == Family::Binary && ins.op->functor >= 0) {
      auto fn = static_cast<BinaryFn>(ins.op->functor);
      bool comparison = in_group(op_of(fn), Group::Comparison);
      std::string compute = comparison ? type_of(promote(ins.in[0].dtype, ins.in[1].dtype), op) : out_t;
      expr = std::string("fg::fn::") + kBinaryFunctors[ins.op->functor] + "{}(" + as(compute, 0) + ", " +
             as(compute, 1) + ")";
    } else if (ins.op->id == OpId::where) {
      expr = in[0] + " ? " + as(out_t, 1) + " : " + as(out_t, 2);
    } else if (ins.op->id == OpId::cast) {
      expr = as(out_t, 0);
    } else {
      fail(ErrorKind::Value, "compile: no generated CUDA code for '", op, "'");
    }
    body << "    const " << out_t << " t" << k << " = fg_keep(" << expr << ");\n";
    if (!local[ins.out[0].buffer]) body << "    " << param(ins.out[0].buffer) << "[e] = t" << k << ";\n";
  }
  std::ostringstream src;
  src << kPrelude << functors_text() << "\n// fused run of " << chain.size() << " elementwise ops over shape " << to_string(shape) << "\nextern \"C\" __global__ void " << name << "(";
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    int b = kernel.params[i];
    bool written = produced[b] >= 0;
    src << (i ? ", " : "") << (written ? "" : "const ") << c_type(p.buffers[b].dtype) << "* __restrict__ p" << i;
  }
  src << ") {\n  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < " << kernel.numel
      << "LL; e += (long long)gridDim.x * blockDim.x) {\n";
  if (needs_index) {  // the multi-index of e over the run's shape
    src << "    long long rest = e;\n";
    for (int d = rank - 1; d >= 0; --d)
      src << "    const long long i" << d << " = rest % " << shape[d] << "LL; rest /= " << shape[d] << "LL;\n";
  }
  src << body.str() << "  }\n}\n";
  kernel.source = src.str();
  return kernel;
}

// ---- NVRTC, opened on first use ----

namespace {

// Resolves `symbol` from the dlopen'ed `lib` into `fn`; the first one missing is recorded in `missing`
// as "<what> has no <symbol>".
template <class Fn>
void load_symbol(void* lib, Fn& fn, const char* symbol, const char* what, std::string& missing) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (!fn && missing.empty()) missing = std::string(what) + " has no " + symbol;
}

struct Nvrtc {
  using Program = void*;
  int (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*ptx_size)(Program, size_t*) = nullptr;
  int (*ptx)(Program, char*) = nullptr;
  int (*cubin_size)(Program, size_t*) = nullptr;
  int (*cubin)(Program, char*) = nullptr;
  int (*num_archs)(int*) = nullptr;
  int (*archs)(int*) = nullptr;
  int (*log_size)(Program, size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  const char* (*error)(int) = nullptr;
  std::string missing;  // why NVRTC cannot be used ("" when it can)
};

const Nvrtc& nvrtc() {
  static const Nvrtc api = [] {
    Nvrtc n;
    void* lib = nullptr;
    for (const char* name : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      n.missing = "NVRTC (libnvrtc.so, part of the CUDA toolkit) was not found";
      return n;
    }
    auto load = [&](auto& fn, const char* symbol) { load_symbol(lib, fn, symbol, "libnvrtc", n.missing); };
    load(n.create, "nvrtcCreateProgram");
    load(n.compile, "nvrtcCompileProgram");
    load(n.ptx_size, "nvrtcGetPTXSize");
    load(n.ptx, "nvrtcGetPTX");
    load(n.cubin_size, "nvrtcGetCUBINSize");
    load(n.cubin, "nvrtcGetCUBIN");
    load(n.num_archs, "nvrtcGetNumSupportedArchs");
    load(n.archs, "nvrtcGetSupportedArchs");
    load(n.log_size, "nvrtcGetProgramLogSize");
    load(n.log, "nvrtcGetProgramLog");
    load(n.destroy, "nvrtcDestroyProgram");
    load(n.error, "nvrtcGetErrorString");
    return n;
  }();
  return api;
}

// NVRTC's output for `source` compiled with --gpu-architecture=<target>: a CUBIN for sm_XY, PTX
// for compute_XY.
std::string nvrtc_compile(const std::string& source, const std::string& name, const std::string& target) {
  const Nvrtc& n = nvrtc();
  FG_CHECK(n.missing.empty(), Runtime, "compile: cannot compile the fused CUDA kernel ", name, ": ", n.missing);
  const bool cubin = target.rfind("sm_", 0) == 0;
  Nvrtc::Program program = nullptr;
  int rc = n.create(&program, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
  FG_CHECK(rc == 0, Runtime, "compile: nvrtcCreateProgram failed for ", name, ": ", n.error(rc));
  std::string arch_flag = "--gpu-architecture=" + target;
  // 177: an index variable of the run's shape that no operand needs
  const char* options[] = {arch_flag.c_str(), "--std=c++17", "-default-device", "-diag-suppress=177"};
  rc = n.compile(program, 4, options);
  std::string image;
  if (rc == 0) {
    size_t size = 0;
    (cubin ? n.cubin_size : n.ptx_size)(program, &size);
    image.resize(size);
    (cubin ? n.cubin : n.ptx)(program, image.data());
  } else {
    size_t size = 0;
    n.log_size(program, &size);
    std::string log(size, '\0');
    n.log(program, log.data());
    n.destroy(&program);
    fail(ErrorKind::Runtime, "compile: NVRTC could not compile the fused CUDA kernel ", name, " (", n.error(rc),
         "):\n", log);
  }
  n.destroy(&program);
  return image;
}

}  // namespace

bool nvrtc_available(std::string* why) {
  if (why) *why = nvrtc().missing;
  return nvrtc().missing.empty();
}

std::vector<int> nvrtc_archs() {
  const Nvrtc& n = nvrtc();
  FG_CHECK(n.missing.empty(), Runtime, "NVRTC: ", n.missing);
  int count = 0;
  n.num_archs(&count);
  std::vector<int> archs(std::max(count, 0));
  if (count > 0) n.archs(archs.data());
  return archs;
}

std::string compile_ptx(const std::string& source, const std::string& name, int arch) {
  return nvrtc_compile(source, name, "compute_" + std::to_string(arch));
}

// SASS for the GPU itself when this NVRTC knows its architecture: no PTX JIT in the driver, so an
// NVRTC newer than the driver still works. Otherwise (a GPU newer than NVRTC) PTX for the newest
// architecture NVRTC knows below it, which the driver JIT-compiles.
FusedBinary compile_fused(const std::string& source, const std::string& name, int arch) {
  std::vector<int> archs = nvrtc_archs();
  if (std::find(archs.begin(), archs.end(), arch) != archs.end()) {
    std::string target = "sm_" + std::to_string(arch);
    return {nvrtc_compile(source, name, target), "CUBIN for " + target};
  }
  int ptx_arch = 0;
  for (int a : archs)
    if (a <= arch) ptx_arch = std::max(ptx_arch, a);
  FG_CHECK(ptx_arch > 0, Runtime, "compile: NVRTC knows no architecture at or below sm_", arch, " for ", name);
  std::string target = "compute_" + std::to_string(ptx_arch);
  return {nvrtc_compile(source, name, target), "PTX for " + target};
}

// ---- the CUDA driver: module loading and launches, opened on first use ----
// NEVER RAN: written for a GPU machine; the machine this was written on has no GPU or driver.

namespace {

constexpr unsigned kThreads = 256;
constexpr int kComputeMajor = 75, kComputeMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*

struct Driver {
  int (*ctx_get_current)(void**) = nullptr;
  int (*ctx_set_current)(void*) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*primary_ctx_retain)(void**, int) = nullptr;
  int (*device_attribute)(int*, int, int) = nullptr;
  int (*module_load_data)(void**, const void*) = nullptr;
  int (*module_unload)(void*) = nullptr;
  int (*module_function)(void**, void*, const char*) = nullptr;
  int (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                void**) = nullptr;
  int (*error)(int, const char**) = nullptr;
  std::string missing;
};

const Driver& driver() {
  static const Driver api = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      d.missing = "the CUDA driver (libcuda.so.1) was not found";
      return d;
    }
    auto load = [&](auto& fn, const char* symbol) { load_symbol(lib, fn, symbol, "libcuda", d.missing); };
    int (*init)(unsigned) = nullptr;
    load(init, "cuInit");
    load(d.ctx_get_current, "cuCtxGetCurrent");
    load(d.ctx_set_current, "cuCtxSetCurrent");
    load(d.device_get, "cuDeviceGet");
    load(d.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    load(d.device_attribute, "cuDeviceGetAttribute");
    load(d.module_load_data, "cuModuleLoadData");
    load(d.module_unload, "cuModuleUnload");
    load(d.module_function, "cuModuleGetFunction");
    load(d.launch, "cuLaunchKernel");
    load(d.error, "cuGetErrorString");
    if (d.missing.empty() && init(0) != 0) d.missing = "cuInit failed (no usable GPU)";
    return d;
  }();
  return api;
}

void check(int rc, const char* call) {
  if (rc == 0) return;
  const char* text = nullptr;
  driver().error(rc, &text);
  fail(ErrorKind::Device, "fused CUDA kernel: ", call, " failed: ", text ? text : "unknown error", " (", rc, ")");
}

// The primary context of cuda:<device>, the one the CUDA runtime uses (retained once, kept).
void* primary_context(int device) {
  static std::mutex mutex;
  static std::map<int, void*> contexts;
  std::lock_guard<std::mutex> lock(mutex);
  void*& context = contexts[device];
  if (!context) {
    int handle = 0;
    check(driver().device_get(&handle, device), "cuDeviceGet");
    check(driver().primary_ctx_retain(&context, handle), "cuDevicePrimaryCtxRetain");
  }
  return context;
}

// Makes `context` current on this thread for the scope.
class ContextScope {
 public:
  explicit ContextScope(void* context) {
    check(driver().ctx_get_current(&previous_), "cuCtxGetCurrent");
    if (previous_ == context) return;
    check(driver().ctx_set_current(context), "cuCtxSetCurrent");
    changed_ = true;
  }
  ~ContextScope() {
    if (changed_) driver().ctx_set_current(previous_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  void* previous_ = nullptr;
  bool changed_ = false;
};

FusedFault g_fault = FusedFault::None;

// A generated kernel loaded into its device's primary context.
struct FusedModule {
  std::shared_ptr<void> module;  // unloaded with the last plan holding it
  void* function = nullptr;
  void* context = nullptr;
};

// A loaded fused kernel and its arguments (fixed: plan memory does not move).
struct FusedLaunch {
  std::shared_ptr<const FusedModule> loaded;
  std::vector<void*> pointers;  // one per kernel parameter
  std::vector<void*> params;    // &pointers[i], what cuLaunchKernel reads
  unsigned blocks = 1;
};

// The one place fused runs launch: on the env's stream (the plan's run stream), like every
// other kernel, and counted for the capture self-check.
void launch_fused(const void* p, const KernelEnv& env) {
  auto* f = static_cast<const FusedLaunch*>(p);
  if (g_fault == FusedFault::DropInCapture && cuda::capturing(env.stream)) return;
  ContextScope on_device(f->loaded->context);
  unsigned blocks = g_fault == FusedFault::Launch ? 0 : f->blocks;  // a grid of 0 blocks is invalid
  // FusedFault::LegacyStream replays review finding F1 (a launch outside the capture) for the
  // capture self-check's test.
  check(driver().launch(f->loaded->function, blocks, 1, 1, kThreads, 1, 1, 0,
                        g_fault == FusedFault::LegacyStream ? nullptr : reinterpret_cast<void*>(env.stream),
                        const_cast<void**>(f->params.data()), nullptr),
        "cuLaunchKernel");
  cuda::count_launch();
}

}  // namespace

void set_fused_fault(FusedFault fault) { g_fault = fault; }

std::string cuda_fusion_unavailable() {
  std::string why;
  if (!nvrtc_available(&why)) return why;
  return driver().missing;
}

int cuda_arch(int device) {
  const Driver& d = driver();
  int handle = 0, major = 0, minor = 0;
  check(d.device_get(&handle, device), "cuDeviceGet");
  check(d.device_attribute(&major, kComputeMajor, handle), "cuDeviceGetAttribute");
  check(d.device_attribute(&minor, kComputeMinor, handle), "cuDeviceGetAttribute");
  return major * 10 + minor;
}

std::shared_ptr<const void> load_fused(int device, const FusedKernel& kernel, const FusedBinary& binary) {
  const Driver& d = driver();
  auto f = std::make_shared<FusedModule>();
  f->context = primary_context(device);
  ContextScope on_device(f->context);
  // The fault test loads text that is neither a CUBIN nor valid PTX: the driver rejects it as
  // it would a broken module (a complete C string, so the driver reads nothing past it).
  const char* image = g_fault == FusedFault::Load ? "not a module" : binary.image.c_str();
  void* module = nullptr;
  check(d.module_load_data(&module, image), "cuModuleLoadData");
  f->module = std::shared_ptr<void>(module, [unload = d.module_unload](void* m) { unload(m); });
  check(d.module_function(&f->function, module, kernel.name.c_str()), "cuModuleGetFunction");
  return f;
}

Launch bind_fused(const std::shared_ptr<const void>& loaded, const FusedKernel& kernel,
                  const std::vector<void*>& pointers) {
  auto f = std::make_shared<FusedLaunch>();
  f->loaded = std::static_pointer_cast<const FusedModule>(loaded);
  f->pointers = pointers;
  for (void*& ptr : f->pointers) f->params.push_back(&ptr);
  f->blocks = static_cast<unsigned>(std::min<int64_t>((kernel.numel + kThreads - 1) / kThreads, 65535));
  return {launch_fused, f};
}

}  // namespace fg::plan
