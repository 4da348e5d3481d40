"""fit() with the settings published runs use (issue #16): the optimizer implementation and checkpointing."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from autoshard.errors import UsageError
from autoshard.runtime import fit


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
