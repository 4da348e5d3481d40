"""fit() on a module as a fine-tune hands it over: in bf16 or fp16 (``from_pretrained(..., torch_dtype=...)``,
``model.half()``), with fp32 adapters on a frozen 16-bit base (peft), in eval mode (``from_pretrained``). The
precision it is planned and named with follows what trains, and it trains in train mode."""

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
    assert result.plan.precision == "bf16-true"
    assert next(model.parameters()).dtype == torch.float16  # given back as it came, as DeepSpeed and workers do


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


class _Fp32Head(torch.nn.Module):
    """Computes in fp32 on 16-bit hidden states, as a peft LoRA layer casts its input to its weights' dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 64, bias=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.to(self.linear.weight.dtype))


def test_fp32_adapters_on_a_16_bit_base_keep_the_default_precision_and_train_in_fp32() -> None:
    """LoRA as peft builds it: the base frozen in bf16 or fp16, the adapters trainable in fp32. A bf16 base was
    planned bf16-true, which cast the adapters to bf16 (most of their updates were lost to rounding); an fp16 one
    was refused."""
    for dtype in (torch.bfloat16, torch.float16):
        model = _gpt2(dtype)
        model.requires_grad_(False)
        model.lm_head = _Fp32Head()  # an fp32 trainable head on the frozen 16-bit body, as peft's adapters are
        assert module_dtype(model) == torch.float32
        result = fit(model, _batches(), max_steps=1, progress=False)
        assert result.plan.precision == "32-true" and model.lm_head.linear.weight.dtype == torch.float32
        assert not any("parameters are" in note for note in result.notes)


def test_a_module_in_eval_mode_trains_in_train_mode_with_a_note() -> None:
    model = _gpt2(torch.float32).eval()  # as from_pretrained returns it
    seen: list[bool] = []
    model.transformer.drop.register_forward_hook(lambda module, args, out: seen.append(module.training))
    result = fit(model, _batches(), max_steps=1, progress=False)
    assert seen and all(seen) and model.training
    assert any("was in eval mode" in note for note in result.notes)


def test_a_submodule_the_user_put_in_eval_mode_stays_so() -> None:
    model = _gpt2(torch.float32)
    model.transformer.drop.eval()  # the root trains; one submodule kept in eval on purpose
    result = fit(model, _batches(), max_steps=1, progress=False)
    assert not model.transformer.drop.training and model.training
    assert not any("was in eval mode" in note for note in result.notes)


def test_gradient_checkpointing_the_model_turned_on_itself_is_noted() -> None:
    model = _gpt2(torch.float32)
    model.gradient_checkpointing_enable()
    result = fit(model, _batches(), max_steps=1, progress=False, cache=False)
    assert any(note.startswith("GPT2LMHeadModel checkpoints its own blocks") for note in result.notes)
    plain = fit(_gpt2(torch.float32), _batches(), max_steps=1, progress=False, cache=False)
    assert not any("checkpoints its own blocks" in note for note in plain.notes)


def test_parameters_of_two_dtypes_that_meet_without_autocast_are_named_not_the_data() -> None:
    from autoshard.errors import UserCodeError

    model = _gpt2(torch.bfloat16)
    model.requires_grad_(False)
    model.lm_head = torch.nn.Linear(32, 64, bias=False)  # fp32, fed bf16 hidden states: no autocast under 32-true
    with pytest.raises(UserCodeError, match="failed on the first batch") as caught:
        fit(model, _batches(), max_steps=1, progress=False)
    assert "several dtypes (bfloat16, float32)" in (caught.value.hint or "")
    assert "precision='bf16-mixed'" in (caught.value.hint or "")


def test_a_module_mostly_in_bf16_says_bf16_true_casts_the_rest() -> None:
    model = _gpt2(torch.bfloat16)
    model.transformer.h[0].to(torch.float16)
    result = fit(model, _batches(), max_steps=1, progress=False)
    assert result.plan.precision == "bf16-true"
    assert any("bf16 for the most part" in note and "(float16)" in note for note in result.notes)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed_stage_2"])
def test_an_fp32_module_trained_bf16_true_comes_back_in_fp32_whatever_the_backend(strategy: str) -> None:
    """DDP and FSDP2 cast it to bf16 in place, DeepSpeed's hand-back and a worker run kept its dtypes: now one rule."""
    model = _gpt2(torch.float32)
    result = fit(model, _batches(), max_steps=2, progress=False, precision="bf16-true", strategy=strategy)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model.lm_head.weight is model.transformer.wte.weight  # the tie kept
    for name, value in model.state_dict().items():
        assert torch.equal(value, result.state_dict[name].to(value.dtype)), name
