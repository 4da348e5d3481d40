"""``autoshard.tune``: an Optuna study of short real training trials around the planner's recommendation.

The loop is Optuna's ask-and-tell: ask for a configuration, predict its memory with the planner's models
(a configuration predicted not to fit is recorded as infeasible without running and does not count against
the budget), reuse an earlier measurement of the same configuration if there is one, else run it
(:mod:`autoshard.tuner.runner`) and tell Optuna the measured throughput. Out-of-memory trials are told as
COMPLETE with throughput 0 and a violated constraint (``trial.set_constraint``), so TPE learns to avoid their
region; other failures are FAIL with their class; clearly slower trials are pruned.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna

from autoshard.errors import UsageError, UserCodeError
from autoshard.models import ModelSource, load_source
from autoshard.planner import plan_file
from autoshard.planner.machine import default_precision, hardware_for, plan_for
from autoshard.planner.plan import Plan
from autoshard.planner.plan_file import ExportedPlan
from autoshard.planner.search import evaluate
from autoshard.strategies import get
from autoshard.tuner import storage as storage_mod
from autoshard.tuner.cache import ResultCache, default_dir
from autoshard.tuner.estimate import cpu_flops_per_s, cpu_micro_batch_cap, describe, trial_estimate
from autoshard.tuner.pruner import SlowerThanBestPruner
from autoshard.tuner.records import best_record, record
from autoshard.tuner.result import (
    FailureClass,
    TrialConfig,
    TrialEstimate,
    TuneResult,
)
from autoshard.tuner.runner import Measurement, TrialFailed, TrialRunner, TrialSpec, run_trial
from autoshard.tuner.space import SearchSpace, build_space

MAX_PREDICTED_INFEASIBLE = 50
"""Consecutive configurations predicted not to fit after which the study stops asking."""
MAX_DUPLICATES = 10
"""Consecutive configurations this study had already measured after which it stops: the sampler has converged
(a repeated configuration is answered from the study at no cost and does not use up the budget)."""
RERUN_ATTR = "rerun_of"
"""On a trial queued to run again the configuration of a trial an earlier tuner left unfinished: its number."""
_RERUN = (FailureClass.INTERRUPTED.value, FailureClass.STALE.value)
"""Trials that say nothing about their configuration: their tuner stopped while they ran."""
_NOT_COUNTED = (FailureClass.PREDICTED_OOM.value, *_RERUN)
"""Finished trials that do not use up the budget (repeats, ``duplicate_of``, neither)."""
_Pruned = optuna.TrialPruned


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    trials: int
    timeout_s: float | None
    trial_timeout_s: float
    started: float

    def remaining_s(self) -> float | None:
        return None if self.timeout_s is None else self.timeout_s - (time.monotonic() - self.started)


def tune(
    model: str | os.PathLike[str] | ModelSource,
    *,
    hardware: Any = None,
    processes: int | None = None,
    strategies: Sequence[str] | None = None,
    top_strategies: int = 3,
    batch_size: int | None = None,
    micro_batch_sizes: Sequence[int] | None = None,
    global_batch_size: int | None = None,
    seq_len: int | None = None,
    precision: str | None = None,
    optimizer: str = "adamw",
    trials: int = 12,
    timeout_s: float | None = None,
    trial_timeout_s: float = 300.0,
    steps: int = 10,
    warmup_steps: int = 3,
    storage: str | None = None,
    study_name: str | None = None,
    output_dir: str | os.PathLike[str] = "autoshard-tune",
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    prune: bool = True,
    seed: int = 0,
    progress: bool = True,
    space: SearchSpace | None = None,
    runner: TrialRunner = run_trial,
) -> TuneResult:
    """Tune how to train ``model`` on this machine with short real training trials.

    Args:
        model: a ``model.py`` path, a Hugging Face ``config.json`` path, a catalog name, or a loaded source
            (trials run it in their own processes, so an ``nn.Module`` cannot be tuned: save it as a model.py).
        hardware: a profile name / path / ``HardwareSpec`` describing this machine (default: detected).
        processes: GPUs to use, or on a CPU machine the number of gloo processes.
        strategies: consider only these strategies.
        top_strategies: compare this many of the planner's best strategies (1: tune only the recommended one).
        batch_size: a fixed micro-batch (not tuned).
        micro_batch_sizes: the micro-batches to try (default: the largest that fits and powers of two below).
        global_batch_size: samples per optimizer step over all ranks (fixes the accumulation per micro-batch).
        seq_len: sequence length of token models.
        precision: as ``fit()``'s (default ``bf16-mixed`` on GPUs that have it, else ``32-true``).
        optimizer: ``adamw``, ``adam``, ``sgd`` or ``adafactor``.
        trials: trials the study should hold when done (a resumed study counts its earlier ones; configurations
            predicted not to fit are recorded but not counted).
        timeout_s: stop starting trials after this long (``None``: no limit).
        trial_timeout_s: a trial running longer, process start-up included, is stopped and recorded as timed out.
        steps: optimizer steps per trial, ``warmup_steps`` of them untimed.
        warmup_steps: steps dropped before timing.
        storage: an Optuna storage URL (e.g. ``postgresql://...`` shared by several nodes) or a journal file
            ``*.log``; default ``sqlite:///<output_dir>/study.db``.
        study_name: default: ``<model>-<strategy family list>`` made from the model and machine.
        output_dir: where the study file, the trials' logs, the summary, the plots and the best plan's files go.
        cache_dir: the result cache (default ``~/.cache/autoshard/tune``).
        use_cache: reuse measurements of the same job and configuration from the cache, and the model's traced
            step from the workload cache (:mod:`autoshard.planner.workload_cache`); ``False`` measures and traces
            again.
        prune: stop trials that run at less than half the best throughput.
        seed: the sampler's seed (and the trials' training seed).
        progress: show a progress bar on stderr.
        space: search this space instead of the one built from the plan (:func:`~autoshard.tuner.space.build_space`);
            its strategies are checked against the plan's.
        runner: measures one configuration (default :func:`~autoshard.tuner.runner.run_trial`: real training in
            its own processes); a stand-in replays recorded measurements.

    Returns:
        A :class:`~autoshard.tuner.result.TuneResult`; ``best_plan`` is usable by ``fit(plan=...)``, and its
        files are in ``<output_dir>/best``.

    Raises:
        UsageError: bad arguments, an unwritable output directory, an unreachable storage, a study made for
            another job.
        UserCodeError: the model's own code fails in the first trial (every trial would).
        NoFeasiblePlan: nothing fits this machine.
    """
    budget = check_budget(trials, timeout_s, trial_timeout_s, steps, warmup_steps)
    if isinstance(model, ModelSource) and model.kind not in ("catalog", "file", "hf-config"):
        raise UsageError("tune() runs each trial in its own processes, which rebuild the model from its source; "
                         "this model has none.", hint="Save the model as a model.py and tune that.")
    if not isinstance(model, (str, os.PathLike, ModelSource)):
        raise UsageError(f"tune() needs a model source (a model.py path, a config.json path or a catalog name), "
                         f"but got {type(model).__name__}.",
                         hint="Trials rebuild the model in their own processes: save it as a model.py.")
    out = storage_mod.writable_dir(Path(output_dir))
    source = load_source(model)
    origin = source.origin.removeprefix("catalog:")
    hw = _hardware(hardware, processes)
    precision = precision or default_precision(hw)
    plan = plan_for(source, hw, batch_size=batch_size, global_batch_size=global_batch_size, seq_len=seq_len,
                    precision=precision, optimizer=optimizer,
                    strategies=None if strategies is None else list(strategies), cache=use_cache)
    environ = worker_environ(os.environ, hw)
    flops_per_s = cpu_flops_per_s(worker_threads(environ, hw)) if hw.device_type == "cpu" else None
    if space is None:
        cap = None if flops_per_s is None else cpu_micro_batch_cap(plan, steps, flops_per_s)
        space = build_space(plan, top=top_strategies, micro_batch_sizes=micro_batch_sizes, max_micro_batch_size=cap)
    else:
        _check_space(space, plan)
    estimate = trial_estimate(plan, trial_candidate(space.defaults(space.strategies[0]), trial=True), steps,
                              flops_per_s)
    planned = plan_file.from_plan(plan)
    fingerprint = {"model": dataclasses.asdict(planned.model), "hardware": dataclasses.asdict(planned.hardware),
                   "batch": {"global_batch_size": global_batch_size, "precision": precision,
                             "optimizer": optimizer, "seq_len": planned.seq_len}}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar and summary say it; restored after
    try:
        store, shown = storage_mod.open_storage(storage, out)
        name = study_name or _default_name(planned)
        study = create_study(name, store, shown, fingerprint, space, seed, prune, warmup_steps)
        notes = [f"Trial {n} was left running by a tuner that is gone: marked failed."
                 for n in storage_mod.fail_stale_trials(study)]
        enqueue_defaults(study, space)
        notes += [f"Trial {n} was stopped before it finished ({why}): its configuration runs again first."
                  for n, why in enqueue_reruns(study, space)]
        cache = ResultCache(None if not use_cache
                            else Path(cache_dir) if cache_dir is not None else default_dir(os.environ),
                            {**fingerprint, "trial": {"steps": steps, "warmup_steps": warmup_steps, "seed": seed}})
        spec = TrialSpec(model=origin, optimizer=optimizer, steps=steps, warmup_steps=warmup_steps, seed=seed)
        loop = StudyLoop(study, space, plan, spec, cache, out, environ, budget, progress, runner, estimate=estimate)
        loop.run()
        result = _finish(study, space, plan, shown, out, notes + loop.notes)
        return dataclasses.replace(result, trial_estimate=estimate)
    finally:
        optuna.logging.set_verbosity(verbosity)


# -- the loop ------------------------------------------------------------------------------------------------


class StudyLoop:
    """Ask, predict, reuse or run, tell — until the study holds ``trials`` finished trials or time is up."""

    def __init__(self, study: optuna.Study, space: SearchSpace, plan: Plan, spec: TrialSpec, cache: ResultCache,
                 out: Path, environ: dict[str, str], budget: Budget, progress: bool,
                 runner: TrialRunner = run_trial, *, estimate: TrialEstimate | None = None) -> None:
        self.study, self.space, self.plan, self.spec, self.cache = study, space, plan, spec, cache
        self.out, self.environ, self.budget = out, environ, budget
        self.progress = progress
        self.runner = runner
        """Runs one trial (:func:`~autoshard.tuner.runner.run_trial`; a stand-in replays measurements)."""
        self.me = storage_mod.owner()
        self.notes: list[str] = []
        self.estimate = estimate
        """What a trial is predicted to cost; said before the first trial starts."""

    def run(self) -> None:
        from autoshard.tuner.progress import ProgressDisplay

        with ProgressDisplay(total=self.budget.trials, enabled=self.progress) as display:
            predicted_in_a_row = duplicates_in_a_row = 0
            display.advance_to(self._counted())
            if self.estimate is not None and self._counted() < self.budget.trials:
                display.say(describe(self.estimate, self.budget.trials - self._counted()))
            while self._counted() < self.budget.trials:
                remaining = self.budget.remaining_s()
                if remaining is not None and remaining <= 0:
                    break
                # A tuner of this host killed while this one runs leaves a trial RUNNING: fail it now, not at the
                # next resume (it would otherwise count as running elsewhere and stay so in the summary).
                self.notes += [f"Trial {n} was left running by a tuner that is gone: marked failed."
                               for n in storage_mod.fail_stale_trials(self.study)]
                trial = self._ask()
                try:
                    trial.set_user_attr(storage_mod.OWNER_ATTR, self.me)
                    config = self.space.suggest(trial)
                    trial.set_user_attr("config", config.to_dict())
                    how = self._trial(trial, config, display,
                                      min(self.budget.trial_timeout_s, remaining or self.budget.trial_timeout_s))
                except BaseException as e:
                    self._abandon(trial, e)
                    raise
                predicted_in_a_row = predicted_in_a_row + 1 if how == "predicted" else 0
                duplicates_in_a_row = duplicates_in_a_row + 1 if how == "duplicate" else 0
                if predicted_in_a_row >= MAX_PREDICTED_INFEASIBLE:
                    self.notes.append(f"Stopped early: the last {MAX_PREDICTED_INFEASIBLE} configurations asked for "
                                      "were all predicted not to fit.")
                    break
                if duplicates_in_a_row >= MAX_DUPLICATES:
                    self.notes.append(f"Stopped early: the sampler proposed {MAX_DUPLICATES} configurations in a row "
                                      "that the study had already measured (it has converged).")
                    break
                display.advance_to(self._counted())

    def _counted(self) -> int:
        """Finished trials (not predicted infeasible) plus trials other tuners are running now."""
        n = 0
        for t in self.study.get_trials(deepcopy=False):
            if t.state == optuna.trial.TrialState.RUNNING:
                n += t.user_attrs.get(storage_mod.OWNER_ATTR) != self.me
            elif t.state.is_finished():
                # Predicted-infeasible and repeated configurations cost nothing, and a trial whose tuner was killed
                # says nothing about its configuration: none of them uses up the budget.
                n += (t.user_attrs.get("failure") not in _NOT_COUNTED and "duplicate_of" not in t.user_attrs)
        return n

    def _ask(self) -> optuna.Trial:
        """The next trial: a rerun of a trial an earlier tuner left unfinished (:func:`enqueue_reruns`) first,
        ahead of the trials queued before it; else Optuna's (its queue, then its sampler)."""
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

    def _abandon(self, trial: optuna.Trial, error: BaseException) -> None:
        """Settle ``trial`` when this tuner leaves it unfinished (its workers are already stopped): Ctrl-C makes
        it ``interrupted`` (not counted; run again when the study is resumed); anything else a ``crash``."""
        if trial.number not in {t.number for t in self.study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}:
            return  # told already (e.g. the user-code error raised after its trial was recorded)
        if isinstance(error, KeyboardInterrupt):
            failure, message = FailureClass.INTERRUPTED, ("stopped by Ctrl-C (SIGINT to the tuner); it runs again "
                                                          "when the study is resumed")
        else:
            failure, message = FailureClass.CRASH, f"the tuner failed during this trial: {type(error).__name__}"
        trial.set_user_attr("failure", failure.value)
        trial.set_user_attr("message", message)
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def _trial(self, trial: optuna.Trial, config: TrialConfig, display: Any, timeout_s: float) -> str:
        """Run or settle one trial; says how: ``predicted`` (not run: predicted not to fit), ``duplicate``
        (answered from an earlier trial of this study), ``cached`` (from the result cache) or ``ran``."""
        evaluation = evaluate(get(config.strategy), self.plan.workload, self.plan.hardware, self.plan.request,
                              trial_candidate(config, trial=True))
        predicted = evaluation.memory.gpu.total if evaluation.memory is not None else None
        trial.set_user_attr("predicted_peak_bytes", predicted)
        trial.set_user_attr("predicted_samples_per_s",
                            None if evaluation.cost is None else evaluation.cost.samples_per_s)
        if not evaluation.fits:
            self._infeasible(trial, FailureClass.PREDICTED_OOM, "; ".join(evaluation.reasons))
            return "predicted"
        reused, earlier = self._reuse(config)
        if reused is not None:
            trial.set_user_attr("cached", True)
            if earlier is not None:
                trial.set_user_attr("duplicate_of", earlier)
            self._settle(trial, config, reused, cache=False)
            return "cached" if earlier is None else "duplicate"
        exported = plan_file.from_plan(dataclasses.replace(self.plan, recommended=evaluation))
        run_dir = self.out / "trials" / f"{trial.number:04d}"
        display.start_trial(trial.number, _describe(config))
        started = time.monotonic()

        def on_progress(step: int, rate: float) -> None:
            display.update(step, self.spec.steps, rate)
            trial.report(rate, step)
            if trial.should_prune():
                raise _Pruned(f"{rate:.1f} samples/s at step {step}, below half the best so far")

        heartbeat = _Heartbeat(self.study, trial)
        try:
            measured = self.runner(exported, self.spec, run_dir, timeout_s=timeout_s, environ=self.environ,
                                 on_progress=on_progress, on_poll=heartbeat)
            outcome: dict[str, Any] = _measured(measured)
        except TrialFailed as e:
            outcome = {"failure": e.failure.value, "message": e.message}
        except _Pruned as e:
            outcome = {"pruned": True, "message": str(e)}
        outcome["duration_s"] = time.monotonic() - started
        self._settle(trial, config, outcome, cache=True)
        display.end_trial(trial.number, outcome)
        return "ran"

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


# -- setting up ----------------------------------------------------------------------------------------------


def check_budget(trials: int, timeout_s: float | None, trial_timeout_s: float, steps: int, warmup_steps: int
                 ) -> Budget:
    """The budget, its clock started now.

    Raises:
        UsageError: a count or a time out of range.
    """
    def whole(name: str, value: Any, low: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise UsageError(f"{name} must be a whole number >= {low}, but got {value!r}.")

    def seconds(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise UsageError(f"{name} must be a positive number of seconds, but got {value!r}.")

    whole("trials", trials, 1)
    if timeout_s is not None:
        seconds("timeout", timeout_s)
    seconds("trial timeout", trial_timeout_s)
    whole("warm-up steps", warmup_steps, 0)
    whole("steps", steps, 1)
    if steps < warmup_steps + 2:
        raise UsageError(f"steps ({steps}) must exceed the warm-up steps ({warmup_steps}) by at least 2, so that "
                         "throughput is measured over more than one step.")
    return Budget(trials=trials, timeout_s=timeout_s, trial_timeout_s=float(trial_timeout_s),
                   started=time.monotonic())


def _hardware(hardware: Any, processes: int | None) -> Any:
    hw = hardware_for(hardware, processes=processes)
    if hw.nodes > 1:
        raise UsageError(f"trials run on this machine, and the hardware describes {hw.nodes} nodes.",
                         hint="Run autoshard tune on each node with one shared --storage URL: they tune one study.")
    if hw.device_type == "cuda":
        import torch

        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < hw.processes_per_node:
            raise UsageError(f"trials run on this machine, which has {have} CUDA device(s); the hardware describes "
                             f"{hw.processes_per_node} GPU(s).",
                             hint="Drop --hardware to tune for this machine as detected (or pass --gpus N).")
    return hw


def _check_space(space: SearchSpace, plan: Plan) -> None:
    """A given space must search strategies the plan evaluated.

    Raises:
        UsageError: it names one the plan does not hold.
    """
    planned = {e.strategy for e in plan.candidates}
    unknown = [s.strategy for s in space.strategies if s.strategy not in planned]
    if unknown or not space.strategies:
        raise UsageError(f"the search space's strategies ({', '.join(unknown) or 'none'}) are not among the plan's.",
                         hint="Build it with autoshard.tuner.space.build_space(plan) or pass strategies=.")


def _default_name(planned: ExportedPlan) -> str:
    hw = planned.hardware
    device = hw.gpu or "cpu"
    return f"{planned.model.name}-{hw.gpus_per_node}x{device}-{planned.model.layout_hash[:8]}"


def create_study(name: str, store: optuna.storages.BaseStorage, shown: str, fingerprint: Mapping[str, Any],
                 space: SearchSpace, seed: int, prune: bool, warmup_steps: int) -> optuna.Study:
    """The study ``tune()`` runs (created, or loaded and checked against ``fingerprint``): TPE seeded with
    ``seed``, multivariate over the conditional space, with a constant liar for parallel tuners; pruning trials
    slower than half the best when ``prune``.

    Raises:
        UsageError: the stored study minimises, or was made for another job.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=len(space.strategies) + 2, multivariate=True, group=True,
            constant_liar=True)
    pruner = SlowerThanBestPruner(min_steps=2) if prune else optuna.pruners.NopPruner()
    study = optuna.create_study(study_name=name, storage=store, sampler=sampler, pruner=pruner,
                                direction="maximize", load_if_exists=True)
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise UsageError(f"study {name!r} in {shown} minimises; autoshard's maximise throughput.",
                         hint="Pass another --study-name.")
    storage_mod.check_fingerprint(study, fingerprint, shown)
    study.set_user_attr("autoshard_space", space.to_dict())
    return study


def enqueue_defaults(study: optuna.Study, space: SearchSpace) -> None:
    """The planner's choice first, then each other strategy with its backend's defaults (once per study)."""
    if any(t.user_attrs.get("origin") == "planner" for t in study.get_trials(deepcopy=False)):
        return
    for i, s in enumerate(space.strategies):
        study.enqueue_trial(space.params(space.defaults(s)), user_attrs={"origin": "planner" if i == 0 else "default"},
                            skip_if_exists=True)


def worker_threads(environ: Mapping[str, str], hw: Any) -> int:
    """Threads one CPU trial worker computes with: ``OMP_NUM_THREADS`` of its environment, else the cores shared
    by the workers."""
    value = environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return max(1, (os.cpu_count() or 1) // max(1, hw.processes_per_node))


def enqueue_reruns(study: optuna.Study, space: SearchSpace) -> list[tuple[int, str]]:
    """Queue again, once each, the configurations of trials whose tuner stopped while they ran (Ctrl-C:
    ``interrupted``; killed: ``stale``), where ``space`` still holds them; :meth:`StudyLoop._ask` runs them first.

    Returns:
        ``(trial number, its failure class)`` of each trial queued again.
    """
    trials = study.get_trials(deepcopy=False)
    done = {t.user_attrs[RERUN_ATTR] for t in trials if RERUN_ATTR in t.user_attrs}
    queued = []
    for t in trials:
        failure = t.user_attrs.get("failure")
        if t.state != optuna.trial.TrialState.FAIL or failure not in _RERUN or t.number in done:
            continue
        try:
            config = space.suggest(optuna.trial.FixedTrial(t.params))
        except (ValueError, UsageError):  # a parameter missing or outside this space (other --batch-sizes, --top)
            continue
        if config.to_dict() != t.user_attrs.get("config"):  # (== : a stored 25 is the parameter's 25.0)
            continue
        attrs = {RERUN_ATTR: t.number, **({"origin": t.user_attrs["origin"]} if "origin" in t.user_attrs else {})}
        study.enqueue_trial(t.params, user_attrs=attrs)
        queued.append((t.number, str(failure)))
    return queued


def worker_environ(environ: Mapping[str, str], hw: Any) -> dict[str, str]:
    """The trials' workers' environment: ``environ``, with one OpenMP thread per process when several CPU
    processes share the machine."""
    env = dict(environ)
    if hw.device_type == "cpu" and "OMP_NUM_THREADS" not in env and hw.processes_per_node > 1:
        env["OMP_NUM_THREADS"] = "1"  # as torchrun does for several processes per node: no oversubscription
    return env


# -- results -------------------------------------------------------------------------------------------------


def trial_candidate(config: TrialConfig, *, trial: bool) -> Any:
    """``config`` as a planner :class:`~autoshard.strategies.base.Candidate`; with ``trial``, with the settings
    every short trial runs with (:meth:`~autoshard.strategies.base.Strategy.trial_settings`)."""
    from autoshard.strategies.base import Candidate

    settings = dict(config.settings)
    if trial:
        settings.update(get(config.strategy).trial_settings())
    return Candidate(strategy=config.strategy, micro_batch_size=config.micro_batch_size,
                     activation_checkpointing=config.activation_checkpointing, settings=settings)


def _measured(m: Measurement) -> dict[str, Any]:
    return {"samples_per_s": m.samples_per_s, "tokens_per_s": m.tokens_per_s, "step_time_s": m.step_time_s,
            "peak_memory_bytes": m.peak_memory_bytes, "peak_memory_kind": m.peak_memory_kind,
            "step_times_s": list(m.step_times_s)}


def _measured_any(study: optuna.Study) -> bool:
    return any(t.user_attrs.get("failure") is None and t.value is not None
               for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def _describe(config: TrialConfig) -> str:
    parts = [config.strategy, f"mb={config.micro_batch_size}"]
    if config.activation_checkpointing:
        parts.append("ckpt")
    return " ".join(parts)


def exported_plan(plan: Plan, config: TrialConfig) -> ExportedPlan:
    """``config`` as ``plan.json`` holds it (the trial-only settings dropped)."""
    evaluation = evaluate(get(config.strategy), plan.workload, plan.hardware, plan.request,
                          trial_candidate(config, trial=False))
    return plan_file.from_plan(dataclasses.replace(plan, recommended=evaluation))


def _finish(study: optuna.Study, space: SearchSpace, plan: Plan, shown: str, out: Path,
            notes: list[str]) -> TuneResult:
    from autoshard.export import export_plan
    from autoshard.tuner import report

    records = tuple(record(t) for t in study.get_trials(deepcopy=False))
    best = best_record(records)
    planned = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("origin") == "planner"]
    measured = [t for t in planned if t.user_attrs.get("failure") not in _RERUN]  # not its interrupted run
    planner = next((t.number for t in measured or planned), None)
    files: tuple[str, ...]
    best_plan, files = None, ()
    if best is not None and best.config is not None:
        best_plan = exported_plan(plan, best.config)
        files = tuple(str(p) for p in export_plan(best_plan, out / "best", force=True, validate=True))
    else:
        notes.append("No trial completed: nothing to export.")
    result = TuneResult(study_name=study.study_name, storage=shown, output_dir=str(out), trials=records, best=best,
                        best_plan=best_plan, planner_trial=planner, exported=files, notes=tuple(notes))
    _, more = report.write_summary(result, study, out)
    return dataclasses.replace(result, notes=result.notes + tuple(more)) if more else result
