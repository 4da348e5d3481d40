"""fit() with the settings published runs use (issue #16): the optimizer implementation and checkpointing."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from autoshard.errors import UsageError
from autoshard.models import load_source
from autoshard.runtime import fit
from autoshard.runtime.activation_checkpointing import checkpointed_mode


def _capture(seen: list[torch.optim.Optimizer]) -> Any:
    """An ``lr_scheduler`` factory that keeps the optimizer the backend steps."""
    def scheduler(opt: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        seen.append(opt)
        return torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0)

    return scheduler


@pytest.mark.parametrize(("impl", "foreach", "fused"), [("fused", False, True), ("for-loop", False, False),
                                                         ("foreach", True, False)])
def test_fit_plans_and_steps_the_named_optimizer_implementation(impl: str, foreach: bool, fused: bool) -> None:
    seen: list[torch.optim.Optimizer] = []
    result = fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2, optimizer_impl=impl,
                 lr_scheduler=_capture(seen))
    assert result.plan.optimizer_impl == impl
    (optimizer,) = seen
    assert bool(optimizer.defaults["foreach"]) is foreach and bool(optimizer.defaults["fused"]) is fused


def test_fit_replaces_a_given_plans_implementation() -> None:
    planned = fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2).plan
    assert planned.optimizer_impl is None  # torch's default, as plans made before the setting
    seen: list[torch.optim.Optimizer] = []
    result = fit("tiny-gpt2", max_steps=1, seq_len=16, plan=planned, optimizer_impl="fused",
                 lr_scheduler=_capture(seen))
    assert result.plan.optimizer_impl == "fused" and seen[0].defaults["fused"]


def test_fit_refuses_a_fused_optimizer_torch_does_not_have() -> None:
    with pytest.raises(UsageError, match="no fused adafactor"):
        fit("tiny-gpt2", max_steps=1, seq_len=16, optimizer="adafactor", optimizer_impl="fused")


@pytest.mark.parametrize(("mode", "wrapped", "kind"), [("op", 2, "op"), ("every-2", 1, "full"), ("full", 2, "full")])
def test_fit_plans_and_trains_the_named_checkpointing(mode: str, wrapped: int, kind: str) -> None:
    source = load_source("tiny-llama")
    seen: list[list[str | None]] = []

    def step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        seen.append([checkpointed_mode(m) for m in model.modules()])  # what each module trains with
        # the blocks keep their class names: what matches blocks by name (accelerate, Lightning's shard()) finds them
        assert sum(type(m).__name__ == "LlamaDecoderLayer" for m in model.modules()) == 2
        return source.loss_fn(model(**batch), batch)

    result = fit("tiny-llama", max_steps=2, seq_len=16, batch_size=2, activation_checkpointing=mode,
                 training_step=step)
    assert result.plan.activation_checkpointing and result.plan.checkpointing == mode
    assert str(result.plan.checkpointing_choice) == mode
    assert len(seen) == 2 and seen[0].count(kind) == wrapped and len([c for c in seen[0] if c]) == wrapped
    assert all(s.loss == s.loss for s in result.steps)  # finite: recomputation replayed the saved outputs
    # given back with its own classes: a later trainer (or a second fit()) would recompute its blocks too
    assert not any(checkpointed_mode(m) for m in result.model.modules())


def test_fit_without_checkpointing_asked_keeps_it_off_for_a_small_model() -> None:
    result = fit("tiny-llama", max_steps=1, seq_len=16, batch_size=2, activation_checkpointing="none")
    assert not result.plan.activation_checkpointing and result.plan.checkpointing is None
    assert not any(checkpointed_mode(m) for m in result.model.modules())


def test_fit_refuses_an_unknown_checkpointing_before_planning() -> None:
    with pytest.raises(UsageError, match="unknown activation checkpointing"):
        fit("tiny-llama", max_steps=1, activation_checkpointing="sometimes")


def test_fit_points_a_recompute_mode_given_as_checkpointing_to_activation_checkpointing() -> None:
    with pytest.raises(UsageError, match="saves training state") as raised:
        fit("tiny-llama", max_steps=1, checkpointing="full")  # type: ignore[arg-type]
    assert "activation_checkpointing='full'" in str(raised.value.hint)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed_stage_3"])
def test_op_selective_checkpointing_trains_under_sharding_hooks(strategy: str) -> None:
    """FSDP2 unshards in its pre-backward hook and ZeRO-3 gathers again in its pre-forward hook while a block
    recomputes: both must replay the op policy's cache without a mismatch."""
    result = fit("tiny-llama", max_steps=2, seq_len=16, batch_size=2, activation_checkpointing="op", strategy=strategy,
                 processes=2)
    assert result.plan.checkpointing == "op" and len(result.steps) == 2
    assert all(s.loss == s.loss for s in result.steps)


@pytest.mark.slow
def test_fit_trains_fsdp_with_a_bf16_reduce() -> None:
    result = fit("tiny-llama", max_steps=2, seq_len=16, batch_size=2, strategy="fsdp", processes=2,
                 reduce_dtype="bf16", precision="bf16-mixed")
    assert result.plan.settings["reduce_dtype"] == "bf16"
    assert all(s.loss == s.loss for s in result.steps)
