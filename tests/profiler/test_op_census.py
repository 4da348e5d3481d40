"""The op census: its matmul FLOPs are the FLOP counter's, shapes land in their class, and depth
extrapolation reproduces the full trace's census."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from autoshard.profiler import flops
from autoshard.profiler.op_census import CensusCounter, MatmulClass, MemoryClass, OpCensus
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import profile_source
from autoshard.profiler.trace import trace
from tests.profiler import models


@pytest.mark.parametrize("source", [models.gpt_source(2), models.cnn_source(), models.mlp_source()],
                         ids=["gpt", "cnn", "mlp"])
def test_census_matmul_flops_equal_the_flop_counter_total(source):
    profile = trace(source, ProfileOptions(batch_size=2, target="cpu"))
    assert profile.census is not None
    assert profile.census.matmul_flops == profile.forward_flops + profile.backward_flops > 0
    assert profile.census.memory_bytes > 0 and profile.census.kernels > len(profile.census.matmuls)


def test_cnn_convolutions_are_filed_as_conv():
    profile = trace(models.cnn_source(), ProfileOptions(batch_size=2, target="cpu"))
    assert profile.census is not None
    assert {m.kind for m in profile.census.matmuls} == {"conv", "gemm"}


def test_a_known_matmul_lands_in_its_shape_class_with_its_bytes():
    with FakeTensorMode(), flops.counter(census=True) as counter:
        a = torch.empty(96, 512, dtype=torch.bfloat16)
        b = torch.empty(512, 2048, dtype=torch.bfloat16)
        out = a @ b
        out.t()  # a view: no kernel
        out + out  # memory-bound: reads two, writes one
    assert isinstance(counter, CensusCounter)
    census = counter.census()
    assert census.matmuls == (MatmulClass(kind="gemm", dtype="bf16", min_dim=64, flops=2 * 96 * 512 * 2048,
                                          bytes=2 * (96 * 512 + 512 * 2048 + 96 * 2048), kernels=1),)
    assert census.memory == (MemoryClass(size_bytes=1 << 20, bytes=3 * 2 * 96 * 2048, kernels=1),)
    assert census.kernels == 2


def test_combine_weights_every_class_like_the_flops():
    two = OpCensus(matmuls=(MatmulClass(kind="gemm", dtype="bf16", min_dim=64, flops=20, bytes=8, kernels=2),),
                   memory=(MemoryClass(size_bytes=1024, bytes=2048, kernels=2),))
    three = OpCensus(matmuls=(MatmulClass(kind="gemm", dtype="bf16", min_dim=64, flops=30, bytes=12, kernels=3),
                              MatmulClass(kind="attention", dtype="bf16", min_dim=64, flops=5, bytes=1, kernels=1)),
                     memory=(MemoryClass(size_bytes=1024, bytes=3072, kernels=3),))
    at_10 = OpCensus.combine((3 - 10, 10 - 2), (two, three))  # copy2 + 7 · (copy3 - copy2)
    assert at_10.matmuls[1] == MatmulClass(kind="gemm", dtype="bf16", min_dim=64, flops=100, bytes=40, kernels=10)
    assert at_10.matmuls[0].kind == "attention" and at_10.matmuls[0].kernels == 8
    assert at_10.memory == (MemoryClass(size_bytes=1024, bytes=10240, kernels=10),)


def test_extrapolated_census_equals_the_full_trace():
    source = models.gpt_source(6)
    opts = ProfileOptions(batch_size=2, target="cpu")
    full, fast = trace(source, opts), profile_source(source, opts, extrapolate=True)
    assert fast.extrapolated_from_layers == (2, 3)
    assert fast.census == full.census
    assert fast.census is not None and fast.census.matmul_flops == fast.forward_flops + fast.backward_flops


def test_no_census_without_flop_counting():
    profile = trace(models.mlp_source(), ProfileOptions(batch_size=2, target="cpu"))
    uncounted = profile_source(models.mlp_source(), ProfileOptions(batch_size=2, target="cpu"), count_flops=False)
    assert profile.census is not None and uncounted.census is None
    assert profile.to_dict()["census"]["matmul_flops"] == profile.census.matmul_flops


def test_a_grouped_matmul_is_classed_by_the_rows_each_expert_gets():
    from autoshard.profiler import fake_ops

    with fake_ops.installed(), FakeTensorMode(), flops.counter(census=True) as counter:
        tokens = torch.empty(64, 128, dtype=torch.bfloat16)
        experts = torch.empty(4, 128, 256, dtype=torch.bfloat16)
        torch._grouped_mm(tokens, experts, offs=torch.tensor([16, 32, 48, 64], dtype=torch.int32))
    assert isinstance(counter, CensusCounter)
    (grouped,) = counter.census().matmuls
    assert (grouped.kind, grouped.min_dim, grouped.flops) == ("grouped", 16, 2 * 64 * 128 * 256)


def test_an_in_place_op_that_returns_nothing_counts_its_writes():
    """``_foreach_mul_`` returns nothing: its traffic is its list read and written back, as ``mul_``'s is."""
    with FakeTensorMode():
        xs = [torch.empty(1000), torch.empty(3000)]
        with flops.counter(census=True) as single:
            for x in xs:
                x.mul_(0.5)
        with flops.counter(census=True) as foreach:
            torch._foreach_mul_(xs, 0.5)
    assert isinstance(single, CensusCounter) and isinstance(foreach, CensusCounter)
    assert single.census().memory_bytes == foreach.census().memory_bytes == 2 * 4 * 4000
    assert (single.census().kernels, foreach.census().kernels) == (2, 1)


@pytest.mark.parametrize(("impl", "per_parameter"), [("foreach", 84), ("for-loop", 84), ("fused", 32)])
def test_the_optimizer_step_census_is_its_traffic_per_parameter(impl, per_parameter):
    """AdamW on fp32 parameters: torch's foreach and for-loop steps read and write 84 bytes per parameter (decay,
    both moments, the denominator's temporaries, the update); the fused kernel reads four tensors and writes three
    (28), plus the gradients its schema marks as written (4). Depth extrapolation keeps it exact."""
    source = models.gpt_source(4)
    options = ProfileOptions(batch_size=1, target="cpu", precision="32-true", optimizer_impl=impl)
    full = trace(source, options)
    assert full.optimizer_census is not None and full.optimizer_census.matmuls == ()
    assert full.optimizer_census.memory_bytes == pytest.approx(per_parameter * full.trainable_parameter_count,
                                                               rel=1e-3)
    extrapolated = profile_source(source, options, extrapolate=True)
    assert extrapolated.extrapolated_from_layers
    assert extrapolated.optimizer_census == full.optimizer_census
    assert profile_source(source, options, count_flops=False).optimizer_census is None


def _decoder_config(tmp_path, model_type: str):
    import transformers

    config = transformers.AutoConfig.for_model(model_type, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                               num_attention_heads=4, vocab_size=512, max_position_embeddings=2048)
    config.architectures = [{"llama": "LlamaForCausalLM", "bert": "BertForMaskedLM"}[model_type]]
    config.save_pretrained(tmp_path / model_type)
    return str(tmp_path / model_type)


@pytest.mark.parametrize(("model_type", "seq_len", "computed"), [("llama", 1024, 0.5625), ("bert", 512, 1.0)])
def test_a_causal_attention_kernel_computes_the_tiles_up_to_the_diagonal(tmp_path, model_type, seq_len, computed):
    """Llama's SDPA runs causal (the fused kernels skip the score tiles above the diagonal, forward and backward);
    BERT's does not. Its FLOPs stay the full count, as torch's formulas and MFU figures have them."""
    import autoshard
    from autoshard.profiler.op_census import causal_work_fraction

    profile = autoshard.profile(_decoder_config(tmp_path, model_type), batch_size=2, seq_len=seq_len,
                                precision="bf16-mixed", target="cuda")
    assert profile.census is not None
    (attention,) = [m for m in profile.census.matmuls if m.kind == "attention"]
    assert attention.kernels == 4  # two layers, forward and backward
    assert attention.priced_flops == round(attention.flops * computed)
    assert causal_work_fraction(seq_len, seq_len) == computed or model_type == "bert"
    assert profile.census.matmul_flops == profile.forward_flops + profile.backward_flops


def test_causal_fraction_counts_whole_tiles_top_left_aligned():
    from autoshard.profiler.op_census import causal_work_fraction

    assert causal_work_fraction(128, 128) == 1.0  # one tile, the diagonal's
    assert causal_work_fraction(256, 256) == 0.75  # three of four
    assert causal_work_fraction(256, 512) == 3 / 8  # queries see the first keys only (torch's is_causal)
    assert causal_work_fraction(2**16, 2**16) == pytest.approx(0.5, abs=0.001)
