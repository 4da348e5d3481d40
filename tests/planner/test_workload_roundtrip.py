"""A traced workload survives the cache's JSON unchanged, for models of several shapes, and plans the same.

Every dataclass inside a :class:`Workload` (step traces, profiles, depth timelines and their tensors) goes
through :mod:`autoshard._jsonable` and the JSON text; the copy is compared field by field (tensors with
``torch.equal`` and their dtype) and planned on the same hardware as the original.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from autoshard._jsonable import decode, encode
from autoshard.hardware import load_hardware
from autoshard.models import load_source
from autoshard.planner.plan import PlanRequest
from autoshard.planner.search import plan
from autoshard.strategies import get, names
from autoshard.strategies.workload import Workload, build_workload
from tests.models.tiny_configs import TINY_LLAMA

transformers = pytest.importorskip("transformers")


def _hf_config(tmp_path: Path, name: str, config: Any) -> str:
    folder = tmp_path / name
    config.save_pretrained(folder)
    return str(folder / "config.json")


def _tiny_llama(tmp_path: Path) -> str:
    path = tmp_path / "tiny-llama-hf" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    return str(path)


def _deepseek_v3_mixed(tmp_path: Path) -> str:
    # 3 dense then MoE layers (first_k_dense_replace, as published): blocks of two kinds, so the workload holds
    # depth timelines extrapolated place by place (DepthTimelines.stack / positions).
    return _hf_config(tmp_path, "deepseek-v3-tiny", transformers.DeepseekV3Config(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=12, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=64, moe_intermediate_size=16, n_routed_experts=4,
        n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=3,
        q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
        architectures=["DeepseekV3ForCausalLM"]))


CASES = [
    pytest.param(lambda tmp: "gpt2", {"seq_len": 64, "checkpointing": (False,)}, id="catalog-gpt2"),
    pytest.param(_tiny_llama, {"seq_len": 32}, id="hf-tiny-llama"),
    pytest.param(lambda tmp: "tiny-t5", {"seq_len": 32, "precision": "16-mixed", "checkpointing": (True,)},
                 id="encoder-decoder-tiny-t5"),
    pytest.param(lambda tmp: "tiny-vit", {"precision": "32-true", "target": "cpu", "checkpointing": (False,)},
                 id="vision-tiny-vit"),
    pytest.param(_deepseek_v3_mixed, {"seq_len": 32, "checkpointing": (False,)}, id="hf-deepseek-v3-two-block-kinds",
                 marks=pytest.mark.slow),
]


def _same(a: Any, b: Any, path: str = "workload") -> None:
    """Assert ``a`` and ``b`` are equal field by field, with the same types (tensors: same dtype and values)."""
    assert type(a) is type(b) or (isinstance(a, str) and isinstance(b, str)), f"{path}: {type(a)} vs {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), path
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            if f.init:
                _same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            _same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, enum.Enum):
        assert a is b, path
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _plan_dict(workload: Workload) -> dict[str, Any]:
    request = PlanRequest(micro_batch_size=None, global_batch_size=None, goal="pretrain", safety_margin=0.1)
    return plan(workload, load_hardware("dgx-h100"), request, [get(n) for n in names()]).to_dict()


@pytest.mark.parametrize(("model", "options"), CASES)
def test_workload_round_trips_through_json_field_by_field_and_plans_the_same(model, options, tmp_path):
    spec = model(tmp_path)
    workload = build_workload(load_source(spec), **options)
    text = json.dumps(encode(workload, Workload))
    copy = decode(json.loads(text), Workload)
    _same(workload, copy)
    assert json.dumps(encode(copy, Workload)) == text
    assert _plan_dict(copy) == _plan_dict(workload)
    if "deepseek" in spec:  # the case is there for this: timelines extrapolated place by place
        timelines = workload.traces[0].timelines_2
        assert timelines is not None and timelines.positions and timelines.stack
