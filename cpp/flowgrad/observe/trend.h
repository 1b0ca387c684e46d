// Trend: statistics over an epoch history (goDl's semantics). A window > 0 takes the last
// `window` values, <= 0 takes all; slope is the least-squares slope over the window; stalled =
// |slope| < tol; improving = slope < 0; converged = population variance < tol; each is false
// with fewer than 2 values. latest/min/max/mean of an empty trend are 0.
#pragma once
#include <string>
#include <vector>

namespace fg::observe {

class Trend {
 public:
  Trend() = default;
  explicit Trend(std::vector<double> values) : values_(std::move(values)) {}

  void push(double v) { values_.push_back(v); }
  const std::vector<double>& values() const { return values_; }
  size_t size() const { return values_.size(); }
  std::vector<double> last(int64_t n) const;
  double latest() const;
  double min() const;
  double max() const;
  double mean() const;
  double slope(int64_t window = 0) const;
  bool stalled(int64_t window, double tol) const;
  bool improving(int64_t window) const;
  bool converged(int64_t window, double tol) const;

 private:
  std::vector<double> window_of(int64_t window) const;
  std::vector<double> values_;
};

class TrendGroup {
 public:
  explicit TrendGroup(std::vector<Trend> trends) : trends_(std::move(trends)) {}
  const std::vector<Trend>& trends() const { return trends_; }
  // all_* are false for an empty group; any_* are false too.
  bool all_stalled(int64_t window, double tol) const;
  bool any_stalled(int64_t window, double tol) const;
  bool all_improving(int64_t window) const;
  bool any_improving(int64_t window) const;
  bool all_converged(int64_t window, double tol) const;
  bool any_converged(int64_t window, double tol) const;
  std::vector<double> slopes(int64_t window) const;
  double mean_slope(int64_t window) const;  // 0 for an empty group

 private:
  std::vector<Trend> trends_;
};

// "220us", "42ms", "1.2s", "2m05s", "1h02m".
std::string format_duration(double seconds);

}  // namespace fg::observe
