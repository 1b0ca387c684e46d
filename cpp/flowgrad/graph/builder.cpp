#include "flowgrad/graph/builder.h"

#include <map>
#include <sstream>

namespace fg::graph {

template <class... Parts>
void FlowBuilder::fail_later(const Parts&... parts) {
  if (!error_.empty()) return;  // the first mistake is the one to report
  std::ostringstream os;
  (os << ... << parts);
  error_ = os.str();
}

FlowBuilder::FlowBuilder(ModulePtr first) {
  Node input;
  input.kind = NodeKind::Input;
  nodes_.push_back(input);
  if (first) through(std::move(first));
}

int FlowBuilder::add(Node node) {
  for (const ModulePtr& m : node.modules)
    if (!m) fail_later("FlowBuilder.", kind_name(node.kind), "(): expected modules, got None");
  nodes_.push_back(std::move(node));
  return static_cast<int>(nodes_.size()) - 1;
}

bool FlowBuilder::ready(const char* what) {
  if (!error_.empty()) return false;
  if (pending_ != Pending::None) {
    int id = stream_[0];
    fail_later(what, "() after the unfinished ", where(id), ": finish it first with ",
               pending_ == Pending::Loop ? ".for_(n), .while_(halt, max_iter) or .until(halt, max_iter)"
                                         : ".each(), .over(tag) or .slices(n)");
    return false;
  }
  if (split_open_) {
    fail_later(what, "() while the split into ", stream_.size(), " branches (", where(stream_[0]),
               ", ...) is open: merge the branches first with .merge(module)");
    return false;
  }
  return true;
}

bool FlowBuilder::finishing(Pending kind, const char* what) {
  if (!error_.empty()) return false;
  if (pending_ != kind) {
    fail_later(what, "() without a preceding .", kind == Pending::Loop ? "loop(body)" : "map(body)");
    return false;
  }
  return true;
}

FlowBuilder& FlowBuilder::through(ModulePtr m) {
  if (!ready("through")) return *this;
  Node n;
  n.modules = {std::move(m)};
  n.inputs = {stream_[0]};
  stream_ = {add(std::move(n))};
  return *this;
}

FlowBuilder& FlowBuilder::also(ModulePtr m) {
  if (!ready("also")) return *this;
  Node n;
  n.kind = NodeKind::Also;
  n.modules = {std::move(m)};
  n.inputs = {stream_[0]};
  stream_ = {add(std::move(n))};
  return *this;
}

FlowBuilder& FlowBuilder::tag(const std::string& name) {
  if (!error_.empty()) return *this;
  if (name.empty()) {
    fail_later("tag(): tag names must be non-empty");
  } else if (split_open_) {
    fail_later("tag('", name, "') on an open split of ", stream_.size(),
               " branches: name them with tag_group('", name, "') (tags ", name, "_0, ", name, "_1, ...)");
  } else if (!nodes_[stream_[0]].tag.empty()) {
    fail_later("tag('", name, "'): ", where(stream_[0]), " is already tagged '", nodes_[stream_[0]].tag, "'");
  } else {
    nodes_[stream_[0]].tag = name;
  }
  return *this;
}

FlowBuilder& FlowBuilder::tag_group(const std::string& name) {
  if (!error_.empty()) return *this;
  if (!split_open_) {
    fail_later("tag_group('", name, "') needs an open split: it names the branches of .split(...)");
    return *this;
  }
  for (size_t i = 0; i < stream_.size(); ++i) {
    Node& n = nodes_[stream_[i]];
    if (!n.tag.empty()) fail_later("tag_group('", name, "'): ", where(stream_[i]), " is already tagged");
    n.tag = name + "_" + std::to_string(i);
    n.group = name;
  }
  return *this;
}

FlowBuilder& FlowBuilder::using_(const std::vector<std::string>& tags) {
  if (!error_.empty()) return *this;
  if (tags.empty()) fail_later("using(): expected at least one tag");
  for (int id : stream_) {
    if (nodes_[id].kind == NodeKind::Input) {
      fail_later("using('", tags.empty() ? "" : tags[0], "') is dangling: there is no node before it to ",
                 "receive the reference (start the flow with a module)");
      return *this;
    }
    for (const std::string& t : tags) nodes_[id].refs.push_back(Ref{t});
  }
  return *this;
}

FlowBuilder& FlowBuilder::split(const std::vector<ModulePtr>& branches) {
  if (!ready("split")) return *this;
  if (branches.empty()) {
    fail_later("split(): expected at least one branch module");
    return *this;
  }
  std::vector<int> heads;
  for (size_t i = 0; i < branches.size(); ++i) {
    Node n;
    n.modules = {branches[i]};
    n.inputs = {stream_[0]};
    n.branch = static_cast<int>(i);
    heads.push_back(add(std::move(n)));
  }
  stream_ = heads;
  split_open_ = true;
  return *this;
}

FlowBuilder& FlowBuilder::merge(ModulePtr m) {
  if (!error_.empty()) return *this;
  if (!split_open_) {
    fail_later("merge() without a split: merge joins the branches of a preceding .split(...)");
    return *this;
  }
  Node n;
  n.kind = NodeKind::Merge;
  n.modules = {std::move(m)};
  n.inputs = stream_;
  split_open_ = false;
  stream_ = {add(std::move(n))};
  return *this;
}

FlowBuilder& FlowBuilder::routed(NodeKind kind, ModulePtr chooser, const std::vector<ModulePtr>& branches,
                                 const char* what) {
  if (!ready(what)) return *this;
  if (branches.empty()) {
    fail_later(what, "(): expected a ", kind == NodeKind::Gate ? "router and at least one expert" : "selector and at least one branch");
    return *this;
  }
  Node n;
  n.kind = kind;
  n.modules = {std::move(chooser)};
  n.modules.insert(n.modules.end(), branches.begin(), branches.end());
  n.inputs = {stream_[0]};
  stream_ = {add(std::move(n))};
  return *this;
}

FlowBuilder& FlowBuilder::gate(ModulePtr router, const std::vector<ModulePtr>& experts) {
  return routed(NodeKind::Gate, std::move(router), experts, "gate");
}

FlowBuilder& FlowBuilder::switch_(ModulePtr selector, const std::vector<ModulePtr>& branches) {
  return routed(NodeKind::Switch, std::move(selector), branches, "switch");
}

FlowBuilder& FlowBuilder::loop(ModulePtr body) {
  if (!ready("loop")) return *this;
  Node n;
  n.kind = NodeKind::Loop;
  n.modules = {std::move(body)};
  n.inputs = {stream_[0]};
  stream_ = {add(std::move(n))};
  pending_ = Pending::Loop;
  return *this;
}

FlowBuilder& FlowBuilder::for_(int64_t count) {
  if (!finishing(Pending::Loop, "for_")) return *this;
  if (count < 0) fail_later("for_(", count, "): the iteration count must be >= 0");
  nodes_[stream_[0]].count = count;
  pending_ = Pending::None;
  return *this;
}

FlowBuilder& FlowBuilder::halting(LoopMode mode, ModulePtr halt, int64_t max_iter, const char* what) {
  if (!finishing(Pending::Loop, what)) return *this;
  // while_ checks before each iteration (it may run zero times); until runs the body first.
  int64_t least = mode == LoopMode::Until ? 1 : 0;
  if (!halt) fail_later(what, "(): expected a halt module, got None");
  if (max_iter < least)
    fail_later(what, "(): max_iter must be >= ", least, least ? " (the body runs at least once)" : "", ", got ", max_iter);
  Node& n = nodes_[stream_[0]];
  n.loop_mode = mode;
  n.modules.push_back(std::move(halt));
  n.count = max_iter;
  pending_ = Pending::None;
  return *this;
}

FlowBuilder& FlowBuilder::while_(ModulePtr halt, int64_t max_iter) {
  return halting(LoopMode::While, std::move(halt), max_iter, "while_");
}

FlowBuilder& FlowBuilder::until(ModulePtr halt, int64_t max_iter) {
  return halting(LoopMode::Until, std::move(halt), max_iter, "until");
}

FlowBuilder& FlowBuilder::map(ModulePtr body) {
  if (!ready("map")) return *this;
  Node n;
  n.kind = NodeKind::Map;
  n.modules = {std::move(body)};
  n.inputs = {stream_[0]};
  stream_ = {add(std::move(n))};
  pending_ = Pending::Map;
  return *this;
}

FlowBuilder& FlowBuilder::batched() {
  if (finishing(Pending::Map, "batched")) nodes_[stream_[0]].batched = true;
  return *this;
}

FlowBuilder& FlowBuilder::each() {
  if (finishing(Pending::Map, "each")) pending_ = Pending::None;
  return *this;
}

FlowBuilder& FlowBuilder::over(const std::string& tag) {
  if (!finishing(Pending::Map, "over")) return *this;
  Node& n = nodes_[stream_[0]];
  n.map_mode = MapMode::Over;
  n.over = Ref{tag};
  pending_ = Pending::None;
  return *this;
}

FlowBuilder& FlowBuilder::slices(int64_t count) {
  if (!finishing(Pending::Map, "slices")) return *this;
  if (count < 1) fail_later("slices(", count, "): the slice count must be >= 1");
  Node& n = nodes_[stream_[0]];
  n.map_mode = MapMode::Slices;
  n.count = count;
  pending_ = Pending::None;
  return *this;
}

FlowBuilder& FlowBuilder::input(const std::string& name) {
  if (!ready("input")) return *this;
  if (name.empty()) {
    fail_later("input(): input names must be non-empty");
    return *this;
  }
  Node n;
  n.kind = NodeKind::Input;
  n.tag = name;
  add(std::move(n));
  input_names_.push_back(name);
  return *this;
}

std::shared_ptr<Graph> FlowBuilder::build() {
  FG_CHECK(error_.empty(), Graph, "FlowBuilder: ", error_);
  FG_CHECK(!built_, Graph, "FlowBuilder: build() was already called; start a new FlowBuilder for another graph");
  FG_CHECK(pending_ == Pending::None, Graph, "FlowBuilder: ", where(stream_[0]), " is unfinished at build(): ",
           pending_ == Pending::Loop ? "finish it with .for_(n), .while_(halt, max_iter) or .until(halt, max_iter)"
                                     : "finish it with .each(), .over(tag) or .slices(n)");
  FG_CHECK(!split_open_, Graph, "FlowBuilder: the split into ", stream_.size(), " branches (", where(stream_[0]),
           ", ...) is still open at build(): join it with .merge(module)");

  std::map<std::string, int> tags;
  std::map<std::string, std::vector<int>> groups;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.group.empty()) groups[n.group].push_back(static_cast<int>(id));
    if (n.tag.empty()) continue;
    auto [it, fresh] = tags.emplace(n.tag, static_cast<int>(id));
    FG_CHECK(fresh, Graph, "FlowBuilder: duplicate tag '", n.tag, "' on ", where(it->second), " and ",
             where(static_cast<int>(id)));
  }
  for (const auto& [name, members] : groups)
    FG_CHECK(!tags.count(name), Graph, "FlowBuilder: tag group '", name, "' has the same name as the tag on ",
             where(tags.at(name)));
  auto resolve = [&](Ref& r, int id, const char* what) {
    FG_CHECK(!groups.count(r.tag), Graph, "FlowBuilder: ", what, "('", r.tag, "') at ", where(id),
             " names a tag group; refer to one of its tags ('", r.tag, "_0', ...)");
    auto it = tags.find(r.tag);
    if (it == tags.end()) {
      std::string known;
      for (const auto& [name, node] : tags) known += (known.empty() ? "" : ", ") + name;
      fail(ErrorKind::Graph, "FlowBuilder: unknown tag '", r.tag, "' in ", what, "() at ", where(id),
           " (defined tags: ", known.empty() ? "none" : known, ")");
    }
    r.node = it->second;
    r.state = nodes_[r.node].kind != NodeKind::Input && r.node >= id;
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    int id = static_cast<int>(i);
    Node& n = nodes_[id];
    for (Ref& r : n.refs) {
      resolve(r, id, "using");
      FG_CHECK(!r.state || n.kind == NodeKind::Module, Graph, "FlowBuilder: the forward reference using('", r.tag,
               "') at ", where(id), " has no state module to receive it: a tag used before it is defined becomes ",
               "recurrent state, which only .through(module) can take (e.g. fg.flow.StateAdd())");
    }
    if (n.kind == NodeKind::Map && n.map_mode == MapMode::Over) {
      resolve(n.over, id, "over");
      FG_CHECK(!n.over.state, Graph, "FlowBuilder: over('", n.over.tag, "') at ", where(id),
               " refers to a later node; a map can only run over a value computed before it");
    }
  }
  built_ = true;
  return std::make_shared<Graph>(nodes_, input_names_, stream_[0]);
}

}  // namespace fg::graph
