"""Planning for a machine: the default precision and the hardware argument, shared by recommend, fit and tune."""

from __future__ import annotations

import pytest

from autoshard.errors import UsageError
from autoshard.hardware import detect_hardware, load_hardware
from autoshard.planner.machine import default_precision, hardware_for


@pytest.mark.parametrize(("hardware", "expected"), [
    ("dgx-h100", "bf16-mixed"),
    ("dgx-a100", "bf16-mixed"),
    ("v100-sxm-32gb", "16-mixed"),  # Volta: fp16 tensor cores, no bf16
    ("t4", "16-mixed"),
])
def test_default_precision_follows_the_gpu(hardware: str, expected: str) -> None:
    assert default_precision(load_hardware(hardware)) == expected


@pytest.mark.parametrize("hardware", ["v100-sxm-32gb", "t4"])
def test_bf16_on_a_gpu_without_it_is_refused_before_anything_is_traced(hardware: str) -> None:
    """It was planned at the fp32 rate: 25 s a step for a 3M-parameter Llama on four V100s, without a word."""
    from autoshard.planner.machine import plan_for

    with pytest.raises(UsageError, match="has no bf16 arithmetic: bf16-mixed would run emulated") as info:
        plan_for("no-such-model.py", load_hardware(hardware), precision="bf16-mixed")  # refused before loading
    assert "--precision 16-mixed" in (info.value.hint or "")


def test_the_refusal_names_the_python_argument_from_python() -> None:
    """From Python it read "Use 16-mixed (precision= 16-mixed; precision= in fit())"."""
    import autoshard

    with pytest.raises(UsageError) as info:
        autoshard.recommend("no-such-model.py", hardware="t4", precision="bf16-mixed")
    assert 'Use 16-mixed (precision="16-mixed")' in (info.value.hint or "")


def test_recommend_from_python_without_a_precision_takes_the_gpus_default() -> None:
    """autoshard.recommend's default was bf16-mixed, refused on a V100 the user asked nothing of."""
    import autoshard

    plan = autoshard.recommend("tiny-gpt2", hardware="v100-sxm-16gb", seq_len=32, batch_size=2, strategies=["ddp"])
    assert plan.workload.precision.value == "16-mixed"


def test_default_precision_without_a_gpu_is_full_precision() -> None:
    assert default_precision(detect_hardware(environ={"CUDA_VISIBLE_DEVICES": ""})) == "32-true"


def test_hardware_for_takes_a_spec_a_profile_or_this_machine() -> None:
    spec = load_hardware("dgx-h100")
    assert hardware_for(spec) is spec
    assert hardware_for("dgx-h100") == spec
    assert hardware_for(None, processes=2).processes_per_node == 2


@pytest.mark.parametrize("processes", [0, -1, True, 1.5])
def test_hardware_for_refuses_a_bad_process_count(processes: object) -> None:
    with pytest.raises(UsageError, match="processes must be a positive whole number"):
        hardware_for(None, processes=processes)  # type: ignore[arg-type]


def test_a_model_that_checkpoints_itself_is_said_to(tmp_path) -> None:
    """GPT-2 with gradient_checkpointing_enable() in its model.py: the no-checkpointing and full rows were the same
    step, both recomputing, and the first was labelled as not checkpointing."""
    from autoshard.planner.machine import SELF_CHECKPOINTING, plan_for

    model = tmp_path / "model.py"
    model.write_text(
        "import torch\nfrom transformers import GPT2Config, GPT2LMHeadModel\n\n\n"
        "def model():\n"
        "    m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32))\n"
        "    m.gradient_checkpointing_enable()\n    return m\n\n\n"
        "def batch(batch_size, seq_len=16):\n    ids = torch.randint(0, 64, (batch_size, seq_len))\n"
        "    return {'input_ids': ids, 'labels': ids}\n")
    planned = plan_for(str(model), load_hardware("a100-sxm-80gb", gpus=1), strategies=["ddp"], cache=False)
    assert planned.workload.checkpoints_itself and SELF_CHECKPOINTING in planned.explanation
    plain = plan_for("tiny-gpt2", load_hardware("a100-sxm-80gb", gpus=1), strategies=["ddp"], seq_len=16, cache=False)
    assert not plain.workload.checkpoints_itself and SELF_CHECKPOINTING not in plain.explanation
