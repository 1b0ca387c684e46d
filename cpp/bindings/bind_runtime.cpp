// Grad mode, anomaly mode, autograd.grad, RNG, threads, allocator statistics, the op registry
// and CUDA availability.
#include "common.h"
#include "flowgrad/base/parallel.h"
#include "flowgrad/core/allocator.h"
#include "flowgrad/core/env.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/cuda/host_sync.h"
#include "flowgrad/cuda/runtime.h"
#include "kernels/linalg/gemm.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/linalg/sgemm.h"
#include "kernels/nn/nn.h"

namespace fg::py_bind {

void bind_streams(py::module_& cuda);  // bind_streams.cpp

void bind_runtime(py::module_& m) {
  m.def("is_grad_enabled", &grad_enabled, "Whether ops record autograd history on this thread.");
  m.def("set_grad_enabled", &set_grad_enabled, py::arg("enabled"), "Turns recording on or off for this thread.");
  m.def("is_anomaly_enabled", &anomaly_enabled, "Whether anomaly detection is on for this thread.");
  m.def("set_anomaly_enabled", &set_anomaly_enabled, py::arg("enabled"),
        "Checks every op output and gradient of this thread for NaN/Inf and names the first op that makes one.");
  m.def("grad", [](const Tensors& outputs, const Tensors& inputs, const py::object& grad_outputs,
                   bool retain_graph, bool create_graph, bool allow_unused) {
    Tensors given;
    if (!grad_outputs.is_none())
      for (py::handle g : grad_outputs) given.push_back(g.is_none() ? Tensor() : g.cast<Tensor>());
    Tensors result;
    {
      py::gil_scoped_release release;
      result = grad(outputs, inputs, given, retain_graph, create_graph, allow_unused);
    }
    py::list out;
    for (const Tensor& t : result) out.append(t.defined() ? py::cast(t) : py::none());
    return out;
  }, py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = py::none(),
     py::arg("retain_graph") = false, py::arg("create_graph") = false, py::arg("allow_unused") = false,
     "Gradients of outputs with respect to inputs, without touching .grad.");

  m.def("manual_seed", [](uint64_t seed) { manual_seed(seed); }, py::arg("seed"),
        "Seeds the global Philox generator: the same seed gives the same random tensors.");
  m.def("get_rng_state", [] { auto s = rng_state(); return py::make_tuple(s.seed, s.offset); },
        "(seed, offset) of the global generator.");
  m.def("set_rng_state", [](const py::tuple& s) { set_rng_state({s[0].cast<uint64_t>(), s[1].cast<uint64_t>()}); },
        py::arg("state"), "Restores a state from get_rng_state().");
  m.def("get_num_threads", &num_threads, "Threads used by CPU kernels and BLAS.");
  m.def("set_num_threads", &set_num_threads, py::arg("n"), "Sets the threads used by CPU kernels and BLAS.");
  m.def("build_config", [] {
    py::dict d;
    d["cuda_setting"] = FLOWGRAD_CUDA_SETTING;  // AUTO, ON or OFF, as asked at configure time
    d["cuda"] = cuda::built_with_cuda();
    d["cuda_toolkit_setting"] = FLOWGRAD_CUDA_TOOLKIT_SETTING;  // AUTO, system or pypi
    d["cuda_compiler"] = FLOWGRAD_CUDA_COMPILER_SOURCE;  // system, pypi (nvidia-cuda-nvcc) or none
    d["cuda_compiler_version"] = FLOWGRAD_CUDA_COMPILER_VERSION;  // '' without CUDA
    d["cuda_left_out"] = FLOWGRAD_CUDA_LEFT_OUT;  // why a machine with a driver/GPU got no CUDA, and the fix
    d["blas"] = blas_name();
    BlasInfo blas = blas_info();
    d["blas_setting"] = blas.setting;  // FLOWGRAD_BLAS: AUTO, scipy-openblas32, system or OFF
    d["blas_library"] = blas.library;
    d["blas_core"] = blas.core;
    d["blas_config"] = blas.config;
    d["blas_threads"] = blas_threads() == BlasThreads::Pool ? "pool" : "openblas";  // who runs OpenBLAS's jobs
    d["sgemm"] = sgemm_in_use() == Sgemm::Avx512 ? "avx512" : "blas";  // who multiplies float32 matrices
    d["onednn"] = onednn_version();  // '' without oneDNN (FLOWGRAD_ONEDNN)
    d["conv"] = conv_kernel_name(conv_kernel_in_use());  // who runs float32 forward convolutions (FLOWGRAD_CONV)
    d["isa"] = isa_name(cpu_isa());  // the instruction-set level CPU kernels run at (FLOWGRAD_ISA)
    py::list levels;  // every level FLOWGRAD_ISA may ask for here
    for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512})
      if (isa >= cpu_isa_baseline() && isa <= cpu_isa_machine()) levels.append(isa_name(isa));
    d["isa_levels"] = levels;
    return d;
  }, "How this build was configured: the FLOWGRAD_CUDA setting asked for, whether CUDA was compiled, where its "
     "compiler came from (cuda_compiler: system, pypi or none; cuda_compiler_version), cuda_left_out (non-empty when "
     "the build machine had an NVIDIA driver or GPU but no CUDA compiler: what was found and the fix), the BLAS "
     "(its name, the FLOWGRAD_BLAS setting, the library file, OpenBLAS's CPU core and build string, and blas_threads: "
     "'pool' when OpenBLAS runs its threaded calls on flowgrad's thread pool, 'openblas' when on its own threads), , "
     "sgemm: 'avx512' when float32 products run on flowgrad's own AVX-512 kernel, 'blas' when on the BLAS (FLOWGRAD_SGEMM), "
     "onednn: the version of the oneDNN this build links ('' for none; FLOWGRAD_ONEDNN at build time), conv: who runs "
     "float32 forward convolutions ('auto': oneDNN for the shapes where it beats flowgrad's own, 'own', 'onednn'; "
     "FLOWGRAD_CONV), "
     "isa: the instruction-set level CPU kernels run at ('generic', 'avx2' or 'avx512'; FLOWGRAD_ISA forces a lower "
     "one) and isa_levels: every level this machine and build can run.");
  m.def("_isa_for", [](const std::string& asked, const std::string& machine, const std::string& baseline) {
    auto level = [](const std::string& name) { return isa_for(name, Isa::Avx512, Isa::Generic); };
    return std::string(isa_name(isa_for(asked, level(machine), level(baseline))));
  }, py::arg("asked"), py::arg("machine"), py::arg("baseline") = "generic",
     "For tests: the level FLOWGRAD_ISA=asked gives on a machine of the level `machine` with a build of the level "
     "`baseline`; ValueError where it cannot.");
  m.def("_set_conv_kernel", [](const std::string& name) {
    return conv_kernel_name(set_conv_kernel(conv_kernel_named(name)));
  }, py::arg("name"), "For tests and benchmarks: who runs float32 forward convolutions from now on ('auto', 'own' or "
     "'onednn', as FLOWGRAD_CONV); returns it. Call while no convolution runs.");
  m.def("_conv_takes_onednn", [](const std::vector<int64_t>& x, int64_t out_ch, int64_t kh, int64_t kw, int64_t stride,
                                  int64_t pad) {
    FG_CHECK(x.size() == 4, Value, "_conv_takes_onednn: x is (N, C, H, W), got ", x.size(), " dimensions");
    FG_CHECK(kh >= 1 && kw >= 1 && stride >= 1 && pad >= 0, Value, "_conv_takes_onednn: expected a kernel of at "
             "least 1x1, a stride of at least 1 and padding of at least 0, got ", kh, "x", kw, ", ", stride, ", ", pad);
    const Conv2dGeometry g{x[0], x[1], x[2], x[3], kh, kw, stride, stride, pad, pad,
                           (x[2] + 2 * pad - kh) / stride + 1, (x[3] + 2 * pad - kw) / stride + 1};
    return conv2d_takes_onednn(DType::Float32, g, out_ch);
  }, py::arg("x"), py::arg("out_channels"), py::arg("kh"), py::arg("kw"), py::arg("stride") = 1, py::arg("padding") = 0,
     "For tests and benchmarks: whether a float32 conv2d of input shape x here and now runs on oneDNN.");
  m.def("blas_name", &blas_name, "The BLAS library matmul calls ('none': the built-in blocked kernel).");
  m.def("cpu_memory_stats", [] {
    AllocatorStats s = CpuAllocator::get().stats();
    py::dict d;
    d["allocated"] = s.allocated;
    d["peak_allocated"] = s.peak_allocated;
    d["cached"] = s.cached;
    return d;
  }, "Bytes held by the CPU allocator: allocated (live), peak_allocated, cached (free for reuse).");
  m.def("cpu_empty_cache", [] { CpuAllocator::get().empty_cache(); }, "Returns cached CPU blocks to the system.");

  m.def("_op_registry", [] {
    py::list ops;
    for (const OpDef* op : all_ops()) {
      py::dict d;
      d["name"] = op->name;
      d["family"] = family_name(op->family);
      d["has_shape_rule"] = op->shape_rule != nullptr;
      d["has_cpu_kernel"] = op->cpu != nullptr || op->view != nullptr;
      d["is_view"] = op->view != nullptr;  // views run on any device without a kernel
      d["cuda"] = op->cuda != nullptr;
      d["cuda_missing"] = op->cuda_missing ? py::object(py::str(op->cuda_missing)) : py::object(py::none());
      d["has_backward"] = op->backward != nullptr;
      d["not_differentiable"] = op->not_differentiable ? py::str(op->not_differentiable) : py::object(py::none());
      d["fusable"] = op->in(Group::Elementwise);
      d["view"] = op->in(Group::View);
      d["random"] = op->in(Group::Random);
      d["data_dependent"] = op->in(Group::DataDependent);
      d["in_place"] = op->in(Group::InPlace);
      d["saves_original"] = (op->flags & kSavesOriginal) != 0;
      d["host_sync"] = op->in(Group::HostSync);
      // Bit i: the op writes input i < 32; written_groups: (first, period, bits) for groups of inputs
      // from `first` on (multi-tensor updates), or None.
      d["written_inputs"] = op->mutated_inputs.head | (op->in(Group::InPlace) ? 1u : 0u);
      const WrittenInputs& w = op->mutated_inputs;
      d["written_groups"] = w.period > 0 ? py::object(py::make_tuple(w.first, w.period, w.each)) : py::object(py::none());
      ops.append(d);
    }
    return ops;
  }, "Every registered op with its rule, kernels, backward and flags (for tests and tools).");

  auto cuda = m.def_submodule("cuda_runtime", "CUDA availability (the fg.cuda module wraps this).");
  cuda.def("built_with_cuda", &cuda::built_with_cuda, "True when this build compiled the CUDA kernels.");
  cuda.def("device_count", [] { return cuda::device_count(nullptr); }, "Number of visible GPUs (0 without a driver).");
  cuda.def("unavailable_reason", [] {
    std::string why;
    return cuda::device_count(&why) > 0 ? std::string() : why;
  }, "Why no GPU can be used ('' when one can).");
  cuda.def("synchronize", &cuda::synchronize, "Waits for all queued GPU work.");
  cuda.def("sync_count", &cuda::host_sync_count,
           "How many times this thread's host waited for the GPU (item, numpy, copies to the host, stream, event "
           "and device synchronize); 0 in builds without CUDA.");
  cuda.def("memory_stats", [](int device) {
    cuda::MemoryStats s = cuda::memory_stats(device);
    py::dict d;
    d["allocated_bytes"] = s.allocated;
    d["peak_allocated_bytes"] = s.peak_allocated;
    d["reserved_bytes"] = s.reserved;
    d["peak_reserved_bytes"] = s.peak_reserved;
    d["segments"] = s.segments;
    d["allocations"] = s.allocations;
    d["backend_allocations"] = s.backend_calls;
    d["retries"] = s.retries;
    d["deferred_frees"] = s.deferred_frees;  // freed blocks waiting for other streams (record_stream)
    return d;
  }, py::arg("device"), "The caching allocator's statistics for one GPU (zeros without CUDA).");
  cuda.def("reset_peak_memory_stats", &cuda::reset_peak_memory_stats, py::arg("device"),
           "Restarts the peak statistics from the current values.");
  cuda.def("empty_cache", &cuda::empty_cache, "Returns cached, unused GPU memory to the driver.");
  cuda.def("set_allow_tf32", &set_allow_tf32, py::arg("on"),
           "Lets float32 CUDA matmuls use TF32 tensor cores (faster, ~1e-3 relative precision). Off by default.");
  bind_streams(cuda);
  cuda.def("allow_tf32", &allow_tf32, "Whether float32 CUDA matmuls may use TF32.");
  m.def("_debug_level", &env::debug_level, "FLOWGRAD_DEBUG.");
}

}  // namespace fg::py_bind
