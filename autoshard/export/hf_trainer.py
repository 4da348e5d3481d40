"""Hugging Face ``Trainer`` arguments for the plan, as command-line flags and an ``fsdp_config.json``.

Flag and key names from transformers 5.23 ``training_args.py``: ``--deepspeed`` (a JSON path), ``--fsdp`` with
``--fsdp_config`` (a JSON path; keys ``version``, ``reshard_after_forward``, ``auto_wrap_policy``,
``transformer_layer_cls_to_wrap``, ``activation_checkpointing``, ``cpu_offload``), ``--per_device_train_batch_size``,
``--gradient_accumulation_steps``, ``--bf16`` / ``--fp16``.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from autoshard.errors import UsageError
from autoshard.export.accelerate import DS_CONFIG_FILE
from autoshard.export.plan_json import ExportedPlan

FSDP_CONFIG_FILE = "fsdp_config.json"


def fsdp_config(exported: ExportedPlan) -> dict[str, Any]:
    """The Trainer's ``fsdp_config`` for an FSDP plan (FSDP2).

    Raises:
        UsageError: ``fsdp_hybrid``: the Trainer's FSDP2 path has no hybrid sharding (transformers 5.23
            accepts ``hybrid_shard`` only with FSDP1).
    """
    if exported.strategy == "fsdp_hybrid":
        raise UsageError("the Hugging Face Trainer has no FSDP2 hybrid sharding; use the Accelerate config with "
                         "a parallelism config, or plan with strategies=['fsdp'].")
    classes = exported.model.block_classes
    config: dict[str, Any] = {
        "version": 2,
        "reshard_after_forward": exported.settings.get("reshard_after_forward", True) is not False,
        "activation_checkpointing": exported.activation_checkpointing,
        "cpu_offload": exported.strategy == "fsdp_cpu_offload",
    }
    if classes:
        config["auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP"
        config["transformer_layer_cls_to_wrap"] = list(classes)
    return config


def arguments(exported: ExportedPlan, *, ds_config_file: str = DS_CONFIG_FILE,
              fsdp_config_file: str = FSDP_CONFIG_FILE) -> list[str]:
    """``TrainingArguments`` flags, e.g. ``["--per_device_train_batch_size", "4", ..., "--bf16"]``.

    Raises:
        UsageError: see :func:`fsdp_config`.
    """
    args = ["--per_device_train_batch_size", str(exported.micro_batch_size),
            "--gradient_accumulation_steps", str(exported.gradient_accumulation)]
    if exported.precision in ("bf16-mixed", "bf16-true"):
        args.append("--bf16")
    elif exported.precision == "16-mixed":
        args.append("--fp16")
    if exported.family == "deepspeed":
        args += ["--deepspeed", ds_config_file]
    elif exported.family == "fsdp":
        fsdp_config(exported)  # refuses what the Trainer cannot run
        # transformers 5.23 parses --fsdp as a string: "true" is refused ("Unknown `fsdp` option"), so the
        # (deprecated there, still accepted) option string is written; fsdp_config.json's values take precedence.
        reshard = fsdp_config(exported)["reshard_after_forward"]
        options = ["full_shard" if reshard else "shard_grad_op", "auto_wrap"]
        if exported.strategy == "fsdp_cpu_offload":
            options.append("offload")
        args += ["--fsdp", " ".join(options), "--fsdp_config", fsdp_config_file]
    elif exported.family == "ddp":
        s = exported.settings
        args += ["--ddp_bucket_cap_mb", str(int(s["bucket_cap_mb"])),
                 "--ddp_find_unused_parameters", str(bool(s["find_unused_parameters"])).lower()]
    if exported.activation_checkpointing and exported.family != "fsdp":
        args.append("--gradient_checkpointing")
    return args


def command_line(exported: ExportedPlan, *, script: str = "train.py") -> str:
    """One shell line: ``python train.py <flags>`` (prefix it with a launcher from ``launch.sh``)."""
    return shlex.join(["python", script, *arguments(exported)])


def dumps_fsdp_config(exported: ExportedPlan) -> str:
    """``fsdp_config.json``'s text."""
    return json.dumps(fsdp_config(exported), indent=2) + "\n"
