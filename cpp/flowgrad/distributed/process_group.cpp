#include "flowgrad/distributed/process_group.h"

#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"

namespace fg::dist {
namespace {

std::unique_ptr<ProcessGroup> g_group;
std::mutex g_group_mutex;

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}


void check_reducible(const Backend& backend, const Tensor& t, ReduceOp op, const char* what) {
  FG_CHECK(t.dtype() != DType::Bool, DType, what, ": cannot reduce a bool tensor (", describe(t),
           "); cast it to int32 first");
  FG_CHECK(backend.reduces(t.dtype()), DType, what, ": the ", backend.name(), " backend cannot reduce ",
           dtype_name(t.dtype()), " (", describe(t), "); cast it to int32 first");
  FG_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), DType, what,
           ": op 'avg' needs a floating tensor, got ", describe(t));
}

// Copies a staged result back into the caller's tensor when staging made a copy.
void write_back(const Tensor& dst, const Tensor& src) {
  if (src.impl_ptr() != dst.impl_ptr()) raw::copy_into(dst, raw::device_copy(src, dst.device()));
}

// An average the transport lacks: its sum divided in place, on the communication thread (one
// pass over the staged host buffer; no op dispatch, so the all_reduce_ op's kernel stays one op).
void divide_host(const Tensor& buf, int n) {
  FG_ASSERT(buf.device().is_cpu() && buf.is_contiguous());
  auto divide = [&](auto* p) {
    for (int64_t i = 0, count = buf.numel(); i < count; ++i) p[i] /= n;
  };
  if (buf.dtype() == DType::Float64) divide(buf.data<double>());
  else divide(buf.data<float>());  // floating and staged: half types arrive as float32
}

}  // namespace

ReduceOp reduce_op_from_name(const std::string& name) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    if (name == op_name(op)) return op;
  fail(ErrorKind::Value, "distributed: unknown reduce op '", name, "' (expected sum, avg, max or min)");
}

void Work::finish(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  error_ = error;
  done_ = true;
  done_cv_.notify_all();
}

void Work::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
  if (finished_) return;
  finished_ = true;
  auto epilogue = std::move(epilogue_);
  lock.unlock();
  if (epilogue) epilogue();
}

bool Work::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

ProcessGroup::ProcessGroup(std::unique_ptr<Backend> backend) : backend_(std::move(backend)) {
  if (backend_->blocking()) worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroup::~ProcessGroup() {
  try {
    shutdown();
  } catch (...) {  // a destructor must not throw; shutdown() reports errors when called directly
  }
}

void ProcessGroup::worker_loop() {
  for (;;) {
    std::pair<std::function<void()>, WorkPtr> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_cv_.wait(lock, [&] { return (stopping_ || !queue_.empty()) && !busy_; });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::exception_ptr error;
    try {
      item.first();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
    }
    item.second->finish(error);
  }
}

WorkPtr ProcessGroup::submit(std::function<void()> call, std::function<void()> epilogue, Wait wait) {
  auto work = std::make_shared<Work>();
  work->epilogue_ = std::move(epilogue);
  if (!backend_->blocking()) {  // enqueued on the stream: ordered before whatever comes next
    call();
    work->finish(nullptr);
    return work;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  FG_CHECK(!stopping_, Value, "distributed: the process group was shut down");
  if (wait == Wait::Queued || busy_ || !queue_.empty()) {  // after what is already issued
    queue_.emplace_back(std::move(call), work);
    queue_cv_.notify_one();
    return work;
  }
  busy_ = true;  // the communication thread starts nothing until this call is done
  lock.unlock();
  std::exception_ptr error;
  try {
    call();
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  busy_ = false;
  queue_cv_.notify_one();
  lock.unlock();
  work->finish(error);
  return work;
}

Tensor ProcessGroup::staged(const Tensor& t) const {
  if (!backend_->host_buffers()) {
    FG_CHECK(t.device().is_cuda(), Device, backend_->name(), ": collectives take CUDA tensors, got ",
             describe(t));
    return raw::contiguous(t);
  }
  Tensor host = raw::contiguous(raw::device_copy(t, cpu_device()));  // itself when already contiguous on the CPU
  return is_half(t.dtype()) ? raw::converted(host, DType::Float32) : host;
}

WorkPtr ProcessGroup::all_reduce(const Tensor& t, ReduceOp op, Wait wait) {
  check_reducible(*backend_, t, op, "all_reduce");
  Tensor buf = staged(t);
  bool divide = op == ReduceOp::Avg && !backend_->supports(op);
  ReduceOp sent = divide ? ReduceOp::Sum : op;
  int n = size();
  return submit([this, buf, sent, divide, n] {
                  backend_->all_reduce(buf.data_ptr(), buf.numel(), buf.dtype(), sent);
                  if (divide) divide_host(buf, n);
                },
                [t, buf] { write_back(t, buf); }, wait);
}

WorkPtr ProcessGroup::broadcast(const Tensor& t, int root) {
  FG_CHECK(root >= 0 && root < size(), Value, "broadcast: root ", root, " is not a rank of the ",
           size(), " processes");
  Tensor buf = staged(t);
  return submit([this, buf, root] { backend_->broadcast(buf.data_ptr(), buf.numel(), buf.dtype(), root); },
                [t, buf] { write_back(t, buf); });
}

WorkPtr ProcessGroup::all_gather(const Tensor& out, const Tensor& in) {
  FG_CHECK(out.dtype() == in.dtype() && out.device() == in.device() &&
               out.numel() == in.numel() * size(), Shape, "all_gather: output ", describe(out),
           " must hold world_size (", size(), ") times the input ", describe(in),
           " with the same dtype and device");
  Tensor src = staged(in), dst = staged(out);
  return submit([this, src, dst] { backend_->all_gather(src.data_ptr(), dst.data_ptr(), src.numel(), src.dtype()); },
                [out, dst] { write_back(out, dst); });
}

WorkPtr ProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  check_reducible(*backend_, in, op, "reduce_scatter");
  FG_CHECK(out.dtype() == in.dtype() && out.device() == in.device() &&
               in.numel() == out.numel() * size(), Shape, "reduce_scatter: input ", describe(in),
           " must hold world_size (", size(), ") times the output ", describe(out),
           " with the same dtype and device");
  Tensor src = staged(in), dst = staged(out);
  bool divide = op == ReduceOp::Avg && !backend_->supports(op);
  ReduceOp sent = divide ? ReduceOp::Sum : op;
  int n = size();
  return submit([this, src, dst, sent, divide, n] {
                  backend_->reduce_scatter(src.data_ptr(), dst.data_ptr(), dst.numel(), dst.dtype(), sent);
                  if (divide) divide_host(dst, n);
                },
                [out, dst] { write_back(out, dst); });
}

WorkPtr ProcessGroup::barrier() {
  return submit([this] { backend_->barrier(); }, nullptr);
}

void ProcessGroup::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    queue_cv_.notify_one();
  }
  if (worker_.joinable()) worker_.join();
  backend_->finalize();
}

bool built_with_mpi() {
#ifdef FLOWGRAD_HAVE_MPI
  return true;
#else
  return false;
#endif
}

#ifndef FLOWGRAD_HAVE_MPI
std::unique_ptr<Backend> open_mpi() {
  fail(ErrorKind::Device, "distributed: flowgrad was built without MPI (CMake found no MPI when it "
       "was compiled); install Open MPI (apt-get install openmpi-bin libopenmpi-dev) and rebuild "
       "flowgrad, or use backend='nccl' on GPUs");
}
#endif

void init(const std::string& backend) {
  std::lock_guard<std::mutex> lock(g_group_mutex);
  FG_CHECK(!g_group, Value, "distributed.init: already initialised (backend '", g_group->backend_name(),
           "'); call destroy() first");
  FG_CHECK(backend == "mpi" || backend == "nccl", Value, "distributed.init: unknown backend '",
           backend, "' (expected 'mpi' or 'nccl')");
  g_group = std::make_unique<ProcessGroup>(backend == "mpi" ? open_mpi() : open_nccl());
}

bool is_initialized() { return g_group != nullptr; }

ProcessGroup& group() {
  FG_CHECK(g_group, Value, "distributed: not initialised; call fg.distributed.init(backend='mpi') "
           "(or 'nccl') first");
  return *g_group;
}

void destroy() {
  std::unique_ptr<ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(g_group_mutex);
    group = std::move(g_group);
  }
  if (group) group->shutdown();
}

}  // namespace fg::dist
