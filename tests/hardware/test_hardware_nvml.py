from __future__ import annotations

import sys

import pytest

from autoshard.errors import HardwareError
from autoshard.hardware import detect_hardware
from autoshard.hardware.nvml import probe_nvml
from autoshard.hardware.profiles import load_profile
from hardware_fake_nvml import FakeNvml, load_fixture

A100_TOTAL = 81920 * 2**20


def test_dgx_a100_reports_eight_gpus_with_nv12_between_every_pair(fake_nvml) -> None:
    nvml = fake_nvml("dgx_a100_8x")
    hw = detect_hardware(environ={}, nvml=nvml)
    assert (hw.device_type, hw.backend, hw.processes_per_node, hw.world_size) == ("cuda", "nccl", 8, 8)
    assert hw.gpu is not None and hw.gpu.name == "a100-sxm-80gb"  # matched to its profile ...
    assert hw.gpu.memory_bytes == A100_TOTAL  # ... but memory is what NVML measured
    assert hw.gpu.peak_tflops.bf16 == 312
    assert [d.nvlink_active_links for d in hw.node.devices] == [12] * 8
    topology = hw.node.topology
    assert topology is not None and topology.all_pairs_nvlink and topology.min_pair_nvlinks == 12
    assert topology.labels[0] == ("X",) + ("NV12",) * 7
    assert hw.node.intra_node_link is not None and hw.node.intra_node_link.name == "nvlink3"
    assert hw.node.intra_node_bandwidth_bytes_per_s == pytest.approx(300e9)  # 12 links x 25 GB/s
    assert nvml.init_calls == nvml.shutdown_calls == 1


def test_two_consumer_gpus_on_pcie_use_the_max_link_not_the_idle_one(fake_nvml) -> None:
    hw = detect_hardware(environ={}, nvml=fake_nvml("rtx4090_2x_pcie"))
    first = hw.node.devices[0]
    # Old nvidia-ml-py returned bytes: everything is str here.
    assert first.name == "NVIDIA GeForce RTX 4090" and first.uuid.startswith("GPU-1a2b")
    assert first.pci_bus_id == "00000000:01:00.0"
    assert (first.pcie_generation, first.pcie_max_generation, first.pcie_max_width) == (1, 4, 16)
    assert hw.node.topology is not None and hw.node.topology.labels == (("X", "PHB"), ("PHB", "X"))
    assert hw.node.intra_node_link is not None and hw.node.intra_node_link.kind == "pcie"
    assert hw.node.intra_node_bandwidth_bytes_per_s == pytest.approx(31.5e9)
    assert hw.gpu is not None and hw.gpu.name == "rtx-4090" and hw.gpu.memory_bytes == 24564 * 2**20


def test_one_gpu_tolerates_unsupported_queries(fake_nvml) -> None:
    hw = detect_hardware(environ={}, nvml=fake_nvml("t4_1x"))
    (t4,) = hw.node.devices
    assert (t4.pcie_generation, t4.pcie_width) == (None, None)  # NotSupported in this VM
    assert (t4.pcie_max_generation, t4.pcie_max_width) == (3, 16)
    assert hw.node.topology is None and hw.node.intra_node_bandwidth_bytes_per_s is None
    assert hw.gpu is not None and hw.gpu.name == "t4" and hw.gpu.host_link is not None
    assert hw.gpu.host_link.bandwidth_bytes_per_s == pytest.approx(15.75e9)
    assert hw.world_size == 1
    # The plan made from the t4 profile before renting is the one made on the card: the same memory (NVML's total,
    # not the datasheet's "16GB", which the card's ECC reserve leaves 1 GiB short of).
    assert hw.gpu.memory_bytes == load_profile("t4").spec.memory_bytes == 15360 * 2**20


@pytest.mark.parametrize("fixture", ["nvml_missing", "driver_not_loaded"])
def test_missing_nvml_or_driver_means_no_gpu_and_plans_for_the_cpu(fake_nvml, fixture: str) -> None:
    hw = detect_hardware(environ={}, nvml=fake_nvml(fixture))
    assert (hw.device_type, hw.backend, hw.node.gpus, hw.processes_per_node) == ("cpu", "gloo", 0, 1)
    assert hw.notes[0].startswith("No GPU detected (NVML: ")
    assert 'load_hardware("NAME")' in hw.notes[0] and "(gpus=N runs N)" in hw.notes[0]  # a Python caller's terms
    assert hw.device_memory_bytes == hw.node.cpu.memory_available_bytes


def test_nvidia_ml_py_not_installed_means_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    hw = detect_hardware(environ={})
    assert hw.device_type == "cpu" and "nvidia-ml-py is not installed" in hw.notes[0]


def test_nvml_error_mid_way_is_a_clear_hardware_error_and_nvml_is_shut_down(fake_nvml) -> None:
    nvml = fake_nvml("dgx_a100_8x_gpu_lost")
    with pytest.raises(HardwareError, match=r"GPU 5 .*GPU is lost") as info:
        detect_hardware(environ={}, nvml=nvml)
    # a Python caller is pointed at load_hardware(), the command line at --hardware (errors.HARDWARE_ARGUMENTS)
    assert "nvidia-smi" in (info.value.hint or "") and 'use load_hardware("NAME")' in (info.value.hint or "")
    assert "--hardware" not in (info.value.hint or "")
    assert nvml.init_calls == nvml.shutdown_calls == 1


def test_nvml_init_failure_other_than_missing_is_an_error() -> None:
    data = {"init_error": "NVML_ERROR_LIB_RM_VERSION_MISMATCH"}
    with pytest.raises(HardwareError, match="NVML could not start"):
        probe_nvml(FakeNvml(data))


def test_unknown_gpu_model_keeps_nvml_facts_and_says_peaks_are_unknown() -> None:
    data = load_fixture("t4_1x")
    data["devices"][0]["name"] = "NVIDIA B999"
    hw = detect_hardware(environ={}, nvml=FakeNvml(data))
    assert hw.gpu is not None and hw.gpu.name == "NVIDIA B999" and hw.gpu.profile_path is None
    assert hw.gpu.peak_tflops.bf16 is None and hw.gpu.compute_capability == (7, 5)
    assert any("no profile for 'NVIDIA B999'" in note for note in hw.notes)


def test_mixed_gpus_plan_with_the_smallest_and_say_so() -> None:
    data = load_fixture("rtx4090_2x_pcie")
    data["devices"][1].update(name="NVIDIA GeForce RTX 3090", memory={"total": 24 * 10**9, "free": 1, "used": 0})
    hw = detect_hardware(environ={}, nvml=FakeNvml(data))
    assert hw.gpu is not None and hw.gpu.name == "rtx-3090" and hw.gpu.memory_bytes == 24 * 10**9
    assert any("GPUs differ" in note for note in hw.notes)
    assert any("CUDA_DEVICE_ORDER" in note for note in hw.notes)


def test_zero_devices_means_no_gpu() -> None:
    report = probe_nvml(FakeNvml({"devices": [], "driver_version": "1"}))
    assert report.devices == () and report.no_gpu_reason == "NVML found no NVIDIA GPU"


def test_real_detection_on_this_machine_never_initialises_cuda() -> None:
    import torch

    hw = detect_hardware()
    assert hw.source == "detected" and hw.world_size >= 1
    assert hw.node.cpu.memory_total_bytes and hw.node.cpu.logical_cores
    if hw.device_type == "cpu":
        assert hw.backend == "gloo" and "No GPU detected" in hw.notes[0]
    else:
        assert hw.backend == "nccl" and hw.node.devices
    assert not torch.cuda.is_initialized()


@pytest.mark.parametrize("visible", [None, "0,1"])
def test_gpus_this_process_may_not_use_are_left_out_and_said(visible: str | None) -> None:
    """A job confined to GPUs 2 and 3 of 8 (SLURM's ConstrainDevices): NVML counts all 8 and refuses the others'
    handles with NVML_ERROR_NO_PERMISSION (nvml.h: "Update your code to handle this error"); detection refused
    the machine (a container probe). CUDA numbers the two it sees 0 and 1, as SLURM's CUDA_VISIBLE_DEVICES does."""
    from autoshard.hardware import detect_hardware
    from tests.hardware.hardware_fake_nvml import load_fixture

    data = {**load_fixture("dgx_a100_8x"), "no_permission": [0, 1, 4, 5, 6, 7]}
    hw = detect_hardware(environ={} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}, nvml=FakeNvml(data))
    assert hw.world_size == 2 and [d.nvml_index for d in hw.node.devices] == [2, 3]
    assert [d.index for d in hw.node.devices] == [0, 1]
    assert any("may not use 6 of them (NVML numbering 0, 1, 4, 5, 6, 7" in n for n in hw.notes)
    none = {**data, "no_permission": list(range(8))}
    cpu = detect_hardware(environ={}, nvml=FakeNvml(none))
    assert cpu.device_type == "cpu" and any("none of which this process may use" in n for n in cpu.notes)


def test_more_cpu_processes_than_usable_cores_are_said(fake_nvml) -> None:
    """--gpus 4 on a 2-core machine planned 4 gloo processes and said only "gloo backend with 4 processes" (a docs
    probe): each runs slower than alone, and so does what fit() and tune measure."""
    hw = detect_hardware(environ={}, nvml=fake_nvml("nvml_missing"))
    cores = hw.node.cpu.usable_cores or hw.node.cpu.logical_cores
    crowded = detect_hardware(gpus=cores + 1, environ={}, nvml=fake_nvml("nvml_missing"))
    assert f"These {cores + 1} processes share {cores} usable core" in crowded.notes[0]
    alone = detect_hardware(gpus=cores, environ={}, nvml=fake_nvml("nvml_missing"))
    assert "processes share" not in alone.notes[0]
