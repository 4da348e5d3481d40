"""A stand-in trial runner and a small DDP search space, for studies driven through ``tune(space=, runner=)``
without real trials (tests/tuner/test_tune_seam.py, tests/tuner/test_tune_grad_clip.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoshard.planner.plan_file import ExportedPlan
from autoshard.tuner.runner import Measurement, TrialRunner, TrialSpec
from autoshard.tuner.space import SearchSpace, StrategySpace

DDP_SPACE = SearchSpace(strategies=(StrategySpace(strategy="ddp", family="ddp", micro_batch_sizes=(1, 2),
                                                  checkpointing=(False,), knobs=(), default_micro_batch_size=1,
                                                  default_checkpointing=False),))
"""DDP at micro-batch 1 or 2, nothing else."""


def replay(calls: list[ExportedPlan]) -> TrialRunner:
    """A runner that records each configuration in ``calls`` and measures 100 samples/s per sample of micro-batch
    (larger micro-batches are faster in this recording)."""
    def run(exported: ExportedPlan, spec: TrialSpec, run_dir: Path, **_: Any) -> Measurement:
        calls.append(exported)
        return Measurement(samples_per_s=100.0 * exported.micro_batch_size, tokens_per_s=None, step_time_s=1.0,
                           peak_memory_bytes=None, peak_memory_kind=None, step_times_s=(1.0,) * 5)
    return run
