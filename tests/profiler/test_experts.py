"""A mixture-of-experts model's parameters active per token, on transformers' own MoE classes: the count its
authors publish (Mixtral 8x7B: 46.7B, 12.9B active), which the profile did not give (a 46.7B model read as 46.7B
of work per token until the FLOPs were looked at)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

import autoshard
from autoshard.profiler.experts import ExpertRouting, active_parameters

SMALL = dict(vocab_size=128, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64)


def _saved(config: transformers.PretrainedConfig, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    config.save_pretrained(folder)
    return folder


def test_mixtrals_active_parameters_are_all_but_the_unchosen_experts(tmp_path: Path) -> None:
    # Extrapolated from shallower traces (4 blocks traced at 2 and 3): the count must follow the depth.
    config = transformers.MixtralConfig(**SMALL, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2)
    profile = autoshard.profile(str(_saved(config, tmp_path, "mixtral")), batch_size=1, seq_len=16,
                                extrapolate=True)
    h, ff, layers = 32, 48, 4
    routed = layers * 8 * 3 * h * ff  # w1, w3 (gate_up) and w2 (down) of every expert
    assert profile.extrapolated_from_layers is not None
    assert profile.routed_expert_parameter_count == routed
    assert profile.expert_routing == ExpertRouting(experts=8, per_token=2)
    assert profile.active_parameter_count == profile.parameter_count - routed * 6 // 8
    data = profile.to_dict()
    assert data["active_parameter_count"] == profile.active_parameter_count
    assert data["expert_routing"] == {"experts": 8, "experts_per_token": 2}


def test_shared_experts_count_as_active(tmp_path: Path) -> None:
    """Qwen2-MoE's shared expert runs for every token: it is not among the routed experts."""
    config = transformers.Qwen2MoeConfig(**SMALL, intermediate_size=48, moe_intermediate_size=16,
                                         shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=1,
                                         decoder_sparse_step=1, mlp_only_layers=[])
    profile = autoshard.profile(str(_saved(config, tmp_path, "qwen2-moe")), batch_size=1, seq_len=16)
    assert profile.routed_expert_parameter_count == 4 * 4 * 3 * 32 * 16
    assert profile.active_parameter_count == profile.parameter_count - 4 * 3 * 3 * 32 * 16


def test_a_model_py_returning_a_transformers_moe_model_is_read_from_its_config(tmp_path: Path) -> None:
    """No config.json to read the routing from: the module's own ``config`` says it."""
    (tmp_path / "model.py").write_text(
        "import torch, transformers\n"
        "def model():\n"
        "    return transformers.MixtralForCausalLM(transformers.MixtralConfig(vocab_size=128, hidden_size=32,\n"
        "        intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,\n"
        "        num_local_experts=4, num_experts_per_tok=1))\n"
        "def batch(batch_size):\n"
        "    ids = torch.randint(0, 128, (batch_size, 16))\n"
        "    return {'input_ids': ids, 'labels': ids}\n")
    profile = autoshard.profile(str(tmp_path / "model.py"), batch_size=1)
    assert profile.expert_routing == ExpertRouting(experts=4, per_token=1)
    assert profile.active_parameter_count == profile.parameter_count - 2 * 4 * 3 * 32 * 48 * 3 // 4


def test_a_dense_model_has_no_active_count(tmp_path: Path) -> None:
    config = transformers.LlamaConfig(**SMALL, intermediate_size=48)
    profile = autoshard.profile(str(_saved(config, tmp_path, "llama")), batch_size=1, seq_len=16)
    assert (profile.routed_expert_parameter_count, profile.expert_routing, profile.active_parameter_count) == (
        0, None, None)
    assert active_parameters(100, 0, ExpertRouting(experts=8, per_token=2)) is None


@pytest.mark.parametrize("command", ["profile", "recommend"])
def test_the_cli_says_the_active_parameters(tmp_path: Path, command: str) -> None:
    config = transformers.MixtralConfig(**SMALL, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2)
    folder = _saved(config, tmp_path, "mixtral")
    extra = ["--hardware", "dgx-h100"] if command == "recommend" else []
    # Both runs plan with this test's own workload cache (conftest.py): the text run traces the model and the
    # --json run reads what it wrote, so that the count is checked on the traced and on the cached workload, and
    # the model is traced once (test_workload_cache.py checks that a cached plan equals the traced one).
    cache = {"AUTOSHARD_CACHE_DIR": os.environ["AUTOSHARD_CACHE_DIR"]}
    run = subprocess.run([sys.executable, "-m", "autoshard", command, str(folder), "--seq-len", "16", *extra],
                         capture_output=True, text=True, check=False, env={"COLUMNS": "200", "PATH": "", **cache},
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    active = autoshard.profile(str(folder), batch_size=1, seq_len=16).active_parameter_count
    assert active is not None
    shown = f"{active / 1e3:.2f}K active per token" + (" (input embedding included)" if command == "profile" else
                                                       ", input embedding included")
    assert shown in " ".join(run.stdout.split())
    if command == "profile":
        assert "2 of 8 experts" in run.stdout
    run = subprocess.run([sys.executable, "-m", "autoshard", command, str(folder), "--seq-len", "16", *extra,
                          "--json"], capture_output=True, text=True, check=False, cwd=tmp_path)
    data = json.loads(run.stdout)
    assert (data if command == "profile" else data["model"])["active_parameter_count"] == active
