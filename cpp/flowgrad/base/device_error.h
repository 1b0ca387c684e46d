// Errors found by CUDA kernels, reported at the next host synchronisation instead of by a host
// read inside the op. A kernel that meets a bad index claims a per-device flag (an atomic in
// device memory, so the first report wins) and writes what it saw into pinned host memory it
// can address directly. cuda::synchronize and every device-to-host copy (item, numpy, to('cpu'))
// call raise_device_errors(), which raises the IndexError a CPU run would have raised at once.
// The op itself never synchronises and the record lives at fixed addresses, so a captured CUDA
// graph can contain checking kernels: a replay reports through the same record.
#pragma once
#include <cstdint>

#include "flowgrad/base/fg_hd.h"

namespace fg {

// The ops that check indices on the device. A record carries the code, and the host maps it to
// the name: never a pointer, since a string literal in device code is not host memory and a
// host string may be gone by the next synchronisation.
enum class IndexCheckOp : int32_t {
  Gather, ScatterAdd, IndexSelect, IndexAdd, IndexPut, OneHot,
  CrossEntropy,  // last: index_check_op walks the codes up to it
};

inline const char* index_check_op_name(IndexCheckOp op) {
  switch (op) {  // no default: -Wswitch names a code added without its name
    case IndexCheckOp::Gather: return "gather";
    case IndexCheckOp::ScatterAdd: return "scatter_add";
    case IndexCheckOp::IndexSelect: return "index_select";
    case IndexCheckOp::IndexAdd: return "index_add";
    case IndexCheckOp::IndexPut: return "index_put_";
    case IndexCheckOp::OneHot: return "one_hot";
    case IndexCheckOp::CrossEntropy: return "cross_entropy";
  }
  return "an unknown op";  // a corrupted record
}

struct IndexErrorRecord {
  int64_t value;     // the bad index as given (before wrapping negatives)
  int64_t size;      // the size of the dimension it indexes
  IndexCheckOp op;   // which op found it
  int32_t dim;
  volatile int32_t set;  // written last: the other fields are complete when it is 1
};

// What a checking kernel receives (by value) to report through.
struct IndexErrorSink {
  int* claimed;              // device memory: 0 until a kernel claims the record
  IndexErrorRecord* record;  // device view of the pinned host record
};

#if defined(FLOWGRAD_HAVE_CUDA)
// The code of the op named `name` (one of the names above; anything else is a bug of the caller).
IndexCheckOp index_check_op(const char* name);
// The sink of the current device (allocated on first use; CUDA graph capture makes it first).
IndexErrorSink index_error_sink();
// Raises the IndexError a kernel reported since the last call (and clears it). Host only; the
// caller has synchronised with the device.
void raise_device_errors();
#endif

}  // namespace fg
