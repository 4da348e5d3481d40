"""A Hugging Face model given as an object (a model.py's, fit(model)'s) keeps its KV cache on by default; with its
blocks checkpointed by autoshard, a recomputed block appended its keys and values to the cache a second time, and
with eager attention backward failed on the mask's shape (the profiler then blamed the user's model file). Both
wrappers, the runtime's and the trace's, now train such a model with the cache off."""

from __future__ import annotations

import copy
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import transformers

from autoshard.models import load_source
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.trace import trace
from autoshard.runtime.activation_checkpointing import checkpoint_blocks
from tests.benchmark_scripts import load

MODEL_PY = '''
import torch
import transformers


def model():
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0{extra})
    config._attn_implementation = "eager"
    return transformers.GPT2LMHeadModel(config)


def batch(batch_size, seq_len=16):
    ids = torch.randint(0, 128, (batch_size, seq_len))
    return {{"input_ids": ids, "labels": ids}}
'''


def _gpt2() -> transformers.GPT2LMHeadModel:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config._attn_implementation = "eager"
    return transformers.GPT2LMHeadModel(config).train()


def _t5() -> transformers.T5ForConditionalGeneration:
    """T5's encoder and decoder stacks each hold their own copy of the config (use_cache on in the decoder's)."""
    torch.manual_seed(0)
    config = transformers.T5Config(num_layers=2, num_decoder_layers=2, d_model=64, num_heads=2, d_kv=32, d_ff=128,
                                   vocab_size=128, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
    config._attn_implementation = "eager"
    return transformers.T5ForConditionalGeneration(config).train()


BLOCKS = {"gpt2": ("transformer.h.0", "transformer.h.1"),
          "t5": ("encoder.block.0", "encoder.block.1", "decoder.block.0", "decoder.block.1")}


@pytest.mark.parametrize("make", [_gpt2, _t5], ids=["gpt2", "t5"])
def test_the_runtime_checkpoints_a_cached_hf_model_with_the_same_gradients(make: Any) -> None:
    plain = make()
    assert any(getattr(m, "config", plain.config).use_cache for m in plain.modules())  # transformers' default
    checkpointed = copy.deepcopy(plain)
    blocks = BLOCKS["t5" if isinstance(plain, transformers.T5ForConditionalGeneration) else "gpt2"]
    assert checkpoint_blocks(checkpointed, blocks) == len(blocks)
    assert not any(getattr(m, "config", checkpointed.config).use_cache for m in checkpointed.modules())
    ids = torch.randint(1, 128, (2, 16))
    for model in (plain, checkpointed):
        for _ in range(2):  # the second step too: nothing left over from the first
            model.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
    for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


def test_no_block_checkpointed_leaves_the_cache_alone() -> None:
    model = _gpt2()
    assert checkpoint_blocks(model, ("transformer.h.0", "transformer.h.1"), "none") == 0
    assert model.config.use_cache is True


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("memory_accuracy")


@pytest.mark.parametrize("mode", ["full", "op"])
def test_the_trace_of_a_cached_hf_model_file_matches_the_cpu_allocator(tmp_path: Path, bench: ModuleType,
                                                                        mode: str) -> None:
    (tmp_path / "cached").mkdir()
    (tmp_path / "cached" / "model.py").write_text(MODEL_PY.format(extra=""), encoding="utf-8")
    (tmp_path / "off").mkdir()
    (tmp_path / "off" / "model.py").write_text(MODEL_PY.format(extra=", use_cache=False"), encoding="utf-8")
    options = ProfileOptions(batch_size=2, seq_len=16, precision="32-true", checkpointing=mode, target="cpu")
    torch.manual_seed(0)
    cached = trace(load_source(tmp_path / "cached" / "model.py"), options)
    off = trace(load_source(tmp_path / "off" / "model.py"), options)
    assert cached.peak_bytes == off.peak_bytes and cached.backward_flops == off.backward_flops
    measured = bench.measure_peak(load_source(tmp_path / "cached" / "model.py"), options, torch.device("cpu"))
    assert cached.peak_bytes == pytest.approx(measured["allocated"], rel=0.02)
