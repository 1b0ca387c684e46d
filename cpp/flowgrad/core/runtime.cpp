#include "flowgrad/core/runtime.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <random>

#include "flowgrad/core/env.h"
#include "flowgrad/base/errors.h"
#include "flowgrad/base/parallel.h"

// Provided by OpenBLAS; absent (null) with other BLAS libraries.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace fg {
namespace {

std::atomic<int> g_threads{0};

std::mutex& rng_mutex() {
  static std::mutex m;
  return m;
}

RngState& global_rng() {
  static RngState state{std::random_device{}() | (uint64_t{std::random_device{}()} << 32), 0};
  return state;
}
RngState& rng() {
  std::optional<RngState>& stream = context().rng_stream;  // set by RngStream
  return stream ? *stream : global_rng();
}

}  // namespace

namespace {
std::atomic<bool> g_tf32{false};
}  // namespace
void set_allow_tf32(bool on) { g_tf32 = on; }
bool allow_tf32() { return g_tf32; }

int num_threads() {
  if (g_threads.load() == 0) {
    set_blas_threads(env::blas_on_pool() ? BlasThreads::Pool : BlasThreads::OpenBlas);
    set_num_threads(env::num_threads());
  }
  return g_threads.load();
}

void set_num_threads(int n) {
  FG_CHECK(n >= 1, Value, "set_num_threads: expected n >= 1, got ", n);
  g_threads = n;
  set_pool_threads(n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
}

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(rng_mutex());
  global_rng() = RngState{seed, 0};
}

RngState rng_state() {
  std::lock_guard<std::mutex> lock(rng_mutex());
  return rng();
}

void set_rng_state(RngState s) {
  std::lock_guard<std::mutex> lock(rng_mutex());
  rng() = s;
}

uint64_t rng_reserve(uint64_t counters) {
  std::lock_guard<std::mutex> lock(rng_mutex());
  uint64_t first = rng().offset;
  rng().offset += counters;
  return first;
}

}  // namespace fg
