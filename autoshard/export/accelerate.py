"""An Accelerate config file (``accelerate launch --config_file accelerate_config.yaml train.py``).

Key names and values are those ``accelerate config`` writes and ``accelerate launch`` reads in accelerate 1.15.0
(``commands/config/config_args.py::ClusterConfig`` for the top level, ``commands/config/cluster.py`` for the
``fsdp_config`` / ``deepspeed_config`` keys, ``utils/constants.py::FSDP_AUTO_WRAP_POLICY``); accelerate itself is
not needed to write it.
"""

from __future__ import annotations

from typing import Any

import yaml

from autoshard.export.plan_json import ExportedPlan

DS_CONFIG_FILE = "ds_config.json"
_MIXED_PRECISION = {"32-true": "no", "16-mixed": "fp16", "bf16-mixed": "bf16", "bf16-true": "no"}
"""accelerate's ``mixed_precision`` choices are no / fp16 / bf16 / fp8; ``bf16-true`` is the user's model cast to
bf16 with autocast off, hence ``no``."""


def accelerate_config(exported: ExportedPlan, *, ds_config_file: str = DS_CONFIG_FILE) -> dict[str, Any]:
    """The config as a dict (:func:`dumps` writes it as YAML).

    Multi-node jobs also need ``--machine_rank`` and ``--main_process_ip`` on each node's command line; they are
    left out of the file, which is the same on every node.
    """
    hw = exported.hardware
    cpu = hw.device_type == "cpu"
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "num_machines": hw.nodes,
        "num_processes": hw.world_size,  # accelerate counts processes over all machines
        "machine_rank": 0,
        "mixed_precision": _MIXED_PRECISION[exported.precision],
        "use_cpu": cpu,
        "debug": False,
    }
    if exported.family == "deepspeed":
        config["distributed_type"] = "DEEPSPEED"
        # With a config file, accelerate takes zero stage, offload, batch and precision from it (cluster.py).
        config["deepspeed_config"] = {"deepspeed_config_file": ds_config_file}
        if hw.nodes > 1:
            config["deepspeed_config"]["deepspeed_multinode_launcher"] = "standard"
    elif exported.family == "fsdp":
        config["distributed_type"] = "FSDP"
        config["fsdp_config"] = fsdp_config(exported)
    elif cpu:
        config["distributed_type"] = "MULTI_CPU"
    else:
        config["distributed_type"] = "MULTI_GPU" if hw.world_size > 1 else "NO"
    return config


def fsdp_config(exported: ExportedPlan) -> dict[str, Any]:
    """The ``fsdp_config`` block: FSDP2, the block classes as the wrapping units, checkpointing and offload.

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
        "fsdp_offload_params": exported.strategy == "fsdp_cpu_offload",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
    }


def dumps(exported: ExportedPlan, *, ds_config_file: str = DS_CONFIG_FILE) -> str:
    """The YAML text (``yaml.safe_dump``, keys in a stable order)."""
    return yaml.safe_dump(accelerate_config(exported, ds_config_file=ds_config_file), sort_keys=True)
