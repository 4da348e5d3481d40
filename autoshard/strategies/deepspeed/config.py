"""``ds_config.json`` for the ``deepspeed_stage_*`` strategies, checked by DeepSpeed's own config classes.

Keys and defaults are those of deepspeed 0.19.8: ``runtime/zero/config.py::DeepSpeedZeroConfig`` (the
``zero_optimization`` block, a pydantic model that forbids unknown keys), ``runtime/zero/offload_config.py``
(``offload_optimizer`` / ``offload_param``), ``runtime/swap_tensor/aio_config.py`` (``aio``),
``runtime/precision_config.py`` (``bf16`` / ``fp16``) and ``runtime/config.py::DeepSpeedConfig`` (batch sizes).

``gradient_clipping`` is the plan's ``grad_clip_norm``, else 0.0 (off): DeepSpeed's own default clips at 1.0,
which the other backends do not. Left to the user on purpose: the
``optimizer`` / ``scheduler`` blocks (the training script builds them; with optimizer offload DeepSpeed wants
``deepspeed.ops.adam.DeepSpeedCPUAdam``), and wrapping blocks in activation checkpointing (DeepSpeed's
``activation_checkpointing`` block only tunes ``deepspeed.checkpointing``; it checkpoints nothing by itself).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

from autoshard.errors import UsageError
from autoshard.planner.plan_file import ExportedPlan
from autoshard.strategies import get

NVME_PATH_PLACEHOLDER = "/local_nvme"
"""Written as ``nvme_path`` when the hardware names no mounted NVMe directory; the user must replace it."""
_ZERO_KNOBS = ("reduce_bucket_size", "overlap_comm", "contiguous_gradients", "stage3_prefetch_bucket_size",
               "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
               "sub_group_size")
"""autoshard knobs that are ``zero_optimization`` keys of the same name (DeepSpeedZeroConfig)."""
_AIO_KNOBS = {"aio_block_size": "block_size", "aio_queue_depth": "queue_depth",
              "aio_thread_count": "intra_op_parallelism"}
"""autoshard knob → ``aio`` key (runtime/swap_tensor/constants.py, deepspeed 0.19.8)."""


def ds_config(exported: ExportedPlan) -> dict[str, Any]:
    """The DeepSpeed config of a ``deepspeed_stage_*`` plan.

    Raises:
        UsageError: the plan's strategy is not a DeepSpeed one.
    """
    if exported.family != "deepspeed":
        raise UsageError(f"ds_config.json is for DeepSpeed strategies, and the plan uses {exported.strategy}.")
    strategy = get(exported.strategy)
    s = exported.settings
    nvme_path = exported.hardware.nvme_path or NVME_PATH_PLACEHOLDER
    zero: dict[str, Any] = {"stage": strategy.stage}  # type: ignore[attr-defined]
    zero.update({k: s[k] for k in _ZERO_KNOBS if k in s})
    for key, device in (("offload_optimizer", strategy.offload_optimizer),  # type: ignore[attr-defined]
                        ("offload_param", strategy.offload_param)):  # type: ignore[attr-defined]
        if device != "none":
            # pin_memory: page-locked host buffers so host<->GPU copies run asynchronously (DeepSpeed's default
            # is False; runtime/zero/offload_config.py). It costs host RAM that cannot be swapped.
            block: dict[str, Any] = {"device": device, "pin_memory": True}
            if device == "nvme":
                block["nvme_path"] = nvme_path
            zero[key] = block
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": exported.micro_batch_size,
        "gradient_accumulation_steps": exported.gradient_accumulation,
        "train_batch_size": exported.global_batch_size,
        "zero_optimization": zero,
        # The plan's clip, else off, as in the other backends' configs: DeepSpeed's own default clips at norm 1.0
        # (runtime/constants.py GRADIENT_CLIPPING_DEFAULT, 0.19.8), which would change training silently.
        "gradient_clipping": exported.grad_clip_norm or 0.0,
    }
    config.update(precision_sections(exported.precision))
    if any(k in s for k in _AIO_KNOBS):
        # runtime/swap_tensor/aio_config.py defaults for the two keys autoshard does not tune.
        config["aio"] = {**{key: s[knob] for knob, key in _AIO_KNOBS.items() if knob in s},
                         "single_submit": False, "overlap_events": True}
    return config


def precision_sections(precision: str) -> dict[str, Any]:
    """The ``bf16`` / ``fp16`` block for a Lightning precision name.

    DeepSpeed's bf16 and fp16 modes keep 16-bit parameters and fp32 master weights in the ZeRO optimizer, which
    is what ``bf16-mixed`` / ``16-mixed`` plan for; ``bf16-true`` maps to the same block. ``loss_scale: 0`` is
    dynamic loss scaling (runtime/precision_config.py).

    Example:
        >>> precision_sections("16-mixed"), precision_sections("32-true")
        ({'fp16': {'enabled': True, 'loss_scale': 0}}, {})
    """
    if precision in ("bf16-mixed", "bf16-true"):
        return {"bf16": {"enabled": True}}
    if precision == "16-mixed":
        return {"fp16": {"enabled": True, "loss_scale": 0}}
    if precision == "32-true":
        return {}
    raise UsageError(f"unknown precision {precision!r}.", hint="Use 32-true, 16-mixed, bf16-mixed or bf16-true.")


def validate(config: dict[str, Any], world_size: int) -> None:
    """Check ``config`` with DeepSpeed's own config classes, as ``deepspeed.initialize`` would.

    ``DeepSpeedConfig`` takes the world size from ``torch.distributed`` and falls back to 1 when no process group
    exists (deepspeed 0.19.8 ``runtime/config.py``, even when ``mpu`` is given), so the batch sizes are checked
    here with its rule ``train_batch_size == micro × accumulation × world_size`` and the rest of the config is
    validated with ``train_batch_size`` for one rank.

    Raises:
        UsageError: DeepSpeed is not installed, or it rejects the config (its message is included).
    """
    if importlib.util.find_spec("deepspeed") is None:
        raise UsageError("checking ds_config.json needs DeepSpeed, which is not installed.",
                         hint="pip install deepspeed, or export with validate=False to write it unchecked.")
    # DeepSpeed's logger writes to the sys.stdout of its first import, and checking a config logs "Setting
    # accelerator to CPU" (deepspeed 0.19.8 utils/logging.py, accelerator/real_accelerator.py): a check is not
    # output, so both happen with stdout on stderr, and `autoshard export > files.txt` holds the file list alone.
    with contextlib.redirect_stdout(sys.stderr), _quiet_accelerator_choice():
        _validate(config, world_size)


class _AcceleratorChoice(logging.Filter):
    """Drops DeepSpeed's "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect
    it." (``accelerator/real_accelerator.py``, deepspeed 0.19.8): checking a config runs nothing on a device, and
    ``autoshard export`` on a laptop printed it as a warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Setting accelerator to" not in record.getMessage()


@contextlib.contextmanager
def _quiet_accelerator_choice() -> Iterator[None]:
    """While DeepSpeed is imported to check a config: its logger (``utils/logging.py`` creates it by name, keeping
    filters set before) says nothing of the accelerator it picked."""
    quiet = _AcceleratorChoice()
    logger = logging.getLogger("DeepSpeed")
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _validate(config: dict[str, Any], world_size: int) -> None:
    import deepspeed
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.swap_tensor.aio_config import AIO_DEFAULT_DICT
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    micro, accumulation = config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]
    if config["train_batch_size"] != micro * accumulation * world_size:
        raise UsageError(f"ds_config.json: train_batch_size {config['train_batch_size']} != "
                         f"{micro} × {accumulation} × {world_size} ranks, which DeepSpeed requires.")
    unknown_aio = set(config.get("aio", {})) - set(AIO_DEFAULT_DICT)  # get_aio_config ignores unknown keys
    if unknown_aio:
        raise UsageError(f"ds_config.json: DeepSpeed {deepspeed.__version__} has no aio key(s) "
                         f"{', '.join(sorted(unknown_aio))}.")
    one_rank = copy.deepcopy(config)
    one_rank["train_batch_size"] = micro * accumulation
    try:
        DeepSpeedZeroConfig(**config["zero_optimization"])
        DeepSpeedConfig(one_rank)
    except (ValueError, AssertionError, TypeError, KeyError) as e:  # pydantic's ValidationError is a ValueError
        raise UsageError(f"DeepSpeed {deepspeed.__version__} rejects the generated ds_config.json: {e}") from e


def dumps(exported: ExportedPlan, *, check: bool = True) -> str:
    """``ds_config.json``'s text, validated first unless ``check`` is false.

    Raises:
        UsageError: see :func:`ds_config` and :func:`validate`.
    """
    config = ds_config(exported)
    if check:
        validate(config, exported.hardware.world_size)
    return json.dumps(config, indent=2) + "\n"
