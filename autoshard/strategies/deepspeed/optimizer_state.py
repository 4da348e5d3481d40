"""Bytes DeepSpeed keeps per parameter: the dtype of its model copy and gradients, and the optimizer's state on
the fp32 flat partitions it steps (:mod:`autoshard.strategies.deepspeed.memory` prices the ranks' memory with
them, :mod:`autoshard.strategies.deepspeed.offload_cost` the offloaded traffic)."""

from __future__ import annotations

import functools

import torch

from autoshard.profiler.optimizers import build_optimizer
from autoshard.profiler.options import Precision, state_follows_parameter_dtype
from autoshard.strategies.workload import Workload

FP32_BYTES = 4


def model_dtype_bytes(precision: Precision) -> int:
    """Bytes of the dtype DeepSpeed keeps model parameters and gradients in.

    Lightning's ``DeepSpeedPrecision`` turns ``16-mixed`` into DeepSpeed ``fp16`` and ``bf16-*`` into ``bf16``
    (the module is converted; no autocast), ``32-true`` into fp32. The gradient dtype follows the model dtype:
    ``engine.py::DeepSpeedEngine.get_data_types`` uses ``grad_accum_dtype`` = model dtype unless the config sets
    ``data_types.grad_accum_dtype``; the communication dtype follows too (``engine.py::communication_data_type``).
    """
    return FP32_BYTES if precision is Precision.FP32 else 2


def frozen_dtype_bytes(workload: Workload) -> float:
    """Bytes per element of the frozen parameters on a DeepSpeed rank.

    Its ``bf16`` and ``fp16`` modes cast every parameter of the module to the model dtype
    (``engine.py::DeepSpeedEngine._configure_distributed_model``, deepspeed 0.19.8); fp32 casts nothing, so a
    frozen base stays in the dtype the user built it in (a bf16 base under fp32 LoRA adapters: 2 bytes).
    """
    lp = model_dtype_bytes(workload.precision)
    held = workload.frozen_bytes_per_element
    return lp if held is None or workload.precision is not Precision.FP32 else held


FLAT_SHAPED_OPTIMIZERS = ("adafactor",)
"""Optimizers whose state depends on the tensor's shape: torch's Adafactor factors the second moment of a tensor of
two or more dimensions into a row and a column, and keeps it whole for a 1-D one
(``torch/optim/_adafactor.py::Adafactor._init_group``: ``if p.grad.dim() > 1``, torch 2.x; transformers'
``Adafactor`` likewise, ``factored = len(grad_shape) >= 2``)."""

_FLAT_PROBE_NUMEL = 1024


def state_bytes_per_parameter(workload: Workload) -> float:
    """Optimizer-state bytes per parameter once the state lives on an fp32 master copy.

    DeepSpeed's optimizer always steps fp32 master partitions (``single_partition_of_fp32_groups`` in
    ``stage_1_and_2.py``, ``fp32_partitioned_groups_flat`` in ``stage3.py``), so state profiled on bf16 weights
    (``bf16-true``) is scaled to fp32; bitsandbytes' 8-bit state is not (its size does not follow the dtype).
    Those partitions are flat 1-D tensors (``param_group['params'] = [single_partition_of_fp32_groups[i]]``,
    ``DeepSpeedZeroOptimizer.__init__``), so an optimizer whose state depends on the shape
    (:data:`FLAT_SHAPED_OPTIMIZERS`) keeps what it keeps for a 1-D tensor: Adafactor its whole second moment,
    4 B per element, not the factored rows and columns of the model's matrices the trace measured.
    """
    if workload.optimizer in FLAT_SHAPED_OPTIMIZERS:
        return flat_state_bytes_per_element(workload.optimizer)
    if not state_follows_parameter_dtype(workload.optimizer):
        return workload.optimizer_state_bytes_per_parameter
    profiled = 2 if workload.precision is Precision.BF16_TRUE else FP32_BYTES
    return workload.optimizer_state_bytes_per_parameter * FP32_BYTES / profiled


@functools.cache
def flat_state_bytes_per_element(optimizer: str) -> float:
    """State bytes per element that ``optimizer`` keeps for one 1-D fp32 tensor, measured by stepping it once on
    two sizes (what does not grow with the tensor, the ``step`` counter, drops out).

    Example:
        >>> flat_state_bytes_per_element("adafactor"), flat_state_bytes_per_element("adamw")
        (4.0, 8.0)
    """
    def state_bytes(numel: int) -> int:
        parameter = torch.nn.Parameter(torch.zeros(numel, dtype=torch.float32))
        parameter.grad = torch.ones_like(parameter)
        stepped = build_optimizer(optimizer, [parameter])
        stepped.step()
        return sum(t.numel() * t.element_size() for state in stepped.state.values() for t in state.values()
                   if isinstance(t, torch.Tensor))

    return (state_bytes(2 * _FLAT_PROBE_NUMEL) - state_bytes(_FLAT_PROBE_NUMEL)) / _FLAT_PROBE_NUMEL
