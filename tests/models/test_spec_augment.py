"""SpecAugment (wav2vec2, HuBERT, ...) in a trace: its random masks are a boolean-mask assignment whose size depends
on values, which fake tensors cannot run, so every trace turns it off (docs/models.md) — for a model built from a
config.json, a ``model.py``'s and a module given to ``fit()`` alike — and its mask embedding, left without a
gradient by that, is not reported unused (it trains in the real step, and DDP would search for it every step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import autoshard
from autoshard.models import load_source
from autoshard.runtime.module_source import module_source

transformers = pytest.importorskip("transformers")

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
        "conv_dim": (16, 16, 16), "conv_stride": (5, 2, 2), "conv_kernel": (10, 3, 3), "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 2, "num_labels": 3}


def test_a_wav2vec2_module_given_as_an_object_traces_with_spec_augment_off_and_trains_with_it_on() -> None:
    """A probe's fit() of Wav2Vec2ForSequenceClassification with transformers' defaults (mask_time_prob 0.05)
    failed planning: "the backward calls aten.nonzero.default ... Make that code shape-static"."""
    model = transformers.Wav2Vec2ForSequenceClassification(transformers.Wav2Vec2Config(**TINY))
    assert model.config.apply_spec_augment and model.config.mask_time_prob > 0
    batch = {"input_values": torch.randn(2, 4000), "labels": torch.tensor([0, 1])}
    profile = autoshard.profile(module_source(model, batch), batch_size=2, target="cpu", precision="32-true")
    assert profile.unused_parameter_count == 0, profile.unused_modules  # masked_spec_embed trains for real
    assert model.config.apply_spec_augment  # the user's module is left as it was
    model.train()
    assert model(**batch).loss.isfinite()  # and its real step masks (nonzero on real values is fine)


def test_a_wav2vec2_config_reports_no_unused_mask_embedding(tmp_path: Path) -> None:
    config = transformers.Wav2Vec2Config(**TINY, vocab_size=32)
    config.architectures = ["Wav2Vec2ForCTC"]
    config.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["apply_spec_augment"] is True
    profile = autoshard.profile(load_source(tmp_path), batch_size=1, target="cpu", precision="32-true")
    assert profile.unused_parameter_count == 0, profile.unused_modules
