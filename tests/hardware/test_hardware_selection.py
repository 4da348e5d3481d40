from __future__ import annotations

import dataclasses
import doctest
import json
from pathlib import Path

import pytest

import autoshard.hardware
from autoshard.errors import HardwareError, UsageError
from autoshard.hardware import (
    DiskBenchmark,
    HardwareOverrides,
    attach_disk_benchmark,
    load_hardware,
    select_hardware,
    selection,
)

GiB = 2**30


def test_a_gpu_profile_becomes_nodes_of_that_gpu() -> None:
    hw = load_hardware("a100-sxm-80gb", gpus=8, nodes=2)
    assert (hw.source, hw.origin, hw.device_type, hw.backend) == ("profile", "a100-sxm-80gb", "cuda", "nccl")
    assert (hw.nodes, hw.processes_per_node, hw.world_size) == (2, 8, 16)
    assert hw.node.intra_node_link is not None and hw.node.intra_node_link.name == "nvlink3"  # SXM: NVLink
    assert hw.node.cpu.memory_total_bytes is None  # a GPU profile does not know the host
    assert any("network between them is unknown" in note for note in hw.notes)
    pcie = load_hardware("a100-pcie-80gb", gpus=4)
    assert pcie.node.intra_node_link is not None and pcie.node.intra_node_link.name == "pcie-gen4"
    assert load_hardware("t4").node.intra_node_link is None  # one GPU: no link between GPUs


def test_a_node_preset_carries_cpu_ram_nvme_and_network() -> None:
    hw = load_hardware("dgx-a100", nodes=4)
    assert hw.world_size == 32
    assert hw.node.cpu.physical_cores == 128 and hw.node.cpu.memory_total_bytes == 2 * 2**40
    assert hw.node.nvme[0].total_bytes == 30 * 10**12
    assert hw.inter_node_bandwidth_bytes_per_s == 8 * 25e9
    assert hw.node.intra_node_bandwidth_bytes_per_s == 300e9


def test_fewer_gpus_than_a_preset_is_a_subset_more_is_a_conflict() -> None:
    hw = load_hardware("dgx-h100", gpus=4)
    assert hw.processes_per_node == 4 and any("Using 4 of the node's 8 GPUs" in n for n in hw.notes)
    assert load_hardware("dgx-h100", gpus=1).node.intra_node_link is None
    with pytest.raises(UsageError, match="contradicts 'dgx-h100', which has 8 GPUs") as info:
        load_hardware("dgx-h100", gpus=16)
    assert 'load_hardware("h100-sxm-80gb", gpus=16)' in (info.value.hint or "")  # a Python caller's terms


@pytest.mark.parametrize(
    ("overrides", "error", "fragment"),
    [
        (dict(gpu_memory="garbage"), UsageError, "gpu_memory=: expected a size"),
        (dict(gpu_memory="0GB"), UsageError, "positive"),
        (dict(cpu_memory="-1TiB"), UsageError, "cpu_memory=: expected a positive size"),
        (dict(gpus=0), UsageError, "gpus= must be a positive whole number"),
        (dict(nodes=-1), UsageError, "nodes= must be a positive whole number"),
        (dict(cpu_cores=0), UsageError, "cpu_cores= must be a positive whole number"),
        (dict(nvme="relative/dir"), UsageError, "absolute path on t4"),
    ],
)
def test_bad_overrides_are_usage_errors(overrides: dict, error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        load_hardware("t4", **overrides)


def test_overrides_replace_pieces_and_say_so(tmp_path: Path) -> None:
    hw = load_hardware("l4", gpu_memory="20GB", cpu_memory="512GiB", cpu_cores=32, nvme=tmp_path)
    assert hw.gpu is not None and hw.gpu.memory_bytes == 20 * 10**9
    assert hw.node.cpu.memory_total_bytes == hw.node.cpu.memory_available_bytes == 512 * GiB
    assert hw.node.cpu.physical_cores == hw.node.cpu.usable_cores == 32
    assert [d.path for d in hw.node.nvme] == [str(tmp_path)]
    # said in a Python caller's terms: "by gpu_memory=", ..., "by nvme=" (the command's say "by --gpu-memory")
    assert [note.split(" by ")[1].split()[0] for note in hw.notes] == ["gpu_memory=", "cpu_memory=", "cpu_cores=",
                                                                       "nvme=;"]


def test_nvme_on_a_profile_is_a_directory_there_sized_by_the_profile(tmp_path: Path) -> None:
    # A renter's --nvme names a directory on the rented machine: this machine's disk says nothing about it.
    # Once it was measured here: the DGX H100's 30.72 TB became this laptop's free space, or the path had to exist.
    hw = load_hardware("dgx-h100", nvme="/raid/offload")
    assert [(d.path, d.free_bytes, d.total_bytes) for d in hw.node.nvme] == [("/raid/offload", 30.72e12, 30.72e12)]
    assert any("/raid/offload" in n and "dgx-h100" in n and "27.94 TiB" in n for n in hw.notes)
    # A profile without disks: the room is unknown, said so, and NVMe offload is not refused for it.
    bare = load_hardware("l4", nvme="/mnt/nvme")
    assert [(d.path, d.free_bytes) for d in bare.node.nvme] == [("/mnt/nvme", None)]
    assert any("lists no disk" in n for n in bare.notes)


def test_cpu_cores_price_the_offloaded_optimizer_step() -> None:
    """The CPU Adam of ZeRO-Offload runs on the host's cores, shared by the node's ranks: a GPU profile knows none
    (8 assumed, and said), ``--cpu-cores`` gives them."""
    from autoshard.strategies.deepspeed.offload_cost import cpu_adam_parameters_per_s

    unknown, _ = cpu_adam_parameters_per_s(load_hardware("h100-sxm-80gb", gpus=8))
    given, note = cpu_adam_parameters_per_s(load_hardware("h100-sxm-80gb", gpus=8, cpu_cores=64))
    assert given == pytest.approx(8 * unknown) and "8 thread(s) per rank (64 cores / 8 rank(s) per node" in note


def test_an_interconnect_is_not_hardware() -> None:
    with pytest.raises(HardwareError, match="'nvlink3' is an interconnect profile"):
        load_hardware("nvlink3")


def test_detected_hardware_is_the_default_and_gpus_picks_a_subset(fake_nvml) -> None:
    hw = select_hardware(None, HardwareOverrides(gpus=4, gpu_memory_bytes=40 * GiB), environ={},
                         nvml=fake_nvml("dgx_a100_8x"))
    assert hw.source == "detected" and hw.processes_per_node == 4 and len(hw.node.devices) == 4
    assert hw.gpu is not None and hw.gpu.memory_bytes == 40 * GiB
    with pytest.raises(UsageError, match="more GPUs than the 8 visible"):
        select_hardware(None, HardwareOverrides(gpus=9), environ={}, nvml=fake_nvml("dgx_a100_8x"))


def test_without_a_gpu_gpus_counts_cpu_processes_and_gpu_memory_conflicts(fake_nvml) -> None:
    hw = select_hardware(None, HardwareOverrides(gpus=4), environ={}, nvml=fake_nvml("nvml_missing"))
    assert (hw.device_type, hw.backend, hw.processes_per_node, hw.world_size) == ("cpu", "gloo", 4, 4)
    assert hw.device_memory_bytes == hw.node.cpu.memory_available_bytes // 4  # type: ignore[operator]
    with pytest.raises(UsageError, match="no GPU was detected and no --hardware chosen"):
        select_hardware(None, HardwareOverrides(gpu_memory_bytes=GiB), environ={}, nvml=fake_nvml("nvml_missing"))


def test_a_profile_wins_over_detection(fake_nvml) -> None:
    hw = select_hardware("h200-sxm-141gb", HardwareOverrides(gpus=8), environ={}, nvml=fake_nvml("t4_1x"))
    assert hw.gpu is not None and hw.gpu.name == "h200-sxm-141gb" and hw.world_size == 8


def test_disk_benchmark_results_attach_to_the_disk_holding_the_path(tmp_path: Path) -> None:
    hw = load_hardware("t4", nvme=tmp_path)
    result = DiskBenchmark(path=str((tmp_path / "sub").resolve()), bytes_written=1, bytes_read=1,
                           write_bytes_per_s=1e9, read_bytes_per_s=2e9, direct_io=True,
                           read_may_be_cached=False, stopped_early=False, elapsed_s=0.1)
    measured = attach_disk_benchmark(hw, result)
    assert len(measured.node.nvme) == 1
    assert (measured.node.nvme[0].read_bytes_per_s, measured.node.nvme[0].write_bytes_per_s) == (2e9, 1e9)
    elsewhere = attach_disk_benchmark(load_hardware("t4"), dataclasses.replace(result, path=str(tmp_path)))
    assert [(d.path, d.origin) for d in elsewhere.node.nvme] == [(str(tmp_path.resolve()), "benchmark")]


def test_hardware_spec_to_dict_is_json_with_byte_sizes() -> None:
    data = json.loads(json.dumps(load_hardware("dgx-a100").to_dict()))
    assert data["schema_version"] == 1 and data["world_size"] == 8
    assert data["node"]["gpu"]["memory_bytes"] == 80 * GiB
    assert data["node"]["gpu"]["compute_capability"] == [8, 0]
    assert data["node"]["gpu"]["peak_tflops"]["bf16"] == 312
    assert data["node"]["network"]["bandwidth_bytes_per_s"] == 200e9
    assert data["inter_node_bandwidth_bytes_per_s"] == 200e9


@pytest.mark.parametrize("module", [autoshard.hardware, selection], ids=lambda m: m.__name__)
def test_docstring_examples_run(module) -> None:
    assert doctest.testmod(module).failed == 0
