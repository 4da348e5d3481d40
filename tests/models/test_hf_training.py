"""Hugging Face models built for a training step: the KV cache off, build errors in the config's terms, the
class chosen (or refused) from ``architectures``, and state-space mixers refused before any slow work."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import autoshard
from autoshard.errors import ModelSourceError
from autoshard.models import load_source
from autoshard.models.hf_build import sub_configs
from tests.models.tiny_configs import TINY_DECODER

transformers = pytest.importorskip("transformers")


@pytest.fixture
def save(tmp_path: Path) -> Callable[..., Path]:
    """``save(config, architecture, name)`` saves ``config`` with save_pretrained and returns its folder."""

    def write(config: Any, architecture: str | None, name: str = "tiny") -> Path:
        if architecture is not None:
            config.architectures = [architecture]
        folder = tmp_path / name
        config.save_pretrained(folder)
        return folder

    return write


# Families whose config enables the KV cache by default and failed a checkpointed trace with it (a broadcast
# error in the recomputed attention). Phi-3 fails with a sliding window, which its published configs set
# (microsoft/Phi-3-mini-4k-instruct: "sliding_window": 2047).
CACHED = [
    pytest.param(lambda: transformers.Gemma2Config(**TINY_DECODER, head_dim=8), "Gemma2ForCausalLM", id="gemma2"),
    pytest.param(
        lambda: transformers.Phi3Config(**TINY_DECODER, pad_token_id=0, sliding_window=16),
        "Phi3ForCausalLM",
        id="phi3",
    ),
]
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128}
CACHED_OTHERS = [
    pytest.param(lambda: transformers.FalconConfig(**SMALL), "FalconForCausalLM", id="falcon"),
    pytest.param(lambda: transformers.BloomConfig(**SMALL), "BloomForCausalLM", id="bloom"),
]


@pytest.mark.parametrize(("config", "architecture"), CACHED + CACHED_OTHERS)
def test_activation_checkpointing_profiles_models_whose_config_enables_the_kv_cache(
    config: Callable[[], Any], architecture: str, save: Callable[..., Path]
) -> None:
    folder = save(config(), architecture)
    assert json.loads((folder / "config.json").read_text())["use_cache"] is True
    plain = autoshard.profile(folder, batch_size=2, seq_len=32, precision="32-true")
    checkpointed = autoshard.profile(
        folder, batch_size=2, seq_len=32, precision="32-true", activation_checkpointing=True
    )
    assert checkpointed.parameter_count == plain.parameter_count
    assert checkpointed.peak_breakdown.activations < plain.peak_breakdown.activations


@pytest.mark.parametrize(("config", "architecture"), CACHED)
def test_checkpointed_real_step_with_the_configs_cache_setting_trains(
    config: Callable[[], Any], architecture: str, save: Callable[..., Path]
) -> None:
    from torch.utils.checkpoint import checkpoint

    source = load_source(save(config(), architecture))
    module = source.build()
    module.train()
    for layer in module.model.layers:  # recompute every decoder layer in backward, as autoshard's trace does
        layer.forward = lambda *a, _f=layer.forward, **k: checkpoint(_f, *a, use_reentrant=False, **k)
    batch = source.batch(2, 16)
    loss = autoshard.models.call_model(module, batch).loss
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in module.model.layers.parameters())


def test_kv_cache_is_off_in_the_built_model_and_every_sub_config(save: Callable[..., Path]) -> None:
    text = transformers.LlamaConfig(**TINY_DECODER).to_dict()
    vision = transformers.CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
    ).to_dict()
    config = transformers.LlavaConfig(text_config=text, vision_config=vision, image_token_id=127)
    parts = [part for part in sub_configs(config) if hasattr(part, "use_cache")]
    assert parts and all(part.use_cache for part in parts)  # the defaults this test overrides
    source = load_source(save(config, "LlavaForConditionalGeneration"))
    with torch.device("meta"):
        module = source.build()
    built = [part for part in sub_configs(module.config) if hasattr(part, "use_cache")]
    assert len(built) == len(parts) and not any(part.use_cache for part in built)
    assert source.metadata["use_cache"] is False


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"pad_token_id": 32000}, "pad_token_id is 32000, outside the vocabulary (vocab_size = 1000)."),
        ({}, "pad_token_id is 32000, the Phi3Config default, since the config.json does not set it, outside"),
    ],
    ids=["set-in-the-file", "class-default"],
)
def test_padding_index_outside_the_vocabulary_is_reported_as_the_configs_value(
    data: dict[str, Any], expected: str, write_config: Callable[..., Path]
) -> None:
    assert transformers.Phi3Config().pad_token_id == 32000  # the default this test relies on
    config = {
        "model_type": "phi3",
        "architectures": ["Phi3ForCausalLM"],
        **TINY_DECODER,
        "vocab_size": 1000,
        **data,
    }
    source = load_source(write_config(config))
    with pytest.raises(ModelSourceError) as info:
        source.build()
    message = str(info.value)
    assert expected in message and '"pad_token_id"' in message
    assert message.count("\n") == 1 and "model file" not in message


def test_profile_reports_a_config_build_error_without_blaming_a_model_file(
    write_config: Callable[..., Path],
) -> None:
    config = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], **TINY_DECODER, "vocab_size": 1000}
    with pytest.raises(ModelSourceError) as info:
        autoshard.profile(write_config(config), batch_size=1, seq_len=8)
    assert "pad_token_id is 32000" in str(info.value) and "model file" not in str(info.value)


# --- the model class ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("architectures", "architecture", "chosen_by"),
    [
        (["LlamaForSequenceClassification"], "LlamaForSequenceClassification", "architectures[0]"),
        (None, "LlamaForCausalLM", "AutoModelForCausalLM"),
    ],
    ids=["named", "absent"],
)
def test_metadata_says_how_the_class_was_chosen(
    architectures: list[str] | None, architecture: str, chosen_by: str, write_config: Callable[..., Path]
) -> None:
    data = {"model_type": "llama", **TINY_DECODER}
    if architectures is not None:
        data["architectures"] = architectures
    source = load_source(write_config(data))
    assert (source.metadata["architecture"], source.metadata["architecture_chosen_by"]) == (
        architecture,
        chosen_by,
    )


def test_an_encoder_decoder_speech_config_without_architectures_is_built_whole(
    write_config: Callable[..., Path]
) -> None:
    """Whisper has a decoder-only WhisperForCausalLM too: chosen, it was half the model, its cross-attention
    unused (a new user's config; transformers files Whisper under the speech seq2seq Auto class)."""
    from transformers import WhisperConfig

    data = WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128).to_dict()
    data.pop("architectures", None)
    source = load_source(write_config(data))
    assert (source.metadata["architecture"], source.metadata["architecture_chosen_by"]) == (
        "WhisperForConditionalGeneration", "AutoModelForSpeechSeq2Seq")


@pytest.mark.parametrize(
    ("architectures", "expected"),
    [
        ("LlamaForCausalLM", "\"architectures\" is 'LlamaForCausalLM'; it must be a list of class names."),
        (["LlamaConfig"], "architectures[0] is LlamaConfig, which transformers"),
    ],
    ids=["not-a-list", "not-a-model-class"],
)
def test_architectures_that_name_no_model_class_are_errors(
    architectures: Any, expected: str, write_config: Callable[..., Path]
) -> None:
    with pytest.raises(ModelSourceError) as info:
        load_source(write_config({"model_type": "llama", **TINY_DECODER, "architectures": architectures}))
    assert expected in str(info.value) and str(info.value).count("\n") == 1


def test_custom_hub_code_is_named_as_such(write_config: Callable[..., Path]) -> None:
    data = {
        "model_type": "llama",
        **TINY_DECODER,
        "architectures": ["MyLlama"],
        "auto_map": {"AutoModel": "x.MyLlama"},
    }
    with pytest.raises(ModelSourceError, match="custom code from the Hub"):
        load_source(write_config(data))


# --- state-space mixers -------------------------------------------------------------------------------------

SSM = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 128}
MAMBA2 = {
    "mamba_n_heads": 8,
    "mamba_d_head": 16,
    "mamba_n_groups": 1,
    "mamba_d_state": 8,
    "mamba_chunk_size": 16,
}
ATTENTION = {"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64}


def _selective_scan() -> list[Any]:
    return [
        pytest.param(lambda: transformers.MambaConfig(**SSM, state_size=8), "MambaForCausalLM", id="mamba"),
        pytest.param(
            lambda: transformers.FalconMambaConfig(**SSM, state_size=8),
            "FalconMambaForCausalLM",
            id="falcon-mamba",
        ),
        pytest.param(
            lambda: transformers.JambaConfig(
                **SSM, **ATTENTION, num_experts=2, attn_layer_period=2, attn_layer_offset=1
            ),
            "JambaForCausalLM",
            id="jamba",
        ),
        pytest.param(  # Zamba's default layer pattern needs 3 layers or more
            lambda: transformers.ZambaConfig(**{**SSM, "num_hidden_layers": 3}, **ATTENTION),
            "ZambaForCausalLM",
            id="zamba",
        ),
    ]


@pytest.mark.parametrize(("config", "architecture"), _selective_scan())
def test_mamba1_mixers_are_refused_in_two_lines_before_any_slow_work(
    config: Callable[[], Any], architecture: str, save: Callable[..., Path]
) -> None:
    folder = save(config(), architecture)
    with pytest.raises(ModelSourceError) as loading:
        load_source(folder)  # loading builds nothing
    started = time.perf_counter()
    with pytest.raises(ModelSourceError) as info:
        autoshard.profile(folder, batch_size=1, seq_len=4096)
    # A 2-layer tiny Mamba took 22 s to trace at seq_len=512 (measured), so minutes at 4096.
    assert time.perf_counter() - started < 30.0
    message = str(info.value)
    assert message == str(loading.value)
    assert f"autoshard cannot trace {architecture} yet: its Mamba (selective-scan) mixer layers" in message
    assert "docs/models.md" in message and message.count("\n") == 1


def test_recurrent_gemma_is_refused_in_two_lines_before_any_slow_work(save: Callable[..., Path]) -> None:
    # Its RG-LRU layers loop over the tokens in Python: the default 2B config took 50 s to profile at 128 tokens.
    folder = save(transformers.RecurrentGemmaConfig(hidden_size=64, lru_width=64, num_hidden_layers=3,
                                                    num_attention_heads=4, intermediate_size=64, vocab_size=128),
                  "RecurrentGemmaForCausalLM")
    started = time.perf_counter()
    with pytest.raises(ModelSourceError) as info:
        autoshard.profile(folder, batch_size=1, seq_len=4096)
    assert time.perf_counter() - started < 30.0
    message = str(info.value)
    assert "autoshard cannot trace RecurrentGemmaForCausalLM yet: its RG-LRU recurrent layers" in message
    assert "docs/models.md" in message and message.count("\n") == 1


def _chunked_scan() -> list[Any]:
    return [
        pytest.param(
            lambda: transformers.Mamba2Config(
                **SSM, state_size=8, num_heads=8, head_dim=16, n_groups=1, chunk_size=16
            ),
            "Mamba2ForCausalLM",
            id="mamba2",
        ),
        pytest.param(
            lambda: transformers.BambaConfig(**SSM, **ATTENTION, **MAMBA2, attn_layer_indices=[1]),
            "BambaForCausalLM",
            id="bamba",
        ),
        pytest.param(  # 12 blocks: deep enough to extrapolate, whose copies must renumber hybrid_layer_ids
            lambda: transformers.Zamba2Config(
                **{**SSM, "num_hidden_layers": 12}, num_attention_heads=4, num_key_value_heads=4,
                intermediate_size=64, n_mamba_heads=8, mamba_headdim=16, mamba_ngroups=1, mamba_d_state=8,
                chunk_size=16, layers_block_type=["mamba"] * 2 + ["hybrid"] + ["mamba"] * 5 + ["hybrid"]
                + ["mamba"] * 3),
            "Zamba2ForCausalLM",
            id="zamba2",
        ),
    ]


@pytest.mark.parametrize(("config", "architecture"), _chunked_scan())
def test_mamba2_mixers_train_a_real_step_and_profile_in_seconds(
    config: Callable[[], Any], architecture: str, save: Callable[..., Path]
) -> None:
    folder = save(config(), architecture)  # time_step_limit (0, inf) is saved as {"__float__": "Infinity"}
    source = load_source(folder)
    assert source.metadata.get("reference_scan") is True  # the plan says its figures are upper bounds
    output = autoshard.models.call_model(source.build(), source.batch(2, 32))
    output.loss.backward()
    assert torch.isfinite(output.loss)
    started = time.perf_counter()
    profile = autoshard.profile(folder, batch_size=1, seq_len=1024, precision="32-true")
    assert time.perf_counter() - started < 60.0
    assert profile.parameter_count == sum(p.numel() for p in source.build().parameters())


def test_a_plan_for_mamba2_mixers_says_its_figures_are_upper_bounds(save: Callable[..., Path]) -> None:
    """The PyTorch scan stores far more than the mamba-ssm kernels: a plan that does not say so misleads (a 7B
    Mamba2 at 4096 tokens traced at 223 GiB of activations per sequence)."""
    from autoshard.hardware import load_hardware
    from autoshard.models.scope import REFERENCE_SCAN
    from autoshard.planner.machine import plan_for

    mamba2 = save(transformers.Mamba2Config(**SSM, state_size=8, num_heads=8, head_dim=16, n_groups=1,
                                            chunk_size=16), "Mamba2ForCausalLM")
    plan = plan_for(mamba2, load_hardware("dgx-h100", gpus=2), seq_len=64, batch_size=2, strategies=["ddp"])
    assert plan.explanation[-1] == REFERENCE_SCAN
    llama = save(transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, vocab_size=128), "LlamaForCausalLM")
    assert "reference_scan" not in load_source(llama).metadata


@pytest.mark.parametrize(("data", "said"), [
    ({"model_type": "llama", **TINY_DECODER, "num_hidden_layers": -1}, "num_hidden_layers is -1"),
    ({"model_type": "llama", **TINY_DECODER, "num_hidden_layers": 0}, "num_hidden_layers is 0"),
    ({"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 0, "vocab_size": 64}, "n_layer is 0"),
])
def test_a_stack_of_no_blocks_is_refused_by_the_configs_own_key(data: dict[str, Any], said: str,
                                                                 write_config: Callable[..., Path]) -> None:
    """transformers builds it (no blocks), and it was planned as embeddings and a head, without a word."""
    with pytest.raises(ModelSourceError, match=f"{said}: a model needs at least one block"):
        load_source(write_config(data))


def test_a_decoder_classifier_without_a_pad_token_is_told_to_set_one(write_config: Callable[..., Path]) -> None:
    """Llama's configs ship pad_token_id null; its sequence-classification head cannot batch without one, and the
    hint used to speak of experts and key/value heads (a new user's report)."""
    from autoshard.errors import UserCodeError

    data = {"model_type": "llama", **TINY_DECODER, "num_labels": 3, "pad_token_id": None,
            "architectures": ["LlamaForSequenceClassification"]}
    with pytest.raises(UserCodeError, match="no padding token") as info:
        autoshard.profile(write_config(data), batch_size=2, seq_len=8)
    assert 'Set "pad_token_id"' in (info.value.hint or "") and "experts" not in (info.value.hint or "")
