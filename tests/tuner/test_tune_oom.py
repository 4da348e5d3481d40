"""A configuration that ran out of memory (a real CPU allocator failure in a real trial) is not run again with
only other bucket sizes: those variants are recorded as ``implied_oom`` without starting a worker, and do not
use up the budget."""

from __future__ import annotations

from pathlib import Path

import pytest

import autoshard
from autoshard.strategies.base import Knob
from autoshard.tuner import FailureClass, TrialState
from autoshard.tuner.loop import MAX_IMPLIED
from autoshard.tuner.space import SearchSpace, StrategySpace

MODEL = Path(__file__).parent / "trial_model.py"
BUCKETS = Knob(name="bucket_cap_mb", default=25.0, kind="float", low=1.0, high=200.0, log=True)
# DDP at micro-batch 8 only, which runs out of memory whatever its bucket size: every configuration the
# sampler can ask for is a bucket-size variant of the first trial.
ONLY_OOM = SearchSpace(strategies=(StrategySpace(strategy="ddp", family="ddp", micro_batch_sizes=(8,),
                                                 checkpointing=(False,), knobs=(BUCKETS,), default_micro_batch_size=8,
                                                 default_checkpointing=False),))


def test_an_oom_is_not_run_again_with_other_bucket_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three trials were three real runs of micro-batch 8 at three bucket sizes, each out of memory."""
    monkeypatch.setenv("AUTOSHARD_TEST_OOM_FROM", "8")
    result = autoshard.tune(MODEL, processes=1, space=ONLY_OOM, trials=3, steps=3, warmup_steps=1,
                            trial_timeout_s=120, output_dir=tmp_path / "out", use_cache=False, progress=False,
                            precision="32-true")
    first, *rest = result.trials
    assert first.failure is FailureClass.OOM and first.state is TrialState.INFEASIBLE, first.to_dict()
    assert "can't allocate memory" in (first.message or "")  # the allocator's own refusal, from the worker
    assert len(rest) == MAX_IMPLIED, [t.to_dict() for t in rest]  # then the study stopped asking
    for t in rest:
        assert t.state is TrialState.INFEASIBLE and t.failure is FailureClass.IMPLIED_OOM, t.to_dict()
        assert t.message is not None and t.message.startswith("not run: trial 0 (ddp mb=8) ran out of memory")
        assert t.duration_s is None and t.config is not None and t.config.settings != first.config.settings
    assert sorted(p.name for p in (tmp_path / "out" / "trials").iterdir()) == ["0000"]  # no worker started again
    assert result.best is None
    assert any(n.startswith(f"{MAX_IMPLIED} configuration(s) not run (implied_oom)") for n in result.notes)
    assert any(n.startswith(f"Stopped early: the last {MAX_IMPLIED} configurations") for n in result.notes)
