"""Tracing one training step without allocating: memory, FLOPs, per-block breakdown."""

from __future__ import annotations

from autoshard.profiler.options import (
    OPTIMIZERS,
    Precision,
    ProfileOptions,
    parse_precision,
)
from autoshard.profiler.result import (
    BlockProfile,
    MemoryBreakdown,
    ModelProfile,
    Overhead,
    ReserveReplay,
)

__all__ = [
    "OPTIMIZERS",
    "BlockProfile",
    "MemoryBreakdown",
    "ModelProfile",
    "Overhead",
    "Precision",
    "ProfileOptions",
    "ReserveReplay",
    "parse_precision",
]
