"""DeepSpeed ZeRO stages 1-3 with CPU and NVMe offload: the presets under Lightning's names, the memory and
step-time model (:mod:`.strategy`, :mod:`.memory`, :mod:`.cost`, :mod:`.layout`), ``ds_config.json``
(:mod:`.config`), the training backend (:mod:`.backend`) and the exporter (:mod:`.export`)."""

from __future__ import annotations

from autoshard.strategies.deepspeed.strategy import DeepSpeedZero
from autoshard.strategies.registry import Family, register, register_family

register_family(Family(name="deepspeed", backend="autoshard.strategies.deepspeed.backend:DeepSpeedBackend",
                       exporter="autoshard.strategies.deepspeed.export:EXPORTER"))

# Lightning's names and presets (src/lightning/pytorch/strategies/deepspeed.py::register_strategies).
register("deepspeed_stage_1", description="DeepSpeed ZeRO-1: optimizer state sharded", stage=1)(DeepSpeedZero)
register("deepspeed_stage_2", description="DeepSpeed ZeRO-2: optimizer state and gradients sharded",
         stage=2)(DeepSpeedZero)
register("deepspeed_stage_2_offload", description="DeepSpeed ZeRO-2 with the optimizer offloaded to CPU",
         stage=2, offload_optimizer="cpu")(DeepSpeedZero)
register("deepspeed_stage_3", description="DeepSpeed ZeRO-3: optimizer state, gradients and parameters sharded",
         stage=3)(DeepSpeedZero)
register("deepspeed_stage_3_offload", description="DeepSpeed ZeRO-3 with optimizer and parameters offloaded to CPU",
         stage=3, offload_optimizer="cpu", offload_param="cpu")(DeepSpeedZero)
register("deepspeed_stage_3_offload_nvme",
         description="DeepSpeed ZeRO-3 with optimizer and parameters offloaded to NVMe",
         stage=3, offload_optimizer="nvme", offload_param="nvme")(DeepSpeedZero)



__all__ = ["DeepSpeedZero"]
