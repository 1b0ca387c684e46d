// Which module is running: a plan's tracer (plan/trace.cpp) is also an observer told of every
// module call of its thread while it traces, to say which module each traced op came from.
// Nothing is observed when no tracer is active (one null check per module call).
#pragma once

namespace fg::nn {

class Module;

class CallObserver {
 public:
  virtual ~CallObserver() = default;
  virtual void enter(const Module& m) = 0;
  virtual void leave() = 0;
};

CallObserver* call_observer();  // this thread's innermost trace mode that is one, or null

// Tells the observer (if any) that `m` runs for this scope's lifetime.
struct CallScope {
  explicit CallScope(const Module& m) : observer(call_observer()) {
    if (observer) observer->enter(m);
  }
  ~CallScope() {
    if (observer) observer->leave();
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  CallObserver* observer;
};

}  // namespace fg::nn
