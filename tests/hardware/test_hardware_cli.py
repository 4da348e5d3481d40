from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoshard.cli import main
from autoshard.hardware.profiles import profiles_dir


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_shows_this_machine_for_real(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hardware"]) == 0
    out = capsys.readouterr().out
    assert "Hardware: this machine (detected)" in out
    assert "No GPU detected" in out or "GPUs (CUDA order)" in out


def test_cli_json_for_real_is_documented_shape(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["hardware", "--json"])
    assert data["schema_version"] == 1 and data["source"] == "detected"
    assert data["device_type"] in ("cpu", "cuda") and data["disk_benchmark"] is None
    assert data["node"]["cpu"]["memory_total_bytes"] > 0
    if data["device_type"] == "cpu":
        assert data["backend"] == "gloo" and data["node"]["gpu"] is None


def test_cli_renders_a_faked_dgx_a100(capsys: pytest.CaptureFixture[str], install_nvml) -> None:
    install_nvml("dgx_a100_8x")
    assert main(["hardware"]) == 0
    out = capsys.readouterr().out
    assert "8 × NVIDIA A100-SXM4-80GB" in out and "NV12" in out and "300.0 GB/s" in out
    data = _json(capsys, ["hardware", "--json", "--gpus", "2"])
    assert data["world_size"] == 2 and data["node"]["topology"]["labels"] == [["X", "NV12"], ["NV12", "X"]]
    assert data["node"]["devices"][0]["memory_total_bytes"] == 81920 * 2**20


def test_cli_plans_for_a_profile_with_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["hardware", "--hardware", "dgx-h100", "--nodes", "2", "--cpu-memory", "1TiB", "--json"])
    assert (data["source"], data["nodes"], data["world_size"]) == ("profile", 2, 16)
    assert data["node"]["cpu"]["memory_total_bytes"] == 2**40
    assert main(["hardware", "--hardware", "workstation-2x-rtx4090", "--gpu-memory", "20GB"]) == 0
    out = capsys.readouterr().out
    assert "PCIe 4.0 x16" in out and "18.63 GiB" in out  # 20 GB = 18.63 GiB


def test_a_profile_without_nvme_says_so_rather_than_that_none_was_found_here(
        capsys: pytest.CaptureFixture[str]) -> None:
    """"No local NVMe/SSD found" under a GPU profile read as if autoshard had looked at the rented machine."""
    assert main(["hardware", "--hardware", "h100-sxm-80gb"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "h100-sxm-80gb lists no NVMe/SSD to offload to" in out and "No local NVMe" not in out


def test_cli_lists_every_shipped_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hardware", "--list"]) == 0
    assert "dgx-a100" in capsys.readouterr().out
    entries = _json(capsys, ["hardware", "--list", "--json"])
    assert {e["name"] for e in entries} == {p.stem for p in profiles_dir().rglob("*.yaml")}


def test_cli_benchmarks_a_disk_and_cleans_up(capsys: pytest.CaptureFixture[str], tmp_path: Path, install_nvml) -> None:
    install_nvml("nvml_missing")  # this machine, as on one without GPUs
    data = _json(capsys, ["hardware", "--benchmark-disk", str(tmp_path), "--benchmark-size", "1MiB", "--json"])
    bench = data["disk_benchmark"]
    assert bench["bytes_written"] == 2**20 and bench["write_bytes_per_s"] > 0
    assert data["node"]["nvme"][0]["read_bytes_per_s"] == bench["read_bytes_per_s"]
    assert list(tmp_path.iterdir()) == []
    assert main(["hardware", "--benchmark-disk", str(tmp_path), "--benchmark-size", "64KiB"]) == 0
    assert "the test file was deleted" in capsys.readouterr().out


BAD_YAML = "kind: node\nname: x\ngpu: [t4\n"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--hardware", "dgx-a10"], "did you mean dgx-a100"),
        (["--hardware", "{bad}"], "malformed YAML"),
        (["--hardware", "{missing}"], "no such hardware file"),
        (["--hardware", "nvlink3"], "is an interconnect profile"),
        (["--hardware", "t4", "--gpu-memory", "lots"], "--gpu-memory: expected a size"),
        (["--hardware", "t4", "--gpu-memory=-1GB"], "expected a positive size"),
        (["--hardware", "t4", "--cpu-memory", "0"], "--cpu-memory: '0' has no unit"),
        (["--hardware", "dgx-a100", "--gpus", "16"], "contradicts 'dgx-a100'"),
        (["--hardware", "t4", "--gpus", "0"], "--gpus must be a positive whole number"),
        (["--hardware", "t4", "--gpus", "100000"], "no node holds more than 1024"),  # a typo, not a node
        (["--hardware", "{huge}"], "gpus_per_node: expected at most 1024 GPUs"),
        (["--hardware", "{bytes_for_bits}"], "expected at most 1600 Gb/s for one infiniband port"),
        (["--hardware", "t4", "--nodes", "-3"], "--nodes must be a positive whole number"),
        (["--nvme", "{missing}"], "does not exist"),  # on this machine it is measured
        (["--hardware", "t4", "--nvme", "relative"], "absolute path on t4"),  # on a profile, a path there
        (["--gpu-memory", "80GB"], "no GPU was detected"),
        (["--benchmark-disk", "{missing}"], "does not exist"),
        (["--benchmark-disk", "{bad}"], "not a directory"),
        (["--benchmark-disk", "{tmp}", "--benchmark-size", "huge"], "--benchmark-size"),
        # this machine's disk attached to a rented one's profile described neither
        (["--hardware", "t4", "--benchmark-disk", "{tmp}"], "--benchmark-disk measures a disk of this machine"),
        (["--list", "--hardware", "t4"], "--list does not combine with --hardware"),
        # without --benchmark-disk these were ignored: any value, exit 0 (a new user's report)
        (["--benchmark-size", "lots", "--benchmark-seconds=-3"], "set the disk benchmark, which --benchmark-disk"),
        (["--list", "--benchmark-size", "1GiB"], "--list does not combine with --benchmark-size"),
        (["--hardware", "l40s:0"], "--hardware l40s:0: a machine has at least one GPU per node"),  # said --gpus
        # named the --gpus the user did not type (a renting probe)
        (["--hardware", "dgx-h100:16"], "--hardware dgx-h100:16: 16 GPUs per node contradict 'dgx-h100', which has 8"),
        (["--hardware", "h100-sxm-80gb:8x2:3"], "--hardware h100-sxm-80gb:8x2:3: the machine is sized twice."),
    ],
)
def test_cli_bad_input_is_one_clear_message_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, install_nvml, argv: list[str], fragment: str
) -> None:
    install_nvml("nvml_missing")  # the same answer on machines with and without GPUs
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_YAML)
    huge = tmp_path / "huge.yaml"
    huge.write_text("kind: node\nname: huge\ngpu: h100-sxm-80gb\ngpus_per_node: 100000\n")
    bytes_for_bits = tmp_path / "port.yaml"  # a probe's 400 GB/s port, meant as NDR's 400 Gb/s
    bytes_for_bits.write_text("kind: node\nname: n\ngpu: h100-sxm-80gb\ngpus_per_node: 8\nnetwork:\n  link:\n"
                              "    {name: p, display_name: p, type: infiniband, bandwidth: 400 GB/s}\n  ports: 8\n")
    paths = {"bad": str(bad), "missing": str(tmp_path / "missing.yaml"), "tmp": str(tmp_path), "huge": str(huge),
             "bytes_for_bits": str(bytes_for_bits)}
    assert main(["hardware", *(a.format(**paths) for a in argv)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("autoshard: error: ") and fragment in captured.err
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) <= 2


def test_cli_nvml_failure_mid_way_exits_2_without_traceback(
    capsys: pytest.CaptureFixture[str], install_nvml
) -> None:
    install_nvml("dgx_a100_8x_gpu_lost")
    assert main(["hardware"]) == 2
    err = capsys.readouterr().err
    assert "GPU is lost" in err and "Traceback" not in err


def test_cli_non_numeric_gpus_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["hardware", "--gpus", "many"])
    assert info.value.code == 2
    assert "invalid int value" in capsys.readouterr().err


def test_a_size_is_read_with_its_x_in_either_case(capsys: pytest.CaptureFixture[str], install_nvml) -> None:
    """Profile names are case-insensitive, and "8X2" was "not a size" (a renting probe)."""
    install_nvml("nvml_missing")
    assert main(["hardware", "--hardware", "h100-sxm-80gb:8X2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["nodes"], out["processes_per_node"]) == (2, 8)
