"""The notes of a resumed study say what became of the trials an earlier tuner left unfinished."""

from __future__ import annotations


def test_a_rerun_that_ran_is_said_as_run_not_as_queued() -> None:
    """After a resume the summary still said the interrupted trial "is queued to run again first", though it had
    run (a concurrency probe)."""
    import optuna

    from autoshard.tuner.resume import RERUN_ATTR
    from autoshard.tuner.study import _reruns_said

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"x": 1}, user_attrs={RERUN_ATTR: 1})
    study.enqueue_trial({"x": 2}, user_attrs={RERUN_ATTR: 2})
    trial = study.ask()
    trial.suggest_int("x", 1, 2)
    study.tell(trial, 1.0)
    notes = [f"Trial {n} was stopped before it finished (interrupted): its configuration is queued to run again "
             "first." for n in (1, 2)] + ["Another note."]
    assert _reruns_said(study, notes) == [
        "Trial 1 was stopped before it finished (interrupted): its configuration ran again as trial 0.",
        notes[1],  # still waiting: still queued
        "Another note."]
