"""Errors name what the caller typed: a Python argument from the library, a flag from the command line."""

from __future__ import annotations

import json

import pytest

import autoshard
from autoshard.cli import main
from autoshard.errors import UsageError
from autoshard.hardware import load_hardware


def test_a_python_caller_is_told_its_argument_and_the_command_line_its_flag(capsys):
    with pytest.raises(UsageError) as info:
        autoshard.profile("tiny-gpt2", batch_size=1, seq_len=100_000)
    assert info.value.message.startswith("seq_len=100000 exceeds") and info.value.hint == "Use seq_len=128 or less."
    assert main(["profile", "tiny-gpt2", "--seq-len", "100000"]) == 2
    assert "Use --seq-len 128 or less." in capsys.readouterr().err


def test_load_hardware_names_its_own_arguments():
    with pytest.raises(UsageError) as info:
        load_hardware("dgx-a100", gpus=16)
    assert info.value.message.startswith("gpus=16 contradicts 'dgx-a100'")
    assert 'load_hardware("a100-sxm-80gb", gpus=16)' in (info.value.hint or "")
    with pytest.raises(UsageError, match=r"^gpus= must be a positive whole number"):
        load_hardware("a100-sxm-80gb", gpus=0)
    assert "--" not in str(info.value)


@pytest.mark.parametrize("call", [lambda: autoshard.profile("tiny-gpt2", batch_size=True),
                                  lambda: autoshard.recommend("tiny-gpt2", hardware="a10g", batch_size=True)])
def test_true_is_not_a_batch_size(call):
    # profile() took it as 1 and the catalog model's batch() failed inside torch.randint, blamed on "the model's code"
    with pytest.raises(UsageError, match=r"batch size must be a positive integer, but got True"):
        call()


def _outside_backticks(text: str) -> str:
    return "".join(text.split("`")[::2])  # a command quoted whole keeps its flags


OFFLOAD = ["deepspeed_stage_3_offload", "deepspeed_stage_3_offload_nvme"]


def test_a_plan_returned_to_python_names_its_arguments_and_the_commands_plan_its_flags(capsys):
    """The plan's own lines (the global batch, a host whose RAM and cores are unknown, an NVMe path not given, the
    hardware's overrides) told a Python caller to pass --global-batch-size, --cpu-memory SIZE, --nvme PATH."""
    plan = autoshard.recommend("tiny-gpt2", hardware=load_hardware("a100-sxm-40gb", gpus=8, nodes=2), batch_size=2,
                               seq_len=64, strategies=OFFLOAD)
    texts = [*plan.explanation, *plan.hardware.notes,
             *(t for c in plan.candidates for t in (*c.reasons, *(c.cost.notes if c.cost else ()),
                                                   *(c.memory.notes if c.memory else ())))]
    assert [t for t in texts if "--" in _outside_backticks(t)] == []
    assert any(t.endswith("global_batch_size= sets it.") for t in plan.explanation)
    assert any("load_hardware(..., cpu_memory=SIZE) has the plan check it" in t for t in plan.explanation)
    assert any("load_hardware(..., cpu_cores=N) prices the real host" in t for t in plan.explanation)
    assert "Nodes set to 2 (profile: 1)." in plan.hardware.notes
    assert plan.recommended in plan.candidates and plan.recommended is plan.candidates[0]

    assert main(["recommend", "tiny-gpt2", "--hardware", "a100-sxm-40gb", "--gpus", "8", "--nodes", "2",
                 "--batch-size", "2", "--seq-len", "64", "--strategies", *OFFLOAD, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(t.endswith("--global-batch-size sets it.") for t in doc["explanation"])
    assert any("--cpu-memory SIZE has the plan check it" in t for t in doc["explanation"])
    assert "Nodes set to 2 (profile: 1)." in doc["hardware"]["notes"]
    # the same plan but for its wording
    assert len(doc["explanation"]) == len(plan.explanation)
    assert doc["recommended"]["strategy"] == plan.recommended.strategy


def test_a_plan_for_a_hugging_face_config_names_no_flag_either(tmp_path):
    """The same on a config.json written from transformers' own LlamaConfig (grouped-query attention)."""
    from tests.models.tiny_configs import TINY_LLAMA

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    plan = autoshard.recommend(str(config), hardware="a100-sxm-40gb:8x2", batch_size=2, seq_len=32)
    texts = [*plan.explanation, *plan.hardware.notes,
             *(t for c in plan.candidates for t in (*c.reasons, *(c.cost.notes if c.cost else ()),
                                                   *(c.memory.notes if c.memory else ())))]
    assert [t for t in texts if "--" in _outside_backticks(t)] == []
    assert any(t.endswith("global_batch_size= sets it.") for t in plan.explanation)


def test_the_hardwares_notes_read_the_same_from_load_hardware_recommend_and_compare():
    """compare's machine sizes drop the nodes note (the size is the machine's, not an override); a node profile cut
    to fewer GPUs is said in Python's terms whether load_hardware returns it or recommend's plan carries it."""
    from autoshard.planner.compare import machine_hardware

    assert not any(n.startswith("Nodes set to") for n in machine_hardware("h100-sxm-80gb:8x2").notes)
    assert "Nodes set to 2 (profile: 1)." in load_hardware("h100-sxm-80gb:8x2").notes
    assert "Using 2 of the node's 8 GPUs (gpus=2)." in load_hardware("dgx-h100:2").notes
    plan = autoshard.recommend("tiny-gpt2", hardware="dgx-h100:2", batch_size=2, seq_len=32)
    assert "Using 2 of the node's 8 GPUs (gpus=2)." in plan.hardware.notes


@pytest.mark.parametrize("call", [lambda: load_hardware("h100-sxm"),
                                  lambda: autoshard.recommend("tiny-gpt2", hardware="dgx-h1000")])
def test_an_unknown_profile_points_a_python_caller_to_list_profiles_and_the_command_to_its_list(call, capsys):
    with pytest.raises(autoshard.HardwareError) as info:
        call()
    assert info.value.hint == "`autoshard.hardware.list_profiles()` lists them all; or pass a YAML file."
    assert main(["recommend", "tiny-gpt2", "--hardware", "dgx-h1000"]) == 2
    err = capsys.readouterr().err
    assert "did you mean dgx-h100" in err and "`autoshard hardware --list` lists them all" in err
    from autoshard.hardware import list_profiles  # and what it names exists and lists the names suggested

    assert {"dgx-h100", "h100-sxm-80gb"} <= {p.name for p in list_profiles()}


def test_a_python_caller_passing_no_name_is_pointed_to_list_profiles():
    with pytest.raises(UsageError) as info:
        load_hardware(3)  # type: ignore[arg-type]
    assert "autoshard.hardware.list_profiles() lists the profiles" in (info.value.hint or "")
