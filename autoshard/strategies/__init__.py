"""Distributed training strategies: one module per family (``ddp``, ``fsdp``, ``zero``) behind
:class:`~autoshard.strategies.base.Strategy` and a name registry."""

from __future__ import annotations

from autoshard.strategies.base import (
    Candidate,
    Collective,
    CostEstimate,
    GpuMemory,
    Knob,
    MemoryEstimate,
    Strategy,
)
from autoshard.strategies.registry import describe, get, names, register
from autoshard.strategies.workload import Workload, build_workload

__all__ = [
    "Candidate",
    "Collective",
    "CostEstimate",
    "GpuMemory",
    "Knob",
    "MemoryEstimate",
    "Strategy",
    "Workload",
    "build_workload",
    "describe",
    "get",
    "names",
    "register",
]
