#include "flowgrad/observe/trend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "flowgrad/base/errors.h"

namespace fg::observe {

std::vector<double> Trend::window_of(int64_t window) const {
  if (window <= 0 || static_cast<size_t>(window) >= values_.size()) return values_;
  return std::vector<double>(values_.end() - window, values_.end());
}

std::vector<double> Trend::last(int64_t n) const {
  FG_CHECK(n >= 0, Value, "Trend.last: n must be >= 0, got ", n);
  return n == 0 ? std::vector<double>{} : window_of(n);
}

double Trend::latest() const { return values_.empty() ? 0.0 : values_.back(); }
double Trend::min() const { return values_.empty() ? 0.0 : *std::min_element(values_.begin(), values_.end()); }
double Trend::max() const { return values_.empty() ? 0.0 : *std::max_element(values_.begin(), values_.end()); }
double Trend::mean() const {
  if (values_.empty()) return 0.0;
  double s = 0;
  for (double v : values_) s += v;
  return s / static_cast<double>(values_.size());
}

double Trend::slope(int64_t window) const {
  std::vector<double> w = window_of(window);
  size_t n = w.size();
  if (n < 2) return 0.0;
  double mean_x = (static_cast<double>(n) - 1) / 2, mean_y = 0;
  for (double v : w) mean_y += v;
  mean_y /= static_cast<double>(n);
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < n; ++i) {
    double dx = static_cast<double>(i) - mean_x;
    sxy += dx * (w[i] - mean_y);
    sxx += dx * dx;
  }
  return sxy / sxx;
}

bool Trend::stalled(int64_t window, double tol) const {
  return window_of(window).size() >= 2 && std::abs(slope(window)) < tol;
}

bool Trend::improving(int64_t window) const { return window_of(window).size() >= 2 && slope(window) < 0; }

bool Trend::converged(int64_t window, double tol) const {
  std::vector<double> w = window_of(window);
  if (w.size() < 2) return false;
  double m = 0;
  for (double v : w) m += v;
  m /= static_cast<double>(w.size());
  double var = 0;
  for (double v : w) var += (v - m) * (v - m);
  return var / static_cast<double>(w.size()) < tol;
}

namespace {
template <class Pred>
bool all_of(const std::vector<Trend>& ts, Pred p) {
  return !ts.empty() && std::all_of(ts.begin(), ts.end(), p);
}
template <class Pred>
bool any_of(const std::vector<Trend>& ts, Pred p) {
  return std::any_of(ts.begin(), ts.end(), p);
}
}  // namespace

bool TrendGroup::all_stalled(int64_t w, double tol) const { return all_of(trends_, [&](const Trend& t) { return t.stalled(w, tol); }); }
bool TrendGroup::any_stalled(int64_t w, double tol) const { return any_of(trends_, [&](const Trend& t) { return t.stalled(w, tol); }); }
bool TrendGroup::all_improving(int64_t w) const { return all_of(trends_, [&](const Trend& t) { return t.improving(w); }); }
bool TrendGroup::any_improving(int64_t w) const { return any_of(trends_, [&](const Trend& t) { return t.improving(w); }); }
bool TrendGroup::all_converged(int64_t w, double tol) const { return all_of(trends_, [&](const Trend& t) { return t.converged(w, tol); }); }
bool TrendGroup::any_converged(int64_t w, double tol) const { return any_of(trends_, [&](const Trend& t) { return t.converged(w, tol); }); }

std::vector<double> TrendGroup::slopes(int64_t w) const {
  std::vector<double> out;
  for (const Trend& t : trends_) out.push_back(t.slope(w));
  return out;
}

double TrendGroup::mean_slope(int64_t w) const {
  if (trends_.empty()) return 0.0;
  double s = 0;
  for (double v : slopes(w)) s += v;
  return s / static_cast<double>(trends_.size());
}

std::string format_duration(double seconds) {
  FG_CHECK(std::isfinite(seconds) && seconds >= 0, Value, "format_duration: expected a finite duration >= 0, got ", seconds);
  char buf[64];
  if (seconds > 0 && seconds < 0.0005) {
    std::snprintf(buf, sizeof buf, "%dus", static_cast<int>(std::lround(seconds * 1e6)));
  } else if (seconds < 1) {
    std::snprintf(buf, sizeof buf, "%dms", static_cast<int>(std::lround(seconds * 1000)));
  } else if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  } else if (seconds < 3600) {
    int64_t s = std::llround(seconds);
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else {
    int64_t m = std::llround(seconds / 60);
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(m / 60), static_cast<long long>(m % 60));
  }
  return buf;
}

}  // namespace fg::observe
