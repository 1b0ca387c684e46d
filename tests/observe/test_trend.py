"""fg.Trend / TrendGroup statistics against NumPy, the documented edge cases, format_duration."""
import numpy as np
import pytest

import flowgrad as fg


def test_statistics_match_numpy(rng):
    values = rng.standard_normal(30).cumsum()
    t = fg.Trend(values.tolist())
    assert len(t) == 30 and t.values() == pytest.approx(values.tolist())
    assert t.latest() == values[-1] and t.min() == values.min() and t.max() == values.max()
    assert t.mean() == pytest.approx(values.mean())
    assert t.last(4) == pytest.approx(values[-4:].tolist())
    assert t.slope() == pytest.approx(np.polyfit(np.arange(30), values, 1)[0])
    assert t.slope(7) == pytest.approx(np.polyfit(np.arange(7), values[-7:], 1)[0])
    assert t.slope(-3) == pytest.approx(t.slope(0))  # window <= 0 takes everything
    var = np.var(values[-5:])
    assert t.converged(5, var * 1.01) and not t.converged(5, var * 0.99)


def test_questions_and_edge_cases():
    falling = fg.Trend([5, 4, 3, 2])
    flat = fg.Trend([1.0, 1.001, 0.999, 1.0])
    assert falling.improving(0) and not falling.stalled(0, 0.5)
    assert flat.stalled(0, 0.01) and not flat.stalled(0, 1e-6)
    assert flat.slope(3) == pytest.approx(-0.0005) and flat.improving(3)
    one = fg.Trend([3.0])
    assert not one.stalled(0, 1e9) and not one.improving() and not one.converged(0, 1e9) and one.slope() == 0
    empty = fg.Trend()
    assert empty.latest() == 0 and empty.min() == 0 and empty.max() == 0 and empty.mean() == 0 and len(empty) == 0
    empty.append(2.0)
    empty.append(1.0)
    assert empty.improving() and empty.slope() == -1.0
    with pytest.raises(fg.InvalidArgumentError, match="Trend.last: n must be >= 0"):
        falling.last(-1)


def test_trend_group():
    group = fg.TrendGroup([fg.Trend([3, 2, 1]), fg.Trend([1, 1, 1])])
    assert group.any_improving() and not group.all_improving()
    assert group.any_stalled(0, 0.1) and not group.all_stalled(0, 0.1)
    assert group.any_converged(0, 1e-9) and not group.all_converged(0, 1e-9)
    assert group.slopes() == [-1.0, 0.0] and group.mean_slope() == -0.5
    assert len(group) == 2 and group[1].latest() == 1
    none = fg.TrendGroup([])
    assert not none.all_stalled(0, 1) and not none.all_improving() and not none.all_converged(0, 1)
    assert not none.any_stalled(0, 1) and none.mean_slope() == 0


def test_reduce_lr_on_plateau_reads_a_trend():
    p = fg.ones(1, requires_grad=True)
    opt = fg.optim.SGD([p], lr=1.0)
    trend = fg.Trend()
    plateau = fg.optim.lr_scheduler.ReduceLROnPlateau(opt, trend=trend, patience=1, factor=0.5)
    for v in [1.0, 1.0, 1.0]:
        trend.append(v)
        plateau.step()
    assert opt.param_groups[0]["lr"] == 0.5


@pytest.mark.parametrize("seconds,text", [(0.042, "42ms"), (0, "0ms"), (0.00022, "220us"), (0.0006, "1ms"), (1.23, "1.2s"), (59.94, "59.9s"),
                                          (125, "2m05s"), (3725, "1h02m")])
def test_format_duration(seconds, text):
    assert fg.format_duration(seconds) == text


def test_format_duration_rejects_negative():
    with pytest.raises(fg.InvalidArgumentError, match="format_duration: expected a finite duration >= 0"):
        fg.format_duration(-1)
