"""A one-process ``fit()`` that checkpoints the user's blocks gives the module back as it came: each block's own
class (the run swapped in a ``Checkpointed<Class>`` that recomputes under any later trainer) and the KV cache
the run turned off on again (``generate()`` recomputed every earlier position at each new token without it); and
the process as it was: ``sys.excepthook`` unwrapped of torch's rank prefix. A one-process FSDP2 run gives it back
plain: ``fully_shard`` had sharded it in place (DTensor parameters, ``FSDP<Class>`` classes, FSDP hooks), and
``save_pretrained`` then failed inside safetensors."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from autoshard.runtime import fit
from autoshard.runtime.activation_checkpointing import checkpointed_mode


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32))


def _batches() -> list[dict[str, torch.Tensor]]:
    ids = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": ids[i:i + 4], "labels": ids[i:i + 4]} for i in (0, 4)]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed_stage_2"])
def test_checkpointed_blocks_and_the_kv_cache_come_back(strategy: str) -> None:
    model = _gpt2()
    assert model.config.use_cache
    seen: list[tuple[str, bool]] = []

    def step(wrapped: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        module = getattr(wrapped, "module", wrapped)  # as the backend wraps it: a DeepSpeed engine holds it
        block = module.transformer.h[0]
        layers = sum("_autoshard_checkpointed_from" in c.__dict__ for c in type(block).__mro__)
        seen.append((f"{type(block).__name__} checkpointed {layers}x as {checkpointed_mode(block)}",
                     module.config.use_cache))
        return wrapped(**batch).loss

    result = fit(model, _batches(), max_steps=2, strategy=strategy, activation_checkpointing="full",
                 training_step=step, progress=False)
    assert result.plan.checkpointing == "full"
    assert seen[-1][0].endswith("GPT2Block checkpointed 1x as full") and seen[-1][1] is False  # FSDP<Class> too
    assert [type(b).__name__ for b in model.transformer.h] == ["GPT2Block", "GPT2Block"]
    assert not any(checkpointed_mode(b) for b in model.transformer.h)
    assert model.config.use_cache is True
    again = fit(model, _batches(), max_steps=1, strategy=strategy, activation_checkpointing="full",
                training_step=step, progress=False)  # checkpointed once more, not twice
    assert len(again.losses) == 1 and seen[-1][0].endswith("checkpointed 1x as full")


def test_a_run_that_fails_gives_the_blocks_back_too() -> None:
    model = _gpt2()

    def step(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise RuntimeError("the user's step fails")

    with pytest.raises(Exception, match="the user's step fails"):
        fit(model, _batches(), max_steps=2, strategy="ddp", activation_checkpointing="full", training_step=step,
            progress=False)
    assert type(model.transformer.h[0]).__name__ == "GPT2Block" and model.config.use_cache is True


def test_sys_excepthook_is_the_users_again_after_a_one_process_fit() -> None:
    """torch's init_process_group wraps sys.excepthook ("[rank0]: " before every line) and never unwraps it: each
    one-process fit() added a prefix to the user's later tracebacks ("[rank0]: [rank0]: ValueError" after two)."""
    import sys

    before = sys.excepthook
    for _ in range(2):
        fit(_gpt2(), _batches(), max_steps=1, strategy="ddp", progress=False)
    assert sys.excepthook is before


def test_the_module_comes_back_plain_tied_trained_and_trainable_again(tmp_path) -> None:
    model = _gpt2()
    result = fit(model, _batches(), max_steps=2, strategy="fsdp", progress=False)
    assert result.model is model and result.state_dict is not None
    assert not any(isinstance(m, FSDPModule) for m in model.modules())
    assert not any(isinstance(p, DTensor) for p in model.parameters())
    assert type(model.transformer.h[0]).__name__ == "GPT2Block"
    assert model.lm_head.weight is model.transformer.wte.weight  # the tie kept
    for name, value in model.state_dict().items():
        assert torch.equal(value, result.state_dict[name]), name
    with torch.no_grad():
        assert model(_batches()[0]["input_ids"]).logits.shape == (4, 16, 64)
    model.save_pretrained(tmp_path / "saved")  # failed: "access the data pointer on an invalid python storage"
    again = fit(model, _batches(), max_steps=1, strategy="fsdp", progress=False)
    assert len(again.losses) == 1


def test_a_module_a_failed_zero3_run_left_partitioned_is_refused_in_words() -> None:
    """The next fit() blamed the user's code: "forward raised AssertionError: 'weight' must be 2-D, got 1-D"."""
    from autoshard.errors import UsageError

    model, seen = _gpt2(), []

    def step(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(batch["input_ids"], FakeTensor):  # a real step, not planning's trace
            seen.append(1)
            if len(seen) == 2:
                raise ValueError("the user's step fails")
        return module(**batch).loss

    with pytest.raises(ValueError, match="the user's step fails"):
        fit(model, _batches(), max_steps=5, strategy="deepspeed_stage_3", training_step=step, progress=False)
    if not any(hasattr(p, "ds_id") for p in model.parameters()):
        pytest.skip("the failed run left no partitions (the failure came before the engine)")
    with pytest.raises(UsageError, match="partitioned by DeepSpeed ZeRO-3"):
        fit(model, _batches(), max_steps=1, progress=False)
