"""The study loop: Optuna's ask-and-tell over short real training trials.

Ask for a configuration, predict its memory with the planner's models (a configuration predicted not to fit is
recorded as infeasible without running and does not count against the budget, as is one that needs no less
memory than a configuration of the same strategy that ran out of memory), reuse an earlier measurement of
the same configuration if there is one, else run it (:mod:`autoshard.tuner.runner`) and tell Optuna the measured
throughput. Out-of-memory trials are told as COMPLETE with throughput 0 and a violated constraint
(``trial.set_constraint``), so TPE learns to avoid their region; other failures are FAIL with their class;
clearly slower trials are pruned.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

from autoshard.errors import UserCodeError
from autoshard.planner import plan_file
from autoshard.planner.plan import Plan
from autoshard.planner.search import evaluate
from autoshard.strategies import get
from autoshard.tuner import storage as storage_mod
from autoshard.tuner.budget import Budget
from autoshard.tuner.cache import ResultCache
from autoshard.tuner.candidate import trial_candidate
from autoshard.tuner.estimate import describe
from autoshard.tuner.observer import TuneObserver
from autoshard.tuner.records import trial_strategy
from autoshard.tuner.result import FailureClass, TrialConfig, TrialEstimate, TuneResult
from autoshard.tuner.resume import RERUN, RERUN_ATTR, enqueue_reruns, superseded
from autoshard.tuner.runner import Measurement, TrialFailed, TrialRunner, TrialSpec, run_trial
from autoshard.tuner.space import SearchSpace

MAX_PREDICTED_INFEASIBLE = 50
"""Consecutive configurations predicted not to fit after which the study stops asking."""
MAX_DUPLICATES = 10
"""Consecutive configurations this study had already measured after which it stops: the sampler has converged
(a repeated configuration is answered from the study at no cost and does not use up the budget)."""
MAX_IMPLIED = 10
"""Consecutive configurations that need no less memory than one that ran out of it (``implied_oom``) after which
the study stops: the sampler keeps to a region that does not fit."""
_NOT_COUNTED = (FailureClass.PREDICTED_OOM.value, FailureClass.IMPLIED_OOM.value, *RERUN)
"""Finished trials that do not use up the budget (repeats, ``duplicate_of``, neither)."""
_Pruned = optuna.TrialPruned


class Terminated(KeyboardInterrupt):
    """SIGTERM to the tuner (``kill``, a job scheduler's time limit), raised by ``autoshard tune``'s handler: the
    study stops as on Ctrl-C, and the trial it stops says which signal stopped it."""


class Interrupted(KeyboardInterrupt):
    """Raised by :func:`autoshard.tune` once Ctrl-C or SIGTERM has stopped its study and what finished before it
    is written out: ``result`` holds those trials (as ``summary.json`` does), so ``tune --json`` can print them."""

    def __init__(self, result: TuneResult) -> None:
        n = len(result.trials)
        super().__init__(f"tuning interrupted; {n} trial{'s' * (n != 1)} recorded in {result.output_dir} "
                         "(summary.md), and the same call resumes the study")
        self.result = result


class StudyLoop:
    """Ask, predict, reuse or run, tell — until the study holds ``trials`` finished trials or time is up."""

    def __init__(self, study: optuna.Study, space: SearchSpace, plan: Plan, spec: TrialSpec, cache: ResultCache,
                 out: Path, environ: dict[str, str], budget: Budget, runner: TrialRunner = run_trial, *,
                 observer: TuneObserver | None = None, estimate: TrialEstimate | None = None) -> None:
        self.study, self.space, self.plan, self.spec, self.cache = study, space, plan, spec, cache
        self.out, self.environ, self.budget = out, environ, budget
        self.observer = observer or TuneObserver()
        """Told what the loop does (a progress bar draws it); by default nobody."""
        self.runner = runner
        """Runs one trial (:func:`~autoshard.tuner.runner.run_trial`; a stand-in replays measurements)."""
        self.me = storage_mod.owner()
        self.notes: list[str] = []
        self.estimate = estimate
        """What a trial is predicted to cost; said before the first trial starts."""
        self.implied = 0
        """Configurations this run did not start: one that needs no less memory ran out of it."""
        self.started_any = False
        """Whether this run asked for a trial yet."""
        self.planned_s = 0.0
        """Seconds from the budget's clock start (the study's) to the loop's: planning."""

    def run(self) -> None:
        display = self.observer
        display.study_started(budget=self.budget.trials)
        try:
            predicted_in_a_row = duplicates_in_a_row = implied_in_a_row = 0
            display.trials_done(self._counted())
            self.planned_s = time.monotonic() - self.budget.started
            if self.estimate is not None and self._counted() < self.budget.trials:
                display.say(describe(self.estimate, self.budget.trials - self._counted()))
                short = _short_limit(self.estimate, self.budget.trial_timeout_s)
                if short is not None:
                    display.say(short)
                    self.notes.append(short)
            while self._counted() < self.budget.trials:
                remaining = self.budget.remaining_s()
                stop = self._out_of_time(remaining)
                if stop is not None:
                    self.notes.append(stop)
                    break
                # A tuner of this host killed while this one runs leaves a trial RUNNING: fail it now, not at the
                # next resume (it would otherwise count as running elsewhere and stay so in the summary).
                self.notes += [f"Trial {n} was left running by a tuner that is gone: marked failed."
                               for n in storage_mod.fail_stale_trials(self.study)]
                # Another tuner of a shared study stopped mid-trial (Ctrl-C, SIGTERM, killed): its configuration
                # runs again here, as it would where that tuner resumed (a probe: it was never measured).
                self.notes += [f"Trial {n} was stopped before it finished ({why}) in another tuner: its "
                               "configuration runs again." for n, why in enqueue_reruns(self.study, self.space)]
                trial = self._ask()
                self.started_any = True
                try:
                    trial.set_user_attr(storage_mod.OWNER_ATTR, self.me)
                    config = self.space.suggest(trial)
                    trial.set_user_attr("config", config.to_dict())
                    how = self._trial(trial, config, display,
                                      min(self.budget.trial_timeout_s, remaining or self.budget.trial_timeout_s))
                except BaseException as e:
                    self._abandon(trial, e)
                    raise
                predicted_in_a_row = predicted_in_a_row + 1 if how in ("predicted", "implied") else 0
                implied_in_a_row = implied_in_a_row + 1 if how == "implied" else 0
                duplicates_in_a_row = duplicates_in_a_row + 1 if how == "duplicate" else 0
                if predicted_in_a_row >= MAX_PREDICTED_INFEASIBLE:
                    self.notes.append(f"Stopped early: the last {MAX_PREDICTED_INFEASIBLE} configurations asked for "
                                      "were all predicted not to fit, or to need no less memory than one that ran "
                                      "out of it.")
                    break
                if implied_in_a_row >= MAX_IMPLIED:
                    self.notes.append(f"Stopped early: the last {MAX_IMPLIED} configurations asked for all need no "
                                      "less memory than one that ran out of it (the sampler keeps to a region that "
                                      "does not fit).")
                    break
                if duplicates_in_a_row >= MAX_DUPLICATES:
                    self.notes.append(f"Stopped early: the sampler proposed {MAX_DUPLICATES} configurations in a row "
                                      "that the study had already measured (it has converged).")
                    break
                display.trials_done(self._counted())
        finally:
            display.study_ended()
            self.notes += self._reruns_not_run()
            if self.implied:
                self.notes.append(f"{self.implied} configuration(s) not run (implied_oom): each needs no less memory "
                                  "than one of its strategy that ran out of memory (other bucket sizes or comm hooks "
                                  "do not make it fit); they do not use up the budget.")

    def _out_of_time(self, remaining: float | None) -> str | None:
        """Why no trial should start with ``remaining`` seconds of the study's time limit left: none are left, or
        fewer than a trial takes here (the median duration of this study's trials measured to the end; a trial
        started anyway would be stopped at the limit, its time spent for nothing). ``None``: start one."""
        if remaining is None:
            return None
        limit = f"the study's time limit (timeout, {self.budget.timeout_s:g} s)"
        if remaining <= 0 and not self.started_any:
            return (f"Stopped: planning (tracing the model, measuring this machine) took {self.planned_s:.1f} s of "
                    f"{limit}, which left no time to start a trial ({self._counted()} of {self.budget.trials} "
                    "trial(s) done).")
        if remaining <= 0:
            return f"Stopped: {limit} ran out, after {self._counted()} of {self.budget.trials} trial(s)."
        durations = [float(t.user_attrs["duration_s"]) for t in self.study.get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if t.user_attrs.get("failure") is None
            and not t.user_attrs.get("cached") and t.user_attrs.get("duration_s") is not None]
        expected = statistics.median(durations) if durations else 0.0
        if remaining >= expected:
            return None
        return (f"Stopped: {remaining:.1f} s of {limit} were left, less than a trial takes here ({expected:.1f} s, "
                f"the median of {len(durations)} measured); no trial was started that could not finish, after "
                f"{self._counted()} of {self.budget.trials} trial(s).")

    def _counted(self) -> int:
        """Finished trials (not predicted infeasible) plus trials other tuners are running now, of this run's
        strategies (a study resumed with other ``--strategies`` gets its budget for them)."""
        n = 0
        allowed = {s.strategy for s in self.space.strategies}
        old = superseded(self.study)  # run for the job the study was taken up from: they count for nothing
        for t in self.study.get_trials(deepcopy=False):
            if t.number in old:
                continue
            if t.state == optuna.trial.TrialState.RUNNING:
                n += t.user_attrs.get(storage_mod.OWNER_ATTR) != self.me
            elif t.state.is_finished() and trial_strategy(t) in allowed:
                # Predicted-infeasible and repeated configurations cost nothing, and a trial whose tuner was killed
                # (failed by Optuna's heartbeat: no failure recorded) says nothing about its configuration: none of
                # them uses up the budget. Nor does one that never got a configuration (its tuner failed first).
                failure = t.user_attrs.get("failure")
                n += (failure not in _NOT_COUNTED and "duplicate_of" not in t.user_attrs
                      and not (failure is None and t.state == optuna.trial.TrialState.FAIL))
        return n

    def _ask(self) -> optuna.Trial:
        """The next trial: a rerun of a trial an earlier tuner left unfinished
        (:func:`~autoshard.tuner.resume.enqueue_reruns`) first, ahead of the trials queued before it; else
        Optuna's (its queue, then its sampler)."""
        storage = self.study._storage  # optuna's ask() pops its queue in trial order and has no way to pick one
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            if RERUN_ATTR not in t.user_attrs:
                continue
            try:  # as Study.ask() claims a queued trial: False when another tuner claimed it first
                claimed = storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.RUNNING)
            except optuna.exceptions.UpdateFinishedTrialError:
                claimed = False
            if claimed:
                return optuna.Trial(self.study, t._trial_id)
        with warnings.catch_warnings():  # heartbeats are recorded by this loop (_Heartbeat), not optimize()
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            return self.study.ask()

    def _reruns_not_run(self) -> list[str]:
        """Notes for configurations queued to run again that are still queued: the budget was spent first (a
        resumed study whose other tuners filled it said it would run them, and ran nothing)."""
        try:
            waiting = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        except Exception as e:  # the storage is gone: the error that ends the study says so
            if storage_mod.lost(e):
                return []
            raise
        return [f"Trial {t.user_attrs[RERUN_ATTR]}'s configuration, queued to run again, did not run: the budget "
                f"({self.budget.trials} trial(s)) was spent first; a larger --trials runs it."
                for t in waiting if RERUN_ATTR in t.user_attrs]

    def _abandon(self, trial: optuna.Trial, error: BaseException) -> None:
        """Settle ``trial`` when this tuner leaves it unfinished (its workers are already stopped): Ctrl-C or
        SIGTERM (:class:`Terminated`) makes it ``interrupted`` (not counted; run again when the study is resumed);
        anything else a ``crash``. Nothing when the storage itself is what failed: the next tuner to open the
        study finds the trial running with its tuner gone (``stale``)."""
        if storage_mod.lost(error):
            return
        if trial.number not in {t.number for t in self.study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}:
            return  # told already (e.g. the user-code error raised after its trial was recorded)
        if isinstance(error, KeyboardInterrupt):
            how = "SIGTERM to the tuner" if isinstance(error, Terminated) else "Ctrl-C (SIGINT to the tuner)"
            failure, message = FailureClass.INTERRUPTED, f"stopped by {how}; it runs again when the study is resumed"
        else:
            failure, message = FailureClass.CRASH, f"the tuner failed during this trial: {type(error).__name__}"
        trial.set_user_attr("failure", failure.value)
        trial.set_user_attr("message", message)
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def _trial(self, trial: optuna.Trial, config: TrialConfig, display: TuneObserver, timeout_s: float) -> str:
        """Run or settle one trial; says how: ``predicted`` (not run: predicted not to fit), ``implied`` (not
        run: it needs no less memory than one that ran out of it), ``duplicate``
        (answered from an earlier trial of this study), ``cached`` (from the result cache) or ``ran``."""
        evaluation = evaluate(get(config.strategy), self.plan.workload, self.plan.hardware, self.plan.request,
                              trial_candidate(config, trial=True))
        predicted = evaluation.memory.gpu.total if evaluation.memory is not None else None
        trial.set_user_attr("predicted_peak_bytes", predicted)
        trial.set_user_attr("predicted_samples_per_s",
                            None if evaluation.cost is None else evaluation.cost.samples_per_s)
        if not evaluation.fits:
            self._infeasible(trial, FailureClass.PREDICTED_OOM, "; ".join(evaluation.reasons))
            _said(display, trial.number, config, {"failure": FailureClass.PREDICTED_OOM.value,
                                                  "message": "not run: predicted not to fit"})
            return "predicted"
        outgrown = self._outgrown(config, predicted)
        if outgrown is not None:
            self._infeasible(trial, FailureClass.IMPLIED_OOM, outgrown)
            self.implied += 1
            _said(display, trial.number, config, {"failure": FailureClass.IMPLIED_OOM.value,
                                                  "message": "not run: a smaller one ran out of memory"})
            return "implied"
        reused, earlier = self._reuse(config)
        if reused is not None:
            trial.set_user_attr("cached", True)
            if earlier is not None:
                trial.set_user_attr("duplicate_of", earlier)
            self._settle(trial, config, reused, cache=False)
            _said(display, trial.number, config, {**reused, "from": "the result cache" if earlier is None
                                                  else f"trial {earlier}"})
            return "cached" if earlier is None else "duplicate"
        exported = plan_file.from_plan(dataclasses.replace(self.plan, recommended=evaluation))
        run_dir = self.out / "trials" / f"{trial.number:04d}"
        display.trial_started(trial.number, _describe(config))
        started = time.monotonic()

        def on_progress(step: int, rate: float) -> None:
            display.trial_step(step, self.spec.steps, rate)
            trial.report(rate, step)
            if step < self.spec.steps and trial.should_prune():  # a trial at its last step has its measurement
                raise _Pruned(f"{rate:.1f} samples/s at step {step}, below half the best so far")

        heartbeat = _Heartbeat(self.study, trial)
        try:
            measured = self.runner(exported, self.spec, run_dir, timeout_s=timeout_s, environ=self.environ,
                                 on_progress=on_progress, on_poll=heartbeat)
            outcome: dict[str, Any] = _measured(measured)
        except TrialFailed as e:
            outcome = {"failure": e.failure.value, "message": e.message}
            if e.failure is FailureClass.TIMEOUT:
                outcome["message"] = _timed_out(e.message, timeout_s, self.budget.trial_timeout_s)
        except _Pruned as e:
            outcome = {"pruned": True, "message": str(e)}
        outcome["duration_s"] = time.monotonic() - started
        self._settle(trial, config, outcome, cache=True)
        display.trial_ended(trial.number, outcome)
        return "ran"

    def _outgrown(self, config: TrialConfig, predicted: int | None) -> str | None:
        """Why ``config`` cannot fit, without running it: a trial of this study with the same strategy, at no
        larger a micro-batch and with checkpointing if ``config`` has it, ran out of memory, and ``config`` is
        predicted to need no less (its other knobs — bucket sizes, comm hooks — do not lower the planner's
        figure). ``None``: it may fit. A knob the memory model says saves memory (FSDP's resharding, DDP's
        gradients as bucket views) is tried.
        """
        if predicted is None:
            return None
        key = config.key()
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            stored, peak = t.user_attrs.get("config"), t.user_attrs.get("predicted_peak_bytes")
            if t.user_attrs.get("failure") != FailureClass.OOM.value or stored is None or peak is None:
                continue
            oom = TrialConfig(**stored)
            if (oom.strategy == config.strategy and oom.micro_batch_size <= config.micro_batch_size
                    and (oom.activation_checkpointing or not config.activation_checkpointing) and predicted >= peak
                    and oom.key() != key):  # the very configuration again is a repeat (duplicate_of)
                return (f"not run: trial {t.number} ({_describe(oom)}) ran out of memory, and this configuration "
                        f"is predicted to need no less ({predicted / 2**20:,.1f} MiB against "
                        f"{peak / 2**20:,.1f} MiB)")
        return None

    def _reuse(self, config: TrialConfig) -> tuple[dict[str, Any] | None, int | None]:
        """An earlier outcome of the same configuration and the study trial it came from: in this study, else
        in the result cache (trial ``None``)."""
        key = config.key()
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if t.user_attrs.get("config") is None or t.user_attrs.get("failure") == FailureClass.PREDICTED_OOM.value:
                continue
            if TrialConfig(**t.user_attrs["config"]).key() == key and "outcome" in t.user_attrs:
                return dict(t.user_attrs["outcome"]), int(t.user_attrs.get("duplicate_of", t.number))
        return self.cache.get(config), None

    def _settle(self, trial: optuna.Trial, config: TrialConfig, outcome: Mapping[str, Any], *, cache: bool) -> None:
        for key in ("samples_per_s", "tokens_per_s", "step_time_s", "peak_memory_bytes", "peak_memory_kind",
                    "message", "duration_s"):
            if key in outcome:
                trial.set_user_attr(key, outcome[key])
        if outcome.get("pruned"):
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return
        failure = outcome.get("failure")
        if failure == FailureClass.OOM.value:
            self._infeasible(trial, FailureClass.OOM, str(outcome.get("message", "")), outcome=outcome)
            if cache:
                self.cache.put(config, outcome)
            return
        if failure is not None:
            trial.set_user_attr("failure", failure)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            if failure == FailureClass.USER_CODE.value and _measured_any(self.study) is False:
                raise UserCodeError(f"the first trial failed in your code: {outcome.get('message')}",
                                    hint=f"Every trial would fail the same way; its logs are in "
                                         f"{self.out / 'trials' / f'{trial.number:04d}'}.")
            return
        trial.set_user_attr("outcome", dict(outcome))
        trial.set_constraint("oom", 0.0)
        self.study.tell(trial, float(outcome["samples_per_s"]))
        if cache:
            self.cache.put(config, outcome)

    def _infeasible(self, trial: optuna.Trial, failure: FailureClass, message: str,
                    outcome: Mapping[str, Any] | None = None) -> None:
        trial.set_user_attr("failure", failure.value)
        trial.set_user_attr("message", message)
        if outcome is not None:
            trial.set_user_attr("outcome", dict(outcome))
        trial.set_constraint("oom", 1.0)
        self.study.tell(trial, 0.0)


def _said(display: TuneObserver, number: int, config: TrialConfig, outcome: Mapping[str, Any]) -> None:
    """A trial settled without running (predicted, implied, reused), told as a run one is: a study under
    ``--json`` or in a log said nothing of them."""
    display.trial_started(number, _describe(config))
    display.trial_ended(number, outcome)


class _Heartbeat:
    """Records the running trial's heartbeat every few seconds (database storages), so that a tuner on another
    node can tell a live trial from a dead one."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial) -> None:
        storage = study._storage  # heartbeats are a storage feature optuna drives from optimize()
        self._storage = storage if isinstance(storage, optuna.storages.RDBStorage) else None
        self._trial_id = trial._trial_id
        self._last = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if self._storage is not None and now - self._last >= storage_mod.HEARTBEAT_INTERVAL_S:
            self._storage.record_heartbeat(self._trial_id)
            self._last = now


def _short_limit(estimate: TrialEstimate, trial_timeout_s: float) -> str | None:
    """A warning when a trial's time limit is shorter than a trial is estimated to take here (``None`` if not).

    Example:
        >>> print(_short_limit(TrialEstimate(seconds=12.0, startup_s=8.0, step_s=0.4, steps=10,
        ...                                  micro_batch_size=8, basis="a model"), 3.0))
        ... # doctest: +NORMALIZE_WHITESPACE
        A trial's time limit (3 s) is shorter than a trial is estimated to take here (about 12 s, 8 s of it to
        start the workers): trials will likely be stopped at the limit; raise --trial-timeout (trial_timeout_s=).
    """
    if trial_timeout_s >= estimate.seconds:
        return None
    return (f"A trial's time limit ({trial_timeout_s:g} s) is shorter than a trial is estimated to take here (about "
            f"{estimate.seconds:.0f} s, {estimate.startup_s:.0f} s of it to start the workers): trials will likely be "
            "stopped at the limit; raise --trial-timeout (trial_timeout_s=).")


def _timed_out(message: str, timeout_s: float, trial_timeout_s: float) -> str:
    """A timed-out trial's message, naming the limit it ran into: the trial's own, or what the study's time limit
    had left (the smaller one is the trial's).

    Example:
        >>> _timed_out("the workers did not finish within the time limit and were stopped.", 3.0, 3.0)
        "the workers did not finish within the trial's time limit (3 s, start-up included) and were stopped."
    """
    limit = (f"the trial's time limit ({timeout_s:g} s, start-up included)" if timeout_s >= trial_timeout_s
             else f"what was left of the study's time limit ({timeout_s:.1f} s)")
    if "the time limit" in message:
        return message.replace("the time limit", limit, 1)
    return f"stopped at {limit}: {message}"


def _measured(m: Measurement) -> dict[str, Any]:
    return {"samples_per_s": m.samples_per_s, "tokens_per_s": m.tokens_per_s, "step_time_s": m.step_time_s,
            "peak_memory_bytes": m.peak_memory_bytes, "peak_memory_kind": m.peak_memory_kind,
            "step_times_s": list(m.step_times_s), "step_time_spread": m.step_time_spread}


def _measured_any(study: optuna.Study) -> bool:
    return any(t.user_attrs.get("failure") is None and t.value is not None
               for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def _describe(config: TrialConfig) -> str:
    parts = [config.strategy, f"mb={config.micro_batch_size}"]
    if config.activation_checkpointing:
        parts.append("ckpt")
    return " ".join(parts)
