"""Observation on a Graph: collect / record / flush, trends, logs, CSV, HTML, DOT/SVG,
profiling and checkpoints of the histories."""
import csv
import io
import re
import shutil

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn


def graph(device="cpu"):
    fg.manual_seed(0)
    return (fg.flow(nn.Linear(3, 4)).tag("h")
            .split(nn.Linear(4, 2), nn.Linear(4, 2)).tag_group("head").merge(fg.flow.Add())
            .through(nn.Linear(2, 1)).tag("out").build().to(device))


def test_collect_takes_means_and_flush_averages_the_batch(device):
    g = graph(device)  # on cuda the collected means stay on the device until read
    seen = []
    for _ in range(3):
        g(fg.randn(5, 3, device=device))
        seen.append(float(g.tagged("out").mean()))
        g.collect("out")
    np.testing.assert_allclose(g.collected("out"), seen, rtol=1e-6)
    flushed = g.flush()
    assert flushed["out"] == pytest.approx(np.mean(seen), rel=1e-6)
    assert g.collected("out") == [] and g.flush_count == 1
    assert g.trend("out").values() == pytest.approx([np.mean(seen)], rel=1e-6)


def test_record_values_and_tensors(device):
    g = graph(device)
    g.record("loss", 1.0, 2)
    g.record("loss", fg.tensor([3.0, 5.0], device=device))  # a tensor counts as its mean
    assert g.collected("loss") == [1.0, 2.0, 4.0]
    assert g.flush("loss") == {"loss": pytest.approx(7.0 / 3)}
    with pytest.raises(fg.InvalidArgumentError, match="record\\('loss'\\): expected at least one value"):
        g.record("loss")
    with pytest.raises(fg.ShapeError, match="cannot record an empty tensor"):
        g.record("loss", fg.zeros(0, device=device))


def test_tag_groups_expand_in_collect_and_trends(device):
    g = graph(device)
    for epoch in range(4):
        g(fg.randn(2, 3, device=device))
        g.collect("head")
        g.flush()
    tg = g.trends("head")
    assert len(tg) == 2 and len(tg[0]) == 4
    with pytest.raises(fg.GraphError, match="'head' is a tag group; use trends\\('head'\\)"):
        g.trend("head")


def test_trend_questions_on_flushed_history():
    g = graph()
    for v in [5.0, 4.0, 3.0, 2.9, 2.9, 2.9]:
        g.record("loss", v)
        g.flush()
    t = g.trend("loss")
    assert t.improving(0) and t.stalled(3, 1e-9) and not t.stalled(0, 0.1)
    assert t.slope(0) == pytest.approx(np.polyfit(np.arange(6), [5, 4, 3, 2.9, 2.9, 2.9], 1)[0])
    assert g.trends("loss").all_stalled(3, 1e-9)
    g.reset_trend("loss")
    assert len(g.trend("loss")) == 0


def test_flush_callbacks_and_log(capsys):
    g = graph()
    got, lines = [], []
    g.on_flush(got.append)
    g.log("loss", total_epochs=3)
    g.record("loss", 0.5)
    g.flush()
    assert got == [{"loss": 0.5}]
    out = capsys.readouterr().out
    assert out.startswith("epoch 1/3  loss 0.5  (") and "eta" in out
    g.on_log(lines.append)
    g.record("loss", 0.25)
    g.flush()
    assert lines[0].startswith("epoch 2/3  loss 0.25  (") and capsys.readouterr().out == ""


def test_progress_lines_print_without_on_log_callbacks(capsys):
    g = graph()
    g.log("loss", total_epochs=2, every=2)
    g.record("loss", 1.0, fg.tensor([2.0, 4.0]))  # a number and a tensor (its mean): two steps
    assert capsys.readouterr().out.startswith("epoch 1/2  step 2  loss 2  (")
    g.record("loss", 6.0)
    assert capsys.readouterr().out == ""  # step 3: no line
    assert g.collected("loss") == [1.0, 3.0, 6.0]
    with pytest.raises(fg.InvalidArgumentError, match=r"record\('loss'\): expected at least one value"):
        g.record("loss")


def test_elapsed_eta_and_durations(monkeypatch):
    g = graph()
    assert g.elapsed() == 0.0 and g.eta(10) == 0.0 and g.last_flush_duration() == 0.0
    g.record("loss", 1.0)
    g.flush()
    g.record("loss", 1.0)
    g.flush()
    assert g.elapsed() >= g.last_flush_duration() >= 0
    per_epoch = g.elapsed() / 2
    assert g.eta(4) == pytest.approx(2 * per_epoch, rel=0.5, abs=1e-3)
    assert g.eta(2) == 0.0


def test_export_trends_csv(tmp_path):
    g = graph()
    g.record("loss", 1.0)
    g.record("acc", 0.5)
    g.flush()
    g.record("loss", 0.5)
    g.flush()
    path = tmp_path / "metrics.csv"
    g.export_trends(path)
    rows = list(csv.reader(io.StringIO(path.read_text())))
    assert rows == [["epoch", "loss", "acc"], ["1", "1", "0.5"], ["2", "0.5", ""]]
    g.export_trends(path, "acc")
    assert path.read_text().splitlines() == ["epoch,acc", "1,0.5", "2,"]


def test_write_log(tmp_path):
    g = graph()
    for v in (0.9, 0.6):
        g.record("loss", v)
        g.flush()
    path = tmp_path / "train.log"
    g.write_log(path, 4)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("epoch 1/4  loss 0.9  (") and ", eta " in lines[0]
    assert lines[1].startswith("epoch 2/4  loss 0.6  (")


def test_plot_html_is_self_contained(tmp_path):
    g = graph()
    for v in (3.0, 2.0, 1.0):
        g.record("loss", v)
        g.record("val_loss", v + 0.5)
        g.flush()
    path = tmp_path / "training.html"
    g.plot_html(path, "loss", "val_loss")
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.count("<svg") == 2  # linear and log views
    assert "log-toggle" in text and "val_loss" in text and "<polyline" in text
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in text and "<script src" not in text


def test_dot_and_svg(monkeypatch, tmp_path):
    g = graph()
    dot = g.dot()
    assert dot.startswith("digraph flow {") and "n1 -> n2" in dot and 'cluster_head' in dot
    assert '#h' in dot
    if shutil.which("dot"):
        path = tmp_path / "graph.svg"
        svg = g.svg(path)
        assert "<svg" in svg and path.read_text() == svg
        assert "<svg" in g._repr_html_() and "<svg" in g.svg_with_profile()
    monkeypatch.setenv("PATH", "")
    with pytest.raises(fg.FlowgradError, match="needs Graphviz's `dot` program, which is not on PATH"):
        g.svg()
    assert g._repr_svg_() is None and "<pre>" in g._repr_html_()


def test_state_edges_in_dot():
    g = fg.flow(fg.flow.StateAdd()).using("s").tag("s").through(nn.Identity()).using("s").build()
    dot = g.dot()
    assert 'style=dotted' in dot and 'state s' in dot and 'style=dashed' in dot


def test_trend_reprs_are_svg():
    t = fg.Trend([3.0, 2.0, 1.0])
    assert t._repr_svg_().startswith("<svg") and "<polyline" in t._repr_svg_()
    assert "<svg" in fg.TrendGroup([t, t])._repr_html_()


def test_profiling_off_by_default_and_timings(device):
    g = graph(device)
    assert not g.profiling
    with pytest.raises(fg.GraphError, match="profiling is off"):
        g.timing("out")
    profiles = []
    g.enable_profiling()
    g.on_profile(profiles.append)
    for _ in range(3):
        g(fg.randn(4, 3, device=device))
        g.collect_timings("out", "head")
    g.flush_timings()
    p = g.profile()
    assert p["total"] > 0 and len(p["nodes"]) == 5 and p["parallelism"] > 0
    assert {n["tag"] for n in p["nodes"]} >= {"h", "out", "head_0"}
    assert len(profiles) == 3
    out_seconds = [next(n["seconds"] for n in q["nodes"] if n["tag"] == "out") for q in profiles]
    assert g.timing("out") == out_seconds[-1]
    assert g.timing_trend("out").values() == pytest.approx([np.mean(out_seconds)])  # flush averages the 3 calls
    assert len(g.timing_trends("head")) == 2
    durations = re.findall(r'\\n(\d+us|\d+ms|\d+\.\ds)"', g.dot_with_profile())
    assert len(durations) == 6  # the 5 nodes and the output's total
    g.disable_profiling()
    assert not g.profiling


def test_timing_exports(tmp_path):
    g = graph()
    g.enable_profiling()
    g(fg.randn(4, 3))
    g.collect_timings()
    g.flush_timings()
    g.export_timing_trends(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().startswith("epoch,h,head_0,head_1,out")
    g.plot_timings_html(tmp_path / "t.html")
    assert "seconds" in (tmp_path / "t.html").read_text()


def test_nested_sub_graph_observation(device):
    inner = fg.flow(nn.Linear(3, 3)).tag("inner").build()
    outer = fg.flow(inner).tag("enc").through(nn.Linear(3, 1)).build().to(device)
    outer(fg.randn(2, 3, device=device))
    outer.sub("enc").collect("inner")
    assert len(inner.collected("inner")) == 1


def test_checkpoint_keeps_trends_and_state(tmp_path, device):
    g = fg.flow(fg.flow.StateAdd()).using("s").tag("s").build()
    g(fg.ones(2, device=device))
    g(fg.ones(2, device=device))
    for v in (2.0, 1.0):
        g.record("loss", v)
        g.flush()
    path = tmp_path / "ck.safetensors"
    fg.save_checkpoint(path, g, graph=g, step=2)
    h = fg.flow(fg.flow.StateAdd()).using("s").tag("s").build()
    meta = fg.load_checkpoint(path, h, graph=h)
    assert meta["step"] == 2 and h.trend("loss").values() == [2.0, 1.0] and h.flush_count == 2
    out = h(fg.ones(2, device=device))
    np.testing.assert_array_equal(out.numpy(), [3.0, 3.0])  # the state carried over
    with pytest.raises(fg.InvalidArgumentError, match="graph= takes an fg.Graph, got int"):
        fg.save_checkpoint(path, g, graph=3)


def test_reduce_lr_on_plateau_reads_graph_trend():
    g = graph()
    opt = fg.optim.SGD(g.parameters(), lr=1.0)
    sched = fg.optim.lr_scheduler.ReduceLROnPlateau(opt, lambda: g.trend("val_loss"), patience=1, factor=0.5)
    for v in (1.0, 0.5, 0.5, 0.5):
        g.record("val_loss", v)
        g.flush()
        sched.step()
    assert sched.get_last_lr() == [0.5]


def test_record_means_of_any_layout_and_dtype(device):
    g = graph(device)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    g.record("m", fg.tensor(a, device=device).t())  # non-contiguous
    g.record("m", fg.tensor([True, False, True, True], device=device))
    g.record("m", fg.tensor([1, 2], dtype=fg.int64, device=device))
    g.record("m", fg.tensor(a, requires_grad=True, device=device) * 2)
    assert g.collected("m") == pytest.approx([5.5, 0.75, 1.5, 11.0])


def test_live_chart_redraws_on_flush():
    pytest.importorskip("IPython")
    g = graph()
    chart = fg.viz.LiveChart(g, "loss", "head")
    assert chart.tags == ["loss", "head_0", "head_1"]
    assert "<polyline" not in chart._render()
    for v in (2.0, 1.0):
        g.record("loss", v)
        g.flush()
    assert "<polyline" in chart._render() and "loss epoch 2: 1" in chart._render()
