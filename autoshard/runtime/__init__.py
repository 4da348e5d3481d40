"""The hand-off: :func:`fit` trains a model with the plan's backend (DDP, FSDP2, DeepSpeed ZeRO)."""

from __future__ import annotations

from autoshard.runtime.fit import fit
from autoshard.runtime.result import FitResult, StepMetrics
from autoshard.runtime.supervisor import is_worker

__all__ = ["FitResult", "StepMetrics", "fit", "is_worker"]
