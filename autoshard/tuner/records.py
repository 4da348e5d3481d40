"""Reading a study back: each stored Optuna trial as autoshard's :class:`~autoshard.tuner.result.TrialRecord`
(its state in autoshard's words, the configuration and figures kept in the trial's user attributes), and the
best of them."""

from __future__ import annotations

from collections.abc import Sequence

import optuna

from autoshard.errors import UsageError
from autoshard.tuner.result import FailureClass, TrialConfig, TrialRecord, TrialState
from autoshard.tuner.resume import RERUN_ATTR
from autoshard.tuner.space import SearchSpace


def record(t: optuna.trial.FrozenTrial, queued: TrialConfig | None = None) -> TrialRecord:
    """A stored trial as a :class:`TrialRecord`; ``queued``: the configuration a trial still waiting to run was
    queued with (:func:`queued_config`), which it records only when it runs."""
    attrs = t.user_attrs
    failure = attrs.get("failure")
    state = {optuna.trial.TrialState.COMPLETE: TrialState.COMPLETE, optuna.trial.TrialState.PRUNED: TrialState.PRUNED,
             optuna.trial.TrialState.FAIL: TrialState.FAILED, optuna.trial.TrialState.RUNNING: TrialState.RUNNING,
             optuna.trial.TrialState.WAITING: TrialState.WAITING}[t.state]
    if state is TrialState.COMPLETE and any(v > 0 for v in t.constraints.values()):
        state = TrialState.INFEASIBLE
    if t.state == optuna.trial.TrialState.FAIL and failure is None:
        failure = FailureClass.STALE.value  # failed by Optuna's heartbeat check
    config = attrs.get("config")
    measured = state in (TrialState.COMPLETE, TrialState.PRUNED)
    return TrialRecord(
        number=t.number, state=state, config=queued if config is None else TrialConfig(**config),
        samples_per_s=attrs.get("samples_per_s") if state is TrialState.COMPLETE else None,
        tokens_per_s=attrs.get("tokens_per_s") if state is TrialState.COMPLETE else None,
        step_time_s=attrs.get("step_time_s") if measured else None,
        step_time_spread=attrs.get("step_time_spread") if measured else None,
        peak_memory_bytes=attrs.get("peak_memory_bytes"), peak_memory_kind=attrs.get("peak_memory_kind"),
        predicted_peak_bytes=attrs.get("predicted_peak_bytes"),
        predicted_samples_per_s=attrs.get("predicted_samples_per_s"),
        failure=None if failure is None else FailureClass(failure), message=attrs.get("message"),
        cached=bool(attrs.get("cached", False)), duplicate_of=attrs.get("duplicate_of"),
        rerun_of=attrs.get(RERUN_ATTR), duration_s=attrs.get("duration_s"))


def queued_config(t: optuna.trial.FrozenTrial, space: SearchSpace) -> TrialConfig | None:
    """The configuration a trial waiting in the queue (``study.enqueue_trial``: a rerun, the planner's pick) will
    run: its fixed parameters read through ``space``; ``None`` for any other trial, or parameters ``space`` does not
    hold (queued by a run with other choices)."""
    fixed = t.system_attrs.get("fixed_params")
    if t.state != optuna.trial.TrialState.WAITING or not isinstance(fixed, dict):
        return None
    try:
        return space.suggest(optuna.trial.FixedTrial(fixed))
    except (ValueError, UsageError):
        return None


def best_record(records: Sequence[TrialRecord]) -> TrialRecord | None:
    """The fastest measured feasible trial."""
    measured = [r for r in records if r.state is TrialState.COMPLETE and r.samples_per_s is not None]
    return max(measured, key=lambda r: r.samples_per_s or 0.0) if measured else None


def trial_strategy(t: optuna.trial.FrozenTrial) -> str | None:
    """The strategy a stored trial runs (``None`` before its configuration was recorded): its stored
    configuration's, read without building the record (the tuner's loop asks it of every trial each turn)."""
    config = t.user_attrs.get("config")
    return None if config is None else config["strategy"]
