"""A multi-node plan records the network its step time was priced with, and its launch scripts say it and how to
check it (an older gap: "exports carry no network; plan.json does not record it")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import autoshard
from autoshard.export import export_plan
from autoshard.hardware.specs import UNKNOWN_LINK_BYTES_PER_S
from autoshard.planner import plan_file

CLUSTER = """\
kind: cluster
name: my-cluster
node: dgx-a100
nodes: 3
network: {link: infiniband-hdr, ports: 4}
"""
"""docs/hardware.md's cluster example: a shipped node (whose own network is 8 HDR ports) on a network of its own."""


def _export(tmp_path: Path, hardware: str) -> tuple[autoshard.Plan, Path]:
    plan = autoshard.recommend("tiny-gpt2", hardware=hardware, seq_len=64, batch_size=4, strategies=["ddp"])
    export_plan(plan, tmp_path)
    return plan, tmp_path


def _network_lines(text: str) -> list[str]:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("# Network:")), None)
    return [] if start is None else lines[start:start + 5]


@pytest.mark.parametrize(("hardware", "said", "bytes_per_s"), [
    ("dgx-h100:8x2", "8 × InfiniBand NDR (400 Gb/s)", 400e9),
    ("aws-p4d-24xlarge:8x4", "4 × 100 GbE", 50e9),
], ids=["infiniband", "ethernet"])
def test_a_profiled_network_is_recorded_said_and_the_one_the_plan_priced(tmp_path: Path, hardware: str, said: str,
                                                                         bytes_per_s: float) -> None:
    plan, out = _export(tmp_path, hardware)
    exported = plan_file.read(out)
    assert (exported.hardware.network, exported.hardware.network_bytes_per_s) == (said, bytes_per_s)
    assert plan.hardware.inter_node_bandwidth_bytes_per_s == bytes_per_s  # what the cost model was given
    for name in ("launch.sh", "slurm.sbatch"):
        text = (out / name).read_text()
        lines = _network_lines(text)
        assert lines[0] == f"# Network: the plan priced {said} per node, {bytes_per_s / 1e9:g} GB/s per node per " \
                           "direction."
        assert any("nccl-tests' all_reduce_perf" in line for line in lines)
        assert subprocess.run(["bash", "-n", str(out / name)], capture_output=True).returncode == 0
    assert f"priced with {said} per node" in (out / "README.md").read_text()


def test_a_network_the_hardware_does_not_describe_is_said_to_be_the_default(tmp_path: Path) -> None:
    plan, out = _export(tmp_path, "h100-sxm-80gb:8x2")
    exported = plan_file.read(out)
    assert (exported.hardware.network, exported.hardware.network_bytes_per_s) == (None, UNKNOWN_LINK_BYTES_PER_S)
    assert plan.hardware.inter_node_bandwidth_bytes_per_s is None  # priced with the default, and noted so
    lines = _network_lines((out / "launch.sh").read_text())
    assert lines[0].startswith("# Network: the hardware did not describe it, so the plan priced 10 GB/s per node")
    assert "The hardware did not describe the network" in (out / "README.md").read_text()


def test_a_cluster_file_of_ones_own_is_priced_and_said(tmp_path: Path) -> None:
    (tmp_path / "my-cluster.yaml").write_text(CLUSTER)
    _, out = _export(tmp_path / "out", str(tmp_path / "my-cluster.yaml"))
    assert _network_lines((out / "slurm.sbatch").read_text())[0] == (
        "# Network: the plan priced 4 × InfiniBand HDR (200 Gb/s) per node, 100 GB/s per node per direction.")


def test_one_node_and_a_plan_file_from_before_the_field_say_no_network(tmp_path: Path) -> None:
    _, out = _export(tmp_path / "one", "dgx-h100")
    exported = plan_file.read(out)
    assert (exported.hardware.network, exported.hardware.network_bytes_per_s) == (None, None)
    assert _network_lines((out / "launch.sh").read_text()) == []

    _, many = _export(tmp_path / "many", "dgx-h100:8x2")
    data = json.loads((many / "plan.json").read_text())
    del data["hardware"]["network"], data["hardware"]["network_bytes_per_s"]
    old = plan_file.loads(json.dumps(data))
    assert (old.hardware.network, old.hardware.network_bytes_per_s) == (None, None)
    export_plan(old, tmp_path / "again")
    assert _network_lines((tmp_path / "again" / "launch.sh").read_text()) == []
    data["hardware"]["network_bytes_per_s"] = "fast"
    with pytest.raises(autoshard.UsageError, match=r'"hardware.network_bytes_per_s" has the wrong type \(str\)'):
        plan_file.loads(json.dumps(data))
