"""Errors name what the caller typed: a Python argument from the library, a flag from the command line."""

from __future__ import annotations

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
