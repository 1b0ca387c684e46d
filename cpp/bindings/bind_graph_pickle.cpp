// Pickling a Graph (flowgrad/_pickle.py): its nodes as plain data and back, checked by
// graph::check_nodes before a Graph is built over them, plus the settings a copy keeps.
#include "common.h"
#include "flowgrad/graph/graph.h"

namespace fg::py_bind {
namespace {

using graph::Graph;
using graph::LoopMode;
using graph::MapMode;
using graph::Node;
using graph::NodeKind;
using graph::Ref;

constexpr NodeKind kKinds[] = {NodeKind::Input, NodeKind::Module, NodeKind::Merge, NodeKind::Also,
                               NodeKind::Gate,  NodeKind::Switch, NodeKind::Loop,  NodeKind::Map};
constexpr const char* kLoopModes[] = {"for", "while", "until"};  // LoopMode's order
constexpr const char* kMapModes[] = {"each", "over", "slices"};  // MapMode's order

template <size_t N>
int mode_index(const char* const (&names)[N], const std::string& name, const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<int>(i);
  fail(ErrorKind::Graph, "Graph nodes: unknown ", what, " '", name, "'");
}

NodeKind kind_from(const std::string& name) {
  for (NodeKind k : kKinds)
    if (name == graph::kind_name(k)) return k;
  fail(ErrorKind::Graph, "Graph nodes: unknown node kind '", name, "'");
}

py::tuple ref_state(const Ref& r) { return py::make_tuple(r.tag, r.node, r.state); }
Ref ref_from(const py::handle& h) {
  auto [tag, node, state] = h.cast<std::tuple<std::string, int, bool>>();
  return Ref{tag, node, state};
}

py::dict node_state(const Node& n) {
  py::dict d;
  py::list refs;
  for (const Ref& r : n.refs) refs.append(ref_state(r));
  d["kind"] = graph::kind_name(n.kind);
  d["modules"] = n.modules;
  d["inputs"] = n.inputs;
  d["refs"] = refs;
  d["tag"] = n.tag;
  d["group"] = n.group;
  d["branch"] = n.branch;
  d["loop"] = kLoopModes[static_cast<int>(n.loop_mode)];
  d["count"] = n.count;
  d["map"] = kMapModes[static_cast<int>(n.map_mode)];
  d["batched"] = n.batched;
  d["over"] = ref_state(n.over);
  return d;
}

Node node_from(const py::dict& d) {
  Node n;
  n.kind = kind_from(d["kind"].cast<std::string>());
  n.modules = d["modules"].cast<std::vector<graph::ModulePtr>>();
  n.inputs = d["inputs"].cast<std::vector<int>>();
  for (py::handle r : d["refs"]) n.refs.push_back(ref_from(r));
  n.tag = d["tag"].cast<std::string>();
  n.group = d["group"].cast<std::string>();
  n.branch = d["branch"].cast<int>();
  n.loop_mode = static_cast<LoopMode>(mode_index(kLoopModes, d["loop"].cast<std::string>(), "loop mode"));
  n.count = d["count"].cast<int64_t>();
  n.map_mode = static_cast<MapMode>(mode_index(kMapModes, d["map"].cast<std::string>(), "map mode"));
  n.batched = d["batched"].cast<bool>();
  n.over = ref_from(d["over"]);
  return n;
}

// The graph's own train/eval mode is `training`; each node module keeps the mode it came with.
std::shared_ptr<Graph> graph_from_nodes(const py::list& states, const std::vector<std::string>& input_names, int output,
                                        bool training) {
  std::vector<Node> nodes;
  for (py::handle s : states) nodes.push_back(node_from(s.cast<py::dict>()));
  graph::check_nodes(nodes, input_names, output);
  std::vector<std::pair<nn::Module*, bool>> modes;  // parents first, so re-applying them in order is exact
  for (const Node& n : nodes)
    for (const auto& m : n.modules)
      for (auto& [name, sub] : m->named_modules()) modes.emplace_back(sub, sub->training());
  auto g = std::make_shared<Graph>(std::move(nodes), input_names, output);
  g->train(training);
  for (auto [m, mode] : modes) m->train(mode);
  return g;
}

}  // namespace

void bind_graph_pickle(py::module_& m) {
  m.def("_graph_nodes", [](const Graph& g) {
    py::list nodes;
    for (const Node& n : g.nodes()) nodes.append(node_state(n));
    return py::make_tuple(nodes, g.input_names(), g.output());
  }, py::arg("graph"), "(nodes as dicts, input names, output node): a Graph's wiring as plain data (pickling).");
  m.def("_graph_from_nodes", &graph_from_nodes, py::arg("nodes"), py::arg("input_names"), py::arg("output"),
        py::arg("training"), "The Graph over _graph_nodes' data, checked first (GraphError naming the node).");
  m.def("_graph_node_names", [](const Graph& g) {
    std::vector<std::string> out;
    for (size_t id = 0; id < g.nodes().size(); ++id) out.push_back(g.nodes()[id].name(static_cast<int>(id)));
    return out;
  }, py::arg("graph"), "Each node as messages name it: \"node 3 'hidden' (Linear)\".");
  m.def("_graph_frozen", [](const Graph& g) { return g.frozen(); }, py::arg("graph"), "The frozen parameters.");
  m.def("_graph_set_frozen", &Graph::set_frozen, py::arg("graph"), py::arg("params"),
        "Restores the frozen set (each must be a parameter of the graph).");
  m.def("_graph_log_settings", [](const Graph& g) -> py::object {
    auto s = g.log_settings();
    if (!s) return py::none();
    return py::make_tuple(s->tags, s->total_epochs, s->every);
  }, py::arg("graph"), "log()'s (tags, total_epochs, every) while logging is on, else None.");
}

}  // namespace fg::py_bind
