"""``detect_hardware()``: this machine as a :class:`HardwareSpec`, from NVML, psutil, sysfs and the launcher.

With no NVIDIA GPU visible, the hardware is this machine's CPU: the plan uses the gloo backend with one
process per chosen device (``gpus=N`` chooses N processes), so that it stays runnable where it was made.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from typing import Any

from autoshard.errors import HARDWARE_ARGUMENTS, UsageError, in_arguments
from autoshard.hardware.environment import cuda_order, launch_environment, slurm_memory
from autoshard.hardware.host import discover_nvme, probe_cpu
from autoshard.hardware.nvml import NvmlReport, probe_nvml
from autoshard.hardware.profiles import gpu_profile_for, interconnect_profile
from autoshard.hardware.specs import (
    CPUSpec,
    GPUDevice,
    GPUSpec,
    GpuTopology,
    HardwareSpec,
    LaunchEnvironment,
    LinkSpec,
    NodeSpec,
    NVMeDevice,
    for_python,
)
from autoshard.hardware.units import format_bytes

CPU_HINT = "To plan for GPUs you do not have here, pass --hardware NAME (see `autoshard hardware --list`)."


@in_arguments(HARDWARE_ARGUMENTS, result=for_python)
def detect_hardware(
    *, gpus: int | None = None, environ: Mapping[str, str] | None = None, nvml: Any = None
) -> HardwareSpec:
    """Describe this machine: its visible GPUs, their links, CPU, RAM, NVMe, and the launcher's nodes.

    Nothing here initialises CUDA: GPUs are read through NVML.

    Args:
        gpus: use only the first ``gpus`` visible GPUs (or, with no GPU, run ``gpus`` CPU processes).
        environ: the environment to read ``CUDA_VISIBLE_DEVICES``, torchrun and SLURM variables from
            (default ``os.environ``).
        nvml: a stand-in for the ``pynvml`` module (tests); default imports ``pynvml``.

    Returns:
        A :class:`HardwareSpec` with ``source == "detected"``; ``device_type == "cpu"`` when no GPU is visible.

    Raises:
        HardwareError: NVML is installed but fails, or a launcher variable is malformed.
        UsageError: ``gpus`` is not positive, or more than the visible GPUs.

    Example:
        >>> hw = detect_hardware(environ={"CUDA_VISIBLE_DEVICES": ""})
        >>> hw.device_type, hw.backend
        ('cpu', 'gloo')
    """
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise UsageError(f"--gpus must be a positive whole number, got {gpus!r}.")
    env = os.environ if environ is None else environ
    launch = launch_environment(env)
    report = probe_nvml(nvml)
    cpu, memory_notes = _within_slurm_memory(probe_cpu(), env)
    nvme = discover_nvme()
    notes: list[str] = [*report.notes, *memory_notes]
    order: list[int] = []
    if report.devices:
        order, order_notes = cuda_order(
            report.devices, env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER")
        )
        notes += order_notes
    if not order:
        reason = report.no_gpu_reason or "no GPU is visible to this process"
        return _cpu_hardware(cpu, nvme, launch, gpus, reason, notes)
    if gpus is not None:
        if gpus > len(order):
            raise UsageError(
                f"--gpus {gpus} asks for more GPUs than the {len(order)} visible on this machine.",
                hint="To plan for a bigger machine, pass --hardware NAME with --gpus.",
            )
        if gpus < len(order):
            notes.append(f"Using the first {gpus} of the {len(order)} visible GPUs (--gpus {gpus}).")
            order = order[:gpus]
    return _gpu_hardware(report, order, cpu, nvme, launch, notes)


def _within_slurm_memory(cpu: CPUSpec, environ: Mapping[str, str]) -> tuple[CPUSpec, list[str]]:
    """Host RAM cut to a SLURM job's memory on this node where it is less (:func:`slurm_memory`), with a note."""
    given = slurm_memory(environ)
    if given is None or cpu.memory_total_bytes is None or given[0] >= cpu.memory_total_bytes:
        return cpu, []
    limit, source = given
    available = limit if cpu.memory_available_bytes is None else min(limit, cpu.memory_available_bytes)
    return (dataclasses.replace(cpu, memory_total_bytes=limit, memory_available_bytes=available),
            [f"Host RAM is this SLURM job's {format_bytes(limit)} ({source}), not the node's "
             f"{format_bytes(cpu.memory_total_bytes)}."])


def _node_name() -> str:
    return f"this machine ({socket.gethostname()})"


def _cpu_hardware(
    cpu: CPUSpec,
    nvme: tuple[NVMeDevice, ...],
    launch: LaunchEnvironment | None,
    processes: int | None,
    reason: str,
    notes: list[str],
) -> HardwareSpec:
    launched = launch.processes_per_node if launch is not None and processes is None else None
    processes = processes or launched or 1
    if launch is not None and launched is not None:  # the launcher's processes per node: the gloo ranks here
        notes = [*notes, f"{launch.launcher} runs {launched} process(es) on each of {launch.nodes} node(s): planned "
                         f"as {launched} gloo rank(s) per node."]
    cores = cpu.usable_cores or cpu.logical_cores
    crowded = (f" These {processes} processes share {cores} usable core{'s' * (cores != 1)}: each runs slower "
               "than it would alone, and so does what fit() and tune measure."
               if cores and processes > cores else "")
    notes = [
        f"No GPU detected ({reason}). The hardware is this machine's CPU: torch.distributed's gloo backend "
        f"with {processes} process{'es' if processes > 1 else ''}"
        f"{'' if processes > 1 else ' (--gpus N runs N)'}.{crowded} {CPU_HINT}",
        *notes,
    ]
    return HardwareSpec(
        source="detected",
        origin="this machine",
        device_type="cpu",
        backend="gloo",
        nodes=launch.nodes if launch is not None else 1,
        processes_per_node=processes,
        node=NodeSpec(name=_node_name(), gpu=None, gpus=0, cpu=cpu, nvme=nvme),
        launch=launch,
        notes=tuple(notes),
    )


def _gpu_hardware(
    report: NvmlReport,
    order: list[int],
    cpu: CPUSpec,
    nvme: tuple[NVMeDevice, ...],
    launch: LaunchEnvironment | None,
    notes: list[str],
) -> HardwareSpec:
    devices = tuple(dataclasses.replace(report.devices[k], index=i) for i, k in enumerate(order))
    topology = None
    if len(order) > 1:
        topology = GpuTopology(
            labels=tuple(tuple(report.topology_label(a, b) for b in order) for a in order),
            nvlink_counts=tuple(tuple(report.nvlink_counts[a][b] for b in order) for a in order),
        )
    gpu = _gpu_spec(devices, notes)
    link, bandwidth = _intra_node(devices, topology, gpu, notes)
    node = NodeSpec(
        name=_node_name(),
        gpu=gpu,
        gpus=len(devices),
        intra_node_link=link,
        intra_node_bandwidth_bytes_per_s=bandwidth,
        cpu=cpu,
        nvme=nvme,
        devices=devices,
        topology=topology,
    )
    if launch is not None and launch.nodes > 1:
        notes.append(
            f"{launch.launcher} runs {launch.nodes} nodes; autoshard assumes they all look like this one. "
            "The network between them is unknown: pass a node or cluster profile with --hardware to set it."
        )
    return HardwareSpec(
        source="detected",
        origin="this machine",
        device_type="cuda",
        backend="nccl",
        nodes=launch.nodes if launch is not None else 1,
        processes_per_node=len(devices),
        node=node,
        launch=launch,
        notes=tuple(notes),
    )


def _pcie_link(device: GPUDevice) -> LinkSpec | None:
    """The PCIe link a GPU can reach (its and its slot's highest generation and width)."""
    gen = device.pcie_max_generation or device.pcie_generation
    width = device.pcie_max_width or device.pcie_width
    link = None if gen is None else interconnect_profile(f"pcie-gen{gen}")
    if link is None or width is None or link.lane_bandwidth_bytes_per_s is None:
        return link
    return dataclasses.replace(
        link,
        display_name=f"PCIe {gen}.0 x{width}",
        bandwidth_bytes_per_s=link.lane_bandwidth_bytes_per_s * width,
        lanes=width,
    )


def _gpu_spec(devices: tuple[GPUDevice, ...], notes: list[str]) -> GPUSpec:
    """The GPU model to plan with: the visible GPU with the least memory, described by its profile."""
    smallest = min(devices, key=lambda d: d.memory_total_bytes)
    if len({d.name for d in devices}) > 1:
        names = ", ".join(sorted({d.name for d in devices}))
        notes.append(
            f"The visible GPUs differ ({names}); planning as if all were {smallest.name} "
            f"({format_bytes(smallest.memory_total_bytes)}). Use CUDA_VISIBLE_DEVICES to choose."
        )
    profile = gpu_profile_for(smallest.name)
    host_link = _pcie_link(smallest)
    if profile is None:
        notes.append(
            f"autoshard has no profile for {smallest.name!r}, so its peak TFLOP/s and memory bandwidth are "
            "unknown; add a GPU profile (docs/hardware.md) for time estimates."
        )
        return GPUSpec(
            name=smallest.name,
            display_name=smallest.name,
            memory_bytes=smallest.memory_total_bytes,
            compute_capability=smallest.compute_capability,
            host_link=host_link,
            nvml_names=(smallest.name,),
        )
    return dataclasses.replace(
        profile,
        display_name=smallest.name,
        memory_bytes=smallest.memory_total_bytes,
        compute_capability=smallest.compute_capability or profile.compute_capability,
        host_link=host_link or profile.host_link,
    )


def _intra_node(
    devices: tuple[GPUDevice, ...], topology: GpuTopology | None, gpu: GPUSpec, notes: list[str]
) -> tuple[LinkSpec | None, float | None]:
    """The link between this node's GPUs and the bandwidth of its slowest pair, in one direction."""
    if topology is None:
        return None, None
    if topology.all_pairs_nvlink:
        links = topology.min_pair_nvlinks
        lane = None if gpu.nvlink is None else gpu.nvlink.lane_bandwidth_bytes_per_s
        if gpu.nvlink is None or lane is None:
            notes.append(
                f"The GPUs are linked by NVLink (at least NV{links} per pair), but autoshard has no NVLink "
                f"figures for {gpu.display_name}; the link bandwidth is unknown."
            )
            return None, None
        return gpu.nvlink, min(links * lane, gpu.nvlink.bandwidth_bytes_per_s)
    n = len(devices)
    if any(topology.nvlink_counts[i][j] for i in range(n) for j in range(n)):
        notes.append("Only some GPU pairs have NVLink; planning with PCIe, the link of the slowest pair.")
    if any(label == "SYS" for row in topology.labels for label in row):
        notes.append(
            "Some GPU pairs are on different CPU sockets (SYS): their traffic crosses the CPU interconnect "
            "and may be slower than the PCIe figure shown."
        )
    pcie = [link for link in map(_pcie_link, devices) if link is not None]
    if len(pcie) < len(devices):
        notes.append("NVML did not report every GPU's PCIe link; the bandwidth between GPUs is unknown.")
        return None, None
    slowest = min(pcie, key=lambda link: link.bandwidth_bytes_per_s)
    return slowest, slowest.bandwidth_bytes_per_s
