"""Which machine to rent: one model planned on several machines, with the time (and, given prices, the cost) of a
training budget on each.

Each machine is planned as ``recommend`` plans it (the same workload, traced once and cached, and the same
request); a machine on which nothing fits is kept, with the reason, rather than ending the comparison.

Example:
    >>> options = compare("gpt2", ["dgx-h100", "l40s:8"], tokens=2e10)  # doctest: +SKIP
    >>> [(o.machine, round(o.hours(tokens=2e10), 1)) for o in options]  # doctest: +SKIP
    [('dgx-h100', 6.8), ('l40s:8', 21.2)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoshard.errors import NoFeasiblePlan, UsageError

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
        """What the plan's checkpointed blocks recompute (``full``, ``op``, ``every-N``); ``None``: it does not
        checkpoint, or nothing fits."""
        if self.plan is None or not self.plan.recommended.candidate.activation_checkpointing:
            return None
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
            "global_batch_size": None if rec is None else (
                rec.candidate.micro_batch_size * rec.gradient_accumulation * self.gpus),
            "activation_checkpointing": None if rec is None else rec.candidate.activation_checkpointing,
            "checkpointing": self.checkpointing, "notes": list(self.notes),
            "gpu_memory_bytes": None if rec is None or rec.memory is None else rec.memory.gpu.total,
            "samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s,
            "hours": self.hours(tokens=tokens, samples=samples), "gpu_hour_usd": self.gpu_hour_usd,
            "cost_usd": self.cost_usd(tokens=tokens, samples=samples), "refused": self.refused,
        }


def machine_hardware(machine: str, load: Callable[..., HardwareSpec] | None = None) -> HardwareSpec:
    """The hardware ``machine`` names: a profile name or file, optionally sized as ``NAME:G`` (G GPUs per node)
    or ``NAME:GxN`` (and N nodes), e.g. ``l40s:8``, ``h100-sxm-80gb:8x2``.

    Raises:
        HardwareError: an unknown profile or an invalid file.
        UsageError: a size the profile contradicts (``dgx-h100:16``).
    """
    from autoshard.hardware import load_hardware
    from autoshard.hardware.selection import sized_machine

    name, gpus, nodes = sized_machine(machine)
    if gpus == 0 or nodes == 0:
        raise UsageError(f"{machine}: a machine has at least one GPU per node and one node.",
                         hint="Size a GPU profile as NAME:G or NAME:GxN with G and N from 1 (e.g. h100-sxm-80gb:8x2).")
    try:
        hw = (load or load_hardware)(name, gpus=gpus, nodes=nodes)
    except UsageError as e:  # it names --gpus / --nodes, which the machine's size stands for here
        raise UsageError(f"{machine}: {e.message}", hint="Size a GPU profile as NAME:G or NAME:GxN (e.g. "
                         "h100-sxm-80gb:16, h100-sxm-80gb:8x2); a node profile keeps its own GPUs (dgx-h100:8x2)."
                         ) from None
    # the machine's own size is not an override of it: "Nodes set to 2 (profile: 1)" is no news when the machine
    # was named NAME:8x2
    return dataclasses.replace(hw, notes=tuple(n for n in hw.notes if not n.startswith("Nodes set to ")))


def compare(source: Any, machines: Sequence[str], *, prices: Mapping[str, float] | None = None,
            **recommend_options: Any) -> tuple[MachineOption, ...]:
    """Plan ``source`` on each of ``machines`` as :func:`autoshard.recommend` would, fastest first.

    Args:
        source: what :func:`autoshard.recommend` takes (a model file, a config.json, a catalog name).
        machines: profile names or files, each optionally sized (:func:`machine_hardware`).
        prices: USD per GPU-hour by machine, as named in ``machines`` (any subset).
        **recommend_options: the request, as :func:`autoshard.recommend` takes it (``seq_len``, ``precision``,
            ``batch_size``...).

    Raises:
        UsageError: no machine, a machine named twice, a price for a machine not compared, or not positive.
        HardwareError: a machine that is not a profile or a valid file (checked before any tracing).
    """
    from autoshard.api import recommend

    prices = dict(prices or {})
    if not machines:
        raise UsageError("no machine to compare.", hint="Name two or more, e.g. dgx-h100 l40s:8.")
    repeated = sorted({m for m in machines if list(machines).count(m) > 1})
    if repeated:
        raise UsageError(f"{', '.join(repeated)} is named twice.")
    unknown = sorted(set(prices) - set(machines))
    if unknown:
        raise UsageError(f"a price is given for {', '.join(unknown)}, which is not compared.",
                         hint=f"Name prices by machine as given: {', '.join(machines)}.")
    bad = {m: p for m, p in prices.items() if not p > 0}
    if bad:
        raise UsageError(f"prices must be positive USD per GPU-hour, but got {bad}.")
    hardware = {m: machine_hardware(m) for m in machines}  # every name checked before the first trace
    options = []
    for machine, hw in hardware.items():
        try:
            plan, refused = recommend(source, hardware=hw, **recommend_options), None
        except NoFeasiblePlan as e:  # with recommend's hint: what would fit, what autoshard does not plan
            plan, refused = None, e.message if not e.hint else f"{e.message} {e.hint}"
        options.append(MachineOption(machine=machine, hardware=hw, plan=plan, refused=refused,
                                     gpu_hour_usd=prices.get(machine)))
    return tuple(sorted(options, key=lambda o: -(o.samples_per_s or 0.0)))
