"""`probe_accuracy.png`: every panel on one y-range, with the task's baseline drawn, so that small differences do not
look large and the distance to a trivial predictor is visible."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from modeling_elmo.evaluation.report import probe_figure, probe_y_range  # noqa: E402
from modeling_elmo.utils.results import ScoreResult, UntrainedComparison  # noqa: E402


def _scores(task, values, baseline, untrained=None):
    return [
        ScoreResult(
            task=task,
            dataset="d",
            split="validation",
            representation=f"layer {i}",
            metric="accuracy",
            value=v,
            examples=100,
            baseline=baseline,
            untrained=UntrainedComparison(untrained[i]) if untrained else None,
        )
        for i, v in enumerate(values)
    ]


def test_the_panels_share_one_y_range_that_holds_every_value_and_the_baselines():
    panels = [
        ("probe-sentiment", _scores("probe-sentiment", [0.572, 0.598, 0.612], 0.51, [0.55, 0.56, 0.57])),
        ("probe-pos", _scores("probe-pos", [0.80, 0.91, 0.93], 0.13)),
        ("wsd-probe (ties as half)", _scores("wsd-probe", [0.61, 0.66, 0.64], 0.33)),
    ]
    fig = probe_figure(panels, plt)
    limits = {ax.get_ylim() for ax in fig.axes}
    plt.close(fig)
    assert limits == {probe_y_range(panels)}
    low, high = limits.pop()
    assert low <= 0.13 and high >= 0.93 and 0.0 <= low and high <= 1.0


def test_each_panel_draws_its_baseline_as_a_labelled_line():
    panels = [
        ("probe-sentiment", _scores("probe-sentiment", [0.60, 0.61], 0.5)),
        ("wsd-probe (ties as half)", _scores("wsd-probe", [0.61, 0.66], 0.33)),
    ]
    fig = probe_figure(panels, plt)
    for ax, baseline, label in zip(
        fig.axes, (0.5, 0.33), ("majority class", "chance (random neighbour)"), strict=False
    ):
        flat = [line for line in ax.lines if len(set(line.get_ydata())) == 1 and line.get_label() == label]
        assert flat and flat[0].get_ydata()[0] == pytest.approx(baseline)
    plt.close(fig)


def test_close_values_get_a_range_of_at_least_a_tenth():
    panels = [("probe-sentiment", _scores("probe-sentiment", [0.600, 0.604], None))]
    low, high = probe_y_range(panels)
    assert high - low >= 0.1 - 1e-12 and low < 0.600 and high > 0.604
