"""Attention whose value head dim differs from the query/key one (DeepSeek-V2/V3 multi-head latent attention).

The CPU flash kernel needs one head dim for q, k and v, so a CPU trace of such a call runs the math path and
saves ``s x s`` attention weights per head. A CUDA GPU runs the memory-efficient kernel (``sdp_utils.cpp``:
``check_head_dim_size_flash`` refuses the call, ``check_head_dim_size_mem_efficient`` only needs q and k to
agree), which saves the output and a logsumexp. Target ``"cuda"`` must follow the GPU, target ``"cpu"`` the CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import autoshard
from autoshard.profiler.cuda_semantics import CudaSemantics

transformers = pytest.importorskip("transformers")

BF16 = torch.bfloat16
B, H, S, D_QK, D_V = 2, 4, 256, 24, 16


class _OpLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _saved(fn: Any) -> tuple[list[torch.Tensor], torch.Tensor]:
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return saved, out


def _per_head_attention_matrices(saved: list[torch.Tensor]) -> int:
    """Distinct saved storages big enough to hold an ``s x s`` matrix for every head (a mask has one per batch)."""
    per_head = B * H * S * S
    return len({t.untyped_storage()._cdata for t in saved
                if t.dim() >= 2 and tuple(t.shape[-2:]) == (S, S)
                and t.untyped_storage().nbytes() >= per_head * t.element_size()})


def _mask(kind: str) -> dict[str, Any]:
    if kind == "causal":
        return {"is_causal": True}
    if kind == "bool":  # transformers' sdpa_mask with padding: (b, 1, s, s) bool
        return {"attn_mask": torch.ones(B, 1, S, S, dtype=torch.bool).tril()}
    return {"attn_mask": torch.zeros(S, S, dtype=BF16)}  # an additive float mask


@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
@pytest.mark.parametrize("mask", ["causal", "bool", "float"])
def test_unequal_head_dims_run_efficient_attention_and_save_no_per_head_seq_by_seq_tensor(mask, dropout_p):
    with FakeTensorMode():
        q, k = (torch.randn(B, H, S, D_QK, dtype=BF16, requires_grad=True) for _ in "qk")
        v = torch.randn(B, H, S, D_V, dtype=BF16, requires_grad=True)
        kwargs = {**_mask(mask), "dropout_p": dropout_p}
        attention = lambda: F.scaled_dot_product_attention(q, k, v, **kwargs)  # noqa: E731
        on_cpu, _ = _saved(attention)
        assert _per_head_attention_matrices(on_cpu) >= 1  # the CPU math path
        with CudaSemantics(), _OpLog() as log:
            saved, out = _saved(attention)
            out.sum().backward()
    assert _per_head_attention_matrices(saved) == 0
    assert "aten._scaled_dot_product_efficient_attention.default" in log.ops
    assert "aten._scaled_dot_product_efficient_attention_backward.default" in log.ops
    assert not any("bmm" in op or "flash" in op for op in log.ops)
    assert out.shape == (B, H, S, D_V) and q.grad.shape == q.shape and v.grad.shape == v.shape
    # The kernel's own tensors: output (b, h, s, d_v) and a fp32 logsumexp padded to 32 rows (meta kernel).
    assert any(t.shape == (B, H, S) and t.dtype == torch.float32 for t in saved)


@pytest.mark.parametrize(
    ("shapes", "kwargs"),
    [
        (((B, H, S, D_QK), (B, H, S, D_QK), (B, H, S, D_QK)), {}),  # equal: the CPU flash kernel stands in
        (((B, H, S, 20), (B, H, S, 20), (B, H, S, D_V)), {}),  # d_qk not a multiple of 8 (16-bit)
        (((B, H, S, D_QK), (B, 2, S, D_QK), (B, 2, S, D_V)), {"enable_gqa": True}),  # GQA: math path
    ],
    ids=["equal-head-dims", "unaligned-head-dim", "gqa"],
)
def test_calls_the_efficient_kernel_would_not_take_keep_their_path(shapes, kwargs):
    with FakeTensorMode():
        q, k, v = (torch.randn(*shape, dtype=BF16, requires_grad=True) for shape in shapes)
        with CudaSemantics(), _OpLog() as log:
            F.scaled_dot_product_attention(q, k, v, is_causal=True, **kwargs)
    assert not any("efficient_attention" in op for op in log.ops)


def test_real_cpu_tensors_keep_the_math_path_and_its_result():
    # The efficient-attention op has no CPU kernel: real tensors take CPU's own path.
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 16, D_QK), torch.randn(1, 2, 16, D_QK), torch.randn(1, 2, 16, D_V)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with CudaSemantics():
        assert torch.allclose(F.scaled_dot_product_attention(q, k, v, is_causal=True), expected)


# --- a DeepSeek-V3 model through autoshard.profile ---------------------------------------------------------

LAYERS, HIDDEN, VOCAB = 2, 64, 1000


def _deepseek_v3(qk_nope_head_dim: int, v_head_dim: int) -> Any:
    # Every layer dense (first_k_dense_replace = layers): the FLOPs are every linear weight, as in PaLM's 6·N·T.
    return transformers.DeepseekV3Config(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=H, num_key_value_heads=H,
        vocab_size=VOCAB, intermediate_size=128, first_k_dense_replace=LAYERS, n_routed_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, n_group=1, topk_group=1, q_lora_rank=32,
        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=qk_nope_head_dim, v_head_dim=v_head_dim,
        architectures=["DeepseekV3ForCausalLM"])


MLA = dict(qk_nope_head_dim=16, v_head_dim=16)  # d_qk 24, d_v 16, as DeepSeek-V3's 192 / 128
EQUAL = dict(qk_nope_head_dim=8, v_head_dim=16)  # d_qk 16 = d_v: the CPU flash kernel runs


def _profile(config: Any, tmp_path: Path, target: str) -> autoshard.ModelProfile:
    path = tmp_path / f"{config.qk_nope_head_dim}-{target}"
    config.save_pretrained(path)
    return autoshard.profile(path, batch_size=1, seq_len=S, target=target, extrapolate=False)


def _linear_weights(config: Any) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def _activation_bytes(p: autoshard.ModelProfile) -> list[int]:
    return [block.activation_bytes for block in p.blocks]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], autoshard.ModelProfile]:
    tmp = tmp_path_factory.mktemp("mla")
    return {(name, target): _profile(_deepseek_v3(**dims), tmp, target)
            for name, dims in (("mla", MLA), ("equal", EQUAL)) for target in ("cuda", "cpu")}


def test_mla_activations_on_cuda_hold_no_attention_matrix_per_head(profiles):
    # bf16-mixed: one (s x s) bf16 matrix per head and sequence is the least the math path keeps per layer.
    matrix_bytes = H * S * S * 2
    mla, equal = _activation_bytes(profiles["mla", "cuda"]), _activation_bytes(profiles["equal", "cuda"])
    assert len(mla) == LAYERS
    # The two models differ only in q/k head dim (24 vs 16): a few (s, h·8) tensors, far below one matrix.
    assert all(abs(m - e) < matrix_bytes / 4 for m, e in zip(mla, equal))
    # Target "cpu" keeps the CPU math path for MLA (what a CPU run does): at least one matrix more per layer.
    mla_cpu, equal_cpu = _activation_bytes(profiles["mla", "cpu"]), _activation_bytes(profiles["equal", "cpu"])
    assert all(m - e >= matrix_bytes for m, e in zip(mla_cpu, equal_cpu))


def test_mla_flops_on_cuda_are_the_linears_and_the_efficient_kernels_formulas(profiles):
    config = _deepseek_v3(**MLA)
    d_qk, d_v = config.qk_nope_head_dim + config.qk_rope_head_dim, config.v_head_dim
    tokens, linears = S, _linear_weights(config)
    # torch/utils/flop_counter.py (torch 2.13): sdpa_flop_count is QKᵀ + AV over the full s x s (not halved for
    # causal); sdpa_backward_flop_count recomputes QKᵀ, then dP = dO·Vᵀ, dV, dQ, dK.
    forward_attention = LAYERS * 2 * H * S * S * (d_qk + d_v)
    backward_attention = LAYERS * 2 * H * S * S * (3 * d_qk + 2 * d_v)
    p = profiles["mla", "cuda"]
    assert p.forward_flops == 2 * linears * tokens + forward_attention
    assert p.backward_flops == 4 * linears * tokens + backward_attention
    # Target "cpu" counts the math path's bmm calls: backward 2 x forward, no recomputation.
    cpu = profiles["mla", "cpu"]
    assert cpu.forward_flops == p.forward_flops
    assert cpu.backward_flops == 4 * linears * tokens + 2 * forward_attention
