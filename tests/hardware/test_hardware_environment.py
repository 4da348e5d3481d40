from __future__ import annotations

import doctest

import pytest

from autoshard.errors import HardwareError
from autoshard.hardware import GPUDevice, detect_hardware, environment
from autoshard.hardware.environment import cuda_order, launch_environment

GPU2_UUID_PREFIX = "GPU-8e1d2c33"
GPU5_UUID = "GPU-d1e2f366-3b4c-4d5e-8f60-1a2b3c4d0f06"


@pytest.mark.parametrize(
    ("visible", "nvml_indices", "note"),
    [
        (None, [0, 1, 2, 3, 4, 5, 6, 7], None),
        ("2,0", [2, 0], None),  # CUDA's order is the variable's order
        (f"{GPU2_UUID_PREFIX},{GPU5_UUID}", [2, 5], None),  # by UUID prefix or whole UUID
        ("8e1d2c33,3", [2, 3], None),  # a UUID prefix without "GPU-"
        ("0,7,foo,1", [0, 7], "'foo' names no GPU"),  # CUDA stops at the first bad entry
        ("1,1,2", [1], "'1' repeats a GPU"),
        ("3,8", [3], "'8' names no GPU"),
        ("GPU-", [], "names no GPU"),
        ("0,MIG-4b2c1a90-0000-0000-0000-000000000000", [0], "MIG instance"),
    ],
)
def test_cuda_visible_devices_picks_and_orders_gpus(
    fake_nvml, visible: str | None, nvml_indices: list[int], note: str | None
) -> None:
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    if not nvml_indices:
        hw = detect_hardware(environ=environ, nvml=fake_nvml("dgx_a100_8x"))
        assert hw.device_type == "cpu"
        assert any("hides all 8 GPU(s)" in n for n in hw.notes)
        return
    hw = detect_hardware(environ=environ, nvml=fake_nvml("dgx_a100_8x"))
    assert [d.nvml_index for d in hw.node.devices] == nvml_indices
    assert [d.index for d in hw.node.devices] == list(range(len(nvml_indices)))
    assert hw.processes_per_node == len(nvml_indices)
    if note is not None:
        assert any(note in n for n in hw.notes)
    if len(nvml_indices) > 1:
        assert hw.node.topology is not None and hw.node.topology.min_pair_nvlinks == 12


@pytest.mark.parametrize("visible", ["", "-1"])
def test_cuda_visible_devices_can_hide_every_gpu(fake_nvml, visible: str) -> None:
    hw = detect_hardware(environ={"CUDA_VISIBLE_DEVICES": visible}, nvml=fake_nvml("dgx_a100_8x"))
    assert hw.device_type == "cpu" and hw.backend == "gloo"


def _device(nvml_index: int, bus: str, name: str = "NVIDIA L4") -> GPUDevice:
    return GPUDevice(index=nvml_index, nvml_index=nvml_index, name=name, uuid=f"GPU-{nvml_index}aaa",
                     pci_bus_id=bus, memory_total_bytes=1, memory_free_bytes=1)


def test_cuda_numbering_follows_the_pci_bus_not_nvml_indices() -> None:
    devices = [_device(0, "00000000:41:00.0"), _device(1, "00000000:01:00.0")]
    assert cuda_order(devices, None, None) == ([1, 0], [])
    assert cuda_order(devices, "0", None)[0] == [1]


def test_mixed_models_warn_about_fastest_first_numbering_unless_pci_bus_id() -> None:
    devices = [_device(0, "00000000:01:00.0"), _device(1, "00000000:41:00.0", name="NVIDIA T4")]
    assert "CUDA_DEVICE_ORDER" in cuda_order(devices, None, None)[1][0]
    assert cuda_order(devices, None, "PCI_BUS_ID")[1] == []


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "RANK": "9", "LOCAL_RANK": "1", "GROUP_RANK": "1"},
         dict(launcher="torchrun", nodes=2, processes_per_node=8, world_size=16, rank=9, local_rank=1, node_rank=1)),
        ({"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "4", "SLURM_TASKS_PER_NODE": "8(x4)", "SLURM_NTASKS": "32",
          "SLURM_PROCID": "10", "SLURM_LOCALID": "2", "SLURM_NODEID": "1"},
         dict(launcher="slurm", nodes=4, processes_per_node=8, world_size=32, rank=10, local_rank=2, node_rank=1)),
        ({"SLURM_JOB_ID": "42", "SLURM_NNODES": "2", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"},
         dict(launcher="torchrun", nodes=1, processes_per_node=4, world_size=4)),  # torchrun wins inside sbatch
    ],
)
def test_launcher_environment_gives_nodes_and_ranks(environ: dict[str, str], expected: dict | None) -> None:
    launch = launch_environment(environ)
    if expected is None:
        assert launch is None
        return
    assert launch is not None
    for key, value in expected.items():
        assert getattr(launch, key) == value


@pytest.mark.parametrize(
    ("environ", "fragment"),
    [
        ({"LOCAL_WORLD_SIZE": "8", "WORLD_SIZE": "lots"}, "WORLD_SIZE='lots'"),
        ({"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "10"}, "not a multiple"),
        ({"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "-2"}, "SLURM_JOB_NUM_NODES"),
        # uneven and empty layouts were planned as the first node's count (a container probe: 4 ranks for 3 tasks)
        ({"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "3", "SLURM_TASKS_PER_NODE": "2,1"},
         r"this job runs 2\+1 tasks on its nodes"),
        ({"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "3", "SLURM_TASKS_PER_NODE": "2(x2),1"}, r"2\+2\+1 tasks"),
        ({"SLURM_JOB_ID": "1", "SLURM_NTASKS_PER_NODE": "0"}, "0 tasks per node"),
        ({"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_NTASKS": "3"},
         r"SLURM_NTASKS=3 is not 2 node\(s\) x 2 task\(s\) per node"),
    ],
)
def test_malformed_launcher_variables_are_named(environ: dict[str, str], fragment: str) -> None:
    with pytest.raises(HardwareError, match=fragment):
        launch_environment(environ)


def test_detected_hardware_takes_its_node_count_from_the_launcher(fake_nvml) -> None:
    environ = {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"}
    hw = detect_hardware(environ=environ, nvml=fake_nvml("dgx_a100_8x"))
    assert (hw.nodes, hw.world_size) == (2, 16)
    assert hw.launch is not None and hw.launch.launcher == "torchrun"
    assert hw.inter_node_bandwidth_bytes_per_s is None
    assert any("network between them is unknown" in n for n in hw.notes)


def test_environment_docstring_examples_run() -> None:
    assert doctest.testmod(environment).failed == 0


def test_a_cpu_machine_under_torchrun_counts_the_launchers_processes_per_node(fake_nvml) -> None:
    """With no GPU the ranks per node defaulted to 1: 2 ranks planned where torchrun ran 16 (its world_size shown
    beside it in the same JSON)."""
    environ = {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"}
    hw = detect_hardware(environ=environ, nvml=fake_nvml("nvml_missing"))
    assert (hw.device_type, hw.nodes, hw.processes_per_node, hw.world_size) == ("cpu", 2, 8, 16)
    assert any(n.startswith("torchrun runs 8 process(es) on each of 2 node(s)") for n in hw.notes)
    assert detect_hardware(environ=environ, nvml=fake_nvml("nvml_missing"), gpus=2).processes_per_node == 2


@pytest.mark.parametrize(("memory", "source"), [
    ({"SLURM_MEM_PER_NODE": "2048"}, "SLURM_MEM_PER_NODE=2048"),
    ({"SLURM_MEM_PER_CPU": "1024", "SLURM_CPUS_ON_NODE": "2"}, "SLURM_MEM_PER_CPU=1024 x SLURM_CPUS_ON_NODE=2"),
])
def test_a_slurm_jobs_memory_caps_host_ram(fake_nvml, memory: dict[str, str], source: str) -> None:
    """A job given 2 GiB (`sbatch --mem`) on a cluster whose cgroup plugin does not constrain RAM was planned with
    the node's RAM, and SLURM's accounting kills a job over its request (left open by the container probe)."""
    environ = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS_PER_NODE": "1", **memory}
    hw = detect_hardware(environ=environ, nvml=fake_nvml("nvml_missing"))
    assert hw.node.cpu.memory_total_bytes == 2**31
    assert (hw.node.cpu.memory_available_bytes or 0) <= 2**31
    assert any(n.startswith(f"Host RAM is this SLURM job's 2.00 GiB ({source}), not the node's") for n in hw.notes)
    plain = detect_hardware(environ={**environ, "SLURM_MEM_PER_NODE": "0"} if "SLURM_MEM_PER_NODE" in memory
                            else {k: v for k, v in environ.items() if k != "SLURM_MEM_PER_CPU"},
                            nvml=fake_nvml("nvml_missing"))  # --mem=0: the whole node; no request: no cap
    assert (plain.node.cpu.memory_total_bytes or 0) > 2**31
    assert not any("SLURM job's" in n for n in plain.notes)
