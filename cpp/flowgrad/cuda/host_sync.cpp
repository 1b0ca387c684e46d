#include "flowgrad/cuda/host_sync.h"

#include <mutex>

#include "flowgrad/base/errors.h"

namespace fg::cuda {
namespace {
thread_local int64_t t_host_syncs = 0;

struct Deferred {
  std::mutex mutex;
  std::string first;  // empty: nothing kept
  int64_t more = 0;
};
Deferred& deferred() {
  static auto* d = new Deferred;  // lives to exit: tensors may be released during shutdown
  return *d;
}
}  // namespace

void count_host_sync() { ++t_host_syncs; }
int64_t host_sync_count() { return t_host_syncs; }

void defer_error(const std::string& what) {
  Deferred& d = deferred();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (d.first.empty())
    d.first = what.empty() ? std::string("an error without a message") : what;
  else
    d.more += 1;
}

void raise_deferred_errors() {
  std::string first;
  int64_t more = 0;
  {
    Deferred& d = deferred();
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.first.empty()) return;
    first.swap(d.first);
    more = d.more;
    d.more = 0;
  }
  fail(ErrorKind::Device, "an earlier release of device resources failed (reported at the next call, since a "
       "destructor cannot raise): ", first, more ? " (and " + std::to_string(more) + " more failure(s) after it)" : "");
}

}  // namespace fg::cuda
