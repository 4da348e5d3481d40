"""Tuning with short real trials under Optuna: :func:`run_study` and its typed results.

The tuner renders nothing; :func:`autoshard.tune` runs :func:`run_study` with a progress bar and the summary
files (:mod:`autoshard.report`) as its observers.
"""

from __future__ import annotations

from autoshard.tuner.observer import TuneObserver
from autoshard.tuner.result import (
    FailureClass,
    TrialConfig,
    TrialRecord,
    TrialState,
    TuneResult,
)
from autoshard.tuner.study import run_study

__all__ = ["FailureClass", "TrialConfig", "TrialRecord", "TrialState", "TuneObserver", "TuneResult", "run_study"]
