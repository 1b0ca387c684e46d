// The pass pipeline: one table, run in order, each pass counted (and logged at FLOWGRAD_DEBUG>=1).
#include <chrono>
#include <iostream>

#include "flowgrad/core/env.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {

const std::vector<Pass>& pipeline() {
  static const std::vector<Pass> passes = {
      {"cse", cse, nullptr, true},
      {"constant folding", fold_constants, nullptr, true},
      {"gradient binding", bind_grads, nullptr, true},
      {"dead code", dce, nullptr, true},
      {"transpose folding", fold_transposes, nullptr, true},
      {"guard updates", guard_updates, nullptr, false},
      {"fusion", fuse_elementwise, env::plan_fusion, true},  // FLOWGRAD_NO_FUSION=1
  };
  return passes;
}

Program run_pipeline(Program p, std::vector<std::tuple<std::string, int64_t, int64_t>>* counts,
                     std::vector<std::pair<std::string, double>>* ms) {
  const bool log = env::debug_level() >= 1;
  auto start = std::chrono::steady_clock::now();
  for (const Pass& pass : pipeline()) {
    const int64_t before = count_calls(p.body);
    if (!pass.enabled || pass.enabled()) p = pass.run(std::move(p));
    const int64_t after = pass.run == fuse_elementwise ? static_cast<int64_t>(p.body.size()) : count_calls(p.body);
    if (counts && pass.reported) counts->emplace_back(pass.name, before, after);
    if (ms && pass.reported) {  // an unreported pass's time goes to the next reported one
      auto now = std::chrono::steady_clock::now();
      ms->emplace_back(pass.name, std::chrono::duration<double, std::milli>(now - std::exchange(start, now)).count());
    }
    if (log) std::cerr << "flowgrad: pass " << pass.name << ": " << before << " -> " << after << " instructions\n";
  }
  return p;
}

}  // namespace fg::plan
