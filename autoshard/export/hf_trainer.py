"""Hugging Face ``Trainer`` arguments for the plan, as command-line flags and an ``fsdp_config.json``.

Flag and key names from transformers 5.23 ``training_args.py``: ``--deepspeed`` (a JSON path), ``--fsdp`` with
``--fsdp_config`` (a JSON path; keys ``version``, ``reshard_after_forward``, ``auto_wrap_policy``,
``transformer_layer_cls_to_wrap``, ``activation_checkpointing``, ``cpu_offload``), ``--per_device_train_batch_size``,
``--gradient_accumulation_steps``, ``--bf16`` / ``--fp16``.
"""

from __future__ import annotations

import shlex

from autoshard.export.accelerate import DS_CONFIG_FILE
from autoshard.planner.plan_file import ExportedPlan
from autoshard.strategies import exporter

FSDP_CONFIG_FILE = "fsdp_config.json"


def arguments(exported: ExportedPlan, *, ds_config_file: str = DS_CONFIG_FILE,
              fsdp_config_file: str = FSDP_CONFIG_FILE) -> list[str]:
    """``TrainingArguments`` flags, e.g. ``["--per_device_train_batch_size", "4", ..., "--bf16"]``.

    Raises:
        UsageError: the Trainer cannot run this plan (FSDP2 hybrid sharding).
    """
    args = ["--per_device_train_batch_size", str(exported.micro_batch_size),
            "--gradient_accumulation_steps", str(exported.gradient_accumulation)]
    if exported.precision in ("bf16-mixed", "bf16-true"):
        args.append("--bf16")
    elif exported.precision == "16-mixed":
        args.append("--fp16")
    args += exporter(exported.family).hf_trainer(exported, ds_config_file=ds_config_file,
                                                 fsdp_config_file=fsdp_config_file)
    return args


def command_line(exported: ExportedPlan, *, script: str = "train.py") -> str:
    """One shell line: ``python train.py <flags>`` (prefix it with a launcher from ``launch.sh``)."""
    return shlex.join(["python", script, *arguments(exported)])


