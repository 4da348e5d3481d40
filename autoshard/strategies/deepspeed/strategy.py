"""DeepSpeed ZeRO stages 1-3, with CPU and NVMe offload, under Lightning's strategy names.

The memory model lives in :mod:`autoshard.strategies.deepspeed.memory`, the step-time model in
:mod:`autoshard.strategies.deepspeed.cost`; this module lists the knobs with DeepSpeed's own
defaults (deepspeed 0.19.8, ``runtime/zero/config.py::DeepSpeedZeroConfig``) and says when a preset cannot run.

Example:
    >>> from autoshard.strategies import get
    >>> s = get("deepspeed_stage_3_offload")
    >>> s.family, s.stage, s.offload_optimizer, s.offload_param
    ('deepspeed', 3, 'cpu', 'cpu')
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import torch

from autoshard.hardware.specs import HardwareSpec
from autoshard.profiler.options import Precision, own_kernel
from autoshard.strategies.base import (
    Candidate,
    CostEstimate,
    Knob,
    MemoryEstimate,
    OffloadTarget,
    Strategy,
    Traits,
)
from autoshard.strategies.deepspeed import cost as zero_cost
from autoshard.strategies.deepspeed import memory as zero_memory
from autoshard.strategies.deepspeed.layout import OFFLOAD_DEVICES, ZeroSettings
from autoshard.strategies.workload import Workload

# DeepSpeed 0.19.8 defaults, runtime/zero/config.py::DeepSpeedZeroConfig (fields and validators).
REDUCE_BUCKET_SIZE = 500_000_000  # reduce_bucket_size = pp_int(5e8)
PREFETCH_BUCKET_SIZE = 50_000_000  # stage3_prefetch_bucket_size = pp_int(5e7)
BUCKET_MEMORY_SHARE = 0.025
"""DeepSpeed's default reduce bucket — 5e8 elements × 2 bytes × 2 buffers with overlap_comm = 2 GB — is 2.5 % of an
80 GB GPU. The default here keeps that share on smaller GPUs (a 24 GB GPU gets 1.5e8, close to Lightning's 2e8)
and never exceeds DeepSpeed's own default: bucket sizes scale with GPU memory."""
PARAM_PERSISTENCE_THRESHOLD = 100_000  # stage3_param_persistence_threshold = pp_int(1e5)
MAX_LIVE_PARAMETERS = 1_000_000_000  # stage3_max_live_parameters = pp_int(1e9)
MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance = pp_int(1e9)
SUB_GROUP_SIZE = 1_000_000_000  # sub_group_size = pp_int(1e9)
# runtime/swap_tensor/constants.py: AIO_BLOCK_SIZE_DEFAULT, AIO_QUEUE_DEPTH_DEFAULT, AIO_INTRA_OP_PARALLELISM_DEFAULT.
AIO_BLOCK_SIZE = 1_048_576
AIO_QUEUE_DEPTH = 8
AIO_THREAD_COUNT = 1

INSTALL_HINT = "pip install deepspeed"
CPU_ADAM_OPTIMIZERS = ("adam", "adamw")
"""Optimizers ZeRO-Offload can step: those ``fit()`` turns into DeepSpeedCPUAdam (``backend.py::_cpu_adam_like``)."""


class DeepSpeedZero(Strategy):
    """A DeepSpeed ZeRO stage with optional optimizer and parameter offload.

    Args:
        stage: 1 (optimizer state sharded), 2 (+ gradients) or 3 (+ parameters).
        offload_optimizer: ``none``, ``cpu`` or ``nvme`` (``zero_optimization.offload_optimizer.device``).
        offload_param: ``none``, ``cpu`` or ``nvme``; stage 3 only (``zero_optimization.offload_param.device``).

    Raises:
        ValueError: a stage or device outside those, or parameter offload below stage 3.
    """

    family = "deepspeed"
    requires = ("deepspeed",)

    def __init__(self, stage: int, offload_optimizer: str = "none", offload_param: str = "none") -> None:
        if stage not in (1, 2, 3):
            raise ValueError(f"stage must be 1, 2 or 3, but got {stage=}.")
        for value in (offload_optimizer, offload_param):
            if value not in OFFLOAD_DEVICES:
                raise ValueError(f"offload devices are {OFFLOAD_DEVICES}, but got {value!r}.")
        if offload_param != "none" and stage != 3:
            # runtime/zero/config.py: offload_param is "Valid only with stage 3".
            raise ValueError(f"parameter offload needs stage 3, but got {stage=}.")
        self.stage = stage
        self.offload_optimizer = offload_optimizer
        self.offload_param = offload_param

    @property
    def traits(self) -> Traits:
        """The ZeRO stage; the offload target is NVMe when either device is, else the CPU when either is."""
        devices = (self.offload_optimizer, self.offload_param)
        target: OffloadTarget = "nvme" if "nvme" in devices else "cpu" if "cpu" in devices else "none"
        return Traits(family="deepspeed", zero_stage=self.stage, offload=target,
                      offload_parameters=self.offload_param != "none")

    def unsupported(self, hardware: HardwareSpec) -> str | None:
        """DeepSpeed must be importable; NVMe offload needs an NVMe device or path."""
        if importlib.util.find_spec("deepspeed") is None:
            return f"{self.name} needs DeepSpeed, which is not installed ({INSTALL_HINT})."
        if "nvme" in (self.offload_optimizer, self.offload_param) and not hardware.node.nvme:
            return (f"{self.name} offloads to NVMe, but no NVMe device or path is known on this hardware; "
                    "name one with --nvme PATH.")
        return None

    def unsupported_precision(self, precision: Precision, hardware: HardwareSpec) -> str | None:
        """DeepSpeed's fp16 on CPU processes needs a CPU with fp16 kernels: its CPU accelerator asks
        ``torch.ops.mkldnn._is_mkldnn_fp16_supported()`` (``accelerator/cpu_accelerator.py``, 0.19.8), and
        ``deepspeed.initialize`` raises "Type fp16 is not supported on your device" without them."""
        if precision is not Precision.FP16_MIXED or hardware.gpu is not None:
            return None
        try:
            supported = bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
        except (AttributeError, RuntimeError):
            supported = False
        if supported:
            return None
        return (f"{self.name} cannot train in 16-mixed on this CPU: DeepSpeed's fp16 needs CPU fp16 kernels "
                "(oneDNN), which it lacks; bf16-mixed or 32-true train.")

    def refuses(self, optimizer: str) -> str | None:
        """ZeRO-Offload steps on the host with DeepSpeed's CPU Adam: it refuses every other optimizer.

        DeepSpeed raises for a client optimizer other than its own ``DeepSpeedCPUAdam`` / ``DeepSpeedCPULion``
        under offload (``runtime/engine.py::DeepSpeedEngine._configure_optimizer``: ``zero_force_ds_cpu_optimizer``,
        true by default, deepspeed 0.19.8), and ``fit()`` turns only Adam / AdamW into DeepSpeedCPUAdam
        (``backend.py::_cpu_adam_like``); a bitsandbytes optimizer is refused even when it is an Adam.
        """
        if self.offload_optimizer == "none" or optimizer in CPU_ADAM_OPTIMIZERS:
            return None
        what = "a bitsandbytes optimizer" if own_kernel(optimizer) else optimizer
        return (f"ZeRO-Offload steps the optimizer on the host with DeepSpeed's CPU Adam and refuses {what} "
                "(zero_force_ds_cpu_optimizer); only Adam and AdamW run there. ZeRO without offload steps it on "
                "the GPU.")

    def knobs(self, hardware: HardwareSpec) -> tuple[Knob, ...]:
        """Settings of ``zero_optimization`` (and ``aio`` for NVMe) with DeepSpeed 0.19.8's defaults, except
        ``reduce_bucket_size``, which scales with GPU memory (:func:`scaled_reduce_bucket_size`).

        ``allgather_bucket_size`` is not offered: in 0.19.8 ZeRO-1/2 gather the updated parameters with one
        ``all_gather_into_tensor`` into the flat buffer whenever torch provides it
        (``runtime/utils.py::all_gather_dp_groups``), so the setting has no effect.
        """
        knobs = [
            Knob(name="reduce_bucket_size", default=scaled_reduce_bucket_size(hardware), kind="int", low=10**6,
                 high=10**9, log=True,
                 description="Elements per gradient bucket; allocated in full (x2 with overlap_comm at stages 1-2)."),
            # config.py::overlap_comm_valid: None becomes `stage == 3`.
            Knob(name="overlap_comm", default=self.stage == 3, kind="bool",
                 description="Reduce gradients (and, at stage 3, gather parameters) on a side stream."),
            Knob(name="contiguous_gradients", default=True, kind="bool",
                 description="Copy gradients into the bucket as they are produced."),
        ]
        if self.stage == 3:
            knobs += [
                Knob(name="stage3_prefetch_bucket_size", default=PREFETCH_BUCKET_SIZE, kind="int", low=0,
                     high=10**9, description="Parameter elements gathered ahead of use."),
                Knob(name="stage3_param_persistence_threshold", default=PARAM_PERSISTENCE_THRESHOLD, kind="int",
                     low=0, high=10**7, description="Tensors this small (elements) stay whole on every rank."),
                Knob(name="stage3_max_live_parameters", default=MAX_LIVE_PARAMETERS, kind="int", low=10**6,
                     high=10**10, log=True, description="Caps how many gathered elements prefetching may reach."),
                Knob(name="stage3_max_reuse_distance", default=MAX_REUSE_DISTANCE, kind="int", low=0, high=10**10,
                     description="Keep a gathered parameter if it is used again within this many elements."),
                Knob(name="sub_group_size", default=SUB_GROUP_SIZE, kind="int", low=10**7, high=10**10, log=True,
                     description="Elements the optimizer steps at a time (and NVMe swap buffer size)."),
            ]
        if "nvme" in (self.offload_optimizer, self.offload_param):
            knobs += [
                Knob(name="aio_block_size", default=AIO_BLOCK_SIZE, kind="choice",
                     choices=(262_144, 524_288, 1_048_576, 2_097_152, 4_194_304), description="aio.block_size"),
                Knob(name="aio_queue_depth", default=AIO_QUEUE_DEPTH, kind="choice", choices=(4, 8, 16, 32, 64),
                     description="aio.queue_depth"),
                Knob(name="aio_thread_count", default=AIO_THREAD_COUNT, kind="int", low=1, high=8,
                     description="aio.intra_op_parallelism (Lightning's thread_count)"),
            ]
        return tuple(knobs)

    def zero_settings(self, hardware: HardwareSpec, candidate: Candidate) -> ZeroSettings:
        """The knob values in force, as the models read them."""
        values: Mapping[str, Any] = self.settings(hardware, candidate)
        return ZeroSettings(
            stage=self.stage,
            offload_optimizer=self.offload_optimizer,
            offload_param=self.offload_param,
            reduce_bucket_size=int(values["reduce_bucket_size"]),
            overlap_comm=bool(values["overlap_comm"]),
            contiguous_gradients=bool(values["contiguous_gradients"]),
            prefetch_bucket_size=int(values.get("stage3_prefetch_bucket_size", 0)),
            param_persistence_threshold=int(values.get("stage3_param_persistence_threshold", 0)),
            max_live_parameters=int(values.get("stage3_max_live_parameters", 0)),
            max_reuse_distance=int(values.get("stage3_max_reuse_distance", 0)),
            sub_group_size=int(values.get("sub_group_size", SUB_GROUP_SIZE)),
            aio_thread_count=int(values.get("aio_thread_count", AIO_THREAD_COUNT)),
        )

    def memory(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> MemoryEstimate:
        """Per-device peak over the step (:mod:`autoshard.strategies.deepspeed.memory`)."""
        return zero_memory.estimate(workload, hardware, candidate, self.zero_settings(hardware, candidate))

    def cost(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> CostEstimate:
        """Step time and throughput (:mod:`autoshard.strategies.deepspeed.cost`)."""
        return zero_cost.estimate(workload, hardware, candidate, self.zero_settings(hardware, candidate))


def scaled_reduce_bucket_size(hardware: HardwareSpec) -> int:
    """DeepSpeed's default reduce bucket, shrunk on GPUs smaller than 80 GB to :data:`BUCKET_MEMORY_SHARE` of their
    memory (2-byte elements, two buffers), in steps of 1e7 elements."""
    memory = hardware.gpu.memory_bytes if hardware.gpu is not None else None
    if memory is None:
        return REDUCE_BUCKET_SIZE
    scaled = int(BUCKET_MEMORY_SHARE * memory / (2 * 2)) // 10**7 * 10**7
    return max(10**7, min(REDUCE_BUCKET_SIZE, scaled))
