"""A sequence past the context a rotary model was made for is planned as asked, and the plan says so: a
long-context user planned Llama 2 at 65,536 tokens (16x its 4,096) and nothing said that training that far needs
RoPE scaling or a long-context checkpoint (probe)."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

import autoshard
from autoshard.models.hf import load_config

SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)


def _line(plan: autoshard.Plan) -> list[str]:
    return [x for x in plan.explanation if x.startswith("Scope: sequence")]


def test_a_sequence_past_the_rotary_context_is_said(tmp_path: Path) -> None:
    folder = tmp_path / "llama"
    transformers.LlamaConfig(**SMALL).save_pretrained(folder)
    assert load_config(folder).metadata["trained_positions"] == 64
    past = autoshard.recommend(str(folder), hardware="dgx-h100", seq_len=128)
    assert _line(past) == [
        "Scope: sequence 128 is past the 64 positions llama was made for (max_position_embeddings): rotary "
        "positions run at any length, so memory and time are counted as asked, but training that far usually needs "
        "RoPE scaling (rope_parameters in the config; rope_scaling before transformers 5) or a long-context "
        "checkpoint."]
    assert _line(autoshard.recommend(str(folder), hardware="dgx-h100", seq_len=64)) == []


def test_learned_positions_are_a_bound_not_a_context() -> None:
    gpt2 = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64)
    from autoshard.models.hf_spec import trained_positions

    assert trained_positions(gpt2) is None
    assert trained_positions(transformers.LlamaConfig(**SMALL)) == 64


def test_profile_says_the_source_lines_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The plan's Scope lines about the model source were said by recommend only: profile's figures (a sequence
    past the rotary context, dense-computed experts, unbuilt MTP layers) came with no word (a new user's report)."""
    from autoshard.cli import main

    folder = tmp_path / "llama"
    transformers.LlamaConfig(**SMALL).save_pretrained(folder)
    p = autoshard.profile(str(folder), batch_size=1, seq_len=128)
    assert [line for line in p.scope if line.startswith("Scope: sequence 128 is past the 64 positions")]
    assert p.to_dict()["scope"] == list(p.scope)
    assert not [line for line in autoshard.profile(str(folder), batch_size=1, seq_len=64).scope
                if line.startswith("Scope:")]
    assert main(["profile", str(folder), "--batch-size", "1", "--seq-len", "128"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "Scope: sequence 128 is past the 64 positions llama was made for" in printed


@pytest.mark.parametrize(("scaling", "reach", "name"), [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}, 256, "yarn, factor 4"),
    ({"rope_type": "yarn", "factor": 4.0}, 256, "yarn, factor 4"),  # Qwen2.5's form: over max_position_embeddings
    # Llama 3.1's: max_position_embeddings is the scaled context already (factor 8 over 4 gives less)
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 4, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0}, 64, "llama3, factor 8"),
])
def test_a_config_with_rope_scaling_is_held_to_the_positions_its_scaling_reaches(
        tmp_path: Path, scaling: dict, reach: int, name: str) -> None:
    """Qwen2.5 (yarn, factor 4 over 32,768) at its published 131,072 was told training that far "usually needs RoPE
    scaling", which its config has (a long-context probe)."""
    folder = tmp_path / "llama"
    transformers.LlamaConfig(**SMALL, rope_scaling=scaling).save_pretrained(folder)
    assert load_config(folder).metadata["rope_reach"] == reach
    assert not [x for x in autoshard.profile(str(folder), batch_size=1, seq_len=reach).scope
                if x.startswith("Scope: sequence")]
    past = autoshard.profile(str(folder), batch_size=1, seq_len=reach * 2).scope
    assert [x for x in past if x.startswith("Scope: sequence")] == [
        f"Scope: sequence {reach * 2:,} is past the {reach:,} positions llama's RoPE scaling ({name}) reaches: rotary "
        "positions run at any length, so memory and time are counted as asked, but the model was not made for that "
        "length (a larger factor in rope_parameters, or a longer-context checkpoint)."]


def test_the_capped_default_sequence_length_is_said(tmp_path: Path) -> None:
    """A 131,072-position config profiled at "seq 2048" with no word that 2,048 is autoshard's cap, not the model's
    length (`--help`: "default: the model's"; a long-context probe)."""
    folder = tmp_path / "llama"
    transformers.LlamaConfig(**{**SMALL, "max_position_embeddings": 8192}).save_pretrained(folder)
    lines = autoshard.profile(str(folder), batch_size=1).scope
    assert "Assumed: sequence 2,048, autoshard's default for llama (its 8,192 positions capped at 2,048): --seq-len " \
           "sets the length to train at." in lines
    assert not [x for x in autoshard.profile(str(folder), batch_size=1, seq_len=1024).scope if x.startswith("Assumed: sequence")]
    small = tmp_path / "small"
    transformers.LlamaConfig(**SMALL).save_pretrained(small)  # 64 positions: the default is the model's own
    assert not [x for x in autoshard.profile(str(small), batch_size=1).scope if x.startswith("Assumed: sequence")]
