// check_nodes: the builder's guarantees, re-checked for nodes that did not come from it.
#include <set>

#include "flowgrad/graph/graph.h"

namespace fg::graph {
namespace {

// How many modules a node of this kind holds: {least, most}.
std::pair<size_t, size_t> module_count(const Node& n) {
  switch (n.kind) {
    case NodeKind::Input: return {0, 0};
    case NodeKind::Gate:
    case NodeKind::Switch: return {2, SIZE_MAX};
    case NodeKind::Loop: return n.loop_mode == LoopMode::For ? std::pair<size_t, size_t>{1, 1} : std::pair<size_t, size_t>{2, 2};
    default: return {1, 1};
  }
}

}  // namespace

void check_nodes(const std::vector<Node>& nodes, const std::vector<std::string>& input_names, int output) {
  const int count = static_cast<int>(nodes.size());
  FG_CHECK(count > 0 && nodes[0].kind == NodeKind::Input, Graph, "Graph nodes: node 0 must be the graph input");
  FG_CHECK(output >= 0 && output < count, Graph, "Graph nodes: the output node ", output, " is not one of the ",
           count, " nodes");
  size_t inputs = 0;
  std::set<std::string> tags;
  for (int id = 0; id < count; ++id) {
    const Node& n = nodes[id];
    auto where = [&] { return "Graph nodes: node " + std::to_string(id) + (n.tag.empty() ? "" : " '" + n.tag + "'"); };
    // An edge reads a node computed earlier, or a graph input (those may be declared later).
    auto earlier = [&](int dep) { return dep >= 0 && dep < count && (dep < id || nodes[dep].kind == NodeKind::Input); };
    FG_CHECK(n.tag.empty() || tags.insert(n.tag).second, Graph, where(), ": the tag is used twice");
    auto [least, most] = module_count(n);
    FG_CHECK(n.modules.size() >= least && n.modules.size() <= most, Graph, where(), ": a ", kind_name(n.kind),
             " node holds ", n.modules.size(), " modules");
    for (const ModulePtr& m : n.modules) FG_CHECK(m != nullptr, Graph, where(), ": a module is None");
    if (n.kind == NodeKind::Input) {
      ++inputs;
      continue;
    }
    FG_CHECK(!n.inputs.empty() && (n.kind == NodeKind::Merge || n.inputs.size() == 1), Graph, where(), ": a ",
             kind_name(n.kind), " node reads ", n.inputs.size(), " inputs");
    for (int in : n.inputs) FG_CHECK(earlier(in), Graph, where(), ": input node ", in, " is not an earlier node");
    for (const Ref& r : n.refs)
      FG_CHECK(r.state ? r.node >= 0 && r.node < count && nodes[r.node].tag == r.tag : earlier(r.node), Graph, where(),
               ": using('", r.tag, "') refers to node ", r.node, ", which it cannot read");
    if (n.kind == NodeKind::Loop) FG_CHECK(n.count >= 0, Graph, where(), ": a loop count of ", n.count);
    if (n.kind == NodeKind::Map && n.map_mode == MapMode::Slices)
      FG_CHECK(n.count >= 1, Graph, where(), ": ", n.count, " slices");
    if (n.kind == NodeKind::Map && n.map_mode == MapMode::Over)
      FG_CHECK(!n.over.state && earlier(n.over.node), Graph, where(), ": over('", n.over.tag, "') refers to node ",
               n.over.node, ", which it cannot read");
  }
  FG_CHECK(inputs == input_names.size(), Graph, "Graph nodes: ", inputs, " input nodes for ", input_names.size(),
           " input names");
}

}  // namespace fg::graph
