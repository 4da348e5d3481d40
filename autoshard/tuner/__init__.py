"""Tuning with short real trials under Optuna: :func:`tune` and its typed results."""

from __future__ import annotations

from autoshard.tuner.result import (
    FailureClass,
    TrialConfig,
    TrialRecord,
    TrialState,
    TuneResult,
)
from autoshard.tuner.study import tune

__all__ = ["FailureClass", "TrialConfig", "TrialRecord", "TrialState", "TuneResult", "tune"]
