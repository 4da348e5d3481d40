"""``fit(tune=...)`` (autoshard/fitting.py) refuses what it cannot do before any trial runs."""

from __future__ import annotations

import re

import pytest
import torch

import autoshard
from autoshard.errors import UsageError
from autoshard.runtime import supervisor


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(2)]


def test_tuning_needs_a_model_source() -> None:
    with pytest.raises(UsageError, match="needs a model source"):
        autoshard.fit(torch.nn.Linear(3, 1), _batches(), loss_fn=torch.nn.functional.mse_loss, tune=True)


def test_tuning_chooses_the_plan_itself(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="cannot be combined with plan="):
        autoshard.fit("tiny-gpt2", max_steps=1, plan=tmp_path / "plan.json", tune=True)


def test_bad_arguments_are_refused_before_tuning() -> None:
    with pytest.raises(UsageError, match="max_steps"):
        autoshard.fit("tiny-gpt2", max_steps=0, tune={"trials": 1})


def test_a_tune_argument_autoshard_tune_does_not_take_is_named_with_the_closest() -> None:
    """``tune={"trial_timeout": 60}`` (the flag's name) was "got an argument tune() does not take", naming none."""
    with pytest.raises(UsageError, match="'trial_timeout' is not an argument of autoshard.tune\\(\\); did you mean "
                                         "'trial_timeout_s'") as info:
        autoshard.fit("tiny-gpt2", [], tune={"trial_timeout": 60}, max_steps=1, progress=False)
    assert "micro_batch_sizes" in (info.value.hint or "")


def test_tuning_under_a_launcher_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Under torchrun every rank would tune. (A worker fit() started itself reaches fit(tune=...) too, running the
    script again: it trains the plan the launching process tuned, tests/tuner/test_tune_study.py.)"""
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(supervisor.RUN_DIR_VAR, raising=False)
    with pytest.raises(UsageError, match="under a launcher would tune once per rank"):
        autoshard.fit("tiny-gpt2", max_steps=1, tune=True)


def test_a_model_file_without_a_loss_is_refused_before_the_study(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The trials time a model with no loss on profiling's stand-in; the run after them refused it, a whole study
    (and an autoshard-tune directory) later (the bad-input probe: 19 s for one trial, against 0.3 s without tune)."""
    model = tmp_path / "model.py"
    model.write_text("import torch\n"
                     "def model(): return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 64))\n"
                     "def batch(batch_size): return torch.randn(batch_size, 64)\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"output is a tensor of shape \[batch, 64\], with no loss") as refused:
        autoshard.fit(model, max_steps=1, tune={"trials": 1, "output_dir": tmp_path / "tune"}, progress=False)
    assert "def loss(output, batch)" in str(refused.value.hint)
    assert not (tmp_path / "tune").exists()


def test_tune_takes_a_bool_or_a_dict() -> None:
    with pytest.raises(UsageError, match=r"tune must be True, False or a dict of autoshard\.tune\(\)'s arguments, "
                                         r"but got 'yes'"):
        autoshard.fit("tiny-gpt2", max_steps=1, tune="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(("fit_args", "tune_args", "named"), [
    ({"strategy": "fsdp"}, {"strategies": ["ddp"]}, "strategies=['ddp'] and fit() has strategy='fsdp'"),
    ({"batch_size": 8}, {"batch_size": 16}, "batch_size=16 and fit() has batch_size=8"),
    ({"batch_size": 8}, {"micro_batch_sizes": [4, 8]}, "micro_batch_sizes=[4, 8] and fit() has batch_size=8"),
    ({"seq_len": 16}, {"seq_len": 32}, "seq_len=32 and fit() has seq_len=16"),
    ({"processes": 2}, {"processes": 1}, "processes=1 and fit() has processes=2"),
])
def test_a_tune_dict_that_contradicts_fits_arguments_is_refused_before_the_study(
        fit_args: dict, tune_args: dict, named: str, tmp_path) -> None:  # type: ignore[no-untyped-def,type-arg]
    """A probe's study ran to its end, then fit() refused its best plan: "the given plan was made for strategy ddp,
    and fit() was given strategy='fsdp'" (22-44 s on a tiny model; hours on a real one)."""
    out = tmp_path / "tune"
    with pytest.raises(UsageError, match=re.escape(named)):
        autoshard.fit("tiny-gpt2", max_steps=1, progress=False, tune={"trials": 1, "output_dir": out, **tune_args},
                      **fit_args)
    assert not out.exists()
