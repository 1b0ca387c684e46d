// Collectives as registry ops (see collective_ops.cpp): what compiled steps record.
#pragma once
#include "flowgrad/distributed/process_group.h"
#include "flowgrad/ops/registry.h"

namespace fg::dist {

// Reduces t in place over the program's group and returns it once the result is there.
Tensor all_reduce_(const Tensor& t, ReduceOp op);
// The same in two ops: start issues the reduction of t (contiguous) and returns t at once, the
// communication going on meanwhile; wait returns t once the result is in it and raises the
// transport's error (a peer that left, a failed call). Nothing may read or write t in between.
Tensor all_reduce_start_(const Tensor& t, ReduceOp op);
Tensor all_reduce_wait_(const Tensor& t);

}  // namespace fg::dist
