"""A catalog model under FSDP2 is built on the meta device, sharded, and initialised by init_weights() on each
rank's shards; under ZeRO-3 it is built inside deepspeed.zero.Init. Either way the initialised model must look like
a normal build (not duplicated shards, not garbage). tests/runtime/test_zero_init_build.py checks the ZeRO-3
build bitwise."""

from __future__ import annotations

import math

import pytest
import torch

import autoshard
from autoshard.models import load_source


@pytest.mark.parametrize(("model", "strategy"), [
    ("tiny-llama", "fsdp"), pytest.param("tiny-gpt2", "fsdp", marks=pytest.mark.slow),  # one model per backend in CI
    ("tiny-gpt2", "deepspeed_stage_3"), ("tiny-llama", "deepspeed_stage_3_offload")])
def test_a_sharded_build_initialises_like_a_normal_build(model: str, strategy: str) -> None:
    # From pytest fit() cannot re-run the session, so it runs `python -m autoshard.runtime.worker` per rank.
    # FSDP2: meta device + to_empty + init_weights(). ZeRO-3: inside zero.Init, init_weights() gathering per module.
    result = autoshard.fit(model, processes=2, strategy=strategy, max_steps=1, seq_len=16, batch_size=2,
                           optimizer=None)
    assert not any("built whole" in n for n in result.notes), result.notes
    assert result.model is None and result.state_dict is not None  # a source: the workers built the model
    assert any(n.startswith("fit() was given a model source, which only the worker processes built, so "
                            "result.model is None here") for n in result.notes), result.notes  # said (a probe)
    vocab = load_source(model).build().config.vocab_size  # type: ignore[union-attr]
    # One SGD step from a fresh init: the first loss is that of near-uniform predictions over the vocabulary.
    assert result.losses[0] == pytest.approx(math.log(vocab), rel=0.05)
    torch.manual_seed(0)
    reference = load_source(model).build().state_dict()
    for name, tensor in result.state_dict.items():
        ref = reference[name]
        assert tensor.shape == ref.shape, name
        if tensor.dim() == 2 and tensor.shape[0] % 2 == 0 and ref.std() > 0:
            half = tensor.shape[0] // 2
            assert not torch.equal(tensor[:half], tensor[half:]), f"{name}: both ranks' shards are identical"
            assert tensor.std().item() == pytest.approx(ref.std().item(), rel=0.25), name
