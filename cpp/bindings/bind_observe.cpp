// fg.Trend, fg.TrendGroup and fg.format_duration (statistics computed in C++).
#include "common.h"
#include "flowgrad/observe/trend.h"

namespace fg::py_bind {

void bind_observe(py::module_& m) {
  using observe::Trend;
  using observe::TrendGroup;
  py::class_<Trend>(m, "Trend", "Statistics over a history of values (e.g. per-epoch losses).")
      .def(py::init([](const py::object& values) {
        std::vector<double> v;
        if (!values.is_none())
          for (py::handle h : values) v.push_back(h.cast<double>());
        return Trend(std::move(v));
      }), py::arg("values") = py::none())
      .def("append", &Trend::push, py::arg("value"), "Adds one value at the end.")
      .def("values", &Trend::values, "All values, oldest first.")
      .def("last", &Trend::last, py::arg("n"), "The last n values.")
      .def("latest", &Trend::latest, "The newest value (0 when empty).")
      .def("min", &Trend::min, "Smallest value (0 when empty).")
      .def("max", &Trend::max, "Largest value (0 when empty).")
      .def("mean", &Trend::mean, "Mean value (0 when empty).")
      .def("slope", &Trend::slope, py::arg("window") = 0,
           "Least-squares slope over the last `window` values (<= 0: all); 0 with fewer than 2.")
      .def("stalled", &Trend::stalled, py::arg("window"), py::arg("tol"),
           "|slope| < tol over the window (False with fewer than 2 values).")
      .def("improving", &Trend::improving, py::arg("window") = 0, "slope < 0 over the window.")
      .def("converged", &Trend::converged, py::arg("window"), py::arg("tol"),
           "Population variance < tol over the window.")
      .def("__len__", &Trend::size)
      .def("__repr__", [](const Trend& t) {
        return "Trend(" + std::to_string(t.size()) + " values, latest " + std::to_string(t.latest()) + ")";
      });
  py::class_<TrendGroup>(m, "TrendGroup", "Questions over several trends at once.")
      .def(py::init<std::vector<Trend>>(), py::arg("trends"))
      .def("all_stalled", &TrendGroup::all_stalled, py::arg("window"), py::arg("tol"), "Every trend stalled (False when empty).")
      .def("any_stalled", &TrendGroup::any_stalled, py::arg("window"), py::arg("tol"), "Some trend stalled.")
      .def("all_improving", &TrendGroup::all_improving, py::arg("window") = 0, "Every trend improving (False when empty).")
      .def("any_improving", &TrendGroup::any_improving, py::arg("window") = 0, "Some trend improving.")
      .def("all_converged", &TrendGroup::all_converged, py::arg("window"), py::arg("tol"), "Every trend converged (False when empty).")
      .def("any_converged", &TrendGroup::any_converged, py::arg("window"), py::arg("tol"), "Some trend converged.")
      .def("slopes", &TrendGroup::slopes, py::arg("window") = 0, "Each trend's slope.")
      .def("mean_slope", &TrendGroup::mean_slope, py::arg("window") = 0, "Mean of the slopes (0 when empty).")
      .def("__len__", [](const TrendGroup& g) { return g.trends().size(); })
      .def("__getitem__", [](const TrendGroup& g, size_t i) {
        FG_CHECK(i < g.trends().size(), Index, "TrendGroup: index ", i, " is out of range for ", g.trends().size(), " trends");
        return g.trends()[i];
      });
  m.def("format_duration", &observe::format_duration, py::arg("seconds"), "Human duration: '220us', '42ms', '1.2s', '2m05s', '1h02m'.");
}

}  // namespace fg::py_bind
