"""What ``fit()`` returns: per-step metrics, the plan used, and the trained model or its state."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from autoshard.planner.plan_file import ExportedPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class StepMetrics:
    """One optimizer step."""

    step: int
    """1-based optimizer step, counted across resumes."""
    epoch: int
    loss: float
    """Mean loss of the step's micro-batches, averaged over all ranks."""
    step_time_s: float
    """Wall-clock time of the step on rank 0 (CUDA synchronised at the end of the step)."""
    samples_per_s: float
    """Samples per second over all ranks."""
    tokens_per_s: float | None
    """Tokens per second over all ranks: the positions of the batches' token ids (``input_ids``, else a 2-D integer
    tensor among what the forward gets: padding included, as the model computes it), or samples × the plan's
    ``seq_len`` for batches without them (a model source's own); ``None`` where neither says (images, features,
    integer targets that only the loss reads)."""
    peak_memory_bytes: int | None
    """``torch.cuda.max_memory_allocated`` during the step, the highest over the ranks; ``None`` on CPU."""
    lr: float | None = None
    """The learning rate this step's update used (the first parameter group's, before the scheduler stepped)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalMetrics:
    """One evaluation of ``eval_data``."""

    step: int
    """The optimizer steps trained when it was scored."""
    loss: float
    """Mean loss of its batches over every rank."""
    batches: int
    """Batches scored, over every rank."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class FitResult:
    """The outcome of :func:`autoshard.fit`."""

    plan: ExportedPlan
    """The plan trained with (as in ``plan.json``)."""
    steps: tuple[StepMetrics, ...]
    """Every optimizer step run by this call (a resumed run starts after the checkpoint's step)."""
    model: nn.Module | None = None
    """The trained module: the user's module, trained in place (under FSDP2 in one process sharded in place, then
    given back plain holding the consolidated weights, sharded still with ``consolidate=False``;
    under DeepSpeed handed back on the rank holding the consolidated weights as the plain module it was, in its
    own dtypes, holding the fp32 master weights) or, when ``fit()`` ran worker processes, the user's module with
    the consolidated weights loaded; ``None`` when only a model source was given and workers trained it, or
    when workers trained it with ``consolidate=False`` (a note says so). The module comes back in the dtypes it came
    in, whatever the precision trained (``bf16-true`` casts it to bf16 while training); its checkpointed blocks
    have their own classes again and a transformers config its KV cache setting."""
    state_dict: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    """The whole model's weights on CPU (fp32 master weights where the backend keeps them), on rank 0 and in
    the launching process; ``None`` on other ranks or with ``consolidate=False``."""
    rank: int = 0
    world_size: int = 1
    resumed_from: str | None = None
    """The checkpoint this run continued from."""
    last_checkpoint: str | None = None
    """The newest checkpoint written."""
    notes: tuple[str, ...] = ()
    """What fit() decided for you that you may want to know (one sentence each)."""
    evals: tuple[EvalMetrics, ...] = ()
    """Each scoring of ``eval_data`` (every ``eval_every`` steps and at the end; empty without ``eval_data``)."""

    @property
    def losses(self) -> list[float]:
        """Loss per step."""
        return [s.loss for s in self.steps]

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, model: nn.Module | None = None,
                  state_dict: dict[str, torch.Tensor] | None = None) -> FitResult:
        """A result as :meth:`to_dict` wrote it (another process's), with the module and weights of this one."""
        import json

        from autoshard.planner.plan_file import loads

        return cls(plan=loads(json.dumps(data["plan"]), source="a fit() result"),
                   steps=tuple(StepMetrics(**s) for s in data["steps"]), model=model, state_dict=state_dict,
                   rank=data.get("rank", 0), world_size=data["world_size"], resumed_from=data["resumed_from"],
                   last_checkpoint=data["last_checkpoint"], notes=tuple(data["notes"]),
                   evals=tuple(EvalMetrics(**e) for e in data.get("evals", ())))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no tensors)."""
        return {
            "plan": self.plan.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
            "rank": self.rank,
            "world_size": self.world_size,
            "resumed_from": self.resumed_from,
            "last_checkpoint": self.last_checkpoint,
            "notes": list(self.notes),
            "evals": [e.to_dict() for e in self.evals],
        }
