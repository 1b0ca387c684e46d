#include "flowgrad/observe/observer.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/distributed/process_group.h"
#include "flowgrad/ops/ops.h"

namespace fg::observe {
namespace {

double seconds_between(Observer::Clock::time_point a, Observer::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Replaces this process's values by their sums over every rank (no-op outside fg.distributed).
void sum_over_ranks(std::vector<double>& values) {
  if (!dist::is_initialized()) return;
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::Float64, cpu_device());
  std::copy(values.begin(), values.end(), t.data<double>());
  dist::group().all_reduce(t, dist::ReduceOp::Sum)->wait();
  std::copy_n(t.data<double>(), values.size(), values.begin());
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The shortest decimal that reads back as exactly v (what Python's repr writes).
std::string exact_number(double v) {
  char buf[32];
  auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

// An RFC 4180 field: quoted (with quotes doubled) when it holds a comma, quote or line break.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitute = diagonal + (a[i - 1] != b[j - 1]);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> closest_first(const std::string& name, std::vector<std::string> names) {
  std::stable_sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return edit_distance(name, a) < edit_distance(name, b);
  });
  return names;
}

Observer::Series& Observer::series_of(const std::string& tag) {
  FG_CHECK(!tag.empty(), Value, "observe: tag names must be non-empty");
  auto [it, inserted] = series_.try_emplace(tag);
  if (inserted) order_.push_back(tag);
  return it->second;
}

void Observer::start_clock() {
  if (started_) return;
  started_ = true;
  start_ = Clock::now();
}

void Observer::record(const std::string& tag, double value) {
  start_clock();
  series_of(tag).pending.push_back(value);
}

namespace {

// The mean of a host tensor, read in place when it is contiguous (the common case: no op, no
// allocation), through the mean op otherwise.
double host_mean(const Tensor& t) {
  if (!t.is_contiguous()) return item(mean(cast(detach(t), DType::Float64), Dims{}, false));
  return visit_dtype(t.dtype(), [&](auto tag) {
    const auto* p = t.data<decltype(tag)>();
    double sum = 0;
    for (int64_t i = 0, n = t.numel(); i < n; ++i) sum += static_cast<double>(p[i]);
    return sum / static_cast<double>(t.numel());
  });
}

// The values of one-element float64 device tensors, read with one device-to-host copy per
// device (one host sync on a single GPU) instead of one item() each.
std::vector<double> read_device_values(const Tensors& values) {
  std::vector<double> out(values.size());
  std::map<int, std::vector<size_t>> by_device;
  for (size_t i = 0; i < values.size(); ++i) by_device[values[i].device().index].push_back(i);
  for (const auto& [device, at] : by_device) {
    Tensors column;
    for (size_t i : at) column.push_back(reshape(values[i], {1}));
    Tensor host = to_device(column.size() == 1 ? column[0] : cat(column, 0), cpu_device());
    const double* p = host.data<double>();
    for (size_t k = 0; k < at.size(); ++k) out[at[k]] = p[k];
  }
  return out;
}

}  // namespace

void Observer::record(const std::string& tag, const Tensor& value) {
  FG_CHECK(value.defined(), Value, "record('", tag, "'): expected a tensor, got None");
  FG_CHECK(value.numel() > 0, Shape, "record('", tag, "'): cannot record an empty tensor of shape ",
           to_string(value.shape()));
  if (value.device().is_cpu()) return record(tag, host_mean(value));
  Tensor v = detach(value);
  if (v.numel() != 1) v = mean(is_floating(v.dtype()) ? v : cast(v, DType::Float64), Dims{}, false);
  if (v.dtype() != DType::Float64) v = cast(v, DType::Float64);  // flush reads them all as one block
  start_clock();
  series_of(tag).pending_device.push_back(v);
}

std::vector<double> Observer::collected(const std::string& tag) const {
  auto it = series_.find(tag);
  if (it == series_.end()) return {};
  std::vector<double> out = it->second.pending;
  for (double v : read_device_values(it->second.pending_device)) out.push_back(v);
  return out;
}

std::vector<std::string> Observer::chosen(const std::vector<std::string>& tags) const {
  if (!tags.empty()) return tags;
  std::vector<std::string> out;
  for (const std::string& tag : order_) {
    const Series& s = series_.at(tag);
    if (!s.pending.empty() || !s.pending_device.empty()) out.push_back(tag);
  }
  return out;
}

std::vector<std::pair<std::string, double>> Observer::flush(const std::vector<std::string>& tags,
                                                              Reduce reduce) {
  start_clock();
  flush_times_.push_back(Clock::now());
  int64_t epoch = flush_count();
  std::vector<std::pair<std::string, double>> out;
  std::vector<std::string> names = chosen(tags);
  Tensors on_device;  // every tag's device values, read together
  for (const std::string& tag : names) {
    const Series& s = series_of(tag);
    on_device.insert(on_device.end(), s.pending_device.begin(), s.pending_device.end());
  }
  std::vector<double> device_values = read_device_values(on_device);
  std::vector<double> stats;  // sum, count per tag
  size_t next = 0;
  for (const std::string& tag : names) {
    Series& s = series_of(tag);
    double sum = 0;
    for (double v : s.pending) sum += v;
    for (size_t k = 0; k < s.pending_device.size(); ++k) sum += device_values[next++];
    stats.push_back(sum);
    stats.push_back(static_cast<double>(s.pending.size() + s.pending_device.size()));
    s.pending.clear();
    s.pending_device.clear();
  }
  if (reduce == Reduce::MeanOverRanks) sum_over_ranks(stats);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& tag = names[i];
    if (stats[2 * i + 1] == 0) continue;
    Series& s = series_of(tag);
    double m = stats[2 * i] / stats[2 * i + 1];
    s.epochs.push_back(epoch);
    s.values.push_back(m);
    out.emplace_back(tag, m);
  }
  for (auto& fn : flush_callbacks_) fn(out);
  return out;
}

void Observer::reset(const std::vector<std::string>& tags) {
  if (tags.empty()) {
    series_.clear();
    order_.clear();
    flush_times_.clear();
    started_ = false;
    return;
  }
  for (const std::string& tag : tags) {
    auto it = series_.find(tag);
    if (it != series_.end()) it->second = Series{};
  }
}

Trend Observer::trend(const std::string& tag) const {
  auto it = series_.find(tag);
  return it == series_.end() ? Trend() : Trend(it->second.values);
}

double Observer::elapsed() const { return started_ ? seconds_between(start_, Clock::now()) : 0.0; }

double Observer::eta(int64_t total_epochs) const {
  int64_t done = flush_count();
  if (done == 0 || total_epochs <= done) return 0.0;
  double per_epoch = seconds_between(start_, flush_times_.back()) / static_cast<double>(done);
  return per_epoch * static_cast<double>(total_epochs - done);
}

double Observer::last_flush_duration() const {
  size_t n = flush_times_.size();
  if (n == 0) return 0.0;
  return seconds_between(n == 1 ? start_ : flush_times_[n - 2], flush_times_[n - 1]);
}

std::vector<double> Observer::flush_seconds() const {
  std::vector<double> out;
  for (auto t : flush_times_) out.push_back(seconds_between(start_, t));
  return out;
}

void Observer::restore(const std::string& tag, std::vector<int64_t> epochs, std::vector<double> values) {
  FG_CHECK(epochs.size() == values.size(), Value, "observe: history of '", tag, "' has ", epochs.size(),
           " epochs but ", values.size(), " values");
  Series& s = series_of(tag);
  s.epochs = std::move(epochs);
  s.values = std::move(values);
}

void Observer::restore_times(std::vector<double> flush_seconds) {
  // Rebase so that elapsed() and eta() continue from the restored run's clock.
  double last = flush_seconds.empty() ? 0.0 : flush_seconds.back();
  started_ = true;
  start_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(last));
  flush_times_.clear();
  for (double s : flush_seconds)
    flush_times_.push_back(start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)));
}

std::string Observer::csv(const std::vector<std::string>& tags) const {
  std::vector<std::string> cols = tags.empty() ? order_ : tags;
  std::ostringstream os;
  os << "epoch";
  for (const std::string& tag : cols) os << ',' << csv_field(tag);
  os << '\n';
  std::vector<size_t> next(cols.size(), 0);
  for (int64_t epoch = 1; epoch <= flush_count(); ++epoch) {
    os << epoch;
    for (size_t c = 0; c < cols.size(); ++c) {
      os << ',';
      auto it = series_.find(cols[c]);
      if (it == series_.end()) continue;
      const Series& s = it->second;
      if (next[c] < s.epochs.size() && s.epochs[next[c]] == epoch) os << exact_number(s.values[next[c]++]);
    }
    os << '\n';
  }
  return os.str();
}

std::string Observer::log_line(int64_t epoch, int64_t total_epochs, const std::vector<std::string>& tags) const {
  std::vector<std::string> cols = tags.empty() ? order_ : tags;
  std::ostringstream os;
  os << "epoch " << epoch;
  if (total_epochs > 0) os << '/' << total_epochs;
  for (const std::string& tag : cols) {
    auto it = series_.find(tag);
    if (it == series_.end()) continue;
    const Series& s = it->second;
    auto pos = std::find(s.epochs.begin(), s.epochs.end(), epoch);
    if (pos != s.epochs.end()) os << "  " << tag << ' ' << number(s.values[pos - s.epochs.begin()]);
  }
  if (epoch >= 1 && epoch <= flush_count()) {
    auto at = flush_times_[epoch - 1];
    double took = seconds_between(epoch == 1 ? start_ : flush_times_[epoch - 2], at);
    os << "  (" << format_duration(took);
    if (total_epochs > epoch) {
      double per_epoch = seconds_between(start_, at) / static_cast<double>(epoch);
      os << ", eta " << format_duration(per_epoch * static_cast<double>(total_epochs - epoch));
    }
    os << ')';
  }
  return os.str();
}

int64_t Observer::pending_steps(const std::vector<std::string>& tags) const {
  size_t most = 0;
  for (const std::string& tag : tags.empty() ? order_ : tags) {
    auto it = series_.find(tag);
    if (it != series_.end()) most = std::max(most, it->second.pending.size() + it->second.pending_device.size());
  }
  return static_cast<int64_t>(most);
}

std::string Observer::progress_line(int64_t step, int64_t total_epochs, const std::vector<std::string>& tags) const {
  std::ostringstream os;
  os << "epoch " << flush_count() + 1;
  if (total_epochs > 0) os << '/' << total_epochs;
  os << "  step " << step;
  for (const std::string& tag : tags.empty() ? order_ : tags) {
    std::vector<double> batch = collected(tag);
    if (batch.empty()) continue;
    double sum = std::accumulate(batch.begin(), batch.end(), 0.0);
    os << "  " << tag << ' ' << number(sum / static_cast<double>(batch.size()));
  }
  auto since = flush_times_.empty() ? start_ : flush_times_.back();
  os << "  (" << format_duration(started_ ? seconds_between(since, Clock::now()) : 0.0) << ')';
  return os.str();
}

std::string Observer::log_text(int64_t total_epochs, const std::vector<std::string>& tags) const {
  std::string out;
  for (int64_t epoch = 1; epoch <= flush_count(); ++epoch) out += log_line(epoch, total_epochs, tags) + '\n';
  return out;
}

}  // namespace fg::observe
