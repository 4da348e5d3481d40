"""Which machine to rent: one model planned on several machines, with the time (and, given prices, the cost) of a
training budget on each.

Each machine is planned as ``recommend`` plans it (the same workload, traced once and cached, and the same
request); a machine on which nothing fits is kept, with the reason, rather than ending the comparison.

Example:
    >>> options = compare("gpt2", ["dgx-h100", "l40s:8"], prices={"l40s:8": 0.86})  # doctest: +SKIP
    >>> [(o.machine, round(o.hours(tokens=2e10), 1)) for o in options]  # doctest: +SKIP
    [('dgx-h100', 6.8), ('l40s:8', 21.2)]
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoshard.errors import (
    COMPARE_ARGUMENTS,
    HARDWARE_ARGUMENTS,
    NoFeasiblePlan,
    UnknownArgument,
    UsageError,
    in_arguments,
    rewording,
    unknown_argument,
)

if TYPE_CHECKING:
    from autoshard.hardware.specs import HardwareSpec
    from autoshard.planner.plan import Plan


@dataclass(frozen=True, kw_only=True, slots=True)
class MachineOption:
    """One machine of a comparison: the plan ``recommend`` makes for it, or why nothing fits."""

    machine: str
    """The machine as it was named (``dgx-h100``, ``l40s:8``, ``my-cluster.yaml``)."""
    hardware: HardwareSpec
    plan: Plan | None
    """``None`` when nothing fits: :attr:`refused` says why."""
    refused: str | None = None
    gpu_hour_usd: float | None = None
    """The price of one GPU for an hour, as given; ``None``: not given."""

    @property
    def gpus(self) -> int:
        """GPUs in all (processes, on a machine without GPUs)."""
        return self.hardware.world_size

    @property
    def tokens_per_s(self) -> float | None:
        """Predicted tokens per second over all GPUs (``None``: nothing fits, or the model takes no tokens)."""
        cost = None if self.plan is None else self.plan.recommended.cost
        return None if cost is None else cost.tokens_per_s

    @property
    def samples_per_s(self) -> float | None:
        """Predicted samples per second over all GPUs (``None``: nothing fits)."""
        cost = None if self.plan is None else self.plan.recommended.cost
        return None if cost is None else cost.samples_per_s

    def hours(self, *, tokens: float | None = None, samples: float | None = None) -> float | None:
        """Hours to train ``tokens`` (or ``samples``) at the predicted rate; ``None`` when it is not known."""
        rate, amount = (self.tokens_per_s, tokens) if tokens is not None else (self.samples_per_s, samples)
        if rate is None or amount is None or rate <= 0:
            return None
        return amount / rate / 3600

    def cost_usd(self, *, tokens: float | None = None, samples: float | None = None) -> float | None:
        """What the budget costs: :meth:`hours` × GPUs × :attr:`gpu_hour_usd` (``None`` without a price)."""
        hours = self.hours(tokens=tokens, samples=samples)
        if hours is None or self.gpu_hour_usd is None:
            return None
        return hours * self.gpus * self.gpu_hour_usd

    def usd_per_million(self, unit: str = "tokens") -> float | None:
        """What a million ``tokens`` (or ``samples``) cost at the predicted rate on all the machine's GPUs
        (``None`` without a price, or a rate in that unit)."""
        rate = self.tokens_per_s if unit == "tokens" else self.samples_per_s
        if rate is None or rate <= 0 or self.gpu_hour_usd is None:
            return None
        return self.gpus * self.gpu_hour_usd / 3600 / rate * 1e6

    @property
    def global_batch_size(self) -> int | None:
        """Samples per optimizer step over all GPUs: micro-batch × accumulation × GPUs (``None``: nothing fits)."""
        rec = None if self.plan is None else self.plan.recommended
        return None if rec is None else rec.candidate.micro_batch_size * rec.gradient_accumulation * self.gpus

    @property
    def notes(self) -> tuple[str, ...]:
        """What the plan for this machine assumed or could not check, and whether it is bound by its network: the
        hardware's notes (an unknown network between nodes, an override) and the plan's ``Assumed:``,
        ``Unchecked:`` and ``Communication-bound:`` lines."""
        lines = () if self.plan is None else tuple(
            x for x in self.plan.explanation if x.startswith(("Assumed:", "Unchecked:", "Communication-bound:")))
        return (*self.hardware.notes, *lines)

    @property
    def checkpointing(self) -> str | None:
        """What the plan's checkpointed blocks recompute (``full``, ``op``, ``every-N``), ``none`` when it does not
        checkpoint (as ``recommend --json`` says it); ``None``: nothing fits."""
        if self.plan is None:
            return None
        if not self.plan.recommended.candidate.activation_checkpointing:
            return "none"
        return str(self.plan.workload.checkpoint_mode)

    def to_dict(self, *, tokens: float | None = None, samples: float | None = None) -> dict[str, Any]:
        """JSON-ready: the machine, its plan's headline figures (the whole plan is ``recommend --json``'s), the
        budget's hours and cost, and what the plan assumed."""
        rec = None if self.plan is None else self.plan.recommended
        return {
            "machine": self.machine, "gpus": self.gpus, "nodes": self.hardware.nodes,
            "gpu": None if self.hardware.gpu is None else self.hardware.gpu.name,
            "strategy": None if rec is None else rec.strategy,
            "micro_batch_size": None if rec is None else rec.candidate.micro_batch_size,
            "gradient_accumulation": None if rec is None else rec.gradient_accumulation,
            "global_batch_size": self.global_batch_size,
            "activation_checkpointing": None if rec is None else rec.candidate.activation_checkpointing,
            "checkpointing": self.checkpointing, "notes": list(self.notes),
            "gpu_memory_bytes": None if rec is None or rec.memory is None else rec.memory.gpu.total,
            "samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s,
            "hours": self.hours(tokens=tokens, samples=samples), "gpu_hour_usd": self.gpu_hour_usd,
            "cost_usd": self.cost_usd(tokens=tokens, samples=samples),
            "usd_per_million_tokens": self.usd_per_million("tokens"),
            "usd_per_million_samples": self.usd_per_million("samples"), "refused": self.refused,
        }


def canonical(machine: str) -> str:
    """``machine`` as ``--hardware`` takes it everywhere (``h100-sxm-80gb:8X2`` is ``h100-sxm-80gb:8x2``).

    Example:
        >>> canonical("h100-sxm-80gb:8X2"), canonical("l40s:8"), canonical("dgx-h100")
        ('h100-sxm-80gb:8x2', 'l40s:8', 'dgx-h100')
    """
    from autoshard.hardware.selection import sized_machine

    name, gpus, nodes = sized_machine(machine)
    return name if gpus is None else f"{name}:{gpus}" + ("" if nodes is None else f"x{nodes}")


def machine_hardware(machine: str, load: Callable[..., HardwareSpec] | None = None) -> HardwareSpec:
    """The hardware ``machine`` names: a profile name or file, optionally sized as ``NAME:G`` (G GPUs per node)
    or ``NAME:GxN`` (and N nodes), e.g. ``l40s:8``, ``h100-sxm-80gb:8x2``
    (:func:`~autoshard.hardware.selection.sized_machine`).

    Raises:
        HardwareError: an unknown profile or an invalid file.
        UsageError: a malformed size, or one the profile contradicts (``dgx-h100:16``).
    """
    from autoshard.hardware import load_hardware
    from autoshard.hardware.selection import SIZE_HINT, sized_machine

    name, gpus, nodes = sized_machine(machine)
    try:
        hw = (load or load_hardware)(name, gpus=gpus, nodes=nodes)
    except UsageError as e:  # it names --gpus / --nodes, which the machine's size stands for here
        message = re.sub(r"(?:--gpus |gpus=)(\d+) contradicts", r"\1 GPUs per node contradict", e.message)
        raise UsageError(f"{machine}: {message}", hint=SIZE_HINT) from None
    # the machine's own size is not an override of it: "Nodes set to 2 (profile: 1)" is no news when the machine
    # was named NAME:8x2
    return dataclasses.replace(hw, notes=tuple(n for n in hw.notes if not n.startswith("Nodes set to ")))


def _for_python(options: tuple[MachineOption, ...]) -> tuple[MachineOption, ...]:
    """``options`` with their text naming Python's arguments, not the command line's flags, as
    :func:`autoshard.recommend` returns its plans to a Python caller."""
    text, hardware_text = rewording(COMPARE_ARGUMENTS), rewording(HARDWARE_ARGUMENTS)
    return tuple(dataclasses.replace(
        o, plan=None if o.plan is None else o.plan.reworded(text, hardware_text),
        hardware=o.hardware.reworded(hardware_text), refused=None if o.refused is None else text(o.refused))
        for o in options)


@in_arguments(COMPARE_ARGUMENTS, result=_for_python)
def compare(source: Any, machines: Iterable[str | os.PathLike[str]], *,
            prices: Mapping[str, float] | None = None, **recommend_options: Any) -> tuple[MachineOption, ...]:
    """Plan ``source`` on each of ``machines`` as :func:`autoshard.recommend` would, fastest first.

    A machine that cannot run the request (nothing fits, or the global batch does not divide among its GPUs) is
    kept, with the reason in :attr:`MachineOption.refused`, rather than ending the comparison.

    Args:
        source: what :func:`autoshard.recommend` takes (a model file, a config.json, a catalog name).
        machines: profile names or files, each optionally sized (:func:`machine_hardware`), e.g.
            ``["dgx-h100", "l40s:8"]``.
        prices: USD per GPU-hour by machine, named as in ``machines`` (case aside; any subset).
        **recommend_options: the request, as :func:`autoshard.recommend` takes it (``seq_len``, ``precision``,
            ``batch_size``, ``global_batch_size``...), but not ``hardware``: the machines are that.

    Raises:
        UsageError: no machine, a machine named twice, a price for a machine not compared or not a finite
            positive number, a keyword recommend does not take, or a global batch no machine can divide;
            all checked before any tracing.
        HardwareError: a machine that is not a profile or a valid file (checked before any tracing).
    """
    from autoshard.api import recommend

    names = _machines(machines)
    _check_options(recommend_options)
    by_machine = _prices(prices, names)
    hardware = {m: machine_hardware(m) for m in names}  # every name checked before the first trace
    refusals = _batch_refusals(hardware, recommend_options.get("global_batch_size"),
                               recommend_options.get("batch_size"))
    options = []
    for machine, hw in hardware.items():
        plan, refused = None, refusals.get(machine)
        if refused is None:
            try:
                plan = recommend(source, hardware=hw, **recommend_options)
            except NoFeasiblePlan as e:  # with recommend's hint: what would fit, what autoshard does not plan
                refused = e.message if not e.hint else f"{e.message} {e.hint}"
        options.append(MachineOption(machine=machine, hardware=hw, plan=plan, refused=refused,
                                     gpu_hour_usd=by_machine.get(machine)))
    return tuple(sorted(options, key=lambda o: -(o.samples_per_s or 0.0)))


def _key(machine: str) -> str:
    """What names one machine: profile names are case-insensitive (a file's path is not)."""
    return machine if Path(machine).exists() else machine.lower()


def _machines(machines: Any) -> list[str]:
    """The machines as named, checked: a list of names or paths, at least one, none twice."""
    if isinstance(machines, (str, os.PathLike)):
        raise UsageError(f"machines must be a list of machine names, e.g. [{os.fspath(machines)!r}], not one "
                         f"name ({os.fspath(machines)!r}).")
    try:
        names = list(machines)
    except TypeError:
        raise UsageError(f"machines must be a list of machine names (e.g. ['dgx-h100', 'l40s:8']), not "
                         f"{type(machines).__name__}.") from None
    for name in names:
        if not isinstance(name, (str, os.PathLike)):
            raise UsageError(f"machines must be names or paths, e.g. 'h100-sxm-80gb:8x2', not {name!r}.",
                             hint="A HardwareSpec's machine is the profile or file it came from: name that.")
    names = [os.fspath(n) for n in names]
    if not names:
        raise UsageError("no machine to compare.", hint="Name one or more, e.g. ['dgx-h100', 'l40s:8'].")
    seen: dict[str, str] = {}
    for name in names:
        first = seen.get(_key(name))
        if first is not None:
            also = "" if name == first else f" (as {first} and {name}: names are case-insensitive)"
            raise UsageError(f"--hardware names {first} twice{also}.", hint="Name each machine once.")
        seen[_key(name)] = name
    return names


_NOT_OPTIONS = {
    "hardware": "the machines are its second argument, each a profile name or file sized in its name, e.g. "
                "compare(model, ['dgx-h100', 'h100-sxm-80gb:8x2'])",
    "tokens": "the budget is each option's: option.hours(tokens=...) and option.cost_usd(tokens=...)",
    "samples": "the budget is each option's: option.hours(samples=...) and option.cost_usd(samples=...)",
}
_SIZES = ("gpus", "nodes", "num_gpus", "num_nodes", "devices", "gpu_memory", "cpu_memory", "cpu_cores", "nvme")


def _check_options(options: Mapping[str, Any]) -> None:
    """Refuse a keyword :func:`autoshard.recommend` does not take, or takes and compare does not (``hardware``)."""
    import inspect

    from autoshard.api import recommend

    taken = {**inspect.signature(recommend).parameters, "machines": None, "prices": None}
    for name in options:
        if name in _NOT_OPTIONS:
            raise UnknownArgument(f"compare() got an unexpected keyword argument {name!r}: {_NOT_OPTIONS[name]}.")
        if name in _SIZES:
            raise UnknownArgument(f"compare() got an unexpected keyword argument {name!r}: each machine is sized in "
                                  "its name, as NAME:G or NAME:GxN (e.g. 'h100-sxm-80gb:8x2'), and its memory, "
                                  "cores and disks are a hardware file's (docs/hardware.md).")
        if name not in taken or name == "source":
            raise UnknownArgument(unknown_argument("compare", name, {k: v for k, v in taken.items()
                                                                     if k != "hardware"}))


def _prices(prices: Any, machines: list[str]) -> dict[str, float]:
    """``prices`` by machine as named in ``machines`` (a price's name matched case aside), checked. A price named
    by a profile (``dgx-h100``) prices every size of it (``dgx-h100:8x64``, ``dgx-h100:8x256``: a GPU-hour costs
    the same), except one priced by its own name."""
    from autoshard.hardware.selection import sized_machine

    if prices is None:
        return {}
    if not isinstance(prices, Mapping):
        raise UsageError(f"prices must be a mapping of machine to USD per GPU-hour, e.g. {{'dgx-h100': 2.99}}, not "
                         f"{type(prices).__name__}.")
    named = {_key(m): m for m in machines}
    sizes: dict[str, list[str]] = {}
    for m in machines:
        sizes.setdefault(_key(sized_machine(m)[0]), []).append(m)
    exact: dict[str, float] = {}
    by_profile: dict[str, float] = {}
    for name, usd in prices.items():
        key = _key(os.fspath(name)) if isinstance(name, (str, os.PathLike)) else None
        if key is None or (key not in named and key not in sizes):
            raise UsageError(f"--price names {name}, which --hardware does not name.",
                             hint=f"Name prices by machine as in --hardware (or its profile, for all its sizes): "
                                  f"{', '.join(machines)}.")
        if isinstance(usd, bool) or not isinstance(usd, (int, float)):
            raise UsageError(f"prices[{name!r}] must be a number of USD per GPU-hour (e.g. 2.99), but got "
                             f"{usd!r}.")
        if not math.isfinite(usd) or usd <= 0:
            raise UsageError(f"prices[{name!r}] must be a finite positive number of USD per GPU-hour, but got "
                             f"{usd!r}.")
        if key in named:
            if named[key] in exact:
                raise UsageError(f"--price names {named[key]} twice.", hint="Give each machine one price.")
            exact[named[key]] = float(usd)
        for machine in sizes.get(key, []):
            by_profile[machine] = float(usd)
    return {**by_profile, **exact}


def _batch_refusals(hardware: Mapping[str, HardwareSpec], global_batch: Any, micro_batch: Any) -> dict[str, str]:
    """Why each machine whose GPUs the global batch (or its per-GPU share, the micro-batch) does not divide cannot
    run it, checked before any tracing; a machine not listed can.

    Raises:
        UsageError: no machine can: the request, not a machine, is what to change.
    """
    from autoshard.planner.plan import PlanRequest
    from autoshard.planner.search import check_request

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value > 0
    if not whole(global_batch):  # none, or refused as recommend refuses it
        return {}
    request = PlanRequest(micro_batch_size=micro_batch if whole(micro_batch) else None,
                          global_batch_size=global_batch, goal="pretrain", safety_margin=0.1)
    refusals = {}
    for machine, hw in hardware.items():
        try:
            check_request(request, hw.world_size)
        except UsageError:
            refusals[machine] = _batch_refusal(global_batch, request.micro_batch_size, hw.world_size)
    if refusals and len(refusals) == len(hardware):
        in_micro = f" in micro-batches of {request.micro_batch_size} (--batch-size)" if request.micro_batch_size else ""
        step = math.lcm(*{hw.world_size for hw in hardware.values()}) * (request.micro_batch_size or 1)
        example = f"{step * max(1, round(global_batch / step))}"
        if len(hardware) == 1:
            ((machine, hw),) = hardware.items()
            raise UsageError(f"--global-batch-size {global_batch} does not divide among {machine}'s "
                             f"{hw.world_size} GPUs{in_micro}.", hint=f"Use a multiple of {step}, e.g. {example}.")
        each = ", ".join(f"{m} has {hw.world_size}" for m, hw in hardware.items())
        raise UsageError(f"--global-batch-size {global_batch} does not divide among the GPUs of any machine "
                         f"compared{in_micro} ({each}).",
                         hint=f"A multiple of {step} divides among them all, e.g. {example}.")
    return refusals


def _batch_refusal(global_batch: int, micro_batch: int | None, gpus: int) -> str:
    """Why a machine of ``gpus`` GPUs cannot run ``global_batch`` (in micro-batches of ``micro_batch``)."""
    step = gpus * (micro_batch or 1)
    unit = f"{gpus} GPUs" if micro_batch is None else f"{gpus} GPUs in micro-batches of {micro_batch} (--batch-size)"
    return (f"--global-batch-size {global_batch} does not divide among its {unit}: not planned. A multiple of "
            f"{step} does, e.g. {step * max(1, round(global_batch / step))}.")
