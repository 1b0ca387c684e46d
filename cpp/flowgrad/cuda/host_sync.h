// Host waits on the GPU, counted per thread, so that "no host sync per step" is a claim a test
// can check (fg.cuda.sync_count, step.stats["host_syncs"]). Every place flowgrad blocks the host
// until device work finishes (reads to the host, stream/event/device synchronize, the device
// error check that follows them) goes through cuda::host_wait (scope.cuh), which counts here.
// Plain C++: CPU-only builds have the counter too, and it stays 0 there.
#pragma once
#include <cstdint>
#include <exception>
#include <string>

namespace fg::cuda {

void count_host_sync();
int64_t host_sync_count();  // this thread's host waits since it started

// Destructors never throw (review G2): a failure while releasing device resources (cudaFree with
// caching off, an event on a stream, a device switch after a sticky error) is kept here and raised
// as a DeviceError by the next allocation or host wait, on any thread. The first one kept wins; how
// many followed is said with it.
void defer_error(const std::string& what);
void raise_deferred_errors();  // raises (and clears) what was kept; nothing when nothing was

// Runs `release` (a destructor's body), keeping what it throws for raise_deferred_errors.
template <class F>
void never_throwing(const char* what, F&& release) noexcept {
  try {
    release();
  } catch (const std::exception& e) {
    defer_error(std::string(what) + ": " + e.what());
  } catch (...) {
    defer_error(std::string(what) + ": an unknown exception");
  }
}

}  // namespace fg::cuda
