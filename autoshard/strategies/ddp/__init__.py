"""PyTorch DistributedDataParallel: its preset, its memory and step-time model (:mod:`.strategy`), its training
backend (:mod:`.backend`) and its exporter (:mod:`.export`)."""

from __future__ import annotations

from autoshard.strategies.ddp.strategy import DDPStrategy
from autoshard.strategies.registry import Family, register, register_family

register_family(Family(name="ddp", backend="autoshard.strategies.ddp.backend:DDPBackend",
                       exporter="autoshard.strategies.ddp.export:EXPORTER"))
register("ddp", description="PyTorch DistributedDataParallel: full replicas, bucketed all-reduce of gradients.")(
    DDPStrategy)

__all__ = ["DDPStrategy"]
