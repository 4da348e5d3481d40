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


def test_unaligned_gemms_on_a_gpu_without_their_measured_slowdown_are_said_to_be_priced_as_aligned() -> None:
    """GPT-2's 50,257-token vocabulary makes its LM head an unaligned GEMM, measured 3-5.5x slower on Hopper and
    priced so there; on an A100 it was priced at the aligned rate without a word, and the H100 NVL (no efficiencies
    in its profile then) came out 1.81x the H100 SXM (probe)."""
    from autoshard.hardware import load_hardware

    a100 = autoshard.recommend("gpt2", hardware=load_hardware("a100-sxm-80gb", gpus=1), seq_len=1024,
                               strategies=["ddp"])
    assert any("not multiples of 8" in line and "A100" in line for line in a100.explanation)
    rates = {}
    for name in ("h100-sxm-80gb", "h100-nvl"):
        plan = autoshard.recommend("gpt2", hardware=load_hardware(name, gpus=1), seq_len=1024, strategies=["ddp"])
        assert not any("not multiples of 8" in line for line in plan.explanation)  # Hopper: measured, priced
        rates[name] = plan.recommended.cost.samples_per_s
    assert rates["h100-nvl"] < rates["h100-sxm-80gb"]  # 835.5 against 989.5 dense TFLOP/s, and a 400 W limit


def test_an_nvlink_on_a_gpu_of_no_form_factor_is_said_to_be_unused(tmp_path: Path) -> None:
    """A GPU file with nvlink: and no form_factor: sxm planned the node's links as unknown, and the line said to
    give the GPU an nvlink, which it had (a new user's report)."""
    path = tmp_path / "node.yaml"
    path.write_text("kind: node\nname: x\ngpus_per_node: 4\ngpu: {name: g, display_name: G, memory: 8 GiB, "
                    "peak_tflops: {fp32: 10, bf16: 100}, nvlink: nvlink4}\n")
    (line,) = [x for x in _assumed(str(path)) if "the link between a node's GPUs is not known" in x]
    assert "its nvlink joins a node's GPUs on an SXM board only: give the GPU form_factor: sxm" in line
