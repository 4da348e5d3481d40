"""Deep models whose blocks differ (dense and MoE layers, sliding and global attention) extrapolate exactly, or
are traced whole with the reason: never silently wrong.

Configs come from transformers' config classes (tiny sizes, published layer patterns), saved with
``save_pretrained``; 12 blocks, so extrapolation is automatic (``AUTO_MIN_LAYERS``) and a full trace is fast.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from autoshard.cli import main
from autoshard.models.hf_layers import layer_kinds
from autoshard.models.source import ModelSource
from autoshard.profiler import scaling
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import (
    AUTO_MIN_LAYERS,
    profile_source,
    profile_with_timelines,
)
from autoshard.profiler.trace import trace_timeline
from autoshard.strategies.workload import StepTrace
from tests.profiler import models

transformers = pytest.importorskip("transformers")

LAYERS = AUTO_MIN_LAYERS
SMALL = {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": LAYERS,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def _deepseek_v3() -> Any:
    # first_k_dense_replace=3 as published (DeepseekV3Config defaults); 4 tiny experts instead of 256.
    return transformers.DeepseekV3Config(
        **{**SMALL, "num_key_value_heads": 4}, moe_intermediate_size=16, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=3, q_lora_rank=16, kv_lora_rank=16,
        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, architectures=["DeepseekV3ForCausalLM"])


def _qwen2_moe() -> Any:
    return transformers.Qwen2MoeConfig(
        **SMALL, moe_intermediate_size=16, shared_expert_intermediate_size=32, num_experts=4,
        num_experts_per_tok=2, decoder_sparse_step=2, mlp_only_layers=[5], architectures=["Qwen2MoeForCausalLM"])


def _gemma2() -> Any:
    # Gemma-2 alternates sliding-window and global attention (layer_types defaults).
    return transformers.Gemma2Config(**SMALL, head_dim=8, sliding_window=16, architectures=["Gemma2ForCausalLM"])


def _ernie_moe_every_other_layer() -> Any:
    # Experts every second layer (moe_layer_interval): a rule autoshard cannot rewrite for a chosen mix.
    return transformers.Ernie4_5_MoeConfig(
        **SMALL, moe_intermediate_size=16, moe_num_experts=4, moe_k=2, moe_num_shared_experts=1,
        moe_layer_start_index=1, moe_layer_interval=2, moe_layer_end_index=LAYERS - 1,
        architectures=["Ernie4_5_MoeForCausalLM"])


def _llama() -> Any:
    return transformers.LlamaConfig(**SMALL, architectures=["LlamaForCausalLM"])


def _is_moe_deepseek(config: Any, i: int) -> bool:
    return i >= config.first_k_dense_replace  # DeepseekV3DecoderLayer.__init__ (transformers 5.x)


def _is_moe_qwen2(config: Any, i: int) -> bool:
    # Qwen2MoeDecoderLayer.__init__ (transformers 5.x)
    return i not in config.mlp_only_layers and (i + 1) % config.decoder_sparse_step == 0


def _gemma2_type(config: Any, i: int) -> str:
    return config.layer_types[i]


MIXED = [
    pytest.param(_deepseek_v3, _is_moe_deepseek, id="deepseek-v3-first-k-dense"),
    pytest.param(_qwen2_moe, _is_moe_qwen2, id="qwen2-moe-sparse-step-and-mlp-only"),
    pytest.param(_gemma2, _gemma2_type, id="gemma2-sliding-and-global"),
]

FIELDS = ("parameter_count", "trainable_parameter_count", "parameter_bytes", "gradient_bytes",
          "optimizer_state_bytes", "buffer_bytes", "peak_bytes", "peak_breakdown", "peak_phase", "peak_module",
          "phase_peaks", "forward_flops", "backward_flops", "flops_per_step", "blocks")


def _partition(labels: list[Any]) -> set[frozenset[int]]:
    return {frozenset(i for i, v in enumerate(labels) if v == value) for value in set(labels)}


@pytest.mark.parametrize(("make", "rule"), MIXED)
def test_layer_kinds_group_the_blocks_as_the_config_rule_does(make, rule, saved):
    source = saved(make)
    config = make()
    with torch.device("meta"):
        kinds = layer_kinds(source.build(), LAYERS)
    assert kinds is not None and kinds.stacks == ("model.layers",)
    assert _partition(list(kinds.kinds[0])) == _partition([rule(config, i) for i in range(LAYERS)])
    assert not kinds.alike_after_first()


OPTIONS = pytest.mark.parametrize(
    "options",
    [pytest.param({"precision": "32-true", "target": "cpu"}, id="fp32-cpu", marks=pytest.mark.slow),
     pytest.param({"precision": "bf16-mixed", "target": "cuda", "activation_checkpointing": True},
                  id="bf16-mixed-cuda-checkpointing")],
)
"""Under checkpointing on the cuda target DeepSeek-V3's backward peaks inside a dense block in some copies and
inside an MoE block in others: the case that needs each phase's peak extrapolated place by place. The fp32 CPU
case (no checkpointing, one peak per phase) is the easier one and runs with ``-m slow``: about 110 s of CI's
2-core time; test_scaling.py keeps fp32 extrapolation of identical blocks in every run."""


@pytest.mark.parametrize(("make", "rule"), MIXED)
@OPTIONS
def test_extrapolated_profile_of_mixed_blocks_equals_full_trace(make, rule, options, saved):
    source = saved(make)
    opts = ProfileOptions(batch_size=2, seq_len=32, **options)
    full = profile_source(source, opts, extrapolate=False)
    fast = profile_source(source, opts)  # automatic from AUTO_MIN_LAYERS blocks
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field
    assert fast.extrapolated_from_layers is not None and max(fast.extrapolated_from_layers) < LAYERS
    assert fast.depth is not None and len(fast.depth.traced_counts) == len(fast.extrapolated_from_layers)
    config = make()
    assert sorted(fast.depth.counts) == sorted(
        map(len, _partition([rule(config, i) for i in range(LAYERS)])))


def _qwen3_moe() -> Any:
    return transformers.Qwen3MoeConfig(
        **SMALL, head_dim=8, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=3,
        mlp_only_layers=[1], architectures=["Qwen3MoeForCausalLM"])


def _deepseek_v2() -> Any:
    return transformers.DeepseekV2Config(
        **{**SMALL, "num_key_value_heads": 4}, moe_intermediate_size=16, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, first_k_dense_replace=2, q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=8, n_group=1, topk_group=1, architectures=["DeepseekV2ForCausalLM"])


def _llama4_text() -> Any:
    # MoE every second layer and no RoPE every fourth (interleave_moe_layer_step, no_rope_layers defaults).
    return transformers.Llama4TextConfig(
        **SMALL, head_dim=8, intermediate_size_mlp=64, num_local_experts=4, num_experts_per_tok=1,
        interleave_moe_layer_step=2, attention_chunk_size=16, architectures=["Llama4ForCausalLM"])


def _cohere2() -> Any:
    return transformers.Cohere2Config(**SMALL, sliding_window=16, sliding_window_pattern=4,
                                      architectures=["Cohere2ForCausalLM"])


def _gpt_oss() -> Any:
    return transformers.GptOssConfig(**SMALL, head_dim=8, num_local_experts=4, num_experts_per_tok=2,
                                     sliding_window=16, architectures=["GptOssForCausalLM"])


def _gemma3_text() -> Any:
    return transformers.Gemma3TextConfig(**SMALL, head_dim=8, sliding_window=16,
                                         architectures=["Gemma3ForCausalLM"])


def _nemotron_h() -> Any:
    # Mamba-2, MoE and attention blocks in one stack (layers_block_type).
    return transformers.NemotronHConfig(
        **SMALL, layers_block_type=["mamba", "moe", "mamba", "attention"] * (LAYERS // 4), mamba_num_heads=4,
        mamba_head_dim=16, ssm_state_size=8, n_groups=1, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=16, moe_shared_expert_intermediate_size=16, head_dim=8, chunk_size=16, n_group=1,
        topk_group=1, architectures=["NemotronHForCausalLM"])


def _bamba() -> Any:
    return transformers.BambaConfig(
        **SMALL, attn_layer_indices=[3, 7, 11], mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8,
        mamba_n_groups=1, mamba_chunk_size=16, architectures=["BambaForCausalLM"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "make", [_qwen3_moe, _deepseek_v2, _llama4_text, _cohere2, _gpt_oss, _gemma3_text, _nemotron_h, _bamba],
    ids=lambda make: make.__name__.strip("_"),
)
def test_more_families_with_mixed_blocks_extrapolate_exactly(make, saved):
    source = saved(make)
    opts = ProfileOptions(batch_size=1, seq_len=32, precision="32-true", target="cpu")
    full, fast = profile_source(source, opts, extrapolate=False), profile_source(source, opts)
    assert fast.depth is not None and fast.depth.traced_counts, fast.depth
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field


def test_identical_blocks_extrapolate_from_two_and_three_as_before(saved):
    source = saved(_llama)
    opts = ProfileOptions(batch_size=1, seq_len=32, precision="32-true", target="cpu")
    full, fast = profile_source(source, opts, extrapolate=False), profile_source(source, opts)
    assert fast.extrapolated_from_layers == (2, 3) and fast.depth is None
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field


@pytest.mark.parametrize(
    ("make", "strip_with_layers", "reason"),
    [
        pytest.param(_ernie_moe_every_other_layer, False, "becomes", id="config-rule-not-rewritable"),
        pytest.param(_deepseek_v3, True, "cannot be rebuilt with a chosen mix", id="source-without-with-layers"),
    ],
)
def test_blocks_that_cannot_be_mixed_are_traced_whole_and_the_profile_says_why(make, strip_with_layers, reason,
                                                                                 saved):
    source = saved(make)
    if strip_with_layers:
        source = source.replace(with_layers=None)
    opts = ProfileOptions(batch_size=1, seq_len=32, precision="32-true", target="cpu")
    profile = profile_source(source, opts)
    assert profile.extrapolated_from_layers is None
    assert profile.depth is not None and profile.depth.traced_counts == ()
    assert profile.depth.note.startswith(f"Traced all {LAYERS} blocks: ") and reason in profile.depth.note
    full = profile_source(source, opts, extrapolate=False)
    for field in FIELDS:
        assert getattr(profile, field) == getattr(full, field), field


def test_extrapolation_whose_parameter_count_disagrees_with_the_full_build_traces_every_block():
    # A source whose shallow rebuild changes more than the depth (here the vocabulary): the blocks match, the
    # parameter count of the extrapolation does not.
    real = models.gpt_source(LAYERS, hidden=32, vocab=64, seq=32)
    source = real.replace(with_num_layers=lambda n: models.gpt_source(n, hidden=32, vocab=96, seq=32))
    opts = ProfileOptions(batch_size=1, precision="32-true", target="cpu")
    profile = profile_source(source, opts)
    assert profile.extrapolated_from_layers is None and profile.depth is not None
    assert f"{profile.parameter_count:,}" in profile.depth.note
    assert profile.parameter_count == profile_source(real, opts, extrapolate=False).parameter_count


def _tower_config(name: str, text: int, vision: int) -> Callable[[], Any]:
    """The zoo's tiny ``name`` (benchmarks/zoo_models.py) with towers of ``text`` and ``vision`` blocks."""

    def make() -> Any:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
        import zoo_models

        config = zoo_models.get(name).config("tiny")
        config.text_config.num_hidden_layers, config.vision_config.num_hidden_layers = text, vision
        return config

    make.__name__ = f"{name.replace('-', '_').replace('.', '_')}_{text}_{vision}"
    return make


@pytest.mark.parametrize(
    ("make", "seq_len", "copies"),
    [pytest.param(_deepseek_v3, 16, 3, id="deepseek-v3"),
     pytest.param(_tower_config("clip-vit-l-14", 4, 5), 16, 3, id="clip-towers-4-5"),
     pytest.param(_tower_config("siglip-base", 5, 5), 16, 2, id="siglip-towers-5-5")],
)
@OPTIONS
def test_workload_phase_peaks_at_other_micro_batches_match_the_full_trace(make, seq_len, copies, options, saved):
    source = saved(make)
    fast, full = (step_trace(source, {"seq_len": seq_len, **options}, extrapolate) for extrapolate in (True, False))
    assert len(fast.timelines_2.depths) == copies and fast.timelines_2.depths == fast.timelines_3.depths
    assert_same_at_other_micro_batches(fast, full)


def step_trace(source: ModelSource, options: dict[str, Any], extrapolate: bool) -> StepTrace:
    """The workload's view of one traced mode: micro-batches 1, 2 and 3, their timelines."""
    traced = [profile_with_timelines(source, ProfileOptions(batch_size=b, **options), extrapolate=extrapolate,
                                     count_flops=b == 1) for b in (1, 2, 3)]
    return StepTrace(mode="amp", checkpointing=traced[0][0].options.activation_checkpointing,
                     precision=traced[0][0].options.precision, at_1=traced[0][0], at_2=traced[1][0],
                     timelines_2=traced[1][1], timelines_3=traced[2][1])


def assert_same_at_other_micro_batches(fast: StepTrace, full: StepTrace) -> None:
    """What the strategies read at micro-batches never traced is the same extrapolated as traced whole."""
    # Place by place from the timelines, not the per-phase fallback (StepTrace._affine).
    assert all(fast.timelines_2.located(fast.timelines_3, b - 1) is not None for b in (4, 7))
    for micro_batch in (1, 4, 7):
        assert fast.phases(micro_batch) == full.phases(micro_batch)
        for phase in fast.phases(micro_batch):
            assert fast.activation_bytes(phase, micro_batch) == full.activation_bytes(phase, micro_batch)
        assert fast.block_activation_bytes(micro_batch) == full.block_activation_bytes(micro_batch)


def test_each_phase_keeps_its_peak_inside_every_block_forward_and_backward(saved):
    # Without checkpointing backward runs no block's forward: its events are placed by the module whose
    # backward runs (MemoryTracker.block).
    source = saved(_deepseek_v3)
    _, phases, timeline = trace_timeline(source, ProfileOptions(batch_size=1, seq_len=16, precision="32-true",
                                                                target="cpu"), count_flops=False, record=True)
    # Outside every block: "" before the phase's first block, "@name" after block name (MemoryTracker.place).
    blocks = {f"model.layers.{i}" for i in range(LAYERS)}
    for phase in ("forward", "backward"):
        peak = phases[phase]
        inside = {place for place in peak.within if not place.startswith("@")}
        after = {place[1:] for place in peak.within if place.startswith("@")}
        assert inside == blocks | {""} and after and after <= blocks, phase
        assert max(peak.within.values(), key=lambda s: s.total_bytes).total_bytes == peak.total_bytes
        assert any(s is peak for s in peak.within.values())
        names = {timeline.block_names[i] for i in timeline.blocks[phase].tolist()}
        assert names == set(peak.within), phase
    assert set(phases["optimizer"].within) == {""}


def test_copies_whose_peak_cannot_be_extrapolated_place_by_place_are_traced_whole(saved, monkeypatch):
    source = saved(_deepseek_v3)
    reason = "the backward peak of the copy of 4 blocks is in block 4, which the other copies do not have"
    monkeypatch.setattr(scaling, "_phase_peak", lambda *args: reason)
    opts = ProfileOptions(batch_size=1, seq_len=16, precision="32-true", target="cpu")
    profile = profile_source(source, opts)
    assert profile.extrapolated_from_layers is None and profile.depth is not None
    assert profile.depth.note == f"Traced all {LAYERS} blocks: {reason}."
    full = profile_source(source, opts, extrapolate=False)
    for field in FIELDS:
        assert getattr(profile, field) == getattr(full, field), field


def test_deepseek_v3_at_published_size_has_the_parameter_count_of_its_full_build(saved):
    def published() -> Any:
        return transformers.DeepseekV3Config(architectures=["DeepseekV3ForCausalLM"])  # defaults: DeepSeek-V3

    source = saved(published)
    with torch.device("meta"):
        built = sum(p.numel() for p in source.build().parameters())
    profile = profile_source(source, ProfileOptions(batch_size=1, seq_len=128), count_flops=False)
    assert profile.parameter_count == built
    config = published()
    assert profile.depth is not None and profile.depth.counts == (
        config.first_k_dense_replace, config.num_hidden_layers - config.first_k_dense_replace)
    # DeepSeek-V3 Technical Report (arXiv:2412.19437), abstract: "671B total parameters"; the Hub checkpoint's
    # 685B adds the multi-token-prediction module, which transformers does not build.
    assert round(built / 1e9) == 671


def test_profile_command_says_which_kinds_it_traced(saved, capsys):
    source = saved(_deepseek_v3)
    args = ["profile", source.origin, "--seq-len", "16", "--precision", "32-true", "--target", "cpu"]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Blocks of 2 kinds:" in out and "DeepseekV3MoE] × 9" in out and "solved for each kind's cost" in out


@pytest.mark.parametrize(
    ("name", "text", "vision", "copies"),
    [("clip-vit-l-14", 4, 5, 3), ("siglip-base", 4, 5, 3), ("siglip-base", 5, 5, 2), ("llava-1.5-7b", 4, 5, 2),
     ("llava-1.5-7b", 5, 5, 3)],
)
@OPTIONS
def test_composite_configs_extrapolate_tower_by_tower_exactly(name, text, vision, copies, options, saved):
    # Text and vision towers in two sub-configs; LLaVA's vision_feature_layer=-2 leaves the last vision block
    # unused, and every copy keeps it and the last that runs. Towers with as many blocks more than the
    # reference copy keeps grow together, in one copy (LLaVA 4 + 5: 2 more of each).
    source = saved(_tower_config(name, text, vision))
    assert source.num_layers == text + vision
    opts = ProfileOptions(batch_size=2, seq_len=32 if name.startswith("llava") else 16, **options)
    full = profile_source(source, opts, extrapolate=False)
    fast = profile_source(source, opts, extrapolate=True)
    assert fast.extrapolated_from_layers is not None and max(fast.extrapolated_from_layers) < text + vision
    assert len(fast.extrapolated_from_layers) == copies
    assert fast.depth is not None and sorted(fast.depth.counts) == sorted([text, vision])
    for field in (*FIELDS, "unused_parameter_count", "unused_parameter_bytes", "unused_modules"):
        assert getattr(fast, field) == getattr(full, field), field
    if name.startswith("llava"):
        assert full.unused_parameter_count > 0


def _t5gemma() -> Any:
    # Encoder and decoder are two sub-configs of one class (T5GemmaModuleConfig), each alternating sliding and
    # full attention (layer_types): 4 kinds of block in 2 towers.
    module = {**SMALL, "num_hidden_layers": 7, "head_dim": 8, "sliding_window": 8}
    return transformers.T5GemmaConfig(encoder=module, decoder=module, vocab_size=128,
                                      architectures=["T5GemmaForConditionalGeneration"])


@OPTIONS
def test_towers_built_from_sub_configs_of_one_class_extrapolate_exactly(options, saved):
    # T5Gemma's towers hold the very sub-config objects they were built from: found by identity, not by class.
    source = saved(_t5gemma)
    assert source.num_layers == 14
    opts = ProfileOptions(batch_size=2, seq_len=16, **options)
    full = profile_source(source, opts, extrapolate=False)
    fast = profile_source(source, opts, extrapolate=True)
    assert fast.extrapolated_from_layers is not None and max(fast.extrapolated_from_layers) < 14
    assert fast.depth is not None and len(fast.depth.kinds) == 4 and sum(fast.depth.counts) == 14
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field
    # Each block's backward is its own: twice its forward, three times under checkpointing (its recomputation),
    # although every decoder block reads the encoder's output, whose gradient is whole only after the last one.
    times = 3 if opts.activation_checkpointing else 2
    assert [b.backward_flops for b in full.blocks] == [times * b.forward_flops for b in full.blocks]


def _minimax() -> Any:
    # Lightning (linear) attention blocks keep the model's depth as an attribute (num_hidden_layers, for their
    # decay rates), which full-attention blocks lack: a copy's blocks must still be of the full model's kinds.
    return transformers.MiniMaxConfig(**SMALL, head_dim=8, num_local_experts=4, num_experts_per_tok=2,
                                      block_size=8, architectures=["MiniMaxForCausalLM"])


def test_an_attribute_only_some_blocks_have_tells_kinds_apart_by_presence(saved):
    source = saved(_minimax)
    opts = ProfileOptions(batch_size=1, seq_len=32, precision="32-true", target="cpu")
    full, fast = profile_source(source, opts, extrapolate=False), profile_source(source, opts)
    assert fast.depth is not None and fast.depth.traced_counts and len(fast.depth.kinds) == 2, fast.depth
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field
