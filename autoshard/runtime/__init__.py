"""The hand-off: :func:`fit` trains a model with the plan's backend (DDP, FSDP2, DeepSpeed ZeRO)."""

from __future__ import annotations

from autoshard.runtime.fit import fit
from autoshard.runtime.options import Checkpointing
from autoshard.runtime.result import EvalMetrics, FitResult, StepMetrics
from autoshard.runtime.supervisor import is_worker

__all__ = ["Checkpointing", "EvalMetrics", "FitResult", "StepMetrics", "fit", "is_worker"]
