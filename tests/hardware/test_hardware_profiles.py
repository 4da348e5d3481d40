from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autoshard.errors import HardwareError
from autoshard.hardware import GPUSpec, LinkSpec, NodeSpec, list_profiles, load_hardware
from autoshard.hardware.profiles import gpu_profile_for, load_profile, profiles_dir

SHIPPED = sorted(profiles_dir().rglob("*.yaml"))
KIND_OF_DIRECTORY = {"gpus": "gpu", "interconnects": "interconnect", "nodes": "node", "clusters": "cluster"}
ISSUE_GPUS = [
    "v100-sxm-16gb", "v100-sxm-32gb", "v100-pcie-16gb", "v100-pcie-32gb", "t4", "a10g", "l4", "l40s", "rtx-3090",
    "rtx-4090", "titan-rtx", "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-40gb", "a100-pcie-80gb", "h100-sxm-80gb",
    "h100-pcie-80gb", "h200-sxm-141gb",
]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_profile_loads_validates_and_cites_its_numbers(path: Path) -> None:
    # Shipped profiles load in strict mode: every number must be {value:, source:} with a known source.
    profile = load_profile(path.stem)
    assert profile.name == path.stem
    assert profile.kind == KIND_OF_DIRECTORY[path.parent.name]
    if isinstance(profile.spec, GPUSpec):
        gpu = profile.spec
        # A power-capped variant has no NVML names of its own (NVML names the board, not its cap): chosen by name.
        assert (gpu.nvml_names or gpu.power_limit_w) and gpu.compute_capability and gpu.memory_bandwidth_bytes_per_s
        assert gpu.host_link is not None and gpu.host_link.kind == "pcie"
        assert gpu.peak_tflops.fp32 and (gpu.peak_tflops.bf16 or gpu.peak_tflops.fp16)
        # NVML's total where it is published (nvidia-smi's MiB: the GDDR6 cards' ECC reserve, the H100's 81,559),
        # else the datasheet's GB read as GiB; a file's memory was once the datasheet's on every card.
        assert gpu.memory_bytes % 2**20 == 0
        nvml = {"l40s": 46068, "l4": 23034, "t4": 15360, "a10g": 23028, "h100-sxm-80gb": 81559,
                "h100-pcie-80gb": 81559, "h100-sxm-80gb-500w": 81559, "h200-sxm-141gb": 143771,
                "b200": 183359, "h100-nvl": 95830, "rtx-a6000": 49140, "a40": 46068}
        if gpu.name in nvml:
            assert gpu.memory_bytes == nvml[gpu.name] * 2**20
        else:
            assert gpu.memory_bytes % 2**30 == 0
    elif isinstance(profile.spec, LinkSpec):
        assert profile.spec.bandwidth_bytes_per_s > 0
    else:
        assert isinstance(profile.spec, NodeSpec) and profile.spec.gpu is not None


def test_the_issue_gpu_list_is_shipped() -> None:
    names = {e.name for e in list_profiles() if e.kind == "gpu"}
    assert set(ISSUE_GPUS) <= names
    assert {"dgx-a100", "dgx-h100", "dgx-b200", "workstation-2x-rtx4090"} <= {e.name for e in list_profiles()}
    assert {"b200", "h100-nvl", "rtx-a6000", "a40"} <= names  # what renters are offered beside the issue's list
    assert {"nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie-gen3", "pcie-gen4", "pcie-gen5", "infiniband-hdr",
            "infiniband-ndr", "ethernet-100g", "ethernet-25g"} <= {e.name for e in list_profiles()}


@pytest.mark.parametrize(
    ("name", "dtype", "dense_tflops"),
    [
        ("a100-sxm-80gb", "bf16", 312),  # datasheet prints 312 dense | 624 sparse
        ("h100-sxm-80gb", "bf16", 989.5),  # datasheet prints only 1,979 with sparsity
        ("h100-pcie-80gb", "fp8", 1513),
        ("l4", "fp16", 121),
        ("rtx-4090", "fp16", 165.2),  # FP32 accumulate, as PyTorch uses
        ("v100-sxm-32gb", "fp16", 125),
        ("t4", "bf16", None),  # Turing has no bf16 tensor cores
        ("b200", "bf16", 2250),  # DGX B200 datasheet: 4.5 PFLOPS with sparsity per GPU
        ("h100-nvl", "bf16", 835.5),  # datasheet prints only 1,671 with sparsity
        ("rtx-a6000", "fp16", 154.8),  # datasheet prints only 309.7 with sparsity
    ],
)
def test_peak_tflops_are_dense_not_sparse(name: str, dtype: str, dense_tflops: float | None) -> None:
    spec = load_profile(name).spec
    assert isinstance(spec, GPUSpec)
    assert spec.peak_tflops.for_dtype(dtype) == dense_tflops


@pytest.mark.parametrize(
    ("nvml_name", "profile"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("A100-SXM4-80GB", "a100-sxm-80gb"),  # older drivers drop the NVIDIA prefix
        ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("GeForce RTX 3090", "rtx-3090"),
        ("Tesla V100-SXM3-32GB", "v100-sxm-32gb"),  # a DGX-2's, whose profile names this board
        ("NVIDIA B999", None),
    ],
)
def test_nvml_names_map_to_profiles(nvml_name: str, profile: str | None) -> None:
    spec = gpu_profile_for(nvml_name)
    assert (spec.name if spec else None) == profile


@pytest.mark.parametrize(
    ("name", "close"),
    [("a100-80gb", "a100-sxm-80gb"), ("dgx-a10", "dgx-a100"), ("H100_SXM_80GB", None)],
)
def test_unknown_profile_name_lists_close_names(name: str, close: str | None) -> None:
    if close is None:  # case and underscores are forgiven
        assert load_hardware(name).gpu.name == "h100-sxm-80gb"  # type: ignore[union-attr]
        return
    with pytest.raises(HardwareError, match="did you mean") as info:
        load_hardware(name)
    assert close in info.value.message
    assert "autoshard.hardware.list_profiles()" in (info.value.hint or "")  # from Python; the CLI's says --list


GOOD_GPU = """\
kind: gpu
name: my-gpu
display_name: My GPU
memory: 24 GiB
peak_tflops: {fp32: 10, bf16: 100}
"""


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("kind: gpu\nname: [unclosed\n", ["malformed YAML", "mine.yaml:3:"]),
        ("- just\n- a list\n", ["expected a mapping", "found a list"]),
        ("kind: gpux\nname: x\n", ["kind: expected one of 'gpu'", "found 'gpux'"]),
        (GOOD_GPU.replace("memory: 24 GiB\n", ""), ["memory: expected a positive size", "found nothing"]),
        (GOOD_GPU.replace("memory:", "memroy:"), ["memroy: unknown key", "expected one of"]),
        (GOOD_GPU.replace("24 GiB", "-24 GiB"), ["memory: expected a positive size", "found '-24 GiB'"]),
        (GOOD_GPU.replace("24 GiB", "0 GiB"), ["memory: expected a positive size", "found '0 GiB'"]),
        (GOOD_GPU.replace("24 GiB", "lots"), ["memory: expected a positive size", "found 'lots' (str)"]),
        # A bare number was read as bytes: 80 bytes of GPU memory, a 400 B/s network, and a plan saying so.
        (GOOD_GPU.replace("24 GiB", "80"), ["memory: expected a positive size", "found 80 (int)",
                                           "A bare number has no unit"]),
        (GOOD_GPU.replace("24 GiB", "1e400 GB"), ["memory: expected a positive size", "found '1e400 GB'"]),
        ("kind: node\nname: n\ngpu: t4\ngpus_per_node: 2\ncpu_memory: 512\n",
         ["cpu_memory: expected a positive size", "found 512 (int)"]),
        ("kind: node\nname: n\ngpu: t4\ngpus_per_node: 2\nnetwork: {link: {name: ib, display_name: IB, "
         "type: infiniband, bandwidth: 400}, ports: 1}\n", ["bandwidth: expected a positive rate", "found 400 (int)"]),
        (GOOD_GPU.replace("bf16: 100", "bf16: fast"), ["peak_tflops.bf16: expected a positive number"]),
        (GOOD_GPU.replace("bf16: 100", "bf17: 100"), ["peak_tflops.bf17: unknown key"]),
        (GOOD_GPU.replace("24 GiB", "{value: 24 GiB, sorce: x}"), ["memory.sorce: unknown key"]),
        (GOOD_GPU + "host_link: pcie-gen9\n", ["host_link: expected the name of a shipped interconnect"]),
        (GOOD_GPU + "nvlink: pcie-gen4\n", ["nvlink: expected an nvlink interconnect", "a pcie link"]),
        ("kind: node\nname: n\ngpu: nvlink3\ngpus_per_node: 2\n", ["gpu: expected the name of a gpu profile",
                                                                   "an interconnect profile"]),
        ("kind: node\nname: n\ngpu: a100-sxm-80\ngpus_per_node: 2\n", ["close: a100-sxm-80gb"]),
        ("kind: node\nname: n\ngpu: t4\ngpus_per_node: eight\n", ["gpus_per_node: expected a positive number",
                                                                 "found 'eight' (str)"]),
        ("kind: node\nname: n\ngpu: t4\ngpus_per_node: 0\n", ["gpus_per_node: expected a positive number"]),
        ("kind: node\nname: n\ngpu: t4\ngpus_per_node: 2\nnetwork: {link: nvlink3, ports: 1}\n",
         ["network.link: expected an infiniband or ethernet interconnect"]),
        ("kind: cluster\nname: c\nnode: dgx-a100\nnodes: -2\n", ["nodes: expected a positive number of nodes"]),
        ("kind: node\nname: n\ngpu: t4\ngpus_per_node: 8\ngpus_per_node: 4\n",  # safe_load kept the last
         ["mine.yaml:5: 'gpus_per_node' is given twice (first on line 4)"]),
        ("kind: node\nname: n\ngpu: t4\ngpus_per_node: 2\nintra_node_link: infiniband-ndr\n",
         ["intra_node_link: expected an nvlink or pcie interconnect", "an infiniband link"]),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_invalid_hardware_file_names_file_key_expected_and_found(
    tmp_path: Path, text: str, fragments: list[str]
) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(HardwareError) as info:
        load_hardware(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_shipped_profiles_must_cite_every_number(tmp_path: Path) -> None:
    # The same file is fine as a user's file but rejected among shipped profiles (strict mode).
    (tmp_path / "gpus").mkdir()
    shutil.copytree(profiles_dir() / "interconnects", tmp_path / "interconnects")
    (tmp_path / "gpus" / "my-gpu.yaml").write_text(GOOD_GPU)
    assert load_profile(tmp_path / "gpus" / "my-gpu.yaml").spec.memory_bytes == 24 * 2**30  # type: ignore[union-attr]
    with pytest.raises(HardwareError, match=r"expected \{value: \.\.\., source: \.\.\.\} \(every number"):
        load_profile("my-gpu", directory=tmp_path)
    (tmp_path / "gpus" / "my-gpu.yaml").write_text(
        "sources: {sheet: a datasheet}\n"
        + GOOD_GPU.replace("24 GiB", "{value: 24 GiB, source: nowhere}")
        .replace("{fp32: 10, bf16: 100}", "{fp32: {value: 10, source: sheet}}")
    )
    with pytest.raises(HardwareError, match=r"memory\.source: expected one of the citation ids"):
        load_profile("my-gpu", directory=tmp_path)


def test_user_files_define_gpus_inline_and_clusters_by_reference(tmp_path: Path) -> None:
    node = tmp_path / "node.yaml"
    node.write_text(
        "kind: node\nname: lab-box\ngpus_per_node: 4\ncpu_memory: 256 GiB\n"
        "gpu:\n" + "".join(f"  {line}\n" for line in GOOD_GPU.splitlines() if not line.startswith("kind"))
        + "  host_link: pcie-gen4\n"
    )
    hw = load_hardware(node)
    assert hw.source == "file" and hw.origin == str(node)
    assert hw.gpu is not None and hw.gpu.name == "my-gpu" and hw.gpu.peak_tflops.bf16 == 100
    assert hw.node.intra_node_link is not None and hw.node.intra_node_link.name == "pcie-gen4"
    assert hw.node.cpu.memory_total_bytes == 256 * 2**30

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "kind: cluster\nname: rented\nnode: dgx-h100\nnodes: 4\nnetwork: {link: infiniband-ndr, ports: 4}\n"
    )
    hw = load_hardware(cluster)
    assert (hw.nodes, hw.processes_per_node, hw.world_size) == (4, 8, 32)
    assert hw.inter_node_bandwidth_bytes_per_s == 4 * 50e9
    assert hw.inter_node_latency_s == pytest.approx(2e-6)
