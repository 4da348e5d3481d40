"""fit() on a module that arrives in bf16 or fp16 (``from_pretrained(..., torch_dtype=...)``, ``model.half()``):
the precision it is planned and named with follows what trains."""

from __future__ import annotations

import pytest
import torch

from autoshard.errors import UsageError
from autoshard.runtime import fit
from autoshard.runtime.precision import for_module, module_dtype


def _gpt2(dtype: torch.dtype) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
    return GPT2LMHeadModel(config).to(dtype)


def _batches() -> list[dict[str, torch.Tensor]]:
    ids = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": ids[i:i + 4], "labels": ids[i:i + 4]} for i in (0, 4)]


def test_a_bf16_module_with_no_precision_is_planned_as_the_bf16_true_it_trains_as() -> None:
    model = _gpt2(torch.bfloat16)
    result = fit(model, _batches(), max_steps=2, progress=False)
    assert result.plan.precision == "bf16-true"
    assert any("parameters are bf16: planned bf16-true" in note for note in result.notes)
    assert all(torch.isfinite(torch.tensor(loss)) for loss in result.losses)
    assert next(model.parameters()).dtype == torch.bfloat16


def test_a_bf16_module_under_a_mixed_precision_trains_as_given_and_says_so() -> None:
    result = fit(_gpt2(torch.bfloat16), _batches(), max_steps=1, progress=False, precision="bf16-mixed")
    assert result.plan.precision == "bf16-mixed"
    assert any("stay bf16 (no fp32 master weights)" in note for note in result.notes)


@pytest.mark.parametrize("precision", [None, "32-true", "16-mixed", "bf16-mixed"])
def test_an_fp16_module_is_refused_before_tracing_unless_bf16_true_casts_it(precision: str | None) -> None:
    def never_read():  # refused before the data is touched
        raise AssertionError("the data was read")
        yield

    with pytest.raises(UsageError, match="parameters are fp16") as caught:
        fit(_gpt2(torch.float16), never_read(), max_steps=1, progress=False, precision=precision)
    assert "model.float()" in (caught.value.hint or "")


def test_an_fp16_module_trains_under_bf16_true() -> None:
    model = _gpt2(torch.float16)
    result = fit(model, _batches(), max_steps=2, progress=False, precision="bf16-true")
    assert result.plan.precision == "bf16-true" and next(model.parameters()).dtype == torch.bfloat16


def test_a_given_plan_says_when_the_module_is_not_in_its_precision() -> None:
    planned = fit(_gpt2(torch.float32), _batches(), max_steps=1, progress=False)
    assert planned.plan.precision == "32-true"
    again = fit(_gpt2(torch.bfloat16), _batches(), max_steps=1, progress=False, plan=planned.plan)
    assert any("parameters are bf16 and 32-true does not cast them" in note for note in again.notes)


def test_the_dtype_is_the_one_holding_most_parameters() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64).to(torch.bfloat16), torch.nn.LayerNorm(64))
    assert module_dtype(model) == torch.bfloat16 and module_dtype(torch.nn.ReLU()) is None
    assert for_module(torch.nn.Linear(2, 2), "bf16-mixed") == ("bf16-mixed", None)
    assert for_module(model, "bf16-true") == ("bf16-true", None)
