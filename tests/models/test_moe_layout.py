"""What a config's MoE layout tells the plan, read from transformers' own config classes: the experts and the
experts per token (a vision-language model's too, from its text config), a top-k no token can run, and
Llama 4, whose transformers code computes every expert for every token (a probe's Scout profiled at 6.7x the
FLOPs its 17B active parameters imply, without a word)."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

import autoshard
from autoshard.errors import ModelSourceError
from autoshard.models.hf import load_config

SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)


def _saved(config: transformers.PretrainedConfig, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    config.save_pretrained(folder)
    return folder


def test_experts_and_experts_per_token_are_recorded(tmp_path: Path) -> None:
    mixtral = transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2)
    meta = load_config(_saved(mixtral, tmp_path, "mixtral")).metadata
    assert (meta["experts"], meta["experts_per_token"], "dense_experts" in meta) == (4, 2, False)


def test_a_vision_language_models_moe_text_model_is_read_from_its_text_config(tmp_path: Path) -> None:
    text = transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2)
    vision = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, image_size=32, patch_size=8)
    llava = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=127)
    meta = load_config(_saved(llava, tmp_path, "llava-mixtral")).metadata
    assert (meta["experts"], meta["experts_per_token"]) == (4, 2)


@pytest.mark.parametrize("per_token", [0, 5])
def test_a_top_k_no_token_can_run_is_refused(tmp_path: Path, per_token: int) -> None:
    mixtral = transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=per_token)
    with pytest.raises(ModelSourceError, match=f"{per_token} experts per token .* between 1 and 4"):
        load_config(_saved(mixtral, tmp_path, f"k{per_token}"))


def test_llama4s_dense_experts_are_said_in_the_plan(tmp_path: Path) -> None:
    llama4 = transformers.Llama4TextConfig(**SMALL, intermediate_size_mlp=64, num_local_experts=4,
                                           num_experts_per_tok=1, interleave_moe_layer_step=1)
    folder = _saved(llama4, tmp_path, "llama4")
    assert load_config(folder).metadata["dense_experts"] is True
    plan = autoshard.recommend(str(folder), hardware="dgx-h100", seq_len=32)
    line = next(x for x in plan.explanation if "sends every token through all 4 experts" in x)
    assert "(top-1)" in line and "about 4x the routed experts' work" in line


def test_a_config_transformers_accepts_but_cannot_run_points_at_the_config(tmp_path: Path) -> None:
    bad = transformers.LlamaConfig(**{**SMALL, "num_attention_heads": 8, "num_key_value_heads": 3})
    with pytest.raises(autoshard.errors.UserCodeError) as info:
        autoshard.profile(str(_saved(bad, tmp_path, "heads")), batch_size=1, seq_len=16)
    assert "check the config" in (info.value.hint or "")


def test_a_class_without_sdpa_says_its_attention_was_traced_eager(tmp_path: Path) -> None:
    """GPT-OSS came out at 7-9 % MFU and nothing said why: its class has no SDPA path (probe)."""
    gpt_oss = transformers.GptOssConfig(**SMALL, head_dim=8, num_local_experts=4, num_experts_per_tok=2)
    plan = autoshard.recommend(str(_saved(gpt_oss, tmp_path, "gpt-oss")), hardware="dgx-h100", seq_len=32)
    assert any(x.startswith("Scope: GptOssForCausalLM has no SDPA path") for x in plan.explanation)
    mixtral = transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2)
    plan = autoshard.recommend(str(_saved(mixtral, tmp_path, "mixtral")), hardware="dgx-h100", seq_len=32)
    assert not any("no SDPA path" in x for x in plan.explanation)


def test_a_model_without_attention_is_not_said_to_have_eager_attention(tmp_path: Path) -> None:
    """ConvNeXt and ResNet profiles said "its attention was traced eager ... the scores of every head are
    materialised": they have no attention (probe)."""
    from autoshard.models import load_source
    from autoshard.models.scope import scope_lines

    convnext = transformers.ConvNextConfig(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1], num_labels=3)
    convnext.architectures = ["ConvNextForImageClassification"]
    source = load_source(_saved(convnext, tmp_path, "convnext"))
    assert source.metadata["attn_implementation_chosen_by"] == "autoshard (the model has no attention)"
    assert not any("attention" in line for line in scope_lines(source))


def test_linear_attention_layers_traced_through_the_reference_path_are_said(tmp_path: Path) -> None:
    """Qwen3-Next's gated DeltaNet layers run transformers' PyTorch chunked path here, as Mamba-2's scan does, and
    only the Mamba-2 plan said so (probe)."""
    qwen3_next = transformers.Qwen3NextConfig(
        **{**SMALL, "num_hidden_layers": 4}, head_dim=8, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=16, shared_expert_intermediate_size=16, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8)
    folder = _saved(qwen3_next, tmp_path, "qwen3-next")
    assert load_config(folder).metadata["reference_linear_attention"] is True
    # transformers names Mamba-2 mixers linear_attention too: those plans say the scan line, not this one
    mamba2 = transformers.Mamba2Config(vocab_size=128, hidden_size=32, num_hidden_layers=2, state_size=8,
                                       num_heads=4, head_dim=16, n_groups=1, chunk_size=16)
    assert "reference_linear_attention" not in load_config(_saved(mamba2, tmp_path, "mamba2")).metadata
    plan = autoshard.recommend(str(folder), hardware="dgx-h100", seq_len=32)
    assert any(x.startswith("Its linear-attention layers (gated DeltaNet) were traced") for x in plan.explanation)
