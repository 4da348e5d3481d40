"""Repeated blocks are the model's layer stacks: one class for a decoder, every stack of an encoder-decoder or a
multimodal model, on real transformers models built on the meta device from their config classes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
import transformers as tf
from torch import nn

import autoshard
from autoshard.cli.profile import repeated_blocks_line
from autoshard.models import catalog
from autoshard.profiler.blocks import block_stacks, find_repeated_blocks
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import profile_source
from autoshard.profiler.trace import trace
from autoshard.strategies.workload import parameter_layout
from tests.profiler import models

_SMALL = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, vocab_size=128)


def _on_meta(cls: type, config: Any) -> nn.Module:
    with torch.device("meta"):
        return cls(config)


def _t5() -> tuple[nn.Module, tuple[int, ...]]:
    c = tf.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4)
    return _on_meta(tf.T5ForConditionalGeneration, c), (c.num_layers, c.num_decoder_layers)


def _bart() -> tuple[nn.Module, tuple[int, ...]]:
    c = tf.BartConfig(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                      decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    return _on_meta(tf.BartForConditionalGeneration, c), (c.encoder_layers, c.decoder_layers)


def _whisper() -> tuple[nn.Module, tuple[int, ...]]:
    c = tf.WhisperConfig(vocab_size=128, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=3,
                         d_model=32, encoder_layers=3, decoder_layers=2, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                         max_source_positions=16, max_target_positions=16)
    return _on_meta(tf.WhisperForConditionalGeneration, c), (c.encoder_layers, c.decoder_layers)


def _clip() -> tuple[nn.Module, tuple[int, ...]]:
    c = tf.CLIPConfig(text_config=dict(_SMALL, num_hidden_layers=2),
                      vision_config=dict(_SMALL, num_hidden_layers=3, image_size=32, patch_size=8))
    return _on_meta(tf.CLIPModel, c), (c.text_config.num_hidden_layers, c.vision_config.num_hidden_layers)


def _llava() -> tuple[nn.Module, tuple[int, ...]]:
    c = tf.LlavaConfig(vision_config=tf.CLIPVisionConfig(**_SMALL, num_hidden_layers=2, image_size=32, patch_size=8),
                       text_config=tf.LlamaConfig(**_SMALL, num_hidden_layers=3))
    return _on_meta(tf.LlavaForConditionalGeneration, c), (c.vision_config.num_hidden_layers,
                                                            c.text_config.num_hidden_layers)


def _decoder(model_cls: type, config: Any) -> Callable[[], tuple[nn.Module, tuple[int, ...]]]:
    return lambda: (_on_meta(model_cls, config), (config.num_hidden_layers,))


def _deepseek_v3_config() -> tf.DeepseekV3Config:
    # One dense layer, then MoE layers: one class, two sizes.
    return tf.DeepseekV3Config(**_SMALL, num_hidden_layers=3, first_k_dense_replace=1, moe_intermediate_size=16,
                               n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                               num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8,
                               qk_nope_head_dim=8, v_head_dim=8)


HF_CASES = [
    ("t5", _t5, ("T5Block",)),
    ("bart", _bart, ("BartEncoderLayer", "BartDecoderLayer")),
    ("whisper", _whisper, ("WhisperEncoderLayer", "WhisperDecoderLayer")),
    ("clip", _clip, ("CLIPEncoderLayer",)),
    ("llava", _llava, ("CLIPEncoderLayer", "LlamaDecoderLayer")),
    ("llama", _decoder(tf.LlamaForCausalLM, tf.LlamaConfig(**_SMALL, num_hidden_layers=3)), ("LlamaDecoderLayer",)),
    ("gpt2", _decoder(tf.GPT2LMHeadModel, tf.GPT2Config(n_embd=32, n_layer=3, n_head=4, vocab_size=128,
                                                         n_positions=64, bos_token_id=0, eos_token_id=0)),
     ("GPT2Block",)),
    ("bert", _decoder(tf.BertForMaskedLM, tf.BertConfig(**_SMALL, num_hidden_layers=3)), ("BertLayer",)),
    ("mixtral", _decoder(tf.MixtralForCausalLM, tf.MixtralConfig(**_SMALL, num_hidden_layers=3, num_local_experts=4,
                                                                 num_key_value_heads=2)), ("MixtralDecoderLayer",)),
    ("deepseek-v3", _decoder(tf.DeepseekV3ForCausalLM, _deepseek_v3_config()), ("DeepseekV3DecoderLayer",)),
]


@pytest.mark.parametrize(("build", "classes"), [c[1:] for c in HF_CASES], ids=[c[0] for c in HF_CASES])
def test_blocks_are_every_layer_stack_of_hf_models(build, classes):
    model, stack_lengths = build()
    found = find_repeated_blocks(model)
    assert found is not None
    assert found.class_names == classes
    assert tuple(len(s) for s in found.stacks) == stack_lengths
    modules = dict(model.named_modules())
    order = {name: i for i, name in enumerate(modules)}
    for stack in found.stacks:  # each stack is one container's elements 0, 1, ... (execution order)
        container = stack[0].rpartition(".")[0]
        assert list(stack) == [f"{container}.{i}" for i in range(len(stack))]
        assert isinstance(modules[container], (nn.ModuleList, nn.Sequential))
    assert [order[s[0]] for s in found.stacks] == sorted(order[s[0]] for s in found.stacks)  # module order
    assert {type(modules[n]).__name__ for n in found.names} == set(classes)
    assert not any(b.startswith(a + ".") for a in found.names for b in found.names)  # none nested
    # Cross-check with what transformers says must stay whole (accelerate's default FSDP wrap classes).
    assert set(classes) <= set(model._no_split_modules)
    unique = {id(p): p.numel() for p in model.parameters()}
    held = {id(p): p.numel() for n in found.names for p in modules[n].parameters()}
    assert found.parameter_fraction == pytest.approx(sum(held.values()) / sum(unique.values()))


def test_every_exported_class_resolves_in_accelerate():
    from accelerate.utils.dataclasses import get_module_class_from_name

    for _, build, _ in HF_CASES:
        model, _ = build()
        for name in find_repeated_blocks(model).class_names:
            assert get_module_class_from_name(model, name).__name__ == name


def test_deepseek_v3_dense_and_moe_layers_keep_their_own_sizes():
    config = _deepseek_v3_config()
    model = _on_meta(tf.DeepseekV3ForCausalLM, config)
    _, blocks, counts = parameter_layout(model)
    assert blocks is not None and blocks.class_names == ("DeepseekV3DecoderLayer",)
    layers = model.model.layers
    assert counts == tuple(sum(p.numel() for p in layer.parameters()) for layer in layers)
    dense, moe = counts[: config.first_k_dense_replace], counts[config.first_k_dense_replace :]
    assert len(set(moe)) == 1 and set(dense).isdisjoint(moe)


@pytest.mark.parametrize("name", ["tiny-t5", "t5-small", "t5-large"])
def test_catalog_t5_blocks_are_t5blocks_of_both_stacks(name):
    source = catalog.get(name)
    with torch.device("meta"):
        model = source.build()
    found = find_repeated_blocks(model)
    assert found.class_names == ("T5Block",)
    assert found.stacks == tuple(tuple(f"{stack}.blocks.{i}" for i in range(source.num_layers))
                                 for stack in ("encoder", "decoder"))


def test_back_to_back_stages_are_one_stack():
    """A ResNet's stages are separate Sequentials with nothing between them: FSDP units may span them."""
    with torch.device("meta"):
        model = catalog.get("resnet50").build()
    found = find_repeated_blocks(model)
    assert found.class_names == ("Bottleneck",) and len(found.stacks) == 1
    assert len({n.rpartition(".")[0] for n in found.names}) > 1  # several containers
    assert block_stacks(model, found.names) == found.stacks


@pytest.mark.parametrize("build", [models.MLP, lambda: nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))])
def test_models_without_layer_stacks_have_no_blocks(build):
    assert find_repeated_blocks(build()) is None


def test_extrapolated_t5_has_every_block_of_both_stacks():
    source = catalog.get("tiny-t5").with_num_layers(5)
    opts = ProfileOptions(batch_size=1, seq_len=16, target="cpu", precision="32-true", activation_checkpointing=True)
    full, fast = trace(source, opts), profile_source(source, opts, extrapolate=True)
    assert fast.extrapolated_from_layers is not None
    assert fast.block_classes == full.block_classes == ("T5Block",)
    strip = [dataclasses.replace(b, forward_flops=0, backward_flops=0) for b in fast.blocks]
    assert strip == [dataclasses.replace(b, forward_flops=0, backward_flops=0) for b in full.blocks]
    assert [b.forward_flops for b in fast.blocks] == [b.forward_flops for b in full.blocks]
    assert fast.peak_bytes == full.peak_bytes


def test_hf_bart_profile_checkpoints_and_reports_both_stacks(tmp_path):
    config = tf.BartConfig(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                           max_position_embeddings=64)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    p = autoshard.profile(str(path), batch_size=1, seq_len=16, target="cpu", precision="32-true")
    assert p.block_classes == ("BartEncoderLayer", "BartDecoderLayer")
    assert p.block_class == "BartEncoderLayer,BartDecoderLayer"
    assert p.to_dict()["block_classes"] == ["BartEncoderLayer", "BartDecoderLayer"]
    assert len(p.blocks) == config.encoder_layers + config.decoder_layers
    assert all(b.activation_bytes > 0 for b in p.blocks)  # the encoder's layers are traced as blocks too
    line = repeated_blocks_line(p.block_classes, tuple(b.name for b in p.blocks))
    assert line == (f"Repeated blocks: BartEncoderLayer, BartDecoderLayer × {len(p.blocks)} "
                    f"(encoder {config.encoder_layers}, decoder {config.decoder_layers})")
