"""``--plot`` is a figure for a report: the recommendation marked, the axis at the device's scale (a 1.5 TiB bar
is cut, not stretching it), the legend clear of the bars, labels that do not overlap."""

from __future__ import annotations

import pytest

from autoshard.planner import plan
from tests.planner.test_planner import H100x8, Synthetic, request, workload

matplotlib = pytest.importorskip("matplotlib")


@pytest.fixture
def big_model_plan():
    strategies = [Synthetic("ddp", state_gib=1500, act_gib=1, per_device_samples_s=100),  # 1.5 TiB: no fit
                  Synthetic("fsdp", state_gib=400, act_gib=4, per_device_samples_s=80, sharded=True),
                  Synthetic("deepspeed_stage_3", state_gib=400, act_gib=4, per_device_samples_s=90, sharded=True)]
    return plan(workload(70_000_000_000), H100x8, request(micro_batch_size=2), strategies)


@pytest.fixture(autouse=True)
def _close_figures():
    """memory_figure() draws with pyplot: close what each test opened, so later tests start with none."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _figure(p):
    from autoshard.cli._plot import memory_figure

    fig = memory_figure(p)
    fig.canvas.draw()
    return fig, fig.axes[0]


def test_the_recommended_candidate_is_marked(big_model_plan):
    _, ax = _figure(big_model_plan)
    marked = [t.get_text() for t in ax.get_yticklabels() if t.get_text().startswith("★")]
    assert marked == ["★ " + big_model_plan.recommended.strategy]
    top = max(ax.get_yticklabels(), key=lambda t: t.get_position()[1])
    assert top.get_text() == marked[0]


def test_the_axis_stays_at_the_devices_scale_when_a_candidate_needs_terabytes(big_model_plan):
    _, ax = _figure(big_model_plan)
    device_gib = H100x8.device_memory_bytes / 2**30
    assert ax.get_xlim()[1] <= 1.5 * device_gib
    assert any("1.5 TiB" in t.get_text() for t in ax.texts)  # the cut bar says its size


def test_the_legend_and_the_labels_do_not_cover_the_bars(big_model_plan):
    fig, ax = _figure(big_model_plan)
    renderer = fig.canvas.get_renderer()
    axes_box = ax.get_window_extent(renderer)
    assert not ax.get_legend().get_window_extent(renderer).overlaps(axes_box)
    ticks = [t.get_window_extent(renderer) for t in ax.get_yticklabels()]
    assert not any(a.overlaps(b) for i, a in enumerate(ticks) for b in ticks[i + 1:])
