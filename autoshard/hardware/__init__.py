"""Hardware: detect this machine (NVML, psutil, sysfs, launcher variables) or load a profile, as typed specs.

Example:
    >>> from autoshard.hardware import load_hardware
    >>> hw = load_hardware("dgx-a100", nodes=2)
    >>> hw.world_size, hw.gpu.name, hw.inter_node_bandwidth_bytes_per_s
    (16, 'a100-sxm-80gb', 200000000000.0)
"""

from __future__ import annotations

from autoshard.hardware.detect import detect_hardware
from autoshard.hardware.disk_benchmark import DiskBenchmark, benchmark_disk
from autoshard.hardware.profiles import ProfileEntry, list_profiles
from autoshard.hardware.selection import (
    HardwareOverrides,
    attach_disk_benchmark,
    load_hardware,
    select_hardware,
)
from autoshard.hardware.specs import (
    CPUSpec,
    GPUDevice,
    GPUSpec,
    GpuTopology,
    HardwareSpec,
    LaunchEnvironment,
    LinkSpec,
    NetworkSpec,
    NodeSpec,
    NVMeDevice,
    PeakTflops,
)
from autoshard.hardware.units import parse_bytes, parse_rate

__all__ = [
    "CPUSpec",
    "DiskBenchmark",
    "GPUDevice",
    "GPUSpec",
    "GpuTopology",
    "HardwareOverrides",
    "HardwareSpec",
    "LaunchEnvironment",
    "LinkSpec",
    "NVMeDevice",
    "NetworkSpec",
    "NodeSpec",
    "PeakTflops",
    "ProfileEntry",
    "attach_disk_benchmark",
    "benchmark_disk",
    "detect_hardware",
    "list_profiles",
    "load_hardware",
    "parse_bytes",
    "parse_rate",
    "select_hardware",
]
