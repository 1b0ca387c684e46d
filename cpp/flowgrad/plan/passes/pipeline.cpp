// The pass pipeline: one table, run in order, each pass counted (and logged at FLOWGRAD_DEBUG>=1).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <set>
#include <sstream>

#include "flowgrad/core/env.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {

const std::vector<Pass>& pipeline() {
  static const std::vector<Pass> passes = {
      {"cse", cse, PassUse::Optional, true},
      {"constant folding", fold_constants, PassUse::Optional, true},
      {"gradient binding", bind_grads, PassUse::Required, true},
      {"dead code", dce, PassUse::Optional, true},
      {"transpose folding", fold_transposes, PassUse::Optional, true},
      {"guard updates", guard_updates, PassUse::Required, false},
      {"fuse epilogues", fuse_epilogues, PassUse::Optional, true},
      {"fuse add norm", fuse_add_norm, PassUse::Optional, true},  // before fusion takes the adds
      {"pair gemms", pair_gemms, PassUse::Optional, true},
      {"fusion", fuse_elementwise, PassUse::Optional, true},  // also FLOWGRAD_NO_FUSION=1
      {"overlap collectives", overlap_collectives, PassUse::Optional, false},  // last: moves what fusion made
  };
  return passes;
}

namespace {

std::string env_name(const char* pass) {  // "dead code" -> "dead_code"
  std::string s(pass);
  std::replace(s.begin(), s.end(), ' ', '_');
  return s;
}

// The passes FLOWGRAD_PLAN_SKIP names; a name that is no optional pass raises, listing them.
std::set<std::string> skipped() {
  std::set<std::string> names;
  std::stringstream list(env::plan_skip());
  for (std::string name; std::getline(list, name, ',');) {
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (name.empty()) continue;
    std::string valid;
    bool found = false;
    for (const Pass& p : pipeline()) {
      if (p.use != PassUse::Optional) continue;
      valid += (valid.empty() ? "" : ", ") + env_name(p.name);
      found |= env_name(p.name) == name;
    }
    FG_CHECK(found, Value, "FLOWGRAD_PLAN_SKIP: '", name, "' is not a pass that can be skipped (", valid, ")");
    names.insert(name);
  }
  return names;
}

}  // namespace

Program run_pipeline(Program p, std::vector<std::tuple<std::string, int64_t, int64_t>>* counts,
                     std::vector<std::pair<std::string, double>>* ms) {
  const bool log = env::debug_level() >= 1;
  auto start = std::chrono::steady_clock::now();
  const std::set<std::string> skip = skipped();
  for (const Pass& pass : pipeline()) {
    const int64_t before = count_calls(p.body);
    bool run = pass.use == PassUse::Required ||
               (!skip.count(env_name(pass.name)) && (pass.run != fuse_elementwise || env::plan_fusion()));
    if (run) p = pass.run(std::move(p));
    const int64_t after = pass.run == fuse_elementwise ? count_kernels(p.body) : count_calls(p.body);
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
