"""Op-selective checkpointing on a model torch's selective checkpointing cannot replay: Zamba2, whose one shared
transformer block runs in several hybrid layers (transformers' ``Zamba2Config``). Under autocast its weights are cast
once in the forward and again in each layer's recompute, so the recompute runs more casts than the forward stored,
and torch 2.13 refuses ("invocation index ... not found in storage"). The user hears what happened and what to use
instead, not that the model's code is broken; the planner keeps full checkpointing (tests/planner/
test_selective_search.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import Zamba2Config

from autoshard import profile
from autoshard.errors import ProfileError


@pytest.fixture(scope="module")
def zamba2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("zamba2")
    Zamba2Config(hidden_size=64, num_hidden_layers=6, layer_types=["mamba", "mamba", "hybrid", "mamba", "hybrid",
                                                                   "mamba"],
                 n_mamba_heads=4, mamba_d_state=16, mamba_headdim=32, num_mem_blocks=1,
                 use_shared_attention_adapter=False, adapter_rank=8, vocab_size=128, intermediate_size=128,
                 num_attention_heads=4, num_key_value_heads=4, hybrid_layer_ids=[2, 4], chunk_size=16,
                 architectures=["Zamba2ForCausalLM"]).save_pretrained(directory)
    return directory / "config.json"


def test_a_shared_block_under_op_selective_checkpointing_says_what_to_use_instead(zamba2: Path) -> None:
    with pytest.raises(ProfileError, match="op-selective checkpointing cannot replay the recompute of") as info:
        profile(zamba2, batch_size=1, seq_len=64, activation_checkpointing="op")
    assert 'activation_checkpointing="full"' in (info.value.hint or "")  # a Python caller's argument
    assert profile(zamba2, batch_size=1, seq_len=64, activation_checkpointing="full").peak_bytes > 0
