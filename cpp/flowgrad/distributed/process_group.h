// Collectives across processes: one process group per program, on MPI (CPU tensors; CUDA
// tensors through host staging) or NCCL (CUDA tensors, on the device's stream). The transports
// are opened with dlopen at init, so the module loads on machines that have neither.
#pragma once
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "flowgrad/core/tensor.h"

namespace fg::dist {

enum class ReduceOp { Sum, Avg, Max, Min };
ReduceOp reduce_op_from_name(const std::string& name);

// A transport: raw collectives on contiguous buffers of `count` elements. MPI's calls block and
// run on the group's communication thread; NCCL's are enqueued on the stream and return at once.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual bool host_buffers() const = 0;  // true: buffers must be in host memory (staging)
  virtual bool blocking() const = 0;      // true: calls run on the communication thread
  virtual bool supports(ReduceOp op) const { return op != ReduceOp::Avg; }
  virtual bool reduces(DType) const { return true; }  // false: reductions of this dtype are refused
  virtual void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual void broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  virtual void all_gather(const void* in, void* out, int64_t count, DType dtype) = 0;
  virtual void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual void barrier() = 0;
  [[noreturn]] virtual void abort(int code) = 0;
  virtual void finalize() = 0;
};

bool built_with_mpi();  // CMake found mpi.h when flowgrad was built
// Opens a transport (DeviceError naming what is missing and how to install it).
std::unique_ptr<Backend> open_mpi();
std::unique_ptr<Backend> open_nccl();

// An issued collective. wait() returns once its result is in the output tensor (for NCCL: once
// it is ordered on the stream before later work) and rethrows a transport error.
class Work {
 public:
  void wait();
  bool is_completed();

 private:
  friend class ProcessGroup;
  void finish(std::exception_ptr error);
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false, finished_ = false;
  std::exception_ptr error_;
  std::function<void()> epilogue_;  // runs on the waiting thread: copies staged results back
};
using WorkPtr = std::shared_ptr<Work>;

// Queued: the call runs on the communication thread and the caller may work meanwhile. Blocking:
// the caller will wait at once, so the call runs on the caller's thread when the communication
// thread is idle (no handoff to another thread and back, which costs a scheduler slice each way
// on a loaded machine).
enum class Wait { Queued, Blocking };

class ProcessGroup {
 public:
  explicit ProcessGroup(std::unique_ptr<Backend> backend);
  ~ProcessGroup();
  int rank() const { return backend_->rank(); }
  int size() const { return backend_->size(); }
  const char* backend_name() const { return backend_->name(); }

  // In place on `t` (any device the backend takes, any layout).
  WorkPtr all_reduce(const Tensor& t, ReduceOp op, Wait wait = Wait::Queued);
  WorkPtr broadcast(const Tensor& t, int root);
  // out: (size * n, ...) gathered from every rank's `in` of n rows, in rank order.
  WorkPtr all_gather(const Tensor& out, const Tensor& in);
  // in: (size * n, ...); out: (n, ...) gets this rank's block of the reduction.
  WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op);
  WorkPtr barrier();
  [[noreturn]] void abort(int code) {
    backend_->abort(code);
    std::_Exit(code);  // not reached: the compiler cannot see that a virtual call never returns
  }
  // Waits for every issued collective, stops the communication thread, finalizes the transport.
  void shutdown();

 private:
  // Stages `t` for the transport: itself when it already fits, else a contiguous (host) copy.
  Tensor staged(const Tensor& t) const;
  WorkPtr submit(std::function<void()> call, std::function<void()> epilogue, Wait wait = Wait::Queued);
  void worker_loop();

  std::unique_ptr<Backend> backend_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<std::pair<std::function<void()>, WorkPtr>> queue_;
  bool stopping_ = false;
  bool busy_ = false;  // a call is running (on the communication thread or inline on a caller's)
};

// The program's group: init opens it once; group() raises when init was not called.
void init(const std::string& backend);
bool is_initialized();
ProcessGroup& group();
void destroy();

}  // namespace fg::dist
