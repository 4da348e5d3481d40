"""DeepSpeed ZeRO-Offload's share of a step, per rank: the host-link traffic of optimizer and parameter offload,
``DeepSpeedCPUAdam`` on the rank's partition, and NVMe swapping (deepspeed 0.19.8). :mod:`.cost` adds it to the
step with the offloaded ``engine.step()``'s own host time."""

from __future__ import annotations

from autoshard.hardware.specs import HardwareSpec
from autoshard.strategies import costs
from autoshard.strategies.costs import HOST_MEMORY_EFFICIENCY
from autoshard.strategies.deepspeed.layout import ZeroSettings, flat_layout, partitioned_layout
from autoshard.strategies.deepspeed.optimizer_state import FP32_BYTES, model_dtype_bytes, state_bytes_per_parameter
from autoshard.strategies.workload import Workload

CPU_ADAM_PARAMETERS_PER_S = 1.0e9
"""``DeepSpeedCPUAdam`` (AVX, fp32) on one thread: 0.4-2.3e9 parameters/s, about 1e9 typical, measured with
deepspeed 0.19.8 on this project's 2-core AMD EPYC build machine (16M parameters in 8 tensors, 5 steps; noisy,
shared host), 6-9x ``torch.optim.AdamW(foreach=False)`` in the same runs — in line with the "5x to 7x" of its
docstring (``deepspeed/ops/adam/cpu_adam.py``) and the CPU-Adam speed-ups of the ZeRO-Offload paper (Ren et al.
2021, sec. 5.1). Per thread; :func:`cpu_adam_parameters_per_s` scales it with the host's cores."""

CPU_ADAM_BYTES_PER_PARAMETER = 28
"""Host memory traffic of one parameter's update in ``Step_AVX`` (deepspeed 0.19.8,
``csrc/includes/cpu_adam.h``): the fp32 gradient, parameter, ``exp_avg`` and ``exp_avg_sq`` loaded (16 bytes),
the parameter and both moments stored (12 bytes). The loop is memory-bound once enough threads run it."""

NVME_DEFAULT_BYTES_PER_S = 2.0e9
"""Sequential NVMe bandwidth assumed when the hardware does not give one (a single PCIe 4.0 SSD is 2-7 GB/s;
the low end, as DeepSpeed's aio is rarely at peak without tuning — an assumption; ``--benchmark-disk`` measures
it)."""


def cpu_adam_parameters_per_s(hardware: HardwareSpec) -> tuple[float, str]:
    """Parameters per second one rank's ``DeepSpeedCPUAdam`` step updates, and how that was priced.

    The step is an OpenMP loop over the rank's partition (``#pragma omp parallel for`` in ``cpu_adam.h``). The
    ``deepspeed`` launcher leaves ``OMP_NUM_THREADS`` unset (it sets it to the cores per rank only with
    ``--bind_cores_to_rank``; ``launcher/launch.py``, 0.19.8), so every rank's loop may use every core, and the
    node's ranks, which step together after backward, share them; autoshard's own launches set
    ``OMP_NUM_THREADS`` to that share (:func:`~autoshard.strategies.costs.host_threads_per_rank`, the same rule
    as FSDP's host step): ``cores / ranks`` threads each, at
    :data:`CPU_ADAM_PARAMETERS_PER_S` per thread, and at most the node's DRAM bandwidth over
    :data:`CPU_ADAM_BYTES_PER_PARAMETER`, shared by the ranks.
    """
    ranks = max(1, hardware.processes_per_node)
    threads, how = costs.cpu_optimizer_threads(hardware)
    rate = threads * CPU_ADAM_PARAMETERS_PER_S
    how = f"{CPU_ADAM_PARAMETERS_PER_S:.2g}/s per thread on {how}"
    bandwidth, assumed = costs.host_memory_bytes_per_s(hardware)
    if bandwidth is not None:
        bound = bandwidth * HOST_MEMORY_EFFICIENCY / CPU_ADAM_BYTES_PER_PARAMETER / ranks
        if bound < rate:
            rate, how = bound, (f"bound by host memory: {bandwidth / 1e9:.4g} GB/s x {HOST_MEMORY_EFFICIENCY:g} / "
                                f"{CPU_ADAM_BYTES_PER_PARAMETER} bytes per parameter / {ranks} ranks{assumed}, "
                                f"under the {rate:.3g}/s of {how}")
    return rate, f"{rate:.3g} parameters/s per rank, {how}"


def offload_seconds(workload: Workload, hardware: HardwareSpec, settings: ZeroSettings,
             backward_s: float) -> tuple[float, list[str]]:
    """Host-link traffic, the CPU optimizer step and NVMe swapping of one step, per rank (exposed seconds)."""
    if settings.offload_optimizer == "none" and settings.offload_param == "none":
        return 0.0, []
    n, lp = hardware.world_size, model_dtype_bytes(workload.precision)
    numels = workload.parameter_numels
    bandwidth, notes = costs.host_link_bytes_per_s(hardware)
    if settings.stage == 3:
        layout = partitioned_layout(numels, n, settings)
        part = layout.partition_numel
    else:
        part = flat_layout(numels, n).partition_numel
    hidden, exposed = 0.0, 0.0
    optimizer_s = 0.0
    if settings.offload_optimizer != "none":
        if settings.stage == 3:
            # partition_grads: the gradient partition to the CPU buffer (lp), back up, then fp32 down at the
            # boundary (_offload_grad_partition_at_boundary); after the step the fp32 master is copied into the
            # 16-bit partitions (_reassign_or_swap_out_partitioned_parameters): up in fp32 unless they are on CPU.
            down, up_grads = (lp + FP32_BYTES) * part, lp * part
            up_params = 0 if settings.offload_param != "none" else FP32_BYTES * part
        else:
            # async_inplace_copy_grad_to_fp32_buffer_from_gpu (fp32 down), then the 16-bit partition up (step()).
            down, up_grads, up_params = FP32_BYTES * part, 0, lp * part
        hidden += (down + up_grads) / bandwidth if settings.overlap_comm else 0.0
        exposed += up_params / bandwidth + (0.0 if settings.overlap_comm else (down + up_grads) / bandwidth)
        adam_rate, adam_note = cpu_adam_parameters_per_s(hardware)
        clip_s, clip_note = costs.grad_clip_seconds(workload, hardware, shard=n, on_host=True)
        optimizer_s = part / adam_rate + clip_s
        notes.append(f"optimizer offload: {down / 2**20:.4g} MiB gradients down, {(up_grads + up_params) / 2**20:.4g}"
                     f" MiB up per rank over the host link at {costs.LINK_EFFICIENCY:g} of nominal; DeepSpeedCPUAdam "
                     f"at {adam_note}, after backward, on the critical path")
        notes += [clip_note] if clip_note else []
    if settings.offload_param != "none" and settings.stage == 3:
        layout = partitioned_layout(numels, n, settings)
        share = layout.gathered_numel / max(sum(numels), 1)
        released = max(0, layout.gathered_numel - layout.retained_numel) / max(layout.gathered_numel, 1)
        # Each fetch copies the rank's partitions to the GPU before the all-gather (_all_gather_dtype: .to(device)).
        up = lp * part * share * (1 + released)
        hidden += up / bandwidth if settings.overlap_comm else 0.0
        exposed += 0.0 if settings.overlap_comm else up / bandwidth
        notes.append(f"parameter offload: {up / 2**20:.4g} MiB of partitions copied up per rank per step for the "
                     "all-gathers (prefetched with overlap_comm)")
    nvme_s = 0.0
    if "nvme" in (settings.offload_optimizer, settings.offload_param):
        disks = hardware.node.nvme
        read = next((d.read_bytes_per_s for d in disks if d.read_bytes_per_s), None)
        write = next((d.write_bytes_per_s for d in disks if d.write_bytes_per_s), None)
        if read is None or write is None:
            notes.append(f"NVMe bandwidth unknown: {NVME_DEFAULT_BYTES_PER_S / 1e9:g} GB/s assumed "
                         "(measure it: `autoshard hardware --benchmark-disk PATH`)")
        read, write = read or NVME_DEFAULT_BYTES_PER_S, write or NVME_DEFAULT_BYTES_PER_S
        ranks = hardware.processes_per_node  # all ranks of a node share its disks
        if settings.offload_optimizer == "nvme":
            # PartitionedOptimizerSwapper: master + state read before, and written after, each sub-group's
            # step; fp32 gradients written during backward (swap_out_gradients) and read for the step.
            moved = (FP32_BYTES + state_bytes_per_parameter(workload)) * part
            nvme_s += ranks * ((moved + FP32_BYTES * part) / read + (moved + FP32_BYTES * part) / write)
        notes.append(f"NVMe swapping at {read / 1e9:.3g} GB/s read, {write / 1e9:.3g} GB/s write shared by the "
                     f"{ranks} rank(s) of a node, not overlapped (pipeline_read/pipeline_write off by default)")
    return costs.exposed(hidden, backward_s) + exposed + optimizer_s + nvme_s, notes
