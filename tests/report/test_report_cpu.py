"""On a CPU the planner's samples/s is a placeholder for ranking (10-20x off a measurement): summary.md does not
show it beside the measured figure, and says why; summary.json keeps the field."""

from __future__ import annotations

import pytest

from autoshard.report import summary_markdown
from autoshard.tuner.result import TrialConfig, TrialRecord, TrialState, TuneResult


def _result(device_type: str) -> TuneResult:
    trial = TrialRecord(number=0, state=TrialState.COMPLETE, samples_per_s=460.0, predicted_samples_per_s=8298.0,
                        config=TrialConfig(strategy="ddp", micro_batch_size=8, activation_checkpointing=False))
    return TuneResult(study_name="s", storage="sqlite:///s.db", output_dir="out", trials=(trial,), best=trial,
                      best_plan=None, device_type=device_type)


@pytest.mark.parametrize(("device_type", "shown"), [("cpu", False), ("cuda", True)])
def test_the_planners_cpu_speed_is_not_shown_as_a_prediction(device_type: str, shown: bool) -> None:
    result = _result(device_type)
    markdown = summary_markdown(result)
    assert ("predicted samples/s |" in markdown) is shown
    assert ("8,298" in markdown) is shown
    assert ("on a CPU the planner's speed is a placeholder" in markdown) is not shown
    assert result.to_dict()["trials"][0]["predicted_samples_per_s"] == 8298.0
