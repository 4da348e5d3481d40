"""benchmarks/step_time_fit.py: the factor search, the power-capped profile of a point, and the graceful skip."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.benchmark_scripts import load


@pytest.fixture(scope="module")
def fit() -> ModuleType:
    return load("step_time_fit")


@pytest.mark.parametrize("true_scale", [0.62, 0.9, 1.24])
def test_the_factor_search_recovers_the_factor_that_matches_the_published_figures(fit, true_scale):
    # A model whose prediction is proportional to the factor and right at `true_scale`.
    published = [100.0, 250.0, 4000.0]

    def errors_at(scale):
        return [fit.log_error(p * scale / true_scale, p) for p in published]

    assert fit.best_scale(errors_at) == pytest.approx(true_scale)


@pytest.mark.parametrize(("variant", "profile"), [
    ("96GB HBM2e, 500 W power limit (Grand Teton)", "h100-sxm-80gb-500w"),
    ("300 W power limit", "h100-sxm-80gb"),  # no such profile shipped: the board's own
    (None, "h100-sxm-80gb"),
])
def test_a_points_power_limit_selects_the_capped_profile_when_shipped(fit, variant, profile):
    assert fit.gpu_profile({"hardware": {"gpu": "h100-sxm-80gb", "variant": variant}}) == profile


def test_without_the_published_points_it_says_so_and_exits_0(fit, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fit, "HERE", tmp_path)  # a benchmarks/ folder without published.py
    assert fit.main([]) == 0
    assert "nothing to fit" in capsys.readouterr().out
