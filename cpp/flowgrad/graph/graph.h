// Graph: a built flow. Nodes wrap modules (or constructs over modules), edges carry tensors,
// and nodes of one topological level run concurrently on the CPU pool. A Graph is a Module,
// so it nests in other graphs and containers. Every forward keeps the tagged values for the
// observation layer (collect / flush / trend) and, when profiling, each node's wall time.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "flowgrad/nn/module.h"
#include "flowgrad/observe/observer.h"

namespace fg::graph {

using ModulePtr = std::shared_ptr<nn::Module>;

enum class NodeKind { Input, Module, Merge, Also, Gate, Switch, Loop, Map };
enum class LoopMode { For, While, Until };
enum class MapMode { Each, Over, Slices };

const char* kind_name(NodeKind kind);

// A `using` reference: the tagged node it reads, and whether it reads that node's value from
// the previous call (a forward reference, i.e. recurrent state).
struct Ref {
  std::string tag;
  int node = -1;
  bool state = false;
};

struct Node {
  NodeKind kind = NodeKind::Module;
  // Module/Also/Merge: {module}; Gate/Switch: {router, branches...}; Loop: {body[, halt]};
  // Map: {body}; Input: none.
  std::vector<ModulePtr> modules;
  std::vector<int> inputs;  // stream inputs: one, or the branches a merge joins
  std::vector<Ref> refs;
  std::string tag;
  std::string group;     // tag_group name of a split branch
  int branch = -1;       // index within its split
  LoopMode loop_mode = LoopMode::For;
  int64_t count = 0;     // for_: iterations; while_/until: max_iter; slices: n
  MapMode map_mode = MapMode::Each;
  bool batched = false;
  Ref over;              // map.over(tag)
  int level = 0;
  std::string label() const;  // "Linear", "gate(SoftmaxRouter; 3 experts)", ...
  std::string name(int id) const;  // "node 3 'hidden' (Linear)" for messages
};

// One forward's timings: per node, and per level the wall time of the level as a whole.
struct Profile {
  double total = 0;
  std::vector<double> node_seconds;
  std::vector<double> level_seconds;
  double parallelism() const;  // sum of node times / sum of level wall times
};

class Graph : public nn::Module {
 public:
  Graph(std::vector<Node> nodes, std::vector<std::string> input_names, int output);

  Tensors forward(const Tensors& inputs) override;
  // Raises TimeoutError once `seconds` have passed, checked between levels and loop iterations.
  Tensors forward_with_timeout(const Tensors& inputs, std::optional<double> seconds);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  int output() const { return output_; }  // the node whose value the graph returns
  // Node indices per topological level (level 1 first; graph inputs are level 0 and not listed).
  const std::vector<std::vector<int>>& levels() const { return levels_; }

  // Tags: the node a tag names, the members of a tag group, and the values of the last call.
  int node_of(const std::string& tag) const;  // raises GraphError for an unknown tag
  std::vector<std::string> tags() const;  // in node order
  std::vector<std::string> group(const std::string& name) const;  // empty when not a group
  std::vector<std::string> expand(const std::vector<std::string>& tags_or_groups) const;
  Tensor tagged(const std::string& tag) const;
  // Replaces the tagged value of the last forward (a compiled step delivers its tagged outputs).
  void set_tagged(const std::string& tag, const Tensor& value);
  const Tensors& traces(const std::string& tag) const;
  ModulePtr sub(const std::string& tag) const;
  nn::Named<Tensor> parameters_by_tag(const std::string& tag) const;

  void freeze(const std::vector<std::string>& tags);    // none: every node
  void unfreeze(const std::vector<std::string>& tags);
  void zero_frozen_grads();
  void detach_state();
  void reset_state();
  const std::map<std::string, Tensor>& state() const { return state_; }
  void set_state(const std::string& tag, const Tensor& value);  // restoring a checkpoint

  // The same flow over copy_module(m) of each node module; the kept tensors (last values,
  // traces, recurrent state, frozen set) go through copy_tensor; observation histories,
  // callbacks and settings carry over. copy.deepcopy(graph) is built on it.
  std::shared_ptr<Graph> clone_with(const std::function<ModulePtr(const ModulePtr&)>& copy_module,
                                    const std::function<Tensor(const Tensor&)>& copy_tensor) const;

  bool parallel() const { return parallel_; }
  void set_parallel(bool on) { parallel_ = on; }

  // For pickling: the frozen parameters (restored ones must be parameters of this graph) and
  // log()'s arguments while logging is on.
  const Tensors& frozen() const { return frozen_; }
  void set_frozen(const Tensors& params);
  struct LogSettings {
    std::vector<std::string> tags;
    int64_t total_epochs = 0, every = 0;
  };
  std::optional<LogSettings> log_settings() const;

  // Observation: values collected from tags or recorded, flushed to per-epoch histories.
  observe::Observer& observer() { return observer_; }
  // collect and record add to the batch buffers, then log a progress line when log(every=N)
  // asks for one.
  void collect(const std::vector<std::string>& tags);  // none: every tag
  using Recorded = std::variant<double, Tensor>;  // a number, or a tensor (by its mean)
  void record(const std::string& tag, const std::vector<Recorded>& values);
  // `tags_or_groups` expanded, each checked to be a graph tag or a tag recorded in `obs`:
  // GraphError naming `what`, the unknown tag and the known ones, closest first.
  std::vector<std::string> observed(const std::vector<std::string>& tags_or_groups,
                                    const observe::Observer& obs, const char* what) const;
  // Flushes the observer (tag groups expand). With logging on, the epoch's line is logged.
  std::vector<std::pair<std::string, double>> flush(const std::vector<std::string>& tags,
                                                    observe::Reduce reduce = observe::Reduce::None);
  // none: every flushed tag. every > 0 also logs a progress line every `every` steps (values
  // in the open batch) within an epoch.
  void log(const std::vector<std::string>& tags, int64_t total_epochs, int64_t every = 0);
  // Log lines go to the on_log callbacks, or to the default log (set_default_log) without any.
  void on_log(std::function<void(const std::string&)> fn) { log_callbacks_.push_back(std::move(fn)); }

  // Profiling (off by default; costs one branch per node when off).
  bool profiling() const { return profiling_; }
  void set_profiling(bool on) { profiling_ = on; }
  const Profile& profile() const { return profile_; }
  void on_profile(std::function<void(const Profile&)> fn) { profile_callbacks_.push_back(std::move(fn)); }
  double timing(const std::string& tag) const;
  observe::Observer& timings() { return timings_; }
  void collect_timings(const std::vector<std::string>& tags);

  std::string dot(bool with_profile = false) const;

 private:
  struct Run;
  Tensor run_node(int id, Run& run);
  Tensor call(const ModulePtr& m, Tensors in, int id) const;
  Tensors ref_values(const Node& node, const Run& run, const Tensor& like) const;
  Tensor run_loop(const Node& node, int id, Tensor x, const Tensors& refs, Run& run);
  Tensor run_map(const Node& node, int id, const Tensor& x, const Tensors& refs, Run& run);
  void run_level(const std::vector<int>& ids, Run& run);
  void set_requires_grad_of(const std::vector<std::string>& tags, bool frozen);

  std::vector<Node> nodes_;
  std::vector<std::string> input_names_;
  std::vector<std::vector<int>> levels_;  // levels_[0] stays empty: inputs are not run
  std::map<std::string, int> tags_;
  std::map<std::string, std::vector<std::string>> groups_;
  int output_;  // the node whose value the graph returns
  std::vector<std::string> state_tags_;  // tags read by forward references

  Tensors last_;                  // per node: its value in the last call if tagged (detached)
  std::vector<Tensors> traces_;   // per node: a loop's per-iteration outputs in the last call
  std::map<std::string, Tensor> state_;  // forward-referenced values, kept across calls
  Tensors frozen_;
  bool parallel_ = true;

  observe::Observer observer_, timings_;
  bool logging_ = false;
  std::vector<std::string> log_tags_;
  int64_t log_total_ = 0;
  int64_t log_every_ = 0, last_progress_step_ = 0;
  std::vector<std::function<void(const std::string&)>> log_callbacks_;
  void emit_log(const std::string& line) const;
  void log_progress();
  bool profiling_ = false;
  Profile profile_;
  std::vector<std::function<void(const Profile&)>> profile_callbacks_;
};

// Checks nodes that come from outside the builder (an unpickled Graph) before Graph's
// constructor trusts them: GraphError naming the node when an index is out of range or not
// earlier, a construct has the wrong number of modules, a count is invalid or a tag repeats.
void check_nodes(const std::vector<Node>& nodes, const std::vector<std::string>& input_names, int output);

// The embedding environment (the Python bindings) installs this so that a level running on
// several threads can let them take the interpreter lock: it returns a token that, while it
// lives, has released the lock if the calling thread held it.
using ReleaseInterpreter = std::shared_ptr<void> (*)();
void set_release_interpreter(ReleaseInterpreter fn);
// It also installs this check, polled between levels, loop iterations and map elements: it
// throws when the user asked to stop (Ctrl-C), so a long forward can be interrupted.
using CheckInterrupt = void (*)();
void set_interrupt_check(CheckInterrupt fn);
// And where a graph's log lines go when it has no on_log callbacks (Python's print).
using DefaultLog = void (*)(const std::string& line);
void set_default_log(DefaultLog fn);

}  // namespace fg::graph
