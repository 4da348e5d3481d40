"""Resuming a study: the trials an earlier tuner left unfinished run again first.

A tuner stopped by Ctrl-C records its running trial as ``interrupted``; one killed leaves it RUNNING, and the
next tuner marks it ``stale`` (:func:`~autoshard.tuner.storage.fail_stale_trials`). Neither says anything about
its configuration, so :func:`enqueue_reruns` queues that configuration again and
the study loop (:mod:`autoshard.tuner.loop`) asks for it before anything else.
"""

from __future__ import annotations

import optuna

from autoshard.errors import UsageError
from autoshard.tuner.result import FailureClass, TrialConfig
from autoshard.tuner.space import SearchSpace

RERUN_ATTR = "rerun_of"
"""On a trial queued to run again the configuration of a trial an earlier tuner left unfinished: its number."""
RERUN = (FailureClass.INTERRUPTED.value, FailureClass.STALE.value)
"""Trials that say nothing about their configuration: their tuner stopped while they ran."""
SUPERSEDED_ATTR = "autoshard_superseded_trials"
"""On a study taken up for another job (every trial had failed: the user fixed the model file whose first trial
raised, :func:`~autoshard.tuner.storage.check_fingerprint`), the numbers of the trials of the old job: their
failures say nothing about the job as it is now, so they run again and count as :data:`RERUN`'s do."""


def superseded(study: optuna.Study) -> frozenset[int]:
    """The numbers of the trials that ran for a job the study was taken up from (:data:`SUPERSEDED_ATTR`)."""
    return frozenset(int(n) for n in study.user_attrs.get(SUPERSEDED_ATTR, ()))


def says_nothing(trial: optuna.trial.FrozenTrial, old: frozenset[int]) -> bool:
    """Whether ``trial`` says nothing about its configuration as the job is now: its tuner stopped while it ran
    (:data:`RERUN`), or it ran for a job the study was taken up from (``old``: :func:`superseded`)."""
    return trial.user_attrs.get("failure") in RERUN or trial.number in old


def enqueue_reruns(study: optuna.Study, space: SearchSpace) -> list[tuple[int, str]]:
    """Queue again, once each, the configurations of trials whose tuner stopped while they ran (Ctrl-C:
    ``interrupted``; killed: ``stale``), where ``space`` still holds them; the loop runs them first
    (:meth:`~autoshard.tuner.loop.StudyLoop._ask`).

    Returns:
        ``(trial number, its failure class)`` of each trial queued again.
    """
    trials = study.get_trials(deepcopy=False)
    done = {t.user_attrs[RERUN_ATTR] for t in trials if RERUN_ATTR in t.user_attrs}
    old = superseded(study)
    queued = []
    for t in trials:
        failure, stored = t.user_attrs.get("failure"), t.user_attrs.get("config")
        if t.state != optuna.trial.TrialState.FAIL or not says_nothing(t, old) or t.number in done or stored is None:
            continue
        # From its configuration, not its parameters: their names carry the choices of the run that asked
        # (autoshard.tuner.space), and this run's may differ and still hold the configuration.
        try:
            params = space.params(TrialConfig(**stored))
            config = space.suggest(optuna.trial.FixedTrial(params))
        except (ValueError, UsageError):  # outside this space (other --batch-sizes, --strategies, --top)
            continue
        if config.to_dict() != stored:  # (== : a stored 25 is the parameter's 25.0)
            continue
        attrs = {RERUN_ATTR: t.number, **({"origin": t.user_attrs["origin"]} if "origin" in t.user_attrs else {})}
        study.enqueue_trial(params, user_attrs=attrs)
        queued.append((t.number, "run for the job before" if t.number in old else str(failure)))
    return queued
