"""PyTorch FSDP2 (``fully_shard``): its presets under Lightning's names, its memory and step-time model
(:mod:`.strategy`, :mod:`.memory`, :mod:`.cost`), its training backend (:mod:`.backend`) and its exporter
(:mod:`.export`)."""

from __future__ import annotations

from autoshard.strategies.fsdp.strategy import FSDPStrategy
from autoshard.strategies.registry import Family, register, register_family

register_family(Family(name="fsdp", backend="autoshard.strategies.fsdp.backend:FSDPBackend",
                       exporter="autoshard.strategies.fsdp.export:EXPORTER"))
register("fsdp", description="FSDP2 full shard: parameters, gradients and optimizer state split across all ranks.",
         reshard_after_forward=True)(FSDPStrategy)
register("fsdp_shard_grad_op", description="FSDP2 keeping unsharded parameters from forward to backward "
         "(reshard_after_forward=False): fewer all-gathers, more memory.", reshard_after_forward=False)(FSDPStrategy)
register("fsdp_hybrid", description="FSDP2 hybrid: shard within each node, replicate across nodes (2-D mesh).",
         reshard_after_forward=True, hybrid=True)(FSDPStrategy)
register("fsdp_cpu_offload", description="FSDP2 with CPUOffloadPolicy: sharded parameters, gradients and "
         "optimizer state in host RAM, AdamW on the CPU.", reshard_after_forward=True, offload=True)(FSDPStrategy)

__all__ = ["FSDPStrategy"]
