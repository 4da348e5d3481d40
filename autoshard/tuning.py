"""``autoshard.tune``: the tuner's study with its report, above both.

:func:`autoshard.tuner.study.run_study` runs the study and renders nothing; :mod:`autoshard.report` draws
the progress bar and writes ``summary.md``, ``summary.json`` and the plots. ``tune()`` hands the second to the
first as observers, so the tuner imports neither rich nor matplotlib.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from autoshard.errors import PLANNER_ARGUMENTS, in_arguments
from autoshard.tuner.runner import TrialRunner, run_trial

if TYPE_CHECKING:
    import torch

    from autoshard.hardware.specs import HardwareSpec
    from autoshard.models.source import ModelSource
    from autoshard.profiler.options import PrecisionName
    from autoshard.strategies.base import StrategyName
    from autoshard.tuner.result import TuneResult
    from autoshard.tuner.space import SearchSpace


TUNE_ARGUMENTS = (
    (r"--gpus N\b", "processes=N"), (r"--batch-sizes\b", "micro_batch_sizes="),
    (r"--study-name '([^']*)'", r'study_name="\1"'), (r"--study-name\b", "study_name="),
    (r"--output-dir\b", "output_dir="), (r"--storage ('[^']*'|\S+)", r"storage=\1"), (r"--storage\b", "storage="),
    *PLANNER_ARGUMENTS,
)
"""``tune()``'s arguments for the flags its messages name: the GPUs it trials on are ``processes=``."""


@in_arguments(TUNE_ARGUMENTS)
def tune(
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
        precision: as ``fit()``'s (default ``bf16-mixed`` on GPUs that have it, ``16-mixed`` on those without
            (V100, T4), ``32-true`` without a GPU).
        optimizer: ``adamw``, ``adam``, ``sgd``, ``adafactor`` or ``adamw8bit`` (bitsandbytes' ``AdamW8bit``);
            default ``adamw``. A model file's ``optimizer()`` wins, as in ``recommend()`` and ``fit()``: the plan
            names it and every trial trains with it (a note says so when another was asked for). An unknown name
            is refused before anything runs.
        grad_clip_norm: the norm the run clips the gradients' global 2-norm to before each optimizer step (a
            positive number; ``None``: no clipping): planned and priced as ``recommend()``'s, every trial clips
            so, and the best plan keeps it (``fit(plan=...)`` clips as it says). A study remembers it: one made
            with another norm is refused.
        training_step: ``training_step(model, batch) -> loss``, the step ``fit()`` will run in place of forward +
            loss: every trial runs it. Trials run in processes of their own, which import it by name: define it
            at the top level of the model file or of a module (a lambda, a closure or a function of the running
            script is refused before any trial).
        loss_fn: ``loss_fn(output, batch) -> loss`` in place of the source's own loss, imported likewise.
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
        compress_gradients: also tune DDP's gradient compression (fp16 / bf16 compression, PowerSGD), which
            changes what training computes: off unless asked, as FSDP2's ``reduce_dtype`` is never tuned.
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
    import torch

    from autoshard.report import ProgressDisplay, SummaryWriter
    from autoshard.runtime.fit import cuda_devices_in_use
    from autoshard.tuner.study import run_study

    observers = [SummaryWriter(), *([ProgressDisplay()] if progress else [])]
    # The caller's random state is left as it was, as fit() leaves it (fit.md): a notebook's `torch.manual_seed(0);
    # tune(...); build the model` drew other weights (planning draws the traced batches).
    with torch.random.fork_rng(devices=cuda_devices_in_use()):
        return run_study(
            model, hardware=hardware, processes=processes, strategies=strategies, top_strategies=top_strategies,
            batch_size=batch_size, micro_batch_sizes=micro_batch_sizes, global_batch_size=global_batch_size,
            seq_len=seq_len, precision=precision, optimizer=optimizer, grad_clip_norm=grad_clip_norm,
            training_step=training_step, loss_fn=loss_fn, trials=trials, timeout_s=timeout_s,
            trial_timeout_s=trial_timeout_s, steps=steps, warmup_steps=warmup_steps, storage=storage,
            study_name=study_name, output_dir=output_dir, cache_dir=cache_dir, use_cache=use_cache, prune=prune,
            seed=seed, compress_gradients=compress_gradients, space=space, runner=runner, observers=observers,
        )
