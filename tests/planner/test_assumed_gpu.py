"""What the step time assumed of a GPU the hardware does not describe in full is said in the explanation (a
probe's GPU file without memory_bandwidth came out 26 % faster than the same GPU with it, and only the JSON's cost
notes said why)."""

from __future__ import annotations

from pathlib import Path

import autoshard

CLONE = """\
kind: node
name: clone
gpus_per_node: 2
gpu:
  name: h100clone
  display_name: H100 clone
  memory: 80 GiB
  compute_capability: "9.0"
  peak_tflops: {fp32: 67, tf32: 494.5, bf16: 989.5, fp16: 989.5}
"""


def _assumed(hardware: object) -> list[str]:
    plan = autoshard.recommend("tiny-gpt2", hardware=hardware, seq_len=32)  # type: ignore[arg-type]
    return [line for line in plan.explanation if line.startswith("Assumed:")]


def test_a_gpu_file_without_bandwidths_or_measurements_is_said_to_be_priced_on_assumptions(tmp_path: Path) -> None:
    path = tmp_path / "clone.yaml"
    path.write_text(CLONE)
    lines = _assumed(str(path))
    assert any("H100 clone's memory bandwidth is not known" in line for line in lines), lines
    assert any("H100 clone has no measured kernel efficiencies" in line for line in lines), lines
    assert any("the link between a node's GPUs is not known" in line for line in lines), lines


def test_a_measured_profile_assumes_nothing_and_a_generic_one_says_so() -> None:
    assert _assumed("dgx-h100") == []
    (line,) = _assumed("l40s")
    assert "NVIDIA L40S has no measured kernel efficiencies" in line
