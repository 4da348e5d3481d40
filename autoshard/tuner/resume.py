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


def enqueue_reruns(study: optuna.Study, space: SearchSpace) -> list[tuple[int, str]]:
    """Queue again, once each, the configurations of trials whose tuner stopped while they ran (Ctrl-C:
    ``interrupted``; killed: ``stale``), where ``space`` still holds them; the loop runs them first
    (:meth:`~autoshard.tuner.loop.StudyLoop._ask`).

    Returns:
        ``(trial number, its failure class)`` of each trial queued again.
    """
    trials = study.get_trials(deepcopy=False)
    done = {t.user_attrs[RERUN_ATTR] for t in trials if RERUN_ATTR in t.user_attrs}
    queued = []
    for t in trials:
        failure, stored = t.user_attrs.get("failure"), t.user_attrs.get("config")
        if t.state != optuna.trial.TrialState.FAIL or failure not in RERUN or t.number in done or stored is None:
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
        queued.append((t.number, str(failure)))
    return queued
