// The MPI transport. mpi.h from the build machine gives the types and the function signatures;
// the library itself is opened with dlopen at init, so `import flowgrad` never needs libmpi.
// Open MPI's handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM...) are addresses of globals in
// libmpi, resolved with dlsym; MPICH's are integer constants that the macros give directly.
#include <dlfcn.h>
// C API only: no C++ bindings (they add link-time symbols we do not resolve).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <sched.h>

#include <chrono>
#include <climits>
#include <thread>
#include <vector>

#include "flowgrad/core/env.h"
#include "flowgrad/distributed/process_group.h"

namespace fg::dist {
namespace {

#ifdef OPEN_MPI
constexpr const char* kSoname = "libmpi.so.40";
#define FG_MPI_HANDLE(type, ompi_symbol, mpich_macro) reinterpret_cast<type>(symbol(#ompi_symbol))
#else
constexpr const char* kSoname = "libmpi.so.12";
#define FG_MPI_HANDLE(type, ompi_symbol, mpich_macro) (mpich_macro)
#endif

const char* kInstallHint = "install Open MPI (apt-get install openmpi-bin libopenmpi-dev) or set "
                           "FLOWGRAD_MPI_LIBRARY to the libmpi.so to use";
bool g_finalized = false;  // MPI allows one init per process
constexpr int kLeftTag = 1;  // on the control communicator: "I left after n collectives"

// Sleeps between tests of MPI state: 20 us at first, doubling up to `longest`.
class Nap {
 public:
  explicit Nap(std::chrono::microseconds longest) : longest_(longest) {}
  void operator()() {
    std::this_thread::sleep_for(next_);
    next_ = std::min(next_ * 2, longest_);
  }

 private:
  std::chrono::microseconds next_{20}, longest_;
};

class MpiBackend final : public Backend {
 public:
  MpiBackend() {
    open_library();
    FG_CHECK(!g_finalized, Value, "distributed.init: MPI was finalised by destroy() and cannot be "
             "initialised again in the same process");
    comm_ = FG_MPI_HANDLE(MPI_Comm, ompi_mpi_comm_world, MPI_COMM_WORLD);
    int initialized = 0;
    check(Initialized_(&initialized), "MPI_Initialized");
    if (!initialized) {
      int provided = 0;
      check(Init_thread_(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
      // Collectives run on one communication thread while another may call MPI_Abort.
      FG_CHECK(provided >= MPI_THREAD_SERIALIZED, Device, "distributed.init: the MPI library gives "
               "thread level ", provided, "; flowgrad needs MPI_THREAD_SERIALIZED or more");
      owns_init_ = true;
    }
    check(Comm_rank_(comm_, &rank_), "MPI_Comm_rank");
    check(Comm_size_(comm_, &size_), "MPI_Comm_size");
    check(Comm_dup_(comm_, &control_), "MPI_Comm_dup");
    left_after_.assign(static_cast<size_t>(size_), -1);
  }

  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool host_buffers() const override { return true; }
  bool blocking() const override { return true; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    for_chunks(data, count, dtype, [&](void* p, int n) {
      collective("all_reduce", [&] {
        check(Allreduce_(MPI_IN_PLACE, p, n, datatype(dtype), mpi_op(op), comm_), "MPI_Allreduce");
      });
    });
  }
  void broadcast(void* data, int64_t count, DType dtype, int root) override {
    for_chunks(data, count, dtype, [&](void* p, int n) {
      collective("broadcast", [&] { check(Bcast_(p, n, datatype(dtype), root, comm_), "MPI_Bcast"); });
    });
  }
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override {
    collective("all_gather", [&] {
      check(Allgather_(in, int_count(count), datatype(dtype), out, int_count(count), datatype(dtype), comm_),
            "MPI_Allgather");
    });
  }
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override {
    collective("reduce_scatter", [&] {
      check(Reduce_scatter_block_(in, out, int_count(count), datatype(dtype), mpi_op(op), comm_),
            "MPI_Reduce_scatter_block");
    });
  }
  void barrier() override {
    collective("barrier", [] {});
  }
  void abort(int code) override {
    Abort_(comm_, code);
    std::_Exit(code);  // MPI_Abort does not return; should it, the process still must end
  }
  void finalize() override {
    if (!owns_init_ || g_finalized) return;
    leave();
    int finalized = 0;
    Finalized_(&finalized);
    if (!finalized) check(Finalize_(), "MPI_Finalize");
    g_finalized = true;
  }

 private:
  void* symbol(const char* name) {
    void* p = dlsym(lib_, name);
    FG_CHECK(p, Device, "distributed.init: the MPI library lacks '", name, "' (", dlerror(),
             "); it does not match the MPI flowgrad was built with (", kSoname, ")");
    return p;
  }

  void open_library() {
    std::vector<std::string> candidates{env::mpi_library()};  // the user's choice, else ours
    if (candidates[0].empty()) {
#ifdef FLOWGRAD_MPI_LIBRARY
      candidates = {FLOWGRAD_MPI_LIBRARY, kSoname};
#else
      candidates = {kSoname};
#endif
    }
    std::string errors;
    for (const std::string& path : candidates) {
      // RTLD_GLOBAL: Open MPI's plugins resolve libmpi's symbols from the global scope.
      lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (lib_) break;
      errors += std::string("\n  ") + dlerror();
    }
    FG_CHECK(lib_, Device, "distributed.init(backend='mpi'): cannot load the MPI library; ",
             kInstallHint, ". Tried:", errors);
#define FG_MPI_RESOLVE(fn) fn##_ = reinterpret_cast<decltype(&::MPI_##fn)>(symbol("MPI_" #fn))
    FG_MPI_RESOLVE(Initialized);
    FG_MPI_RESOLVE(Finalized);
    FG_MPI_RESOLVE(Init_thread);
    FG_MPI_RESOLVE(Comm_rank);
    FG_MPI_RESOLVE(Comm_size);
    FG_MPI_RESOLVE(Allreduce);
    FG_MPI_RESOLVE(Bcast);
    FG_MPI_RESOLVE(Allgather);
    FG_MPI_RESOLVE(Reduce_scatter_block);
    FG_MPI_RESOLVE(Comm_dup);
    FG_MPI_RESOLVE(Ibarrier);
    FG_MPI_RESOLVE(Test);
    FG_MPI_RESOLVE(Iprobe);
    FG_MPI_RESOLVE(Recv);
    FG_MPI_RESOLVE(Isend);
    FG_MPI_RESOLVE(Abort);
    FG_MPI_RESOLVE(Finalize);
    FG_MPI_RESOLVE(Error_string);
#undef FG_MPI_RESOLVE
  }

  // Every collective starts with a non-blocking barrier that waits for the other ranks without
  // holding a core; the data then moves in MPI's blocking call (its tuned algorithms), which
  // polls a core only while the data moves, since every rank has arrived. A blocking call alone
  // polls, even with mpi_yield_when_idle, for as long as a peer is late, or forever when it is
  // gone; the barrier's wait notices a peer that left instead.
  template <class F>
  void collective(const char* what, F&& call) {
    MPI_Request arrival;
    check(Ibarrier_(comm_, &arrival), "MPI_Ibarrier");
    wait(arrival, what);
    call();
    ++completed_;
  }

  // MPI progresses only inside its calls: this tests the request with the core yielded between
  // tests for the first millisecond (a peer about to arrive), then sleeps between tests (up to 1 ms).
  void wait(MPI_Request& request, const char* what) {
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    Nap nap(std::chrono::microseconds(1000));
    for (;;) {
      int done = 0;
      check(Test_(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      if (std::chrono::steady_clock::now() < spin_until) {
        sched_yield();
        continue;
      }
      check_peers_present(what);
      nap();
    }
  }

  // Records the departure notes that ranks which finalized have sent (see leave()).
  void receive_departures() {
    for (;;) {
      int found = 0;
      MPI_Status status;
      check(Iprobe_(MPI_ANY_SOURCE, kLeftTag, control_, &found, &status), "MPI_Iprobe");
      if (!found) return;
      int64_t collectives = 0;
      check(Recv_(&collectives, 1, int64_type(), status.MPI_SOURCE, kLeftTag, control_, MPI_STATUS_IGNORE), "MPI_Recv");
      left_after_[static_cast<size_t>(status.MPI_SOURCE)] = collectives;
    }
  }

  // A rank that left after fewer collectives than this one is waiting in will never join it.
  void check_peers_present(const char* what) {
    receive_departures();
    for (int r = 0; r < size_; ++r) {
      int64_t n = left_after_[static_cast<size_t>(r)];
      if (n >= 0 && n <= completed_)
        fail(ErrorKind::Runtime, "distributed (mpi): rank ", r, " left the job (its script ended or it called "
             "destroy()) after ", n, " collectives, while rank ", rank_, " waits for it in collective ",
             completed_ + 1, " (", what, "); every rank must make the same collective calls");
    }
  }

  // Before MPI_Finalize (which waits for every rank): tells every other rank after how many
  // collectives this one leaves, then waits, sleeping, until each has said the same. A rank
  // still waiting in a collective that this one never made learns it from the note and raises.
  void leave() {
    std::vector<MPI_Request> sends(static_cast<size_t>(size_));
    int64_t mine = completed_;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) check(Isend_(&mine, 1, int64_type(), r, kLeftTag, control_, &sends[static_cast<size_t>(r)]), "MPI_Isend");
    for (Nap nap(std::chrono::microseconds(5000));; nap()) {
      receive_departures();
      int heard = 0;
      for (int r = 0; r < size_; ++r) heard += r != rank_ && left_after_[static_cast<size_t>(r)] >= 0;
      if (heard == size_ - 1) break;
    }
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      int sent = 0;
      for (Nap nap(std::chrono::microseconds(1000)); !sent; nap())
        check(Test_(&sends[static_cast<size_t>(r)], &sent, MPI_STATUS_IGNORE), "MPI_Test");
    }
  }

  MPI_Datatype int64_type() { return FG_MPI_HANDLE(MPI_Datatype, ompi_mpi_int64_t, MPI_INT64_T); }

  void check(int code, const char* call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {0};
    int length = 0;
    Error_string_(code, text, &length);
    fail(ErrorKind::Runtime, "distributed (mpi): ", call, " failed on rank ", rank_, ": ", text);
  }

  MPI_Datatype datatype(DType dtype) {
    switch (dtype) {
      case DType::Float32: return FG_MPI_HANDLE(MPI_Datatype, ompi_mpi_float, MPI_FLOAT);
      case DType::Float64: return FG_MPI_HANDLE(MPI_Datatype, ompi_mpi_double, MPI_DOUBLE);
      case DType::Int32: return FG_MPI_HANDLE(MPI_Datatype, ompi_mpi_int32_t, MPI_INT32_T);
      case DType::Int64: return int64_type();
      case DType::Int16: return FG_MPI_HANDLE(MPI_Datatype, ompi_mpi_int16_t, MPI_INT16_T);
      case DType::Int8: return FG_MPI_HANDLE(MPI_Datatype, ompi_mpi_int8_t, MPI_INT8_T);
      case DType::UInt8: return FG_MPI_HANDLE(MPI_Datatype, ompi_mpi_uint8_t, MPI_UINT8_T);
      case DType::Bool: return FG_MPI_HANDLE(MPI_Datatype, ompi_mpi_byte, MPI_BYTE);
      case DType::Float16:
      case DType::BFloat16: break;  // staged to float32 on the host before they get here
    }  // no default: -Wswitch names a dtype added without its MPI type
    fail(ErrorKind::DType, "distributed (mpi): no MPI type for ", dtype_name(dtype));
  }

  MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
      case ReduceOp::Sum: return FG_MPI_HANDLE(MPI_Op, ompi_mpi_op_sum, MPI_SUM);
      case ReduceOp::Max: return FG_MPI_HANDLE(MPI_Op, ompi_mpi_op_max, MPI_MAX);
      case ReduceOp::Min: return FG_MPI_HANDLE(MPI_Op, ompi_mpi_op_min, MPI_MIN);
      case ReduceOp::Avg: break;  // the group divides a sum
    }
    fail(ErrorKind::Runtime, "internal error: MPI has no average op");
  }

  static int int_count(int64_t count) {
    FG_CHECK(count <= INT_MAX, Value, "distributed (mpi): ", count, " elements per rank is more "
             "than one MPI call takes (", INT_MAX, ")");
    return static_cast<int>(count);
  }

  // MPI counts are ints: longer buffers go in chunks.
  template <class F>
  static void for_chunks(void* data, int64_t count, DType dtype, F&& call) {
    constexpr int64_t kChunk = int64_t{1} << 30;
    auto* bytes = static_cast<char*>(data);
    for (int64_t start = 0; start < count; start += kChunk)
      call(bytes + start * itemsize(dtype), static_cast<int>(std::min(kChunk, count - start)));
  }

  void* lib_ = nullptr;
  MPI_Comm comm_{};
  MPI_Comm control_{};  // departure notes only, apart from the collectives
  int rank_ = 0, size_ = 1;
  bool owns_init_ = false;
  int64_t completed_ = 0;            // collectives this rank has finished
  std::vector<int64_t> left_after_;  // per rank: collectives it finished before leaving, -1: still here
  decltype(&::MPI_Initialized) Initialized_ = nullptr;
  decltype(&::MPI_Finalized) Finalized_ = nullptr;
  decltype(&::MPI_Init_thread) Init_thread_ = nullptr;
  decltype(&::MPI_Comm_rank) Comm_rank_ = nullptr;
  decltype(&::MPI_Comm_size) Comm_size_ = nullptr;
  decltype(&::MPI_Allreduce) Allreduce_ = nullptr;
  decltype(&::MPI_Bcast) Bcast_ = nullptr;
  decltype(&::MPI_Allgather) Allgather_ = nullptr;
  decltype(&::MPI_Reduce_scatter_block) Reduce_scatter_block_ = nullptr;
  decltype(&::MPI_Comm_dup) Comm_dup_ = nullptr;
  decltype(&::MPI_Ibarrier) Ibarrier_ = nullptr;
  decltype(&::MPI_Test) Test_ = nullptr;
  decltype(&::MPI_Iprobe) Iprobe_ = nullptr;
  decltype(&::MPI_Recv) Recv_ = nullptr;
  decltype(&::MPI_Isend) Isend_ = nullptr;
  decltype(&::MPI_Abort) Abort_ = nullptr;
  decltype(&::MPI_Finalize) Finalize_ = nullptr;
  decltype(&::MPI_Error_string) Error_string_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> open_mpi() { return std::make_unique<MpiBackend>(); }

}  // namespace fg::dist
