"""Typed results of planning: each evaluated candidate and the :class:`Plan`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autoshard.hardware.specs import HardwareSpec
from autoshard.profiler.checkpointing import ActivationCheckpointing
from autoshard.strategies import get
from autoshard.strategies.base import Candidate, CostEstimate, MemoryEstimate, Traits
from autoshard.strategies.workload import Workload


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanRequest:
    """What the user asked to plan for."""

    micro_batch_size: int | None
    """Fixed micro-batch, or ``None`` to choose the best that fits."""
    global_batch_size: int | None
    """Samples per optimizer step across all devices, or ``None`` (= micro-batch × world size)."""
    goal: str
    """``pretrain`` or ``finetune``."""
    safety_margin: float
    """Fraction of each GPU's memory kept free for the CUDA context, allocator fragmentation and error."""
    strategies: tuple[str, ...] | None = None
    """Restrict to these strategy names (``None``: all)."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Knob values every candidate takes whose strategy has the knob (e.g. FSDP's ``reduce_dtype``)."""
    max_micro_batch_size: int | None = None
    """The most samples a chosen micro-batch may hold: what each rank's data has (``fit()`` on a dataset of known
    length), or ``None`` (:data:`~autoshard.planner.search.MAX_MICRO_BATCH`)."""
    checkpointing: tuple[bool, ...] | None = None
    """The checkpointing choices to weigh (``(True,)``: only the checkpointed candidates, as ``--checkpointing
    MODE`` asks), or ``None``: every choice the workload traced. The workload may hold a trace the plan does not
    weigh: FSDP2 reads what a recomputed block holds from the one without checkpointing."""

    def checkpointing_choices(self, workload: Workload) -> tuple[bool, ...]:
        """The checkpointing choices to plan on ``workload``: the request's, else every one it traced; without
        checkpointing when nothing repeats."""
        if workload.block_class is None:
            return (False,)
        return workload.checkpointing_choices if self.checkpointing is None else self.checkpointing

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "micro_batch_size": self.micro_batch_size,
            "global_batch_size": self.global_batch_size,
            "goal": self.goal,
            "safety_margin": self.safety_margin,
            "strategies": None if self.strategies is None else list(self.strategies),
            "settings": dict(self.settings),
            "max_micro_batch_size": self.max_micro_batch_size,
            "checkpointing": None if self.checkpointing is None else list(self.checkpointing),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Evaluation:
    """One candidate with its numbers, whether it fits, its score and the reasons."""

    candidate: Candidate
    traits: Traits
    """What the candidate's strategy does (sharding stage, offload, hybrid): what rules ask."""
    fits: bool
    memory: MemoryEstimate | None
    """``None`` when the strategy cannot run on this hardware at all."""
    cost: CostEstimate | None
    gradient_accumulation: int
    max_micro_batch_size: int
    """The largest micro-batch that fits with this strategy and checkpointing choice (0: none)."""
    score: float
    """Ranking score: predicted throughput × the rules' factors (0 when it does not fit)."""
    reasons: tuple[str, ...]
    """Why it was rejected (in numbers) and what each rule that applied said."""

    @property
    def strategy(self) -> str:
        """The strategy name."""
        return self.candidate.strategy

    @property
    def family(self) -> str:
        """The strategy's family: ``ddp``, ``fsdp`` or ``deepspeed``."""
        return self.traits.family

    def reworded(self, text: Callable[[str], str]) -> Evaluation:
        """This evaluation with ``text`` applied to its reasons and its memory's and cost's notes."""
        memory = None if self.memory is None else replace(self.memory, notes=tuple(map(text, self.memory.notes)))
        cost = None if self.cost is None else replace(self.cost, notes=tuple(map(text, self.cost.notes)))
        return replace(self, reasons=tuple(map(text, self.reasons)), memory=memory, cost=cost)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (documented in docs/recommend.md)."""
        return {
            "strategy": self.strategy,
            "family": self.family,
            "traits": self.traits.to_dict(),
            "micro_batch_size": self.candidate.micro_batch_size,
            "activation_checkpointing": self.candidate.activation_checkpointing,
            "gradient_accumulation": self.gradient_accumulation,
            "settings": dict(self.candidate.settings),
            "fits": self.fits,
            "memory": None if self.memory is None else self.memory.to_dict(),
            "max_micro_batch_size": self.max_micro_batch_size,
            "step_time_s": None if self.cost is None else self.cost.step_time_s,
            "throughput": None
            if self.cost is None
            else {"samples_per_s": self.cost.samples_per_s, "tokens_per_s": self.cost.tokens_per_s},
            "cost": None if self.cost is None else self.cost.to_dict(),
            "score": self.score,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class WeighedCheckpointing:
    """A checkpointing choice the planner weighed against another (:mod:`autoshard.planner.selective`)."""

    checkpointing: ActivationCheckpointing
    """Full checkpointing or a selective choice (op-selective)."""
    chosen: bool
    """Whether the plan uses it."""
    best: Evaluation | None
    """Its best fitting checkpointed candidate; ``None``: nothing fits with it, or it could not be traced."""
    not_traced: str | None = None
    """Why its step could not be traced (the profiler's message), when it could not."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (documented in docs/recommend.md)."""
        best = self.best
        return {"checkpointing": str(self.checkpointing), "chosen": self.chosen, "not_traced": self.not_traced,
                "strategy": None if best is None else best.strategy,
                "micro_batch_size": None if best is None else best.candidate.micro_batch_size,
                "samples_per_s": None if best is None or best.cost is None else best.cost.samples_per_s,
                "score": None if best is None else best.score}


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """The planner's answer: the recommendation and every candidate considered."""

    recommended: Evaluation
    candidates: tuple[Evaluation, ...]
    """Every candidate, best first; those that do not fit last."""
    explanation: tuple[str, ...]
    """Why the recommendation won, sentence by sentence."""
    workload: Workload
    hardware: HardwareSpec
    request: PlanRequest
    cached_workload: str | None = None
    """The workload cache entry the traced step was read from (:mod:`autoshard.planner.workload_cache`), or
    ``None`` when it was traced for this plan."""
    checkpointing_weighed: tuple[WeighedCheckpointing, ...] = ()
    """The checkpointing choices weighed against each other when the plan needed checkpointing (full and
    op-selective), the one used marked; empty when none was (no checkpointing won, or the user named one)."""

    def __repr__(self) -> str:
        """One line (the workload's traced step, hundreds of kB, is left out): what is recommended, on what."""
        e, hw = self.recommended, self.hardware
        device = hw.gpu.display_name if hw.gpu is not None else "CPU process"
        memory = "" if e.memory is None else f", {e.memory.gpu.total / 2**30:.1f} GiB per device"
        speed = "" if e.cost is None else f", {e.cost.samples_per_s:,.4g} samples/s " + (
            "predicted" if hw.gpu is not None else "at a placeholder CPU speed")
        checkpointed = ", checkpointed" if e.candidate.activation_checkpointing else ""
        fitting = sum(c.fits for c in self.candidates)
        return (f"<Plan {self.workload.model!r}: {e.strategy}, micro-batch {e.candidate.micro_batch_size}"
                f"{checkpointed}{memory}{speed}; {hw.nodes} × {hw.processes_per_node} × {device}; "
                f"{len(self.candidates)} candidates, {fitting} fit>")

    def __str__(self) -> str:
        """The explanation, a sentence a line: why the recommendation won."""
        return "\n".join(self.explanation)

    def reworded(self, text: Callable[[str], str], hardware_text: Callable[[str], str]) -> Plan:
        """This plan with ``text`` applied to its explanation and every candidate's reasons and notes, and
        ``hardware_text`` to the hardware's notes: the command line's flags they name, as a Python caller's
        arguments (:func:`autoshard.errors.in_arguments`)."""
        candidates = tuple(c.reworded(text) for c in self.candidates)
        at = next((i for i, c in enumerate(self.candidates) if c is self.recommended), None)
        recommended = candidates[at] if at is not None else self.recommended.reworded(text)
        weighed = tuple(replace(w, best=None if w.best is None else w.best.reworded(text),
                                not_traced=None if w.not_traced is None else text(w.not_traced))
                        for w in self.checkpointing_weighed)
        return replace(self, recommended=recommended, candidates=candidates, explanation=tuple(map(text,
                       self.explanation)), hardware=self.hardware.reworded(hardware_text),
                       checkpointing_weighed=weighed)

    def device_memory(self, evaluation: Evaluation) -> dict[str, int] | None:
        """What ``nvidia-smi`` would show for ``evaluation`` on each GPU (:func:`device_memory`)."""
        return device_memory(evaluation, self.workload)

    def _with_device_memory(self, e: Evaluation) -> dict[str, Any]:
        return candidate_dict(e, self.workload, self.hardware)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON form (docs/recommend.md); sizes in bytes."""
        rec = self._with_device_memory(self.recommended)
        return {
            "recommended": rec,
            "explanation": list(self.explanation),
            "candidates": [self._with_device_memory(c) for c in self.candidates],
            "model": self.workload.to_dict(),
            "hardware": self.hardware.to_dict(),
            "request": self.request.to_dict(),
            "cached_workload": self.cached_workload,
            "checkpointing_weighed": [w.to_dict() for w in self.checkpointing_weighed],
        }


def device_memory(evaluation: Evaluation, workload: Workload) -> dict[str, int] | None:
    """What ``nvidia-smi`` would show for ``evaluation`` on each GPU: its allocated peak, the caching allocator's
    reserve (segment rounding, at least) and the CUDA context; ``None`` without a GPU answer."""
    if evaluation.memory is None or not workload.cuda_context_bytes:
        return None
    from autoshard.profiler.cuda_context import reserve_lower_bound_bytes

    allocated = evaluation.memory.gpu.total
    reserve = reserve_lower_bound_bytes(allocated)
    context = workload.cuda_context_bytes
    return {"allocated": allocated, "reserve": reserve, "cuda_context": context,
            "nvidia_smi_total": allocated + reserve + context}


def candidate_dict(e: Evaluation, workload: Workload, hardware: HardwareSpec) -> dict[str, Any]:
    """One candidate as ``recommend --json`` gives it, in a plan's ``candidates`` and in a ``NoFeasiblePlan``'s
    alike (docs/recommend.md): :meth:`Evaluation.to_dict` with the GPU's ``nvidia-smi`` view, what it
    recomputes, and its strategy's settings in force (what it was priced with, as ``plan.json`` writes them), not
    only those the request set."""
    d = e.to_dict()
    d["settings"] = get(e.strategy).settings(hardware, e.candidate, workload)
    if d["memory"] is not None:
        d["memory"]["device"] = device_memory(e, workload)
    # What the checkpointed candidates recompute (full, op, every-N: the workload's choice, the table's "ckpt"
    # column); without it, op-selective at one micro-batch and full at the next read as memory halving.
    d["checkpointing"] = str(workload.checkpoint_mode) if e.candidate.activation_checkpointing else "none"
    return d
