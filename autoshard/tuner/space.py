"""The search space: the planner's top strategies, each with the micro-batches that fit, activation
checkpointing where the model has repeated blocks, and the knobs of the strategy that change its speed.

Parameters are named ``strategy/knob`` (e.g. ``ddp/bucket_cap_mb``), so a knob's distribution is always the
same for Optuna, and a strategy's knobs exist only in trials that chose that strategy (a define-by-run,
conditional space, which Optuna's TPE sampler models with ``group=True``). Knobs that depend on another knob
(PowerSGD's rank on ``comm_hook=powersgd``) are asked for only when they apply.

The two dimensions whose choices depend on the run — the strategy (``--strategies``, ``--top``) and a strategy's
micro-batches (``--batch-sizes``, the CPU cap) — carry their choices in their name:
``strategy[ddp,fsdp]``, ``ddp/micro_batch_size[16,32,64]``. Optuna fixes a categorical's choices at its first
use in a study (its storage refuses another set under the same name: "CategoricalDistribution does not
support dynamic value space"), and a resumed study may ask with other choices. So the same command resumes
the same parameters, which TPE models with every earlier trial, and other choices are a parameter of their own,
which TPE models from the trials that had it; the knobs, the study's own cache of configurations (by value,
:meth:`~autoshard.tuner.result.TrialConfig.key`) and the reruns of unfinished trials do not depend on the names.
The alternative, one superset of choices fixed for the study, would have to be known when the study is made
(``--batch-sizes`` is anything), and TPE spreads its prior over all of it: most suggestions would fall outside
the run's space and be skipped. A knob's choices come from its strategy and the hardware (which the study's
fingerprint fixes), and Optuna lets a numeric range change.

Left out (``Knob.tuned`` is false, set by the strategy that owns the knob), each for a reason:

* ``find_unused_parameters`` (DDP) — correctness, not speed: a model that needs it fails without it, and the
  planner already turns it on when the model has unused parameters.
* ``start_powerSGD_iter`` (DDP) — when compression starts, which changes accuracy, not speed. Trials start
  PowerSGD at step 2 (the earliest PowerSGD allows) so that they measure it at all; the exported best keeps
  the default.
* ``reduce_dtype`` (FSDP2) — changes the numerics of gradient reduction; a user's choice, not a tuner's.
* ``comm_hook`` (DDP) — fp16 / bf16 compression and PowerSGD change the numerics the same way; offered only with
  ``compress_gradients`` (``--compress-gradients``), and PowerSGD's rank with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autoshard.errors import UsageError
from autoshard.planner.plan import Evaluation, Plan
from autoshard.strategies import get
from autoshard.strategies.base import Knob
from autoshard.tuner.result import TrialConfig

"""Knob → (knob, value) it applies under."""
RANGES: dict[str, tuple[float, float, bool]] = {
    # The knobs accept 0 (off), which a log scale cannot reach; the tuner searches the useful span log-uniformly.
    "stage3_prefetch_bucket_size": (1e5, 1e9, True),
    "stage3_param_persistence_threshold": (1e3, 1e7, True),
    "stage3_max_reuse_distance": (1e6, 1e10, True),
}
MAX_MICRO_BATCH_CHOICES = 4
"""Micro-batches offered per strategy: the largest that fits and the powers of two below it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategySpace:
    """One strategy's part of the space."""

    strategy: str
    family: str
    micro_batch_sizes: tuple[int, ...]
    checkpointing: tuple[bool, ...]
    knobs: tuple[Knob, ...]
    default_micro_batch_size: int
    """The planner's micro-batch for this strategy (its best evaluation)."""
    default_checkpointing: bool

    def param(self, name: str) -> str:
        """The Optuna parameter name of one of this strategy's dimensions (the micro-batch's names its choices).

        Example:
            >>> space = StrategySpace(strategy="ddp", family="ddp", micro_batch_sizes=(16, 32), checkpointing=(False,),
            ...                       knobs=(), default_micro_batch_size=32, default_checkpointing=False)
            >>> space.param("micro_batch_size"), space.param("bucket_cap_mb")
            ('ddp/micro_batch_size[16,32]', 'ddp/bucket_cap_mb')
        """
        choices = _choice_set(self.micro_batch_sizes) if name == "micro_batch_size" else ""
        return f"{self.strategy}/{name}{choices}"


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchSpace:
    """The whole space: the strategies to compare and each one's dimensions."""

    strategies: tuple[StrategySpace, ...]

    def suggest(self, trial: optuna.trial.BaseTrial) -> TrialConfig:
        """The configuration of ``trial``, asking Optuna for each dimension that applies."""
        names = [s.strategy for s in self.strategies]
        name = trial.suggest_categorical(self.strategy_param, names) if len(names) > 1 else names[0]
        space = self.strategies[names.index(name)]
        micro = _categorical(trial, space.param("micro_batch_size"), space.micro_batch_sizes)
        ckpt = _categorical(trial, space.param("activation_checkpointing"), space.checkpointing)
        settings: dict[str, Any] = {}
        for knob in space.knobs:
            if knob.when is not None and settings.get(knob.when[0]) != knob.when[1]:
                continue
            settings[knob.name] = _suggest_knob(trial, space.param(knob.name), knob)
        return TrialConfig(strategy=name, micro_batch_size=int(micro), activation_checkpointing=bool(ckpt),
                           settings=settings)

    def params(self, config: TrialConfig) -> dict[str, Any]:
        """The Optuna parameters that produce ``config`` (for ``study.enqueue_trial``)."""
        space = self.space_of(config.strategy)
        out: dict[str, Any] = {}
        if len(self.strategies) > 1:
            out[self.strategy_param] = config.strategy
        if len(space.micro_batch_sizes) > 1:
            out[space.param("micro_batch_size")] = config.micro_batch_size
        if len(space.checkpointing) > 1:
            out[space.param("activation_checkpointing")] = config.activation_checkpointing
        for knob in space.knobs:
            if knob.name in config.settings:
                out[space.param(knob.name)] = config.settings[knob.name]
        return out

    @property
    def strategy_param(self) -> str:
        """The Optuna parameter name of the strategy (it names the strategies: module docstring)."""
        return "strategy" + _choice_set([s.strategy for s in self.strategies])

    def defaults(self, space: StrategySpace) -> TrialConfig:
        """The strategy at the planner's micro-batch and checkpointing with the backend's default knobs."""
        settings: dict[str, Any] = {}
        for knob in space.knobs:
            if knob.when is None or settings.get(knob.when[0]) == knob.when[1]:
                settings[knob.name] = knob.default
        return TrialConfig(strategy=space.strategy, micro_batch_size=space.default_micro_batch_size,
                           activation_checkpointing=space.default_checkpointing, settings=settings)

    def space_of(self, strategy: str) -> StrategySpace:
        """The part of the space for ``strategy``.

        Raises:
            UsageError: the strategy is not in the space.
        """
        for s in self.strategies:
            if s.strategy == strategy:
                return s
        raise UsageError(f"{strategy} is not among the tuned strategies "
                         f"({', '.join(s.strategy for s in self.strategies)}).")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (stored on the study)."""
        return {s.strategy: {"micro_batch_size": list(s.micro_batch_sizes),
                             "activation_checkpointing": list(s.checkpointing),
                             "knobs": [k.name for k in s.knobs]} for s in self.strategies}


def check_space_arguments(top: int, micro_batch_sizes: Sequence[int] | None) -> None:
    """Refuse a ``top`` below 1 or a micro-batch below 1 (before any tracing: :func:`build_space` needs a plan).

    Raises:
        UsageError: either is wrong.
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise UsageError(f"top_strategies (the number of strategies to compare) must be a whole number >= 1, but "
                         f"got {top!r}.")
    if micro_batch_sizes is not None and (isinstance(micro_batch_sizes, (int, str)) or not isinstance(
            micro_batch_sizes, Sequence)):  # a number: "'int' object is not iterable", after the trace
        raise UsageError(f"micro_batch_sizes takes a list of micro-batches, but got {micro_batch_sizes!r}.",
                         hint=f"Pass e.g. micro_batch_sizes=[{_example(micro_batch_sizes)}], or batch_size= to fix "
                              "one.")
    if micro_batch_sizes is not None and (not micro_batch_sizes or any(
            isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in micro_batch_sizes)):
        raise UsageError(f"micro-batch sizes must be positive whole numbers, but got {list(micro_batch_sizes)!r}.")


def _example(given: object) -> str:
    """A micro-batch for a hint: the one ``given`` names (``8``, ``"8"``), else 8."""
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return str(given)
    return given if isinstance(given, str) and given.isdigit() and int(given) > 0 else "8"


def build_space(plan: Plan, *, top: int = 3, micro_batch_sizes: Sequence[int] | None = None,
                tune_checkpointing: bool = True, max_micro_batch_size: int | None = None,
                compress_gradients: bool = False) -> SearchSpace:
    """The space for ``plan``: its ``top`` best-scoring fitting strategies (the recommendation first).

    Args:
        plan: the planner's answer for this machine.
        top: how many strategies to compare (1: tune only the recommended one's knobs).
        micro_batch_sizes: the micro-batches to try (default: the largest that fits each strategy and the powers
            of two below it, :data:`MAX_MICRO_BATCH_CHOICES` in all; a fixed ``batch_size`` in the request
            allows only itself).
        tune_checkpointing: offer activation checkpointing on and off where the model has repeated blocks.
        max_micro_batch_size: a cap on the default micro-batches besides memory (on a CPU machine, so that trials
            finish in seconds: :func:`autoshard.tuner.estimate.cpu_micro_batch_cap`).
        compress_gradients: offer DDP's gradient compression hooks (and PowerSGD's rank); without it DDP
            reduces its gradients as they are, its default (:data:`COMPRESSING`).

    Raises:
        UsageError: ``top`` < 1 or a micro-batch below 1.
    """
    check_space_arguments(top, micro_batch_sizes)
    global_batch, world = plan.request.global_batch_size, plan.hardware.world_size
    if micro_batch_sizes is not None and global_batch is not None:
        wrong = [m for m in micro_batch_sizes if (global_batch // world) % m]
        if wrong:
            raise UsageError(f"micro-batch(es) {wrong} do not divide the per-device batch {global_batch // world} "
                             f"(global batch {global_batch} over {world} device{'s' if world != 1 else ''}).",
                             hint="Choose micro-batches that divide it, or drop the global batch size.")
    fitting: dict[str, list[Evaluation]] = {}
    for e in plan.candidates:
        if e.fits:
            fitting.setdefault(e.strategy, []).append(e)
    chosen = list(fitting)[:top]  # candidates are ranked best first, so the recommendation leads
    hw = plan.hardware
    if micro_batch_sizes is not None:
        fits = {name: max(e.max_micro_batch_size for e in fitting[name]) for name in chosen}
        if min(micro_batch_sizes) > max(fits.values(), default=0):
            widest = max(fits, key=lambda n: fits[n])
            raise UsageError(f"none of the micro-batches {sorted(set(micro_batch_sizes))} fits: the largest that "
                             f"fits is {fits[widest]} ({widest}).",
                             hint=f"Try micro-batches up to {fits[widest]} (--batch-sizes), or drop them to tune "
                                  "the planner's.")
    out = []
    for name in chosen:
        evaluations = fitting[name]
        best = evaluations[0]
        strategy = get(name)
        largest = max(e.max_micro_batch_size for e in evaluations) or best.candidate.micro_batch_size
        if max_micro_batch_size is not None:
            largest = max(1, min(largest, max_micro_batch_size))
        if micro_batch_sizes is not None:
            micro = tuple(sorted(set(micro_batch_sizes)))
        elif plan.request.micro_batch_size is not None:
            micro = (plan.request.micro_batch_size,)
        else:
            micro = _micro_batches(largest, plan.request.global_batch_size, hw.world_size,
                                   planned=best.candidate.micro_batch_size)
        block = plan.workload.block_class is not None
        ckpt = (False, True) if block and tune_checkpointing else (best.candidate.activation_checkpointing,)
        default_micro = best.candidate.micro_batch_size
        if default_micro not in micro:
            default_micro = min(micro, key=lambda m: (abs(m - default_micro), -m))
        out.append(StrategySpace(
            strategy=name, family=strategy.family, micro_batch_sizes=micro, checkpointing=ckpt,
            knobs=tuple(k for k in strategy.knobs(hw) if k.tuned and (compress_gradients or not _compresses(k))),
            default_micro_batch_size=default_micro, default_checkpointing=best.candidate.activation_checkpointing))
    return SearchSpace(strategies=tuple(out))


COMPRESSING = "comm_hook"
"""The knob that compresses gradients (fp16 / bf16 casts, PowerSGD's low-rank approximation): it changes what
training computes, so the tuner offers it only when asked, with the knobs that apply under it."""


def _compresses(knob: Knob) -> bool:
    return knob.name == COMPRESSING or (knob.when is not None and knob.when[0] == COMPRESSING)


def _micro_batches(largest: int, global_batch: int | None, world: int, *, planned: int | None = None
                   ) -> tuple[int, ...]:
    """The largest micro-batch that fits and the powers of two below it (dividing the per-device batch when a
    global batch is fixed), with the planner's own choice ``planned`` among them when it is not above
    ``largest``: the first trial runs the planner's recommendation, not the nearest value to it (which may not
    fit).

    Example:
        >>> _micro_batches(97, None, 2), _micro_batches(97, None, 2, planned=51)
        ((16, 32, 64, 97), (32, 51, 64, 97))
    """
    values = {largest}
    p = 1
    while p < largest:
        values.add(p)
        p *= 2
    if global_batch is not None:
        per_device = global_batch // world
        values = {v for v in values if per_device % v == 0} or {1}
    ordered = sorted(values)[-MAX_MICRO_BATCH_CHOICES:]
    if planned is not None and planned <= largest and planned not in ordered:
        ordered = sorted([*ordered[1:], planned])
    return tuple(ordered)


def _choice_set(choices: Sequence[Any]) -> str:
    """The choices of a run-dependent dimension, as its parameter name carries them (module docstring).

    Example:
        >>> _choice_set((16, 32, 64)), _choice_set(["ddp", "fsdp"])
        ('[16,32,64]', '[ddp,fsdp]')
    """
    return "[" + ",".join(map(str, choices)) + "]"


def _categorical(trial: optuna.trial.BaseTrial, name: str, choices: tuple[Any, ...]) -> Any:
    return trial.suggest_categorical(name, choices) if len(choices) > 1 else choices[0]


def _suggest_knob(trial: optuna.trial.BaseTrial, name: str, knob: Knob) -> Any:
    if knob.kind == "bool":
        return trial.suggest_categorical(name, (False, True))
    if knob.kind == "choice":
        return trial.suggest_categorical(name, knob.choices)
    low, high, log = RANGES.get(knob.name, (knob.low, knob.high, knob.log))
    if low is None or high is None:
        raise ValueError(f"knob {knob.name} has no range")
    if knob.kind == "int":
        return trial.suggest_int(name, int(low), int(high), log=log)
    return trial.suggest_float(name, float(low), float(high), log=log)
