"""The one extension point every strategy family implements: :class:`Strategy`.

A strategy module owns everything about its strategy — its memory model, its communication cost, its knobs —
so adding a strategy means adding one module and removing one means deleting it. Results are typed and
JSON-ready; sizes are bytes, times seconds.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from autoshard.hardware.specs import HardwareSpec
from autoshard.strategies.workload import Workload


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One configuration to evaluate: a strategy at a micro-batch, with or without checkpointing."""

    strategy: str
    micro_batch_size: int
    activation_checkpointing: bool
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Knob values; missing knobs take the strategy's defaults for the hardware."""

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
    """Activations saved for backward plus the temporaries of forward/backward at the peak, and the batch."""
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
    family: ClassVar[str] = ""
    """``ddp``, ``fsdp`` or ``deepspeed``."""
    requires: ClassVar[tuple[str, ...]] = ()
    """Python modules the backend needs at run time (e.g. ``("deepspeed",)``)."""

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

    def workload_settings(self, workload: Workload) -> dict[str, Any]:
        """Knob values this model's step needs in place of the defaults (none unless a strategy says so)."""
        return {}
