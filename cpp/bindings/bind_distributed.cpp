// fg.distributed's engine side: the process group, collectives with wait handles, and the
// gradient reducer behind fg.nn.parallel.DistributedDataParallel.
#include "common.h"
#include "flowgrad/distributed/collective_ops.h"
#include "flowgrad/distributed/process_group.h"
#include "flowgrad/distributed/reducer.h"
#include "flowgrad/distributed/rendezvous.h"

namespace fg::dist {
extern std::vector<std::string> g_nccl_library_hints;
}

namespace fg::py_bind {

void bind_distributed(py::module_& m) {
  namespace dist = fg::dist;
  auto d = m.def_submodule("distributed", "Process group and collectives (the fg.distributed module wraps this).");
  d.def("init", [](const std::string& backend, const std::vector<std::string>& nccl_library_dirs) {
    dist::g_nccl_library_hints = nccl_library_dirs;
    py::gil_scoped_release release;  // the NCCL rendezvous waits for the other ranks
    dist::init(backend);
  }, py::arg("backend"), py::arg("nccl_library_dirs") = std::vector<std::string>{},
     "Opens the process group on 'mpi' or 'nccl' (DeviceError naming what is missing).");
  d.def("built_with_mpi", &dist::built_with_mpi, "True when this build can open MPI (CMake found mpi.h).");
  d.def("is_initialized", &dist::is_initialized, "True between init() and destroy().");
  d.def("destroy", [] {
    py::gil_scoped_release release;
    dist::destroy();
  }, "Waits for pending collectives and closes the process group.");
  d.def("rank", [] { return dist::group().rank(); }, "This process's rank in the group.");
  d.def("world_size", [] { return dist::group().size(); }, "Number of processes in the group.");
  d.def("backend", [] { return std::string(dist::group().backend_name()); }, "'mpi' or 'nccl'.");
  d.def("abort", [](int code) { dist::group().abort(code); }, py::arg("code"),
        "Ends every process of the job at once (MPI_Abort / ncclCommAbort, then exit).");

  py::class_<dist::Work, dist::WorkPtr>(d, "Work", "An issued collective (returned with async_op=True).")
      .def("wait", [](dist::Work& w) {
        py::gil_scoped_release release;
        w.wait();
      }, "Blocks until the result is in the output tensor; raises the transport's error.")
      .def("is_completed", &dist::Work::is_completed, "True once the transport has finished.");

  auto op = [](const std::string& name) { return dist::reduce_op_from_name(name); };
  d.def("all_reduce", [op](const Tensor& t, const std::string& name, bool blocking) {
    py::gil_scoped_release release;  // a blocking call may wait for the other ranks right here
    return dist::group().all_reduce(t, op(name), blocking ? dist::Wait::Blocking : dist::Wait::Queued);
  }, py::arg("tensor"), py::arg("op") = "sum", py::arg("blocking") = false,
     "Issues an in-place all-reduce ('sum', 'avg', 'max', 'min'); blocking=True when the caller waits "
     "at once (then it runs on the caller's thread if the communication thread is idle).");
  d.def("all_reduce_", [op](const Tensor& t, const std::string& name) {
    py::gil_scoped_release release;
    return dist::all_reduce_(t, op(name));
  }, py::arg("tensor"), py::arg("op") = "sum",
     "All-reduces tensor in place through the op registry and returns it once done; compiled steps "
     "record it as an instruction.");
  d.def("all_reduce_start_", [op](const Tensor& t, const std::string& name) {
    py::gil_scoped_release release;
    return dist::all_reduce_start_(t, op(name));
  }, py::arg("tensor"), py::arg("op") = "sum",
     "Starts an in-place all-reduce of tensor (contiguous) through the op registry and returns tensor at once; "
     "the result is there after all_reduce_wait_(tensor), and nothing may touch tensor before. Compiled steps "
     "record it as an instruction.");
  d.def("all_reduce_wait_", [](const Tensor& t) {
    py::gil_scoped_release release;  // waits for the other ranks
    return dist::all_reduce_wait_(t);
  }, py::arg("tensor"),
     "Waits for the all-reduce all_reduce_start_ started on tensor and returns tensor, reduced; raises the "
     "transport's error (fg.FlowgradError: a rank that left, a failed call). Compiled steps record it as an instruction.");
  d.def("broadcast", [](const Tensor& t, int src) { return dist::group().broadcast(t, src); },
        py::arg("tensor"), py::arg("src"), "Issues an in-place broadcast of rank src's tensor.");
  d.def("all_gather", [](const Tensor& out, const Tensor& in) { return dist::group().all_gather(out, in); },
        py::arg("output"), py::arg("input"), "Issues an all-gather of every rank's input into output, in rank order.");
  d.def("reduce_scatter", [op](const Tensor& out, const Tensor& in, const std::string& name) {
    return dist::group().reduce_scatter(out, in, op(name));
  }, py::arg("output"), py::arg("input"), py::arg("op") = "sum",
     "Issues a reduction of input whose block number rank lands in output.");
  d.def("barrier", [] { return dist::group().barrier(); }, "Issues a barrier.");

  d.def("_rendezvous", [](const std::string& secret, int rank, int world_size, const std::string& addr, int port,
                          double timeout_s, const std::string& token) {
    env::JobRank job{rank, world_size, 0, addr, port, token};
    std::string got;
    {
      py::gil_scoped_release release;
      got = dist::rendezvous(job, secret, timeout_s);
    }
    return py::bytes(got);
  }, py::arg("secret"), py::arg("rank"), py::arg("world_size"), py::arg("addr"), py::arg("port"),
     py::arg("timeout_s"), py::arg("token"),
     "NCCL's id exchange over TCP: rank 0 serves secret to clients that send token, the others "
     "receive it (for tests).");

  py::class_<dist::Reducer>(d, "Reducer", "Averages gradients in buckets during backward (used by DistributedDataParallel).")
      .def(py::init<std::vector<Tensor>, std::vector<std::string>, int64_t>(), py::arg("params"),
           py::arg("names"), py::arg("bucket_bytes"))
      .def("prepare_for_backward", [](dist::Reducer& r, const py::handle& outputs, bool find_unused) {
        r.prepare_for_backward(tensors_of(outputs, "DistributedDataParallel outputs"), find_unused);
      }, py::arg("outputs"), py::arg("find_unused"), "Arms the gradient hooks for the next backward.")
      .def_property_readonly("bucket_indices", &dist::Reducer::bucket_indices,
                             "Parameter indices of each bucket, in launch order.")
      .def("average", [](const dist::Reducer& r, const py::handle& params, const py::handle& grads) {
        Tensors out = r.average(tensors_of(params, "average: params"), tensors_of(grads, "average: grads"));
        py::list result;
        for (const Tensor& t : out) result.append(t.defined() ? py::cast(t) : py::none());
        return result;
      }, py::arg("params"), py::arg("grads"),
           "The gradients of `params` (some of this reducer's parameters) averaged over the group by registry ops, "
           "per bucket as backward averages them: packed into one flat tensor and its in-place all-reduce ('avg') "
           "started (all_reduce_start_), then per bucket its wait (all_reduce_wait_) and views of the result. A None gradient stays None (its parameter adds zeros to its bucket).");
}

}  // namespace fg::py_bind
