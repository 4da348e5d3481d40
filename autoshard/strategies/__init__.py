"""Distributed training strategies: one package per family (``ddp``, ``fsdp``, ``deepspeed``) behind
:class:`~autoshard.strategies.base.Strategy` and a name registry.

A family package owns everything about its strategies: the presets and their traits (``__init__.py``), the
memory and step-time models, the training backend (``backend.py``) and the exporter (``export.py``).
See ``docs/architecture.md``.
"""

from __future__ import annotations

from autoshard.strategies.base import (
    Candidate,
    Collective,
    CostEstimate,
    GpuMemory,
    Knob,
    MemoryEstimate,
    Strategy,
    Traits,
)
from autoshard.strategies.registry import (
    Family,
    backend_class,
    describe,
    exporter,
    family,
    family_names,
    get,
    names,
    register,
    register_family,
    traits,
)
from autoshard.strategies.workload import Workload, build_workload

__all__ = [
    "Candidate",
    "Collective",
    "CostEstimate",
    "Family",
    "GpuMemory",
    "Knob",
    "MemoryEstimate",
    "Strategy",
    "Traits",
    "Workload",
    "backend_class",
    "build_workload",
    "describe",
    "exporter",
    "family",
    "family_names",
    "get",
    "names",
    "register",
    "register_family",
    "traits",
]

# Each family registers itself and its presets, in the order they are listed to users.
from autoshard.strategies import ddp, fsdp, deepspeed  # noqa: F401, I001
