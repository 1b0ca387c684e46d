// Collectives as registry ops (see collective_ops.cpp): what compiled steps record.
#pragma once
#include "flowgrad/distributed/process_group.h"
#include "flowgrad/ops/registry.h"

namespace fg::dist {

// Reduces t in place over the program's group and returns it once the result is there.
Tensor all_reduce_(const Tensor& t, ReduceOp op);

}  // namespace fg::dist
