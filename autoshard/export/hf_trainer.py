"""Hugging Face ``Trainer`` arguments for the plan: command-line flags and an ``fsdp_config.json``, or a
``TrainingArguments`` object (:func:`training_arguments`).

Flag and key names from transformers 5.23 ``training_args.py``: ``--deepspeed`` (a JSON path or a dict),
``--fsdp`` with ``--fsdp_config`` (a JSON path or a dict; keys ``version``, ``reshard_after_forward``,
``auto_wrap_policy``, ``transformer_layer_cls_to_wrap``, ``activation_checkpointing``, ``cpu_offload``),
``--per_device_train_batch_size``, ``--gradient_accumulation_steps``, ``--bf16`` / ``--fp16`` and
``--max_grad_norm``, whose default 1.0 clips; ``--optim`` (``adamw_torch``: ``torch.optim.AdamW`` with torch's
foreach default; ``adamw_torch_fused``: ``fused=True``, ``trainer_optimizer.py::_get_adamw_torch``; the default
is ``adamw_torch_fused`` on torch >= 2.8); with DeepSpeed, ``integrations/deepspeed.py`` refuses a
``gradient_clipping`` that differs from it, so the plan's (its ``grad_clip_norm``, else off: 0.0) is written.
``--tf32 True`` when the plan prices fp32 matmuls on TF32 (its ``float32_matmul_precision`` is not ``highest``):
the Trainer then sets ``torch.backends.cuda.matmul.allow_tf32`` (and refuses the flag on a GPU without TF32).
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from autoshard.errors import UsageError
from autoshard.export.accelerate import DS_CONFIG_FILE
from autoshard.export.family import gradient_clipping_norm
from autoshard.planner.plan_file import ExportedPlan
from autoshard.strategies import exporter

if TYPE_CHECKING:
    from transformers import TrainingArguments

FSDP_CONFIG_FILE = "fsdp_config.json"


def arguments(exported: ExportedPlan, *, ds_config_file: str = DS_CONFIG_FILE,
              fsdp_config_file: str = FSDP_CONFIG_FILE) -> list[str]:
    """``TrainingArguments`` flags, e.g. ``["--per_device_train_batch_size", "4", ..., "--bf16"]``.

    Raises:
        UsageError: the Trainer cannot run this plan (FSDP2 hybrid sharding).
    """
    args = ["--per_device_train_batch_size", str(exported.micro_batch_size),
            "--gradient_accumulation_steps", str(exported.gradient_accumulation),
            "--max_grad_norm", str(gradient_clipping_norm(exported))]
    if exported.precision in ("bf16-mixed", "bf16-true"):
        args.append("--bf16")
    elif exported.precision == "16-mixed":
        args.append("--fp16")
    args += optimizer_arguments(exported)
    if exported.hardware.device_type == "cpu":  # else the Trainer refuses --bf16 without a GPU ("use_cpu")
        args += ["--use_cpu", "True"]
    if exported.float32_matmul_precision != "highest":
        args += ["--tf32", "True"]
    args += exporter(exported.family).hf_trainer(exported, ds_config_file=ds_config_file,
                                                 fsdp_config_file=fsdp_config_file)
    return args


_HF_ADAMW = {"foreach": "adamw_torch", "fused": "adamw_torch_fused"}
"""The Trainer's ``--optim`` for AdamW by implementation; the for-loop has none (``optim_args`` is not read for
``adamw_torch``, transformers 5.23)."""


def optimizer_arguments(exported: ExportedPlan) -> list[str]:
    """``["--optim", ...]`` when the plan names an optimizer the Trainer would not build by default: an AdamW
    implementation it can run, bitsandbytes' 8-bit AdamW, SGD with the momentum autoshard plans (``trainer_optimizer.
    py::_get_sgd`` reads ``momentum`` from ``--optim_args``), Adafactor; else nothing (AdamW's default, and Adam:
    the Trainer's AdamW at its default weight decay 0).

    Example:
        >>> import dataclasses
        >>> optimizer_arguments(dataclasses.replace(read("plan.json"), optimizer_impl="fused"))  # doctest: +SKIP
        ['--optim', 'adamw_torch_fused']
    """
    if exported.optimizer == "adamw8bit":
        return ["--optim", "adamw_bnb_8bit"]  # bnb.optim.AdamW(optim_bits=8): AdamW8bit's defaults
    if exported.optimizer == "sgd":  # the plan's SGD holds a momentum buffer; the Trainer's has none unless asked
        return ["--optim", "sgd", "--optim_args", "momentum=0.9"]
    if exported.optimizer == "adafactor":  # transformers.Adafactor without a first moment, as torch's
        return ["--optim", "adafactor"]
    if exported.optimizer != "adamw" or exported.optimizer_impl not in _HF_ADAMW:
        return []
    return ["--optim", _HF_ADAMW[exported.optimizer_impl]]


def command_line(exported: ExportedPlan, *, script: str = "train.py") -> str:
    """One shell line: ``python train.py <flags>`` on one device; on several, the plan's ``torchrun`` (as
    ``launch.sh`` has it) running ``train.py <flags>``: ``python`` would start one process of the plan's many.
    A plan whose optimizer steps on the host runs it with ``OMP_NUM_THREADS`` set as ``launch.sh`` sets it
    (:func:`autoshard.export.launch.host_thread_lines`)."""
    from autoshard.export.launch import host_threads, torchrun

    line = shlex.join([script, *arguments(exported)])
    hw = exported.hardware
    command = f"python {line}" if hw.nodes * hw.gpus_per_node == 1 else torchrun(exported, script=line)
    if exported.strategy_traits.offloads:
        command = f"OMP_NUM_THREADS={host_threads(hw.gpus_per_node)} {command}"
    return command


def training_arguments(exported: ExportedPlan, **overrides: Any) -> TrainingArguments:
    """``transformers.TrainingArguments`` from the same flags as :func:`arguments`, with the family's config
    files (``ds_config.json``, ``fsdp_config.json``) passed as dicts, so no file needs to exist.

    Args:
        exported: the plan.
        **overrides: any other ``TrainingArguments`` field (``output_dir``, ``max_steps``, ``learning_rate``...);
            they win over the plan's.

    Raises:
        UsageError: transformers is not installed, or the Trainer cannot run this plan.

    Example:
        >>> args = training_arguments(read("plan.json"), output_dir="out", max_steps=100)  # doctest: +SKIP
    """
    try:
        from transformers import HfArgumentParser, TrainingArguments
    except ImportError as e:
        raise UsageError("building TrainingArguments needs transformers, which is not installed.",
                         hint="pip install 'transformers>=4.45'") from e
    files = exporter(exported.family).files(exported, validate=False)
    # transformers 5.23 types HfArgumentParser's argument as a DataClassType protocol TrainingArguments misses.
    parser = HfArgumentParser(TrainingArguments)  # type: ignore[arg-type]
    namespace, rest = parser.parse_known_args(arguments(exported))
    if rest:  # a flag the installed transformers does not know
        raise UsageError(f"this transformers does not take {' '.join(rest)}.", hint="pip install -U transformers")
    values = {k: json.loads(files[v]) if isinstance(v, str) and v in files else v for k, v in vars(namespace).items()}
    try:
        return TrainingArguments(**{**values, **overrides})
    except ValueError as e:  # its own checks of this machine: "Your setup doesn't support bf16/gpu" without a GPU
        raise UsageError(f"transformers' TrainingArguments refuses the plan's settings here: {e}",
                         hint="Build them on the machine the plan is for (its GPUs), or override the setting "
                              "(e.g. bf16=False) to try them here.") from e
