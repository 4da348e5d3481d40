"""FSDP2's part of the hand-off files (:class:`~autoshard.export.family.FamilyExporter`): the Accelerate
``fsdp_config`` block, Lightning's ``FSDPStrategy``, the HF Trainer's ``--fsdp`` flags and ``fsdp_config.json``.

Key names: accelerate 1.15 (``commands/config/cluster.py`` ``fsdp_*`` keys, ``utils/constants.py::
FSDP_AUTO_WRAP_POLICY``); Lightning 2.5 ``FSDPStrategy(cpu_offload, auto_wrap_policy,
activation_checkpointing_policy, sharding_strategy)``
(https://lightning.ai/docs/pytorch/stable/api/lightning.pytorch.strategies.FSDPStrategy.html), which runs FSDP1;
transformers 5.23 ``training_args.py`` (``--fsdp``, ``--fsdp_config`` keys ``version``, ``reshard_after_forward``,
``auto_wrap_policy``, ``transformer_layer_cls_to_wrap``, ``activation_checkpointing``, ``cpu_offload``).
"""

from __future__ import annotations

import json
from typing import Any

from autoshard.errors import UsageError
from autoshard.export.hf_trainer import FSDP_CONFIG_FILE
from autoshard.planner.plan_file import ExportedPlan


def accelerate_fsdp_config(exported: ExportedPlan) -> dict[str, Any]:
    """Accelerate's ``fsdp_config`` block: FSDP2, the block classes as the wrapping units, checkpointing and offload.

    ``fsdp_transformer_layer_cls_to_wrap`` is one comma-separated string (accelerate's
    ``FullyShardedDataParallelPlugin`` splits it on ``,``), e.g. ``BartEncoderLayer,BartDecoderLayer``.

    ``reshard_after_forward`` is a bool in accelerate's FSDP2 plugin: a partial size (an int) is written as
    ``True`` and :func:`autoshard.export.notes` says so.
    """
    classes = exported.model.block_classes
    wrap: dict[str, str] = {"fsdp_auto_wrap_policy": "NO_WRAP"}
    if classes:
        wrap = {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_transformer_layer_cls_to_wrap": ",".join(classes)}
    return {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": exported.settings.get("reshard_after_forward", True) is not False,
        **wrap,
        "fsdp_activation_checkpointing": exported.activation_checkpointing,
        "fsdp_offload_params": exported.strategy_traits.offload_parameters,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
    }


def trainer_fsdp_config(exported: ExportedPlan) -> dict[str, Any]:
    """The HF Trainer's ``fsdp_config`` for an FSDP plan (FSDP2).

    Raises:
        UsageError: hybrid sharding: the Trainer's FSDP2 path has none (transformers 5.23 accepts
            ``hybrid_shard`` only with FSDP1).
    """
    if exported.strategy_traits.hybrid:
        raise UsageError("the Hugging Face Trainer has no FSDP2 hybrid sharding; use the Accelerate config with "
                         "a parallelism config, or plan with strategies=['fsdp'].")
    classes = exported.model.block_classes
    config: dict[str, Any] = {
        "version": 2,
        "reshard_after_forward": exported.settings.get("reshard_after_forward", True) is not False,
        "activation_checkpointing": exported.activation_checkpointing,
        "cpu_offload": exported.strategy_traits.offload_parameters,
    }
    if classes:
        config["auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP"
        config["transformer_layer_cls_to_wrap"] = list(classes)
    return config


def lightning_sharding_strategy(exported: ExportedPlan) -> str:
    """FSDP1's ``sharding_strategy`` name for the plan's traits."""
    traits = exported.strategy_traits
    if traits.hybrid:
        return "HYBRID_SHARD"
    return "FULL_SHARD" if traits.shards_parameters else "SHARD_GRAD_OP"


class FSDPExporter:
    """FSDP2's part of each file."""

    def files(self, exported: ExportedPlan, *, validate: bool) -> dict[str, str]:
        """``fsdp_config.json`` for the HF Trainer, where the Trainer can run the plan."""
        if exported.strategy_traits.hybrid:
            return {}
        return {FSDP_CONFIG_FILE: json.dumps(trainer_fsdp_config(exported), indent=2) + "\n"}

    def accelerate(self, exported: ExportedPlan, *, ds_config_file: str) -> dict[str, Any]:
        """``distributed_type: FSDP`` and the ``fsdp_config`` block."""
        return {"distributed_type": "FSDP", "fsdp_config": accelerate_fsdp_config(exported)}

    def lightning(self, exported: ExportedPlan, *, ds_config_file: str) -> tuple[list[str], str]:
        """``FSDPStrategy`` wrapping (and, with checkpointing, checkpointing) every block class."""
        lines = ["from lightning.pytorch.strategies import FSDPStrategy"]
        classes = ", ".join(exported.model.block_classes)
        args = [f"sharding_strategy={lightning_sharding_strategy(exported)!r}"]
        if classes:
            lines.append(f"from my_model import {classes}  # replace my_model with the module defining them")
            args.append(f"auto_wrap_policy={{{classes}}}")
            if exported.activation_checkpointing:
                args.append(f"activation_checkpointing_policy={{{classes}}}")
        if exported.strategy_traits.offload_parameters:
            args.append("cpu_offload=True")
        return lines, f"FSDPStrategy({', '.join(args)})"

    def hf_trainer(self, exported: ExportedPlan, *, ds_config_file: str, fsdp_config_file: str) -> list[str]:
        """``--fsdp`` options and ``--fsdp_config``; checkpointing is in the config file.

        Raises:
            UsageError: see :func:`trainer_fsdp_config`.
        """
        # transformers 5.23 parses --fsdp as a string: "true" is refused ("Unknown `fsdp` option"), so the
        # (deprecated there, still accepted) option string is written; fsdp_config.json's values take precedence.
        reshard = trainer_fsdp_config(exported)["reshard_after_forward"]
        options = ["full_shard" if reshard else "shard_grad_op", "auto_wrap"]
        if exported.strategy_traits.offload_parameters:
            options.append("offload")
        return ["--fsdp", " ".join(options), "--fsdp_config", fsdp_config_file]

    def launchers(self, exported: ExportedPlan, *, script: str) -> list[str]:
        """None besides torchrun."""
        return []

    def notes(self, exported: ExportedPlan) -> list[str]:
        """Partial resharding, the knobs no config can express, FSDP1 under Lightning, hybrid sharding."""
        out = []
        raf = exported.settings.get("reshard_after_forward")
        if not isinstance(raf, bool):
            out.append(f"reshard_after_forward={raf} (a partial shard) is written as True: Accelerate, Lightning and "
                       "the HF Trainer take only a bool.")
        out.append("forward_prefetch, backward_prefetch, reduce_dtype, blocks_per_unit and foreach are not "
                   "expressible in these configs; set them in your own fully_shard code if they differ from the "
                   "defaults.")
        out.append("Lightning's FSDPStrategy runs FSDP1; autoshard's estimates are for FSDP2.")
        if exported.strategy_traits.hybrid:
            out.append("Hybrid sharding: the HF Trainer cannot run it with FSDP2 (no file written); with Accelerate "
                       "add a parallelism config (dp_replicate = nodes, dp_shard = GPUs per node).")
        return out


EXPORTER = FSDPExporter()
