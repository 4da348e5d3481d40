"""Grouped-query attention traced as it runs: transformers' decoders without an explicit mask, and CUDA's math
path for fp32 (no fused CUDA kernel takes grouped-query attention in fp32).

Ground truth: the real CPU step of transformers' own Mistral and Llama, measured by PyTorch's CPU allocator
(``benchmarks/memory_accuracy.py``'s ``measure_peak``); for the CUDA math path, the same step with the math kernel
forced on the CPU (``sdpa_kernel(SDPBackend.MATH)``: the one composite CPU and CUDA share).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel

import autoshard
from autoshard.profiler import hf_masks
from autoshard.profiler.cuda_attention import runs_math_attention
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.trace import trace
from tests.benchmark_scripts import load

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("memory_accuracy")


def _decoder(tmp_path: Path, model_type: str, kv_heads: int) -> autoshard.ModelSource:
    config = {"model_type": model_type, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 8,
              "num_key_value_heads": kv_heads, "num_hidden_layers": 2, "vocab_size": 256,
              "max_position_embeddings": 512}
    if model_type == "mistral":
        config["sliding_window"] = None
    (tmp_path / "config.json").write_text(json.dumps(config))
    return autoshard.load_source(str(tmp_path / "config.json"))


def _qkv(dtype: torch.dtype, kv_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.empty(2, 8, 64, 32, dtype=dtype)
    k, v = (torch.empty(2, kv_heads, 64, 32, dtype=dtype) for _ in "kv")
    return q, k, v


@pytest.mark.parametrize(("dtype", "kv_heads", "enable_gqa", "math"), [
    (torch.float32, 2, True, True),      # the memory-efficient kernel needs equal heads; flash and cuDNN 16-bit
    (torch.bfloat16, 2, True, False),    # flash / cuDNN take it
    (torch.float16, 2, True, False),
    (torch.float32, 8, True, False),     # equal heads: memory-efficient
    (torch.float32, 8, False, False),
])
def test_cuda_runs_the_math_path_for_fp32_grouped_query_attention_only(dtype, kv_heads, enable_gqa, math) -> None:
    assert runs_math_attention(*_qkv(dtype, kv_heads), enable_gqa) is math


@pytest.mark.parametrize("model_type", ["mistral", "llama"])
@pytest.mark.parametrize("kv_heads", [2, 8])
def test_transformers_decoder_trace_equals_the_real_cpu_step(tmp_path, bench, model_type, kv_heads) -> None:
    """Before hf_masks, the trace built a (b, 1, s, s) mask and repeated the key / value heads, which the real run
    does not: +19 % on the grouped-query Mistral, +13 % with equal heads."""
    source = _decoder(tmp_path, model_type, kv_heads)
    options = ProfileOptions(batch_size=2, seq_len=256, precision="32-true", target="cpu")
    predicted = trace(source, options, fake=True).peak_bytes
    torch.manual_seed(0)
    measured = bench.measure_peak(source, options, torch.device("cpu"))
    assert predicted == pytest.approx(measured["allocated"], rel=0.02)


def test_fp32_grouped_query_attention_for_cuda_is_the_math_path(tmp_path, bench) -> None:
    """What a CUDA GPU allocates for it: the math composite, as the CPU runs it when made to."""
    source = _decoder(tmp_path, "mistral", 2)
    cuda = trace(source, ProfileOptions(batch_size=2, seq_len=256, precision="32-true", target="cuda"), fake=True)
    in_allocator = sum(o.bytes for o in cuda.overheads if o.in_allocator)  # the cuBLAS workspaces
    torch.manual_seed(0)
    with sdpa_kernel(SDPBackend.MATH):
        math = bench.measure_peak(source, ProfileOptions(batch_size=2, seq_len=256, precision="32-true",
                                                         target="cpu"), torch.device("cpu"))
    fused = trace(source, ProfileOptions(batch_size=2, seq_len=256, precision="32-true", target="cpu"), fake=True)
    assert cuda.peak_bytes - in_allocator == pytest.approx(math["allocated"], rel=0.02)
    assert math["allocated"] > 2 * fused.peak_bytes  # the per-head s x s probabilities: not a rounding


def test_as_run_reads_fake_positions_as_unpacked_and_restores_transformers() -> None:
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    with FakeTensorMode():
        positions = torch.arange(8).repeat(2, 1)
        assert original(positions) is not None  # transformers cannot read a fake tensor: "maybe packed"
        with hf_masks.as_run({"input_ids": positions}):
            assert masking_utils.find_packed_sequence_indices(positions) is None
        with hf_masks.as_run({"input_ids": positions, "position_ids": positions}):  # packed by the user: as is
            assert masking_utils.find_packed_sequence_indices is original
        with hf_masks.as_run(transformers.BatchEncoding({"input_ids": positions, "position_ids": positions})):
            assert masking_utils.find_packed_sequence_indices is original
    assert masking_utils.find_packed_sequence_indices is original
    real = torch.tensor([[0, 1, 2, 0, 1, 2]])
    with hf_masks.as_run():
        assert masking_utils.find_packed_sequence_indices(real).tolist() == [[0, 0, 0, 1, 1, 1]]
