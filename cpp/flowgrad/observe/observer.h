// Observer: goDl's two-level history. record() appends to a per-tag batch buffer; flush()
// appends each buffer's mean to that tag's epoch history and stamps the time. A value that
// lives on the CPU is read at once (no copy is involved); a device value stays a one-element
// float64 device tensor until flush, so collecting in a training loop causes no host sync, and
// flush reads every pending device value of every tag with one copy (one host sync per GPU).
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "flowgrad/ops/registry.h"
#include "flowgrad/observe/trend.h"

namespace fg::observe {

// `names` sorted by edit distance to `name`, closest first (ties keep their order): the
// suggestions of an unknown-tag error.
std::vector<std::string> closest_first(const std::string& name, std::vector<std::string> names);

// How flush() combines batch means across the processes of fg.distributed.
enum class Reduce { None, MeanOverRanks };

class Observer {
 public:
  using Clock = std::chrono::steady_clock;

  void record(const std::string& tag, double value);
  void record(const std::string& tag, const Tensor& value);  // its mean
  std::vector<double> collected(const std::string& tag) const;  // the unflushed batch

  // Appends the batch means of `tags` (every tag with pending values when empty) to their
  // histories, one epoch stamp for all, and returns them in tag order. Reduce::MeanOverRanks
  // sums every rank's [sum, count] per tag (one all-reduce when fg.distributed is initialized)
  // so that all ranks agree on the means; every rank must then flush the same tags.
  std::vector<std::pair<std::string, double>> flush(const std::vector<std::string>& tags,
                                                    Reduce reduce = Reduce::None);
  void on_flush(std::function<void(const std::vector<std::pair<std::string, double>>&)> fn) {
    flush_callbacks_.push_back(std::move(fn));
  }
  void reset(const std::vector<std::string>& tags);  // history and batch; none: everything

  Trend trend(const std::string& tag) const;  // empty for a tag never flushed
  std::vector<std::string> tags() const { return order_; }  // first-seen order
  int64_t flush_count() const { return static_cast<int64_t>(flush_times_.size()); }

  // Starts the epoch clock unless it runs (a graph starts it at its first forward, so the
  // first epoch is timed from there and not from its first collect).
  void start_clock();

  // Seconds since the clock started, the mean epoch time times the epochs left, and
  // the time between the last two flushes (or start and the first flush).
  double elapsed() const;
  double eta(int64_t total_epochs) const;
  double last_flush_duration() const;

  // One row per flush: "epoch,<tag>..."; a tag not flushed in an epoch leaves its cell empty.
  // Names are quoted as RFC 4180 says; values are the shortest text that reads back exactly.
  std::string csv(const std::vector<std::string>& tags) const;
  // One line per flush: "epoch 3/10  loss 0.4120  acc 0.8810  (1.2s, eta 8.4s)".
  std::string log_text(int64_t total_epochs, const std::vector<std::string>& tags) const;
  std::string log_line(int64_t epoch, int64_t total_epochs, const std::vector<std::string>& tags) const;
  // Within the open epoch: "epoch 4/10  step 200  loss 0.4120  (3.1s)", the running means of
  // the open batches (reads device values: a host sync) and the time since the last flush.
  std::string progress_line(int64_t step, int64_t total_epochs, const std::vector<std::string>& tags) const;
  // The most values any of `tags` (none: every tag) holds in its open batch.
  int64_t pending_steps(const std::vector<std::string>& tags) const;

  // Histories as (tag, epochs, values) for checkpoints and restoring them.
  struct Series {
    std::vector<double> pending;   // host values of the open batch
    Tensors pending_device;        // 0-d device tensors of the open batch
    std::vector<int64_t> epochs;   // flush index (1-based) of each history value
    std::vector<double> values;
  };
  const std::map<std::string, Series>& series() const { return series_; }
  void restore(const std::string& tag, std::vector<int64_t> epochs, std::vector<double> values);
  void restore_times(std::vector<double> flush_seconds);  // seconds after start per flush
  std::vector<double> flush_seconds() const;

 private:
  Series& series_of(const std::string& tag);
  std::vector<std::string> chosen(const std::vector<std::string>& tags) const;

  std::map<std::string, Series> series_;
  std::vector<std::string> order_;
  bool started_ = false;
  Clock::time_point start_;
  std::vector<Clock::time_point> flush_times_;
  std::vector<std::function<void(const std::vector<std::pair<std::string, double>>&)>> flush_callbacks_;
};

}  // namespace fg::observe
