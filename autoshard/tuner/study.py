"""``autoshard.tune``: an Optuna study of short real training trials around the planner's recommendation.

:func:`run_study` checks the budget and the machine, plans, opens (or resumes) the study, queues the planner's
choice and the trials an earlier tuner left unfinished (:mod:`~autoshard.tuner.resume`), runs the loop
(:mod:`~autoshard.tuner.loop`: Optuna's ask-and-tell over short real trials) and settles the result: the best
configuration exported, the observers told. Its pieces are public, for a caller that drives a study itself:
:func:`~autoshard.tuner.budget.check_budget`, :func:`create_study`, :func:`enqueue_defaults` and
:class:`~autoshard.tuner.loop.StudyLoop`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import socket
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from autoshard.errors import AutoshardError, StorageLost, UsageError
from autoshard.models import ModelSource, load_source
from autoshard.planner import plan_file
from autoshard.planner.machine import default_precision, plan_for
from autoshard.planner.plan import Plan
from autoshard.planner.plan_file import ExportedPlan
from autoshard.profiler.options import parse_grad_clip_norm, parse_optimizer
from autoshard.tuner import storage as storage_mod
from autoshard.tuner.budget import check_budget
from autoshard.tuner.cache import ResultCache, default_dir
from autoshard.tuner.candidate import exported_plan, trial_candidate
from autoshard.tuner.estimate import cpu_flops_per_s, cpu_micro_batch_cap, trial_estimate
from autoshard.tuner.loop import Interrupted, StudyLoop, Terminated
from autoshard.tuner.machine import trial_hardware, worker_environ, worker_threads
from autoshard.tuner.observer import Observers, TuneObserver
from autoshard.tuner.pruner import SlowerThanBestPruner
from autoshard.tuner.records import best_record, queued_config, record, trial_strategy
from autoshard.tuner.result import TrialRecord, TrialState, TuneResult
from autoshard.tuner.resume import RERUN_ATTR, enqueue_reruns, says_nothing, superseded
from autoshard.tuner.runner import TrialRunner, TrialSpec, run_trial
from autoshard.tuner.space import SearchSpace, build_space, check_space_arguments
from autoshard.tuner.usercode import function_reference

if TYPE_CHECKING:
    import torch

    from autoshard.hardware.specs import HardwareSpec
    from autoshard.profiler.options import PrecisionName
    from autoshard.strategies.base import StrategyName


def run_study(
    model: str | os.PathLike[str] | ModelSource,
    *,
    hardware: HardwareSpec | str | os.PathLike[str] | None = None,
    processes: int | None = None,
    strategies: Sequence[StrategyName] | None = None,
    top_strategies: int = 3,
    batch_size: int | None = None,
    micro_batch_sizes: Sequence[int] | None = None,
    global_batch_size: int | None = None,
    seq_len: int | None = None,
    precision: PrecisionName | None = None,
    optimizer: str | None = None,
    grad_clip_norm: float | None = None,
    training_step: Callable[[Any, Any], torch.Tensor] | None = None,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
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
    compress_gradients: bool = False,
    space: SearchSpace | None = None,
    runner: TrialRunner = run_trial,
    observers: Sequence[TuneObserver] = (),
) -> TuneResult:
    """Tune how to train ``model`` on this machine with short real training trials, rendering nothing.

    :func:`autoshard.tune` is this with a progress bar and the summary files (:mod:`autoshard.report`) as
    ``observers``; the arguments they share are documented there.

    Args:
        observers: told what the study does as it runs (:class:`~autoshard.tuner.observer.TuneObserver`): a
            progress bar, the summary files; the notes they return at the end join the result's.

    Returns:
        A :class:`~autoshard.tuner.result.TuneResult`, as :func:`autoshard.tune`'s.

    Raises:
        UsageError, UserCodeError, NoFeasiblePlan: as :func:`autoshard.tune`.
    """
    budget = check_budget(trials, timeout_s, trial_timeout_s, steps, warmup_steps)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:  # numpy's range, Optuna's
        raise UsageError(f"seed must be a whole number from 0 to 2**32 - 1, but got {seed!r}.")
    clip_norm = parse_grad_clip_norm(grad_clip_norm)
    if optimizer is not None and not isinstance(optimizer, str):
        raise UsageError(f"optimizer must be a name such as 'adamw', but got {type(optimizer).__name__}.",
                         hint="Trials rebuild the optimizer in their own processes: name it, or define optimizer() "
                              "in the model file.")
    asked = None if optimizer is None else parse_optimizer(optimizer)  # before any trial: every one would fail
    if training_step is not None and loss_fn is not None:
        raise UsageError("pass loss_fn or training_step, not both: training_step returns the loss itself.")
    steps_given = {name: function_reference(fn, name) for name, fn in
                   (("training_step", training_step), ("loss_fn", loss_fn)) if fn is not None}
    if isinstance(model, ModelSource) and model.kind not in ("catalog", "file", "hf-config"):
        raise UsageError("tune() runs each trial in its own processes, which rebuild the model from its source; "
                         "this model has none.", hint="Save the model as a model.py and tune that.")
    if not isinstance(model, (str, os.PathLike, ModelSource)):
        raise UsageError(f"tune() needs a model source (a model.py path, a config.json path or a catalog name), "
                         f"but got {type(model).__name__}.",
                         hint="Trials rebuild the model in their own processes: save it as a model.py.")
    check_space_arguments(top_strategies, micro_batch_sizes)
    for flag, value in (("compress_gradients", compress_gradients), ("use_cache", use_cache), ("prune", prune)):
        if not isinstance(value, bool):  # a truthy "yes" ran a whole study as if True
            raise UsageError(f"{flag} must be True or False, but got {value!r}.")
    if space is not None and not isinstance(space, SearchSpace):
        raise UsageError(f"space must be a SearchSpace (autoshard.tuner.space.build_space), but got "
                         f"{type(space).__name__}.", hint="To tune some strategies only, pass strategies=[...].")
    if not isinstance(output_dir, (str, os.PathLike)):
        raise UsageError(f"output_dir must be a directory path, but got {output_dir!r}.",
                         hint="Leave it out for ./autoshard-tune, or name a directory.")
    if batch_size is not None and micro_batch_sizes is not None:
        raise UsageError("--batch-size fixes the micro-batch and --batch-sizes lists those to try: pass one of "
                         "them.")
    if study_name is not None and not study_name.strip():
        raise UsageError("the study name is empty.", hint="Drop --study-name for the default name, "
                                                          "or give one.")
    existed = Path(output_dir).exists(), (Path(output_dir) / storage_mod.DEFAULT_FILE).exists()
    out = storage_mod.writable_dir(Path(output_dir))
    # Opened before the model is traced: a bad or unreachable storage is refused in seconds, and leaves no output
    # directory behind.
    with storage_mod.removed_if_refused(out, storage, *existed):
        store, shown = storage_mod.open_storage(storage, out)
    with storage_mod.removed_if_refused(out, storage, *existed):  # refused before the study: nothing left behind
        hw = trial_hardware(hardware, processes)  # before the model is built: a second node is refused in seconds
        source = load_source(model)
        origin = source.origin.removeprefix("catalog:")
        chosen = precision or default_precision(hw)
        plan = plan_for(source, hw, batch_size=batch_size, global_batch_size=global_batch_size, seq_len=seq_len,
                        precision=chosen, optimizer=asked or "adamw", grad_clip_norm=clip_norm,
                        strategies=strategies, cache=use_cache)
        planned = plan_file.from_plan(plan)
        name = study_name or _default_name(planned)
        environ = worker_environ(os.environ, hw)
        flops_per_s = cpu_flops_per_s(worker_threads(environ, hw)) if hw.device_type == "cpu" else None
        # The model file's optimizer() wins (the planner priced it, the trials train it, as fit() does): the job
        # is the optimizer the plan names
        batch: dict[str, Any] = {"global_batch_size": global_batch_size, "precision": chosen,
                                 "optimizer": planned.optimizer,
                                 "seq_len": planned.seq_len}
        if clip_norm is not None:  # only then: a study made before clipping was planned keeps its fingerprint
            batch["grad_clip_norm"] = clip_norm
        for arg, ref in steps_given.items():  # only then, likewise: the user's step is part of the job
            batch[arg] = f"{ref['module']}.{ref['qualname']}"
        model_print = dataclasses.asdict(planned.model)
        if source.kind == "file" and source.fingerprint is not None:
            # the file's code and the siblings it imports, as the workload cache keys it: an edited forward is
            # another job (its parameters' shapes, all the layout hash sees, may be the same)
            model_print["code"] = source.fingerprint
        fingerprint = {"model": model_print, "hardware": dataclasses.asdict(planned.hardware), "batch": batch,
                       # a trial's length: throughput measured over other steps is not ranked with these
                       "trial": {"steps": steps, "warmup_steps": warmup_steps}}
        cache = ResultCache(None if not use_cache
                            else Path(cache_dir) if cache_dir is not None else default_dir(os.environ),
                            {**fingerprint, "trial": {"steps": steps, "warmup_steps": warmup_steps, "seed": seed}})
        cap = None if flops_per_s is None else cpu_micro_batch_cap(plan, steps, flops_per_s)
        if cap is not None:
            # Measured afresh at each start, the CPU's rate varies with the machine's load, and the same command
            # would offer other micro-batches each time: a resumed study keeps the cap it was made with, and the
            # same job tuned again elsewhere the cap its cached measurements were made with.
            earlier = cache.job_fact(CAP_ATTR)
            cap = _cap_made_with(store, name) or (earlier if isinstance(earlier, int) and earlier > 0 else cap)
            cache.put_job_fact(CAP_ATTR, cap)
        if space is None:
            space = build_space(plan, top=top_strategies, micro_batch_sizes=micro_batch_sizes, max_micro_batch_size=cap,
                                compress_gradients=compress_gradients)
        else:
            _check_space(space, plan)
        estimate = trial_estimate(plan, trial_candidate(space.defaults(space.strategies[0]), trial=True), steps,
                                  flops_per_s)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar and summary say it; restored after
    try:
        with storage_mod.removed_if_refused(out, storage, *existed), _output_dir_claimed(out, name):
            study, taken_up = create_study(name, store, shown, fingerprint, space,  # one made for another job:
                                           sampler_seed(seed, shared=storage is not None), prune, warmup_steps)
        if cap is not None and CAP_ATTR not in study.user_attrs:
            study.set_user_attr(CAP_ATTR, cap)
        notes = [*taken_up, *(f"Trial {n} was left running by a tuner that is gone: marked failed."
                              for n in storage_mod.fail_stale_trials(study, own_too=True))]
        if source.optimizer_fn is not None and asked is not None and asked != planned.optimizer:
            notes.append(f"The trials train with the model file's optimizer() ({planned.optimizer}), as fit() "
                         f"will; the optimizer asked for ({asked}) is not used.")
        # A forward whose output holds its loss (the trace saw a one-element tensor with a gradient) trains as is.
        returns_loss = any(t.at_1.loss_in_output for t in plan.workload.traces)
        if source.loss_fn is None and not steps_given and source.kind == "file" and not returns_loss:
            notes.append("The model file defines no loss() and its forward returns none: the trials time each step "
                         "with profiling's stand-in (the mean of the output, the same work), which fit() will not "
                         "train on: define loss(output, batch) in the file, or pass loss_fn= to fit().")
        enqueue_defaults(study, space)
        notes += [f"Trial {n} {_what_happened(why)}: its configuration is queued to run again "
                  "first."
                  for n, why in enqueue_reruns(study, space)]
        spec = TrialSpec(model=origin, optimizer=planned.optimizer, steps=steps, warmup_steps=warmup_steps, seed=seed,
                         training_step=steps_given.get("training_step"), loss_fn=steps_given.get("loss_fn"))
        observer = Observers(observers)
        loop = StudyLoop(study, space, plan, spec, cache, out, environ, budget, runner, observer=observer,
                         estimate=estimate)
        try:
            loop.run()
        except KeyboardInterrupt as e:  # what finished before Ctrl-C is written out, then the tuner stops (130)
            how = "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"
            partial = _finish(study, plan, space, shown, out, [*notes, *loop.notes, f"Interrupted ({how}): these "
                              "are the trials finished before it; the same command resumes the study."], observer,
                              estimate)
            raise Interrupted(partial) from e
        except AutoshardError as e:  # the user's code failed the first trial: the summary and best/ say so too
            _finish(study, plan, space, shown, out, [*notes, *loop.notes, f"Stopped: {e.message}"], observer,
                    estimate)
            raise
        except Exception as e:
            if not storage_mod.lost(e):
                raise
            # nothing can be read back to summarise: the trials finished before it are in the storage
            raise StorageLost(f"lost the study storage {shown} during the study: {storage_mod.lost_reason(e)}.",
                              hint="What finished before it is kept there; once it is back, the same command "
                                   "resumes the study (the trial that was running runs again first).") from e
        return _finish(study, plan, space, shown, out, notes + loop.notes, observer, estimate)
    finally:
        optuna.logging.set_verbosity(verbosity)


CAP_ATTR = "autoshard_cpu_micro_batch_cap"
"""On a study made on a CPU machine: the micro-batch cap of its first start (:func:`cpu_micro_batch_cap`)."""


def _cap_made_with(store: optuna.storages.BaseStorage, name: str) -> int | None:
    """The CPU micro-batch cap study ``name`` was made with (``None``: no such study, or made without one)."""
    try:
        cap = store.get_study_user_attrs(store.get_study_id_from_name(name)).get(CAP_ATTR)
    except KeyError:
        return None
    return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None


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


STUDY_FILE = ".autoshard-study"
"""In an output directory: the name of the study its ``trials/``, ``best/`` and summary belong to, written when the
study is made (under a lock of the directory), before any trial."""


@contextlib.contextmanager
def _output_dir_claimed(out: Path, name: str) -> Iterator[None]:
    """One study per output directory: its ``trials/``, ``best/`` and summary are the study's, by fixed names. The
    check and the study's creation hold an exclusive lock of the directory, and the directory is claimed for the
    study once it is made: two tuners of different models started at once into one directory each read the other's
    measurements from the same ``trials/0000`` (their pruning decided on the other model), and the last summary
    replaced the first (a concurrency probe). Tuners of the same study share the directory, as before.

    Raises:
        UsageError: ``out`` belongs to another study (its claim, or its ``summary.json``, names it).
    """
    fd = None
    if os.name == "posix":
        import fcntl

        fd = os.open(out, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        previous = _claimed_by(out)
        if previous is not None and previous != name:
            raise UsageError(f"{out} holds the results of study {previous!r}; this is study {name!r}, whose trials/, "
                             "best/ and summary would replace them.",
                             hint=f"Pass another --output-dir for this study; --study-name '{previous}' goes on with "
                                  "that one, for the job it was made for.")
        yield
        if previous is None:
            (out / STUDY_FILE).write_text(name + "\n", encoding="utf-8")
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _claimed_by(out: Path) -> str | None:
    """The study ``out`` belongs to: its claim, else its ``summary.json``'s (a directory tuned before claims)."""
    with contextlib.suppress(OSError):
        claim = (out / STUDY_FILE).read_text(encoding="utf-8").strip()
        if claim:
            return claim
    summary = out / "summary.json"
    try:
        previous = json.loads(summary.read_text(encoding="utf-8")).get("study_name") if summary.is_file() else None
    except (OSError, ValueError, AttributeError):
        previous = None
    return previous if isinstance(previous, str) else None


def _default_name(planned: ExportedPlan) -> str:
    hw = planned.hardware
    device = hw.gpu or "cpu"
    return f"{planned.model.name}-{hw.gpus_per_node}x{device}-{planned.model.layout_hash[:8]}"


def sampler_seed(seed: int, *, shared: bool) -> int:
    """The sampler's seed: ``seed``; on a storage the user named (a study tuners on several nodes share), ``seed``
    mixed with this host and process, so that two tuners started together do not draw the same points (TPE's
    random start-up trials ignore the constant liar). The trials' training seed stays ``seed``.

    Example:
        >>> sampler_seed(7, shared=False), sampler_seed(7, shared=True) == sampler_seed(7, shared=True)
        (7, True)
    """
    if not shared:
        return seed
    return zlib.crc32(f"{seed}:{socket.gethostname()}:{os.getpid()}".encode())


def create_study(name: str, store: optuna.storages.BaseStorage, shown: str, fingerprint: Mapping[str, Any],
                 space: SearchSpace, seed: int, prune: bool, warmup_steps: int) -> tuple[optuna.Study, list[str]]:
    """The study ``tune()`` runs (created, or loaded and checked against ``fingerprint``) and the note of a study
    taken up for this job (:func:`~autoshard.tuner.storage.check_fingerprint`): TPE seeded with
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
    # compared with this run's strategies only: a study resumed with others holds trials they do not compete with
    pruner = (SlowerThanBestPruner(min_steps=2, strategies=[s.strategy for s in space.strategies]) if prune
              else optuna.pruners.NopPruner())
    study = optuna.create_study(study_name=name, storage=store, sampler=sampler, pruner=pruner,
                                direction="maximize", load_if_exists=True)
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise UsageError(f"study {name!r} in {shown} minimises; autoshard's maximise throughput.",
                         hint="Pass another --study-name.")
    taken_up = storage_mod.check_fingerprint(study, fingerprint, shown)
    study.set_user_attr("autoshard_space", space.to_dict())
    return study, [] if taken_up is None else [taken_up]


def enqueue_defaults(study: optuna.Study, space: SearchSpace) -> None:
    """The planner's choice first, then each other strategy with its backend's defaults (once per study)."""
    allowed = {s.strategy for s in space.strategies}  # a resumed study may have run other strategies
    trials = study.get_trials(deepcopy=False)
    if any(t.user_attrs.get("origin") == "planner" and trial_strategy(t) in allowed for t in trials):
        return
    for i, s in enumerate(space.strategies):
        study.enqueue_trial(space.params(space.defaults(s)), user_attrs={"origin": "planner" if i == 0 else "default"},
                            skip_if_exists=True)


def _clear_best(best: Path) -> list[str]:
    """Remove what an earlier run exported to ``best`` (a study with no best must not show another run's); the
    directory goes too once empty. Returns the note that says so (none when there was nothing)."""
    from autoshard.export import EXPORT_FILES

    old = sorted(p for p in (best / name for name in EXPORT_FILES) if p.is_file())
    if not old:
        return []
    try:
        strategy = plan_file.read(best / "plan.json").strategy if (best / "plan.json") in old else None
    except UsageError:  # only to name it in the note; a plan that cannot be read goes all the same
        strategy = None
    for path in old:
        path.unlink()
    left = sorted(p.name for p in best.iterdir())
    if not left:
        best.rmdir()
    what = f"a {strategy} plan" if strategy else "a plan"
    return [f"{best} held the files of {what} an earlier run exported; this run has no best: they were removed"
            + (f" (left there: {', '.join(left)}, which autoshard did not write)." if left else ".")]


def running_elsewhere(records: Sequence[TrialRecord]) -> list[str]:
    """A note on the trials still running when this tuner finishes (it runs none by then: another tuner sharing
    the study does): this summary is the study as it stands, not as it ends.

    Example:
        >>> running_elsewhere([TrialRecord(number=4, state=TrialState.RUNNING, config=None)])[0][:41]
        'Trial(s) 4 still running in another tuner'
    """
    elsewhere = [r.number for r in records if r.state is TrialState.RUNNING]
    if not elsewhere:
        return []
    return [f"Trial(s) {', '.join(map(str, elsewhere))} still running in another tuner sharing this study: the best "
            "may change; the same command, run again once they finish, writes the study's summary and best/ afresh "
            "(it adds no trial when the budget is spent)."]


def _global_batch_changed(plan: Plan, records: Sequence[TrialRecord], best: TrialRecord, best_plan: ExportedPlan,
                          planner: int | None) -> list[str]:
    """A note when the best trains another global batch than the planner's recommendation (its micro-batch,
    with no global batch fixed): it is faster partly because it learns from other steps."""
    ran = next((r for r in records if r.number == planner and r.config is not None), None)
    if ran is None or ran.number == best.number or ran.config is None:
        return []
    theirs = exported_plan(plan, ran.config).global_batch_size
    if theirs == best_plan.global_batch_size:
        return []
    return [f"The best trains {best_plan.global_batch_size:,} samples per optimizer step, the planner's "
            f"recommendation (trial {ran.number}) {theirs:,}: the batch size changes what training learns, not only "
            "its speed. To compare at one global batch, tune with --global-batch-size (global_batch_size=)."]


def _finish(study: optuna.Study, plan: Plan, space: SearchSpace, shown: str, out: Path, notes: list[str],
            observer: TuneObserver, estimate: Any) -> TuneResult:
    """The study's result, with the estimate of a trial's time the observers (``summary.json``) report too. The
    best is chosen among the trials of this run's strategies: a study resumed with other ``--strategies`` keeps
    the trials it ran, which are listed but not exported."""
    from autoshard.export import export_plan

    records = tuple(record(t, queued_config(t, space)) for t in study.get_trials(deepcopy=False))
    notes = _reruns_said(study, notes)
    allowed = {s.strategy for s in space.strategies}
    outside = sorted({r.config.strategy for r in records if r.config is not None and r.config.strategy not in allowed})
    best = best_record([r for r in records if r.config is None or r.config.strategy in allowed])
    notes = [*notes, *running_elsewhere(records)]
    if outside:
        notes.append(f"This study also holds trials of {', '.join(outside)}, outside this run's strategies "
                     f"({', '.join(sorted(allowed))}): listed, never the best.")
    planned = [t for t in study.get_trials(deepcopy=False)
               if t.user_attrs.get("origin") == "planner" and trial_strategy(t) in allowed]
    old = superseded(study)
    measured = [t for t in planned if not says_nothing(t, old)]  # not its interrupted run, nor the old job's
    planner = next((t.number for t in measured or planned), None)
    files: tuple[str, ...]
    best_plan, files = None, ()
    if best is not None and best.config is not None:
        best_plan = exported_plan(plan, best.config)
        files = tuple(str(p) for p in export_plan(best_plan, out / "best", force=True, validate=True))
        notes += _global_batch_changed(plan, records, best, best_plan, planner)
    else:
        notes.append("No trial completed: nothing to export.")
        notes += _clear_best(out / "best")
    result = TuneResult(study_name=study.study_name, storage=shown, output_dir=str(out), trials=records, best=best,
                        best_plan=best_plan, planner_trial=planner, exported=files, notes=tuple(notes),
                        trial_estimate=estimate, device_type=plan.hardware.device_type)
    more = tuple(observer.study_finished(result, study))
    return dataclasses.replace(result, notes=result.notes + tuple(more)) if more else result


_QUEUED = re.compile(r"^Trial (\d+) (was stopped before it finished \(.*\)|failed for the job before): its "
                     r"configuration is queued to run again first\.$")


def _what_happened(why: str) -> str:
    """How a note names why a trial runs again: its tuner stopped (``why``: its failure class), or it ran for the
    job the study was taken up from."""
    return "failed for the job before" if why == "run for the job before" else f"was stopped before it finished ({why})"


def _reruns_said(study: optuna.Study, notes: list[str]) -> list[str]:
    """``notes`` with "queued to run again first" said as what happened once the rerun has run: the summary of a
    resumed study still said the interrupted trial was queued, after it had run again (a concurrency probe)."""
    ran = {t.user_attrs[RERUN_ATTR]: t.number for t in study.get_trials(deepcopy=False)
           if RERUN_ATTR in t.user_attrs and t.state != optuna.trial.TrialState.WAITING}

    def said(note: str) -> str:
        match = _QUEUED.match(note)
        if match is None or int(match[1]) not in ran:
            return note
        return (f"Trial {match[1]} {match[2]}: its configuration ran again as "
                f"trial {ran[int(match[1])]}.")
    return [said(n) for n in notes]
