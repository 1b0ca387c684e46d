"""Charts of trends: static SVG, a self-contained HTML page and a live chart for notebooks.

Everything here is display: the values come from the C++ observer (`Graph.trend`, `fg.Trend`).
The HTML needs no network: the SVG is inline and a few lines of inline JS switch between the
linear and the log-scale view.
"""
import html
import json
import math

__all__ = ["svg_chart", "html_page", "LiveChart"]

_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def _nice_ticks(lo, hi, count=5):
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(count - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    start = math.floor(lo / step) * step
    ticks, v = [], start
    while v <= hi + step * 0.5:
        ticks.append(round(v, 12))
        v += step
    return ticks


def _label(v):
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2e}"


def svg_chart(series, title="", log_scale=False, width=720, height=360, y_label=""):
    """An SVG line chart. series: {name: [(epoch, value), ...]}; log_scale plots log10 of
    positive values (non-positive ones are left out)."""
    left, right, top, bottom = 64, 150, 34 if title else 14, 40
    pw, ph = width - left - right, height - top - bottom
    points = {}
    for name, pts in series.items():
        kept = [(float(x), float(y)) for x, y in pts if math.isfinite(y) and (y > 0 or not log_scale)]
        points[name] = [(x, math.log10(y) if log_scale else y) for x, y in kept]
    xs = [x for pts in points.values() for x, _ in pts]
    ys = [y for pts in points.values() for _, y in pts]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y_lo, y_hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    if y_hi == y_lo:
        pad = abs(y_lo) * 0.1 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad
    y_ticks = _nice_ticks(y_lo, y_hi) if not log_scale else list(range(math.floor(y_lo), math.ceil(y_hi) + 1))
    y_lo, y_hi = min(y_lo, y_ticks[0]), max(y_hi, y_ticks[-1])
    x_ticks = [t for t in _nice_ticks(x_lo, x_hi, 6) if x_lo <= t <= x_hi and float(t).is_integer()] or [x_lo, x_hi]

    def px(x):
        return left + (x - x_lo) / (x_hi - x_lo) * pw

    def py(y):
        return top + ph - (y - y_lo) / (y_hi - y_lo) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    if title:
        out.append(f'<text x="{left}" y="20" font-size="14" font-weight="bold">{html.escape(title)}</text>')
    for t in y_ticks:
        y = py(t)
        text = _label(10 ** t) if log_scale else _label(t)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{text}</text>')
    for t in x_ticks:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + ph}" y2="{top + ph + 4}" stroke="#333"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{_label(t)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">epoch</text>')
    if y_label or log_scale:
        label = html.escape(y_label + (" (log scale)" if log_scale else ""))
        out.append(f'<text transform="translate(14 {top + ph / 2}) rotate(-90)" text-anchor="middle">{label}</text>')
    for i, (name, pts) in enumerate(points.items()):
        color = _COLORS[i % len(_COLORS)]
        if len(pts) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        for x, y in pts:
            value = 10 ** y if log_scale else y
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{color}">'
                       f'<title>{html.escape(name)} epoch {x:g}: {value:.6g}</title></circle>')
        ly = top + 12 + 18 * i
        out.append(f'<line x1="{left + pw + 12}" x2="{left + pw + 32}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw + 38}" y="{ly + 4}">{html.escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def html_page(series, title="flowgrad trends", y_label=""):
    """A self-contained HTML page: the chart in linear and log scale (a checkbox switches),
    and the data as a table. No network access is needed to view it."""
    linear = svg_chart(series, title, False, y_label=y_label)
    log = svg_chart(series, title, True, y_label=y_label)
    data = json.dumps({k: [[x, y] for x, y in v] for k, v in series.items()})
    rows = sorted({x for pts in series.values() for x, _ in pts})
    table = ["<tr><th>epoch</th>" + "".join(f"<th>{html.escape(n)}</th>" for n in series) + "</tr>"]
    lookup = {n: dict(pts) for n, pts in series.items()}
    for x in rows:
        cells = "".join(f"<td>{lookup[n][x]:.6g}</td>" if x in lookup[n] else "<td></td>" for n in series)
        table.append(f"<tr><td>{x:g}</td>{cells}</tr>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:Helvetica,Arial,sans-serif;margin:24px}} table{{border-collapse:collapse;margin-top:16px}}
td,th{{border:1px solid #ddd;padding:2px 8px;text-align:right}} .hidden{{display:none}}</style></head>
<body>
<label><input type="checkbox" id="log-toggle"> log scale</label>
<div id="chart-linear">{linear}</div>
<div id="chart-log" class="hidden">{log}</div>
<table>{"".join(table)}</table>
<script type="application/json" id="trend-data">{html.escape(data, quote=False)}</script>
<script>
document.getElementById("log-toggle").addEventListener("change", function (e) {{
  document.getElementById("chart-linear").classList.toggle("hidden", e.target.checked);
  document.getElementById("chart-log").classList.toggle("hidden", !e.target.checked);
}});
</script>
</body></html>
"""


def series_of(observer_state, tags):
    """{tag: [(epoch, value), ...]} from a Graph's observation state, for the given tags."""
    series = observer_state["series"]
    chosen = tags or list(series)
    out = {}
    for tag in chosen:
        s = series.get(tag, {"epochs": [], "values": []})
        out[tag] = list(zip(s["epochs"], s["values"]))
    return out


class LiveChart:
    """A trend chart in a notebook cell that redraws itself after every flush of the graph.

        chart = fg.viz.LiveChart(g, "loss", "val_loss")
        for epoch in range(n):
            ...; g.flush()          # the chart updates in place
    """

    def __init__(self, graph, *tags, title="training"):
        try:
            from IPython.display import HTML, display
        except ImportError as e:  # pragma: no cover - IPython is part of every Jupyter install
            raise ImportError("LiveChart needs IPython (run it in Jupyter)") from e
        self._html = HTML
        self.graph, self.title = graph, title
        self.tags = graph._expand(*tags)
        self._handle = display(HTML(self._render()), display_id=True)
        graph.on_flush(lambda values: self.update())

    def _render(self):
        return svg_chart(series_of(self.graph._observation_state(), self.tags), self.title)

    def update(self):
        """Redraws the chart from the graph's current histories."""
        if self._handle is not None:
            self._handle.update(self._html(self._render()))
