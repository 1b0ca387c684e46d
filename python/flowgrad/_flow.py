"""Flows: fg.FlowBuilder / fg.flow, fg.Graph and the Python-side display of graphs and trends.

The graph, its execution and its observation live in C++ (`_core.Graph`); this module adds what
is display: SVG via Graphviz, HTML charts, and Jupyter's rich representations.
"""
import shutil
import subprocess

from . import _core, viz
from ._core import FlowBuilder, Graph, Trend, TrendGroup, FlowgradError

__all__ = ["flow", "FlowBuilder", "Graph"]


class _Flow:
    """fg.flow(module) starts a FlowBuilder (goDl's From); fg.flow.Add() etc. are the built-in
    flow modules."""

    Add = _core.flow.Add
    Mean = _core.flow.Mean
    Cat = _core.flow.Cat
    Reshape = _core.flow.Reshape
    SoftmaxRouter = _core.flow.SoftmaxRouter
    SigmoidRouter = _core.flow.SigmoidRouter
    ArgmaxSelector = _core.flow.ArgmaxSelector
    FixedSelector = _core.flow.FixedSelector
    LearnedHalt = _core.flow.LearnedHalt
    ThresholdHalt = _core.flow.ThresholdHalt
    StateAdd = _core.flow.StateAdd

    def __call__(self, module=None):
        return FlowBuilder(module)

    def __repr__(self):
        return "fg.flow"


flow = _Flow()


def _dot_to_svg(dot_text, path, what):
    exe = shutil.which("dot")
    if exe is None:
        raise FlowgradError(
            f"Graph.{what} needs Graphviz's `dot` program, which is not on PATH: install Graphviz "
            "(apt install graphviz, brew install graphviz or conda install graphviz), or use "
            "g.dot() for the DOT text")
    done = subprocess.run([exe, "-Tsvg"], input=dot_text.encode(), capture_output=True, check=False)
    if done.returncode != 0:
        raise FlowgradError(f"Graph.{what}: Graphviz's dot failed: {done.stderr.decode(errors='replace').strip()}")
    svg = done.stdout.decode()
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg)
    return svg


def svg(self, path=None):
    """The graph drawn as SVG by Graphviz's `dot` (also written to path when given); FlowgradError
    without `dot`."""
    return _dot_to_svg(self.dot(), path, "svg")


def svg_with_profile(self, path=None):
    """Like svg(), with each node's last profiled time (slower nodes redder)."""
    return _dot_to_svg(self.dot_with_profile(), path, "svg_with_profile")


def plot_html(self, path, *tags):
    """Writes one self-contained HTML chart of the tags' histories (all observed tags when
    none are given): axes, legend, log-scale toggle, no network needed."""
    series = viz.series_of(self._observation_state(), self._observed("plot_html", *tags))
    with open(path, "w", encoding="utf-8") as f:
        f.write(viz.html_page(series, "flowgrad trends"))


def plot_timings_html(self, path, *tags):
    """Writes an HTML chart of the per-epoch timing histories in seconds (all timed tags when none
    are given)."""
    series = viz.series_of(self._timing_state(), self._observed("plot_timings_html", *tags))
    with open(path, "w", encoding="utf-8") as f:
        f.write(viz.html_page(series, "flowgrad node timings", y_label="seconds"))


def _repr_svg_(self):
    """Jupyter: the graph as SVG (None without Graphviz)."""
    return _dot_to_svg(self.dot(), None, "svg") if shutil.which("dot") else None


def _repr_html_(self):
    """Jupyter: the graph as SVG, or its DOT text without Graphviz."""
    svg = _repr_svg_(self)
    if svg is not None:
        return svg
    import html
    return ("<p>Install Graphviz to see this graph drawn; its DOT text:</p><pre>"
            + html.escape(self.dot()) + "</pre>")


def _trend_series(trend):
    return list(zip(range(1, len(trend) + 1), trend.values()))


def _trend_svg(self):
    return viz.svg_chart({"trend": _trend_series(self)}, f"Trend ({len(self)} values)")


def _group_svg(self):
    return viz.svg_chart({str(i): _trend_series(t) for i, t in enumerate(self)}, f"TrendGroup ({len(self)} trends)")


# Display is Python's: attached here to the C++ classes (the bindings stay argument conversion).
Graph.svg = svg
Graph.svg_with_profile = svg_with_profile
Graph.plot_html = plot_html
Graph.plot_timings_html = plot_timings_html
Graph._repr_svg_ = _repr_svg_
Graph._repr_html_ = _repr_html_
Trend._repr_svg_ = _trend_svg
Trend._repr_html_ = _trend_svg
TrendGroup._repr_svg_ = _group_svg
TrendGroup._repr_html_ = _group_svg
