"""How DeepSpeed ZeRO (0.19.8) lays parameters out for given settings: the settings themselves, the ZeRO-1/2 flat
partition, the ZeRO-3 per-parameter partition and what ZeRO-3 keeps gathered. Used by the memory model
(:mod:`autoshard.strategies.deepspeed.memory`) and the cost model (:mod:`autoshard.strategies.deepspeed.cost`)."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from autoshard.strategies.workload import first_trainable

OFFLOAD_DEVICES = ("none", "cpu", "nvme")
"""``offload_optimizer`` / ``offload_param`` devices (``runtime/zero/offload_config.py::OffloadDeviceEnum``)."""

NCCL_START_ALIGNMENT = 2
"""ZeRO-1/2 pad the flat buffer to a multiple of ``2 * N`` elements
(``stage_1_and_2.py::DeepSpeedZeroOptimizer.__init__``: ``nccl_start_alignment_factor = 2``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ZeroSettings:
    """The DeepSpeed settings the memory and cost models depend on (names as in the DeepSpeed config)."""

    stage: int
    offload_optimizer: str = "none"
    offload_param: str = "none"
    reduce_bucket_size: int
    """Elements per gradient bucket (``zero_optimization.reduce_bucket_size``)."""
    overlap_comm: bool
    contiguous_gradients: bool
    prefetch_bucket_size: int = 0
    """ZeRO-3: elements gathered ahead of use (``stage3_prefetch_bucket_size``)."""
    param_persistence_threshold: int = 0
    """ZeRO-3: parameters with at most this many elements stay whole on every rank."""
    max_live_parameters: int = 0
    max_reuse_distance: int = 0
    sub_group_size: int = 10**9
    optimizer_buffer_count: int = 4
    """NVMe optimizer swap buffers (``offload_config.py::DeepSpeedZeroOffloadOptimizerConfig.buffer_count``)."""
    param_buffer_count: int = 5
    """NVMe parameter swap buffers (``DeepSpeedZeroOffloadParamConfig.buffer_count``)."""
    param_buffer_size: int = 10**8
    """Elements per NVMe parameter swap buffer (``DeepSpeedZeroOffloadParamConfig.buffer_size``)."""
    max_in_cpu: int = 10**9
    """Parameter elements kept in CPU memory under NVMe parameter offload (``...ParamConfig.max_in_cpu``)."""
    aio_thread_count: int = 1
    """``aio.intra_op_parallelism`` (Lightning's ``thread_count``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FlatLayout:
    """ZeRO-1/2: one flat buffer of all trainable parameters, cut into ``N`` equal partitions."""

    aligned_numel: int
    partition_numel: int
    gradient_partition_numel: int
    """Largest over ranks of the summed sizes of the parameters that overlap a rank's partition: the size of
    ``grads_in_partition`` (``stage_1_and_2.py::copy_grads_in_partition``), whole tensors even when cut."""


def flat_layout(numels: Sequence[int], world: int) -> FlatLayout:
    """The partitioning of ``stage_1_and_2.py::DeepSpeedZeroOptimizer.__init__`` (one parameter group).

    Example:
        >>> flat_layout([4, 3, 3], world=2)  # padded to 12; rank 0's [0, 6) overlaps tensors of 4 and 3
        FlatLayout(aligned_numel=12, partition_numel=6, gradient_partition_numel=7)
    """
    total = sum(numels)
    alignment = NCCL_START_ALIGNMENT * world
    aligned = math.ceil(total / alignment) * alignment
    size = aligned // world
    ends = list(itertools.accumulate(numels))  # tensor t spans [ends[t] - numels[t], ends[t])
    starts = [e - n for e, n in zip(ends, numels, strict=True)]
    prefix = [0, *ends]
    worst = 0
    # A rank whose range holds no tensor's start lies inside one tensor, which the rank holding that tensor's
    # start overlaps too: those ranks alone can hold the most (ranks past the data hold padding only).
    for rank in {a // size for a, n in zip(starts, numels, strict=True) if n > 0}:
        lo, hi = rank * size, (rank + 1) * size
        first = bisect.bisect_right(ends, lo)  # the first tensor ending after lo
        last = bisect.bisect_left(starts, hi)  # one past the last tensor starting before hi
        worst = max(worst, prefix[last] - prefix[first] if last > first else 0)
    return FlatLayout(aligned_numel=aligned, partition_numel=size, gradient_partition_numel=worst)


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionedLayout:
    """ZeRO-3: every parameter cut into ``N`` padded pieces; small ones also kept whole."""

    partition_numel: int
    """Sum over parameters of ``ceil(numel / N)`` (``partition_parameters.py::Init._partition_param``)."""
    persistent_numel: int
    """Elements of the parameters kept whole on every rank (``parameter_offload.py::mark_persistent_parameters``:
    ``numel <= stage3_param_persistence_threshold``)."""
    gathered_numel: int
    """Elements of the parameters gathered for compute (all but the persistent ones)."""
    backward_numel: int
    """Of those, the elements gathered again in backward: all but frozen tensors before the first trainable one
    (see :func:`partitioned_layout`)."""
    retained_numel: int
    """Of those, the elements still gathered when backward starts: a parameter is not released after its
    forward use when it is used again within ``stage3_max_reuse_distance`` elements of the module trace
    (``partitioned_param_coordinator.py::__params_to_release``). The trace runs forward then backward, so
    tensor ``t`` comes back after twice the parameters that follow it."""
    prefetch_numel: int
    """Elements gathered ahead of use at a time: ``stage3_prefetch_bucket_size`` capped by
    ``stage3_max_live_parameters``, plus the tensor that crosses it (``fetch_sub_module`` stops after it)."""
    largest_gathered_numel: int
    sub_group_numel: int
    """Elements of the largest optimizer sub-group (``stage3.py::_create_fp16_sub_groups``, ``sub_group_size``)."""


def partitioned_layout(numels: Sequence[int], world: int, settings: ZeroSettings,
                       module_numels: Sequence[int] = ()) -> PartitionedLayout:
    """The ZeRO-3 partitioning and gathering quantities for ``numels`` (trainable tensors in module order).

    ``module_numels`` lists every parameter tensor in module order, a frozen one's element count negated
    (:attr:`~autoshard.strategies.workload.Workload.module_parameter_numels`; empty: all train). ZeRO-3 partitions
    and gathers frozen parameters as it does trainable ones: the hooks of ``parameter_offload.py`` fetch every
    parameter of a module, whatever its ``requires_grad``, before its forward and, when the module's output needs
    a gradient, before its backward (``_pre_backward_module_hook``: a frozen weight is gathered to compute the
    input's gradient). A frozen tensor before the first trainable one (a frozen embedding, frozen lower blocks)
    has no backward use: the module trace has no later use of it, so ``__params_to_release`` frees it after
    forward. One after it (the frozen base weights around LoRA adapters, all but the norms in norm-only tuning)
    is used again in backward, and stays gathered between the two uses like a trainable one.

    Examples:
        >>> s = ZeroSettings(stage=3, reduce_bucket_size=1, overlap_comm=False, contiguous_gradients=False,
        ...                  param_persistence_threshold=10, max_reuse_distance=10**9)
        >>> partitioned_layout([50], 2, s, module_numels=(-100, 50, -100)).retained_numel  # not the first
        150
        >>> partitioned_layout([50], 2, s).retained_numel
        50
    """
    parts = [math.ceil(n / world) for n in numels]
    every = module_numels or numels
    first = first_trainable(every)
    used = [(abs(n), i >= first) for i, n in enumerate(every)]  # (numel, used in backward)
    gathered = [n for n, _ in used if n > settings.param_persistence_threshold]
    retained, after = 0, 0
    for n, in_backward in reversed(used):
        # Between its forward and backward uses a tensor sees the forward use of those after it and the backward
        # use of those after it that backward reaches.
        if in_backward and n > settings.param_persistence_threshold and after < settings.max_reuse_distance:
            retained += n
        after += n * (2 if in_backward else 1)
    largest = max(gathered, default=0)
    window = min(settings.prefetch_bucket_size, settings.max_live_parameters)
    prefetch = min(sum(gathered), window + largest) if window > 0 else 0
    sub_group, current = 0, 0
    for p in parts:
        current += p
        if current >= settings.sub_group_size:
            sub_group, current = max(sub_group, current), 0
    return PartitionedLayout(
        partition_numel=sum(parts),
        persistent_numel=sum(n for n, _ in used) - sum(gathered),
        gathered_numel=sum(gathered),
        backward_numel=sum(n for n, b in used if b and n > settings.param_persistence_threshold),
        retained_numel=retained,
        prefetch_numel=prefetch,
        largest_gathered_numel=largest,
        sub_group_numel=max(sub_group, current),
    )
