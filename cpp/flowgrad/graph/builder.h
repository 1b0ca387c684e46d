// FlowBuilder: the fluent construction of a Graph (goDl's From / Through / Tag / Using /
// Split / Merge / Also / Gate / Switch / Loop / Map / Input). Mistakes are remembered where
// they happen and raised by build() as GraphError naming the node and tag involved.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "flowgrad/graph/graph.h"

namespace fg::graph {

class FlowBuilder {
 public:
  explicit FlowBuilder(ModulePtr first = nullptr);

  FlowBuilder& through(ModulePtr m);
  FlowBuilder& tag(const std::string& name);
  FlowBuilder& tag_group(const std::string& name);
  FlowBuilder& using_(const std::vector<std::string>& tags);
  FlowBuilder& split(const std::vector<ModulePtr>& branches);
  FlowBuilder& merge(ModulePtr m);
  FlowBuilder& also(ModulePtr m);
  FlowBuilder& gate(ModulePtr router, const std::vector<ModulePtr>& experts);
  FlowBuilder& switch_(ModulePtr selector, const std::vector<ModulePtr>& branches);
  // loop(body) must be followed by for_, while_ or until; map(body) by [batched] each, over
  // or slices.
  FlowBuilder& loop(ModulePtr body);
  FlowBuilder& for_(int64_t n);
  FlowBuilder& while_(ModulePtr halt, int64_t max_iter);
  FlowBuilder& until(ModulePtr halt, int64_t max_iter);
  FlowBuilder& map(ModulePtr body);
  FlowBuilder& batched();
  FlowBuilder& each();
  FlowBuilder& over(const std::string& tag);
  FlowBuilder& slices(int64_t n);
  FlowBuilder& input(const std::string& name);

  std::shared_ptr<Graph> build();

 private:
  enum class Pending { None, Loop, Map };
  template <class... Parts>
  void fail_later(const Parts&... parts);
  bool ready(const char* what);  // false (with an error) while a split, loop or map is open
  bool finishing(Pending kind, const char* what);
  int add(Node node);
  FlowBuilder& halting(LoopMode mode, ModulePtr halt, int64_t max_iter, const char* what);
  FlowBuilder& routed(NodeKind kind, ModulePtr chooser, const std::vector<ModulePtr>& branches, const char* what);
  std::string where(int id) const { return nodes_[id].name(id); }

  std::vector<Node> nodes_;
  std::vector<std::string> input_names_{"input"};
  std::vector<int> stream_{0};  // the current stream; several nodes while a split is open
  bool split_open_ = false;
  Pending pending_ = Pending::None;
  bool built_ = false;
  std::string error_;
};

}  // namespace fg::graph
