"""Planning for bitsandbytes' 8-bit AdamW: which backends can step it, what its state costs per rank, and the
refusals before anything is traced (training with it: tests/runtime/test_fit_bnb.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autoshard import recommend
from autoshard.cli import main
from autoshard.errors import UsageError
from autoshard.export import hf_trainer, notes
from autoshard.hardware import load_hardware
from tests.planner.test_plan_file_settings import PLAN

pytest.importorskip("bitsandbytes")

KW = dict(batch_size=2, seq_len=64, precision="bf16-mixed")


@pytest.fixture(scope="module")
def plans() -> dict[str, object]:
    hardware = load_hardware("a100-sxm-80gb", gpus=4)
    return {name: recommend("tiny-llama", hardware=hardware, optimizer=name, **KW)  # type: ignore[arg-type]
            for name in ("adamw", "adamw8bit")}


def test_fsdp_and_zero_offload_are_refused_with_their_reasons(plans: dict) -> None:
    planned = plans["adamw8bit"]
    by_name = {c.strategy: c for c in planned.candidates}
    for name in ("fsdp", "fsdp_shard_grad_op", "fsdp_cpu_offload"):
        assert not by_name[name].fits and "DTensor" in by_name[name].reasons[0]
    for name in ("deepspeed_stage_2_offload", "deepspeed_stage_3_offload"):
        assert not by_name[name].fits and "CPU Adam" in by_name[name].reasons[0]
    for name in ("ddp", "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_3"):
        assert by_name[name].fits, (name, by_name[name].reasons)
    assert planned.recommended.strategy in ("ddp", "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_3")


def test_state_per_rank_is_the_8bit_state(plans: dict) -> None:
    """About 2 bytes per parameter plus the block scales, against AdamW's 8, on every rank under DDP and on each
    rank's partition under ZeRO (bitsandbytes' state does not follow the fp32 master's dtype)."""
    ddp = {name: next(c for c in p.candidates if c.strategy == "ddp") for name, p in plans.items()}
    w = plans["adamw8bit"].workload
    assert 2.0 < w.optimizer_state_bytes_per_parameter < 3.0  # tiny-llama: its norms stay fp32 (under 4096)
    assert ddp["adamw8bit"].memory.gpu.optimizer < ddp["adamw"].memory.gpu.optimizer / 2.5
    zero = {name: next(c for c in p.candidates if c.strategy == "deepspeed_stage_1" and
                       not c.candidate.activation_checkpointing) for name, p in plans.items()}
    # ZeRO-1 holds an fp32 master partition beside the state: the state's saving is DDP's over the 4 ranks.
    saved_ddp = ddp["adamw"].memory.gpu.optimizer - ddp["adamw8bit"].memory.gpu.optimizer
    saved_zero = zero["adamw"].memory.gpu.optimizer - zero["adamw8bit"].memory.gpu.optimizer
    assert saved_zero * 4 == pytest.approx(saved_ddp, rel=0.05)


def test_asking_only_for_strategies_that_cannot_step_it_is_refused_before_tracing(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text("def model():\n    raise RuntimeError('traced')\n\ndef batch(b):\n    return None\n")
    with pytest.raises(UsageError, match="none of the strategies asked for can step adamw8bit") as info:
        recommend(str(model), hardware="a100-sxm-80gb", optimizer="adamw8bit", batch_size=1,
                  strategies=["fsdp", "deepspeed_stage_3_offload"])
    assert "strategies=" in (info.value.hint or "") and "--" not in (info.value.hint or "")


def test_the_cli_names_the_optimizer_and_exits_nonzero(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["recommend", "tiny-llama", "--hardware", "a100-sxm-80gb", "--optimizer", "adamw_bnb_8bit",
                 "--strategies", "fsdp"])
    err = capsys.readouterr().err
    assert code == 2 and "adamw8bit" in err and "Traceback" not in err  # a contradiction of flags, not "nothing fits"


def test_the_hf_trainer_builds_bitsandbytes_8bit_adamw_from_the_exported_flags() -> None:
    transformers = pytest.importorskip("transformers")
    import bitsandbytes

    exported = dataclasses.replace(PLAN, optimizer="adamw8bit", optimizer_impl=None)
    assert hf_trainer.optimizer_arguments(exported) == ["--optim", "adamw_bnb_8bit"]
    assert any("AdamW8bit" in n for n in notes(exported))
    args = hf_trainer.training_arguments(exported, output_dir="out", use_cpu=True)
    cls, kwargs = transformers.Trainer.get_optimizer_cls_and_kwargs(args)
    assert cls is bitsandbytes.optim.AdamW and kwargs["optim_bits"] == 8


def test_fit_plans_bitsandbytes_8bit_adam_given_as_a_class_or_an_instance_by_its_name() -> None:
    import bitsandbytes
    import torch

    from autoshard.runtime.optimizer_choice import optimizer_name

    params = [torch.nn.Parameter(torch.zeros(8))]
    assert optimizer_name(bitsandbytes.optim.AdamW8bit) == "adamw8bit"
    assert optimizer_name(bitsandbytes.optim.AdamW(params, optim_bits=8)) == "adamw8bit"
    assert optimizer_name(bitsandbytes.optim.AdamW(params)) is None  # 32-bit state: planned as AdamW
    # torch's classes are planned by their names (an SGD class was planned and exported as AdamW)
    assert optimizer_name(torch.optim.AdamW) == "adamw" and optimizer_name("adamw_bnb_8bit") == "adamw8bit"


def test_any_other_bitsandbytes_optimizer_is_planned_away_from_the_strategies_that_cannot_step_it() -> None:
    """Every bitsandbytes optimizer steps with its own kernels (Lion8bit, 32-bit AdamW, ...): named
    ``bitsandbytes.<Class>`` to the strategies, planned over those that can step it, refused where none can."""
    import bitsandbytes
    import torch

    from autoshard.runtime.optimizer_choice import able_strategies, optimizer_label
    from autoshard.strategies import get, names

    params = [torch.nn.Parameter(torch.zeros(8))]
    assert optimizer_label(bitsandbytes.optim.Lion8bit) == "bitsandbytes.Lion8bit"
    assert optimizer_label(bitsandbytes.optim.AdamW(params)) == "bitsandbytes.AdamW"
    assert optimizer_label(bitsandbytes.optim.AdamW8bit) == "adamw8bit"
    assert optimizer_label(torch.optim.AdamW) == "adamw" and optimizer_label(lambda p: None) is None
    notes: list[str] = []
    able = able_strategies(bitsandbytes.optim.Lion8bit, None, notes)
    assert able is not None and "ddp" in able and "deepspeed_stage_2" in able
    left_out = set(names()) - set(able)
    assert {"fsdp", "deepspeed_stage_2_offload"} <= left_out
    assert all(get(n).refuses("bitsandbytes.Lion8bit") for n in left_out)
    assert "bitsandbytes.Lion8bit" in notes[0]
    assert able_strategies(torch.optim.AdamW, "fsdp", []) == ["fsdp"]  # torch's own: nothing left out
    with pytest.raises(UsageError, match=r"can step bitsandbytes\.Lion8bit: bitsandbytes' optimizers cannot"):
        able_strategies(bitsandbytes.optim.Lion8bit, "fsdp", [])
