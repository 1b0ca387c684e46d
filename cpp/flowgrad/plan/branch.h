// Helpers over lowered regions (branch.cpp), shared by lowering and the executor.
#pragma once

#include "flowgrad/plan/plan.h"

namespace fg::plan {

// The stand-in OpDef of a lowered region's record, named after its kind (for display and stats).
const OpDef& branch_op(BranchKind kind);

}  // namespace fg::plan
