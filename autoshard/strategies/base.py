"""The one extension point every strategy family implements: :class:`Strategy`.

A strategy module owns everything about its strategy — its memory model, its communication cost, its knobs —
so adding a strategy means adding one module and removing one means deleting it. Results are typed and
JSON-ready; sizes are bytes, times seconds.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar, Literal, cast

from autoshard.hardware.specs import HardwareSpec
from autoshard.profiler.options import Precision
from autoshard.strategies.workload import Workload

FamilyName = Literal["ddp", "fsdp", "deepspeed"]
"""The strategy families: each is one package under ``autoshard/strategies/``."""
StrategyName = Literal[
    "ddp", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid", "fsdp_cpu_offload", "deepspeed_stage_1", "deepspeed_stage_2",
    "deepspeed_stage_2_offload", "deepspeed_stage_3", "deepspeed_stage_3_offload", "deepspeed_stage_3_offload_nvme",
]
"""The registered strategies' names, for type checkers and editors (``fit(strategy="fsdp")``). The registry holds
the truth; ``tests/strategies/test_conformance.py`` checks this list equals its names, in order, so a preset
registered in its family's ``__init__.py`` is named here too."""
OffloadTarget = Literal["none", "cpu", "nvme"]
FAMILIES: tuple[FamilyName, ...] = ("ddp", "fsdp", "deepspeed")
OFFLOAD_TARGETS: tuple[OffloadTarget, ...] = ("none", "cpu", "nvme")


@dataclass(frozen=True, kw_only=True, slots=True)
class Traits:
    """What a strategy does, as rules, the runtime and the exporters ask it: never by its name.

    Example:
        >>> t = Traits(family="deepspeed", zero_stage=3, offload="cpu", offload_parameters=True)
        >>> t.shards_parameters, t.shards_gradients, t.offloads
        (True, True, True)
        >>> Traits.from_dict(t.to_dict()) == t
        True
    """

    family: FamilyName
    zero_stage: int
    """What stays sharded through the step, as a ZeRO stage (Rajbhandari et al. 2020, §5): 0 whole replicas (DDP),
    1 optimizer state, 2 also gradients, 3 also parameters, gathered for each use and freed after it. FSDP's full
    shard and hybrid are stage 3; ``reshard_after_forward=False`` (Lightning's ``fsdp_shard_grad_op``, FSDP1's
    ``SHARD_GRAD_OP``) keeps the parameters gathered from forward to the end of backward, gathering them once per
    step as ZeRO-2 keeps them whole: stage 2 (the FSDP paper, Zhao et al. 2023, §3.2.1, compares it to ZeRO-2)."""
    offload: OffloadTarget = "none"
    """Where model states leave the GPU for: optimizer state (and with :attr:`offload_parameters` the
    parameters) in host RAM or on NVMe."""
    offload_parameters: bool = False
    """The parameters themselves live on the offload target between uses (ZeRO-3 ``offload_param``, FSDP's
    ``CPUOffloadPolicy``), not only the optimizer state."""
    hybrid: bool = False
    """Shards within each node and replicates across nodes (a 2-D mesh: FSDP's hybrid sharding)."""
    sharded_at_rest: bool = False
    """Each rank holds only its shard of the parameters between steps, so the model can be built sharded from a
    meta build (FSDP at every stage, ZeRO-3's ``zero.Init``). Implied by stage 3."""

    def __post_init__(self) -> None:
        if self.zero_stage == 3 and not self.sharded_at_rest:
            object.__setattr__(self, "sharded_at_rest", True)
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, but got {self.family=}.")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, but got {self.zero_stage=}.")
        if self.offload not in OFFLOAD_TARGETS:
            raise ValueError(f"offload must be one of {OFFLOAD_TARGETS}, but got {self.offload=}.")
        if self.offload_parameters and self.offload == "none":
            raise ValueError("offload_parameters needs an offload target.")

    @property
    def shards_parameters(self) -> bool:
        """Parameters are gathered for each use in forward and in backward (stage 3)."""
        return self.zero_stage == 3

    @property
    def shards_gradients(self) -> bool:
        """Each rank keeps only its shard of the reduced gradients (stage 2 and up)."""
        return self.zero_stage >= 2

    @property
    def shards_optimizer_state(self) -> bool:
        """Each rank keeps only its shard of the optimizer state (stage 1 and up)."""
        return self.zero_stage >= 1

    @property
    def offloads(self) -> bool:
        """Some model state leaves the GPU."""
        return self.offload != "none"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the fields; the derived properties are not stored)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Traits:
        """The traits written by :meth:`to_dict`.

        Raises:
            ValueError: a field missing, unknown or out of range.
        """
        names = set(cls.__dataclass_fields__)
        unknown = set(data) - names
        missing = {"family", "zero_stage"} - set(data)
        if unknown or missing:
            raise ValueError(f"traits: unknown {sorted(unknown)}, missing {sorted(missing)}.")
        types = {"family": str, "zero_stage": int, "offload": str, "offload_parameters": bool, "hybrid": bool,
                 "sharded_at_rest": bool}
        for name, value in data.items():
            if not isinstance(value, types[name]) or (types[name] is int and isinstance(value, bool)):
                raise ValueError(f"traits.{name} has the wrong type ({type(value).__name__}).")
        return cls(**cast(dict[str, Any], dict(data)))


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One configuration to evaluate: a strategy at a micro-batch, with or without checkpointing."""

    strategy: str
    micro_batch_size: int
    activation_checkpointing: bool
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Knob values; missing knobs take the strategy's defaults for the hardware."""
    gradient_accumulation: int = 1
    """Micro-batches per optimizer step. From the second on, what a strategy keeps of the gradients between
    micro-batches is alive through forward: its memory model counts it (``planner.search.evaluate`` sets this
    from the request before asking for memory)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["settings"] = dict(self.settings)
        return d


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuMemory:
    """Bytes on one GPU at that strategy's peak, by kind."""

    parameters: int
    gradients: int
    optimizer: int
    activations: int
    """Activations saved for backward plus the temporaries of the peak's phase, and the batch: forward's or
    backward's, or, where the peak is the optimizer step, the step's own (a foreach AdamW's list-sized
    temporaries; ``peak_phase`` says which)."""
    buffers: int
    """Communication buffers, gathered parameters, model buffers."""
    overhead: int
    """Fixed per-process costs inside the allocator (e.g. cuBLAS workspace)."""

    @property
    def total(self) -> int:
        """Sum of all kinds."""
        return self.parameters + self.gradients + self.optimizer + self.activations + self.buffers + self.overhead

    def to_dict(self) -> dict[str, int]:
        """JSON-ready dict with ``total``."""
        d = asdict(self)
        d["total"] = self.total
        return d


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """Memory a candidate needs per GPU and per node outside the GPUs."""

    gpu: GpuMemory
    peak_phase: str
    """The phase of the step where the GPU peak falls."""
    cpu_bytes_per_node: int = 0
    """Host RAM used by offloaded states and pinned buffers, per node (not counting the framework itself)."""
    nvme_bytes_per_node: int = 0
    notes: tuple[str, ...] = ()
    """The rules applied, each with its source."""

    def with_peak_said(self) -> MemoryEstimate:
        """This estimate with a note on what ``gpu.activations`` holds when the peak is the optimizer step: the
        step's own temporaries, not forward's activations, so checkpointing does not lower it (a reader of a DDP
        breakdown took 25 GiB of "activations" at the step for something checkpointing would cut)."""
        if self.peak_phase != "optimizer" or self.gpu.activations <= 0:
            return self
        said = (f"the peak is the optimizer step: its {self.gpu.activations / 2**30:.2f} GiB of 'activations' are "
                "the step's own temporaries (a foreach optimizer's per-parameter lists) and what is left of the "
                "batch, not forward's activations; activation checkpointing does not lower it, a for-loop "
                "optimizer implementation or sharding the optimizer state does")
        return replace(self, notes=(*self.notes, said))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (issue-4 format: ``{"gpu": {...}, "cpu": N, "nvme": N, ...}``)."""
        return {
            "gpu": self.gpu.to_dict(),
            "cpu": self.cpu_bytes_per_node,
            "nvme": self.nvme_bytes_per_node,
            "peak_phase": self.peak_phase,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Collective:
    """Communication of one kind in one optimizer step."""

    kind: str
    """``all_reduce``, ``reduce_scatter``, ``all_gather`` or ``broadcast``."""
    bytes: int
    """Total payload per rank per step (the tensor size, not bus traffic)."""
    calls: int
    """How many collectives carry it (buckets, units)."""
    group_size: int
    scope: str
    """``intra`` (within a node), ``inter`` (across nodes) or ``world`` (spans both)."""
    overlappable: bool
    """Whether it can hide behind compute (backward for gradient reduction, prefetch for gathers)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class CostEstimate:
    """Predicted time of one optimizer step per GPU."""

    compute_s: float
    communication_s: float
    """Total communication time if nothing overlapped."""
    exposed_communication_s: float
    """Communication time not hidden behind compute."""
    offload_s: float
    """Host↔GPU transfers and CPU/NVMe optimizer work that is not hidden."""
    step_time_s: float
    samples_per_s: float
    """Global throughput (all GPUs)."""
    tokens_per_s: float | None
    collectives: tuple[Collective, ...] = ()
    notes: tuple[str, ...] = ()
    optimizer_s: float = 0.0
    """The optimizer step on the GPU (part of ``step_time_s``; a CPU optimizer's is in ``offload_s``)."""
    repeated_communication_s: float = 0.0
    """The part of ``communication_s`` that runs again for every micro-batch when gradients accumulate (FSDP's and
    ZeRO-3's gathers and reduce-scatters, ZeRO-2's gradient reduction); the rest runs once per optimizer step
    (DDP's ``no_sync`` all-reduce, ZeRO-1's reduction, the all-gathers after the step)."""
    repeated_exposed_s: float = 0.0
    """The part of ``exposed_communication_s`` that repeats likewise (the planner adds it per micro-batch)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["collectives"] = [c.to_dict() for c in self.collectives]
        d["notes"] = list(self.notes)
        return d


@dataclass(frozen=True, kw_only=True, slots=True)
class Knob:
    """A tunable setting of a strategy."""

    name: str
    default: Any
    kind: str
    """``int``, ``float``, ``bool`` or ``choice``."""
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()
    log: bool = False
    description: str = ""
    tuned: bool = True
    """Whether ``autoshard tune`` searches it. ``False`` for settings that decide correctness or numerics, not
    speed: the user's choice, kept at the planner's value."""
    when: tuple[str, Any] | None = None
    """``(knob, value)``: the setting only means something while that other knob has that value (PowerSGD's
    rank with ``comm_hook="powersgd"``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["choices"] = list(self.choices)
        return d


class Strategy(abc.ABC):
    """A way to train across devices. Subclasses implement :meth:`memory`, :meth:`cost` and :meth:`knobs`.

    Instances are created by :func:`autoshard.strategies.get` with the preset keyword arguments they were
    registered with (e.g. ``stage=2, offload_optimizer="cpu"``).
    """

    name: ClassVar[str] = ""
    """Set by the registry: the name users know (Lightning's), e.g. ``deepspeed_stage_2_offload``."""
    family: ClassVar[FamilyName]
    """``ddp``, ``fsdp`` or ``deepspeed``."""
    requires: ClassVar[tuple[str, ...]] = ()
    """Python modules the backend needs at run time (e.g. ``("deepspeed",)``)."""

    @property
    @abc.abstractmethod
    def traits(self) -> Traits:
        """What this preset does (sharding stage, offload, hybrid), from its constructor arguments."""

    @abc.abstractmethod
    def memory(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> MemoryEstimate:
        """Per-device memory of ``candidate`` on ``hardware``."""

    @abc.abstractmethod
    def cost(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> CostEstimate:
        """Predicted step time and throughput of ``candidate`` on ``hardware``."""

    @abc.abstractmethod
    def knobs(self, hardware: HardwareSpec) -> tuple[Knob, ...]:
        """Tunable settings with defaults (which may depend on the hardware) and ranges."""

    def unsupported(self, hardware: HardwareSpec) -> str | None:
        """Why this strategy cannot run on ``hardware`` (a sentence), or ``None`` when it can."""
        return None

    def unsupported_precision(self, precision: Precision, hardware: HardwareSpec) -> str | None:
        """Why this strategy's backend cannot train in ``precision`` on ``hardware`` (a sentence), or ``None``."""
        return None

    def refuses(self, optimizer: str) -> str | None:
        """Why this strategy's backend cannot step ``optimizer`` (a name of
        :data:`~autoshard.profiler.options.OPTIMIZERS`, or ``bitsandbytes.<Class>`` for another bitsandbytes
        optimizer given to ``fit()`` as an object; a sentence), or ``None`` when it can. Known before anything is
        traced."""
        return None

    def settings(self, hardware: HardwareSpec, candidate: Candidate,
                 workload: Workload | None = None) -> dict[str, Any]:
        """The knob values in force: the candidate's, else what ``workload`` needs
        (:meth:`workload_settings`), else the defaults."""
        values = {k.name: k.default for k in self.knobs(hardware)}
        unknown = set(candidate.settings) - set(values)
        if unknown:
            from autoshard.errors import UsageError

            raise UsageError(
                f"{self.name} has no setting {', '.join(sorted(unknown))}.",
                hint=f"Its settings are: {', '.join(sorted(values)) or 'none'}.",
            )
        if workload is not None:
            values.update(self.workload_settings(workload))
        values.update(candidate.settings)
        return values

    def trial_settings(self) -> dict[str, Any]:
        """Settings every short tuning trial runs with, which the exported best does not keep (none unless a
        strategy says so)."""
        return {}

    def workload_settings(self, workload: Workload) -> dict[str, Any]:
        """Knob values this model's step needs in place of the defaults (none unless a strategy says so)."""
        return {}


def checked_micro_batch(candidate: Candidate) -> int:
    """``candidate.micro_batch_size``, checked before a memory or cost model uses it.

    Raises:
        UsageError: it is not a positive whole number.
    """
    b = candidate.micro_batch_size
    if isinstance(b, bool) or not isinstance(b, int) or b < 1:
        from autoshard.errors import UsageError

        raise UsageError(f"micro_batch_size must be a positive whole number, but got {b!r}.")
    return b


def allocation_rounding(workload: Workload) -> Callable[[int], int]:
    """Bytes a tensor of ``n`` bytes occupies: the CUDA caching allocator's rounding for a CUDA workload
    (:func:`autoshard.profiler.gpu.round_allocation_bytes`), else ``n``."""
    if workload.target != "cuda":
        return lambda n: n
    from autoshard.profiler.gpu import round_allocation_bytes

    return round_allocation_bytes
