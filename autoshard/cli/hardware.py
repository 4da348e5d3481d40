"""``autoshard hardware``: what autoshard sees (or a profile), as a table or JSON; ``--list`` lists profiles."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from autoshard.cli import _checks
from autoshard.cli._format import print_json
from autoshard.cli._hardware_args import add_hardware_arguments, hardware_from_args
from autoshard.errors import UsageError

if TYPE_CHECKING:  # the hardware package and rich load when the command runs (``autoshard --help`` stays cheap)
    from rich.table import Table

    from autoshard.hardware.disk_benchmark import DiskBenchmark
    from autoshard.hardware.specs import GPUDevice, GpuTopology, HardwareSpec, NodeSpec

NAME = "hardware"
HELP = "Show the hardware autoshard plans for: GPUs, links, CPU, RAM, NVMe (detected, or a profile)."
DEFAULT_SIZE = "256MiB"
"""The disk benchmark's test file without --benchmark-size (disk_benchmark.DEFAULT_SIZE_BYTES)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``hardware`` flags."""
    from autoshard.hardware.disk_benchmark import DEFAULT_MAX_SECONDS

    add_hardware_arguments(parser)
    parser.add_argument("--list", action="store_true", help="list the shipped hardware profiles")
    parser.add_argument("--json", action="store_true", help="machine-readable output (docs/hardware.md)")
    bench = parser.add_argument_group("disk benchmark")
    bench.add_argument(
        "--benchmark-disk",
        type=_checks.path_text,
        metavar="PATH",
        help="measure sequential write/read bandwidth of a directory (writes, then deletes, one file)",
    )
    bench.add_argument(
        "--benchmark-size", metavar="SIZE", default=None, help=f"size of the test file (default {DEFAULT_SIZE})"
    )
    bench.add_argument(
        "--benchmark-seconds",
        type=float,
        metavar="S",
        default=None,
        help=f"time limit for the benchmark (default {DEFAULT_MAX_SECONDS:g})",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard hardware``."""
    if args.list:
        chosen = [flag for flag, value in (
            ("--hardware", args.hardware), ("--gpus", args.gpus), ("--nodes", args.nodes),
            ("--gpu-memory", args.gpu_memory), ("--cpu-memory", args.cpu_memory), ("--cpu-cores", args.cpu_cores),
            ("--nvme", args.nvme),
            ("--benchmark-disk", args.benchmark_disk), ("--benchmark-size", args.benchmark_size),
            ("--benchmark-seconds", args.benchmark_seconds),
        ) if value is not None]
        if chosen:
            raise UsageError(f"--list does not combine with {', '.join(chosen)}.")
        return _list(as_json=args.json)
    tuning = [flag for flag, value in (("--benchmark-size", args.benchmark_size),
                                       ("--benchmark-seconds", args.benchmark_seconds)) if value is not None]
    if tuning and args.benchmark_disk is None:  # ignored without it: a bad value passed unseen, exit 0
        raise UsageError(f"{' and '.join(tuning)} set the disk benchmark, which --benchmark-disk PATH runs.",
                         hint="Add --benchmark-disk PATH, or drop them.")
    if args.benchmark_disk is not None and args.hardware is not None:
        raise UsageError("--benchmark-disk measures a disk of this machine, and --hardware describes another one: "
                         "run it on the machine itself, then put the figures under 'nvme:' in a hardware file.")
    hw = hardware_from_args(args)
    result = None
    if args.benchmark_disk is not None:
        result, hw = _benchmark(args, hw)
    if args.json:
        print_json({**hw.to_dict(), "disk_benchmark": None if result is None else result.to_dict()})
    else:
        _render(hw, result)
    return 0


def _benchmark(args: argparse.Namespace, hw: HardwareSpec) -> tuple[DiskBenchmark, HardwareSpec]:
    from autoshard.hardware.disk_benchmark import DEFAULT_MAX_SECONDS, benchmark_disk
    from autoshard.hardware.selection import attach_disk_benchmark
    from autoshard.hardware.units import parse_bytes

    try:
        size = parse_bytes(args.benchmark_size or DEFAULT_SIZE, what="--benchmark-size")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    seconds = DEFAULT_MAX_SECONDS if args.benchmark_seconds is None else args.benchmark_seconds
    if not seconds > 0:
        raise UsageError(f"--benchmark-seconds must be positive, got {seconds}.")
    result = benchmark_disk(args.benchmark_disk, size_bytes=size, max_seconds=seconds)
    return result, attach_disk_benchmark(hw, result)


def _list(*, as_json: bool) -> int:
    from rich.table import Table

    from autoshard._console import print_table, stdout_console
    from autoshard.hardware.profiles import list_profiles

    entries = list_profiles()
    if as_json:
        print_json([e.to_dict() for e in entries])
        return 0
    table = Table(title="autoshard hardware profiles (use with --hardware NAME)", title_justify="left")
    for column in ("kind", "name", "description"):
        table.add_column(column)
    for entry in entries:
        table.add_row(entry.kind, entry.name, entry.display_name)
    print_table(stdout_console(wide_when_piped=False), table)
    return 0


def _cell(value: Any) -> str:
    return "?" if value is None else str(value)


def _pcie(device: GPUDevice) -> str:
    best = f"gen{_cell(device.pcie_max_generation)} x{_cell(device.pcie_max_width)}"
    now = f"gen{_cell(device.pcie_generation)} x{_cell(device.pcie_width)}"
    return best if now == best else f"{best} ({now})"


def _summary(hw: HardwareSpec) -> Table:
    from rich.table import Table

    from autoshard.hardware.specs import DTYPES
    from autoshard.hardware.units import format_bytes, format_rate

    node, gpu, cpu = hw.node, hw.node.gpu, hw.node.cpu
    rows: list[tuple[str, str]] = []
    if gpu is not None:
        capability = gpu.compute_capability
        peaks = [f"{dt} {v:g}" for dt in DTYPES if (v := gpu.peak_tflops.for_dtype(dt)) is not None]
        rows += [
            ("GPU", f"{gpu.display_name} (profile {gpu.name})" if gpu.profile_path else gpu.display_name),
            ("GPU memory", format_bytes(gpu.memory_bytes)),
            ("compute capability", "unknown" if capability is None else "{}.{}".format(*capability)),
            ("dense peak TFLOP/s", ", ".join(peaks) or "unknown"),
            ("memory bandwidth", format_rate(gpu.memory_bandwidth_bytes_per_s)),
        ]
        if node.gpus > 1:
            link = node.intra_node_link.display_name if node.intra_node_link else "unknown link"
            rows.append(("GPU↔GPU", f"{link}, {format_rate(node.intra_node_bandwidth_bytes_per_s)} per direction"))
    if cpu.physical_cores is None and cpu.logical_cores is None:
        rows.append(("CPU cores", "unknown (--cpu-cores sets it)"))
    else:
        usable = f", {cpu.usable_cores} usable" if cpu.usable_cores not in (None, cpu.logical_cores) else ""
        rows.append(("CPU cores", f"{_cell(cpu.physical_cores)} physical, {_cell(cpu.logical_cores)} logical{usable}"))
    if cpu.memory_total_bytes is None:
        rows.append(("CPU memory", "unknown (--cpu-memory sets it)"))
    else:
        available = format_bytes(cpu.memory_available_bytes)
        rows.append(("CPU memory", f"{format_bytes(cpu.memory_total_bytes)} total, {available} available"))
    if node.network is not None:
        net = node.network
        total = format_rate(net.bandwidth_bytes_per_s)
        rows.append(("network", f"{net.ports} × {net.link.display_name} = {total} per node per direction"))
    elif hw.nodes > 1:
        rows.append(("network", "unknown"))
    if hw.launch is not None:
        launch = hw.launch
        rows.append(("launcher", f"{launch.launcher}: {launch.nodes} node(s), rank {_cell(launch.rank)}, "
                                 f"local rank {_cell(launch.local_rank)}"))
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for row in rows:
        table.add_row(*row)
    return table


def _gpu_table(node: NodeSpec) -> Table:
    from rich.table import Table

    from autoshard.hardware.units import format_bytes

    table = Table(title="GPUs (CUDA order)", title_justify="left")
    for column in ("#", "name", "memory", "free", "cc", "PCIe (now)", "NVLink", "bus id"):
        table.add_column(column, no_wrap=True)
    for d in node.devices:
        table.add_row(
            str(d.index) if d.index == d.nvml_index else f"{d.index} (nvml {d.nvml_index})",
            d.name,
            format_bytes(d.memory_total_bytes),
            format_bytes(d.memory_free_bytes),
            "?" if d.compute_capability is None else "{}.{}".format(*d.compute_capability),
            _pcie(d),
            str(d.nvlink_active_links),
            d.pci_bus_id.removeprefix("00000000:"),
        )
    return table


def _topology_table(node: NodeSpec, topology: GpuTopology) -> Table:
    from rich.table import Table

    table = Table(title="GPU topology", title_justify="left")
    table.add_column("")
    for d in node.devices:
        table.add_column(f"GPU{d.index}")
    for d, row in zip(node.devices, topology.labels, strict=True):
        table.add_row(f"GPU{d.index}", *row)
    return table


def _disk_table(node: NodeSpec) -> Table:
    from rich.table import Table

    from autoshard.hardware.units import format_bytes, format_rate

    table = Table(title="Local fast disks (offload targets)", title_justify="left")
    for column in ("path", "device", "free", "total", "read", "write", "from"):
        table.add_column(column)
    for disk in node.nvme:
        table.add_row(disk.path, _cell(disk.device), format_bytes(disk.free_bytes), format_bytes(disk.total_bytes),
                      format_rate(disk.read_bytes_per_s), format_rate(disk.write_bytes_per_s), disk.origin)
    return table


def _render(hw: HardwareSpec, result: DiskBenchmark | None) -> None:
    from autoshard._console import stdout_console
    from autoshard.hardware.units import format_bytes, format_rate

    console = stdout_console(wide_when_piped=False)
    node = hw.node
    what = f"{node.gpus} × {node.gpu.display_name}" if node.gpu else "CPU only"
    console.print(
        f"[bold]Hardware[/bold]: {hw.origin} ({hw.source}) — {hw.nodes} node(s) of {what}; "
        f"{hw.device_type}, backend {hw.backend}, {hw.processes_per_node} process(es) per node, "
        f"world size {hw.world_size}"
    )
    console.print(_summary(hw))
    if node.devices:
        console.print(_gpu_table(node))
    if node.topology is not None:
        console.print(_topology_table(node, node.topology))
    if node.nvme:
        console.print(_disk_table(node))
    else:
        console.print("No local NVMe/SSD found to offload to (pass --nvme PATH to choose a directory)."
                      if hw.source == "detected" else
                      f"{hw.origin} lists no NVMe/SSD to offload to (add an nvme: entry with its size to a "
                      "hardware file to plan NVMe offload there).")
    if result is not None:
        cached = " (reads may come from the page cache: no O_DIRECT here)" if result.read_may_be_cached else ""
        early = " — stopped at the time limit" if result.stopped_early else ""
        console.print(
            f"[bold]Disk benchmark[/bold] {result.path}: write {format_rate(result.write_bytes_per_s)}, "
            f"read {format_rate(result.read_bytes_per_s)} over {format_bytes(result.bytes_written)}"
            f"{early}{cached}; the test file was deleted."
        )
    for note in hw.notes:
        console.print(f"• {note}", highlight=False)
