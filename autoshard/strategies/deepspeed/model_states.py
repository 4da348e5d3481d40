"""Model states of one ZeRO rank — parameters, gradients, master weights and optimizer state, on the GPU, the
host or NVMe — as deepspeed 0.19.8 allocates them (:class:`ModelStates`). The phases of the step that add to
them: :mod:`autoshard.strategies.deepspeed.memory`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoshard.strategies.deepspeed.layout import ZeroSettings, flat_layout, partitioned_layout
from autoshard.strategies.deepspeed.optimizer_state import (
    FP32_BYTES,
    frozen_dtype_bytes,
    model_dtype_bytes,
    state_bytes_per_parameter,
)
from autoshard.strategies.workload import Workload

AIO_ALIGNED_BYTES = 1024
"""NVMe swap buffers are rounded to 1 KiB per I/O thread (``runtime/swap_tensor/utils.py::AIO_ALIGNED_BYTES``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelStates:
    """Model-state bytes of one rank in the steady state, where they live — the terms DeepSpeed's estimators
    (``estimate_zero2_model_states_mem_needs``, ``estimate_zero3_model_states_mem_needs``) count."""

    gpu_parameters: int
    """16-bit (or fp32) parameters on the GPU: all of them (ZeRO-1/2), or the partitions plus the persistent
    whole tensors (ZeRO-3; only the persistent ones with parameter offload)."""
    gpu_gradients: int
    """The model-dtype gradient partition kept from backward to the step: ``grads_in_partition`` (ZeRO-1/2),
    ``grad_partitions_flat_buffer`` (ZeRO-3); 0 when it lives on the CPU."""
    gpu_fp32_gradients: int
    """The fp32 gradient the optimizer steps with (per sub-group at ZeRO-3); 0 with optimizer offload."""
    gpu_master: int
    gpu_optimizer_state: int
    cpu_master_and_state: int
    """With optimizer offload: fp32 master, fp32 gradients and optimizer state (pinned CPU memory)."""
    cpu_16bit: int
    """Model-dtype copies in CPU memory: ZeRO-1/2's partition buffer for the copy back
    (``param_buffer_of_bit16_for_cpu_offload_groups``), ZeRO-3's gradient partition buffer and, with parameter
    offload, its parameter partitions."""
    cpu_buffers: int
    """Staging and NVMe swap buffers in CPU memory."""
    nvme: int

    @property
    def gpu(self) -> int:
        """All GPU terms."""
        return (self.gpu_parameters + self.gpu_gradients + self.gpu_fp32_gradients + self.gpu_master
                + self.gpu_optimizer_state)

    @property
    def cpu(self) -> int:
        """All CPU terms."""
        return self.cpu_master_and_state + self.cpu_16bit + self.cpu_buffers


def model_states(workload: Workload, world: int, settings: ZeroSettings) -> ModelStates:
    """Steady-state model states of one rank (the peak rank) for ``world`` data-parallel ranks.

    Args:
        workload: parameter layout, precision and optimizer.
        world: data-parallel ranks ``N``.
        settings: stage, offload and the settings that size buffers.
    """
    lp = model_dtype_bytes(workload.precision)
    numels = workload.parameter_numels
    state = state_bytes_per_parameter(workload)
    frozen_numel = workload.parameter_count - workload.trainable_parameter_count
    frozen = frozen_dtype_bytes(workload)  # per element: fp32 training leaves a 16-bit frozen base as it is
    offload_opt = settings.offload_optimizer != "none"
    if settings.stage in (1, 2):
        flat = flat_layout(numels, world)
        part, total = flat.partition_numel, sum(numels)
        # stage_1_and_2.py::DeepSpeedZeroOptimizer.__init__: bit16_groups_flat holds every trainable parameter
        # (its padding to 2N elements is left out: at most 2N elements, and it would make memory grow with N);
        # single_partition_of_fp32_groups is `.clone().to(fp32)` of the rank's partition, on CPU with offload.
        master, states = FP32_BYTES * part, int(state * part)
        if offload_opt:
            # initialize_optimizer_states: a pinned fp32 gradient partition; __init__: a 16-bit partition buffer
            # and temp_grad_buffer_for_cpu_offload (largest parameter) on CPU. NVMe is handled as CPU here:
            # stage_1_and_2.py has no swapper (`cpu_offload = device != none`).
            return ModelStates(gpu_parameters=total * lp + math.ceil(frozen_numel * frozen), gpu_gradients=0,
                               gpu_fp32_gradients=0, gpu_master=0, gpu_optimizer_state=0,
                               cpu_master_and_state=master + states + FP32_BYTES * part, cpu_16bit=lp * part,
                               cpu_buffers=max(numels) * lp, nvme=0)
        return ModelStates(gpu_parameters=total * lp + math.ceil(frozen_numel * frozen),
                           gpu_gradients=flat.gradient_partition_numel * lp, gpu_fp32_gradients=FP32_BYTES * part,
                           gpu_master=master, gpu_optimizer_state=states, cpu_master_and_state=0, cpu_16bit=0,
                           cpu_buffers=0, nvme=0)
    layout = partitioned_layout(numels, world, settings, workload.module_parameter_numels)
    part = layout.partition_numel
    # lp_param_buffer / pinned CPU flat buffer, and the frozen parameters' partitions in their own dtype
    lp_parts = part * lp + math.ceil(math.ceil(frozen_numel / world) * frozen)
    # Persistent tensors are whole on every rank (gathered in _post_step); with one rank a "gather" is a view of
    # the partition (NoGatherCoalescedHandle) unless the partition is on the CPU.
    persistent = layout.persistent_numel * lp if world > 1 or settings.offload_param != "none" else 0
    # The fp32 master is a copy: the alias branch of stage3.py::_create_fp32_partitions compares a torch.device
    # with a str (`tensor.device == self.device`), never equal in torch 2.x.
    master, states, grad_buffer = FP32_BYTES * part, int(state * part), lp * part
    cpu_master_and_state = cpu_16bit = cpu_buffers = nvme = 0
    if settings.offload_optimizer == "cpu":
        # fp32 master, optimizer state and fp32 gradient buffers (initialize_optimizer_states) on pinned CPU;
        # grad_partitions_flat_buffer is allocated on self.device = cpu.
        cpu_master_and_state, cpu_16bit = master + states + FP32_BYTES * part, grad_buffer
    elif settings.offload_optimizer == "nvme":
        # Swapped to NVMe with their fp32 gradients (PartitionedOptimizerSwapper); pinned swap buffers of the
        # largest sub-group (optimizer_utils.py::OptimizerSwapper: buffer_count x largest_numel x 4 B).
        nvme += master + states + FP32_BYTES * part
        aligned = AIO_ALIGNED_BYTES * settings.aio_thread_count // FP32_BYTES
        cpu_16bit = grad_buffer
        cpu_buffers += settings.optimizer_buffer_count * math.ceil(layout.sub_group_numel / aligned) * aligned * 4
    if settings.offload_param == "cpu":
        cpu_16bit += lp_parts
    elif settings.offload_param == "nvme":
        # _create_param_groups_fp16_flat_cpu_memory keeps up to max_in_cpu elements in CPU memory; the rest go
        # to NVMe through pinned buffers (partitioned_param_swapper.py: buffer_count x buffer_size).
        in_cpu = min(part, settings.max_in_cpu)
        cpu_16bit += in_cpu * lp
        cpu_buffers += settings.param_buffer_count * settings.param_buffer_size * lp
        nvme += (part - in_cpu) * lp
    return ModelStates(
        gpu_parameters=persistent + (0 if settings.offload_param != "none" else lp_parts),
        gpu_gradients=0 if offload_opt else grad_buffer,
        gpu_fp32_gradients=0 if offload_opt else FP32_BYTES * layout.sub_group_numel,
        gpu_master=0 if offload_opt else master,
        gpu_optimizer_state=0 if offload_opt else states,
        cpu_master_and_state=cpu_master_and_state, cpu_16bit=cpu_16bit, cpu_buffers=cpu_buffers, nvme=nvme)


# -- the estimate ---------------------------------------------------------------------------------------------
