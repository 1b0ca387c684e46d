"""Observation mistakes are loud: unknown tags raise naming the known ones (closest first), the
epoch clock starts at the first forward, CSV is RFC 4180 at full precision, and log(every=N)
gives progress lines within long epochs."""
import csv
import io

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn


def graph():
    fg.manual_seed(0)
    return (fg.flow(nn.Linear(3, 4)).tag("hidden")
            .split(nn.Linear(4, 2), nn.Linear(4, 2)).tag_group("head").merge(fg.flow.Add())
            .through(nn.Linear(2, 1)).tag("out").build())


def trained():
    g = graph()
    g(fg.randn(2, 3))
    g.collect("out")
    g.record("val_loss", 0.5)
    g.record("loss", 0.7)
    g.flush()
    return g


@pytest.mark.parametrize("call", [
    lambda g: g.trend("val_los"), lambda g: g.trends("loss", "val_los"), lambda g: g.flush("val_los"),
    lambda g: g.collected("val_los"), lambda g: g.reset_trend("val_los"),
    lambda g, p="x.csv": g.export_trends(p, "val_los"), lambda g, p="x.log": g.write_log(p, 0, "val_los"),
    lambda g, p="x.html": g.plot_html(p, "val_los"),
])
def test_unknown_tags_raise_with_the_closest_known_first(tmp_path, monkeypatch, call):
    monkeypatch.chdir(tmp_path)
    g = trained()
    with pytest.raises(fg.GraphError, match=r"unknown tag 'val_los'.*closest first: val_loss, loss, ") as err:
        call(g)
    for known in ("hidden", "out", "head_0", "head_1", "head"):
        assert known in str(err.value)
    assert not list(tmp_path.iterdir())  # nothing written
    assert g.trend("val_loss").values() == [0.5]  # nothing changed


def test_known_tags_stay_quiet():
    g = trained()
    assert len(g.trend("hidden")) == 0  # a graph tag never collected: known, empty
    assert len(g.trends("head")) == 2 and len(g.trends()) == 3
    g.record("new", 1.0)  # recorded tags are known once recorded
    assert g.collected("new") == [1.0] and len(g.trend("new")) == 0
    g.reset_trend("val_loss")
    assert len(g.trend("val_loss")) == 0


def test_collect_and_timings_name_unknown_tags():
    g = trained()
    with pytest.raises(fg.GraphError, match=r"unknown tag 'hiden' \(the graph's tags: hidden, head_0, head_1, out\)"):
        g.collect("hiden")
    g.enable_profiling()
    g(fg.randn(2, 3))
    g.collect_timings()
    g.flush_timings()
    assert len(g.timing_trend("out")) == 1
    with pytest.raises(fg.GraphError, match=r"timing_trend: unknown tag 'outt'.*closest first: out, "):
        g.timing_trend("outt")
    with pytest.raises(fg.GraphError, match="timing_trends: unknown tag 'loss'"):
        g.timing_trends("loss")  # recorded for trends, not for timings


def test_log_tags_are_checked_at_the_first_flush(capsys):
    g = graph()
    g.log("loss", "val_loss", total_epochs=2)  # val_loss is recorded later: fine here
    g.record("loss", 1.0)
    g.record("val_loss", 2.0)
    g.flush()
    assert capsys.readouterr().out.startswith("epoch 1/2  loss 1  val_loss 2  (")
    g.log("val_los")
    g.record("loss", 1.0)
    with pytest.raises(fg.GraphError, match=r"log: unknown tag 'val_los'.*closest first: val_loss"):
        g.flush()


def test_first_epoch_is_timed_from_the_first_forward():
    import time
    g = graph()
    g(fg.randn(2, 3))
    time.sleep(0.05)  # a slow first epoch, collected only at its end
    g.collect("out")
    g.flush()
    # The first epoch includes the time since the first forward (it used to start at the collect).
    assert g.last_flush_duration() >= 0.05 and g.elapsed() >= 0.05
    g.reset_trend()
    assert g.elapsed() == 0.0 and g.flush_count == 0


def test_csv_quotes_names_and_keeps_full_precision(tmp_path):
    g = graph()
    values = {"loss": 0.1 + 0.2, 'odd, "name"': 1 / 3, "tiny": 1.2345678901234567e-12, "big": 123456789.125}
    for tag, v in values.items():
        g.record(tag, v)
    g.flush()
    path = tmp_path / "m.csv"
    g.export_trends(path)
    rows = list(csv.reader(io.StringIO(path.read_text(), newline="")))
    assert rows[0] == ["epoch", *values]
    assert [float(x) for x in rows[1][1:]] == list(values.values())  # exact round trip
    assert rows[1][1] == repr(0.1 + 0.2)
    assert '"odd, ""name"""' in path.read_text().splitlines()[0]


def test_log_every_n_steps_gives_progress_lines():
    g = graph()
    lines = []
    g.on_log(lines.append)
    g.log("loss", total_epochs=2, every=2)
    for step in range(5):
        g.record("loss", float(step))
    assert len(lines) == 2
    assert lines[0].startswith("epoch 1/2  step 2  loss 0.5  (") and lines[1].startswith("epoch 1/2  step 4  loss 1.5  (")
    g.flush()
    assert lines[2].startswith("epoch 1/2  loss 2  (")
    x = fg.randn(2, 3)
    g.log("out", every=3)
    for _ in range(3):
        g(x)
        g.collect("out")
    assert lines[3].startswith("epoch 2  step 3  out ") and np.isfinite(float(lines[3].split()[5]))
    with pytest.raises(fg.InvalidArgumentError, match="log: every must be >= 0"):
        g.log("loss", every=-1)
