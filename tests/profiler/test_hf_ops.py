"""The profiler on Hugging Face models: bf16-true casting, routed experts (``_grouped_mm``), attention FLOPs,
loss computed inside forward, and the errors a trace gives when it cannot go on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import autoshard
from autoshard.errors import ProfileError
from autoshard.models.source import ModelSource
from autoshard.profiler import fake_ops, flops
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.precision_cast import cast_floating_tensors, fake_module_conversions
from autoshard.profiler.trace import trace_timeline
from autoshard.strategies.registry import names as strategy_names

transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000)
BATCH, SEQ = 2, 32
PRECISIONS = ("bf16-mixed", "bf16-true", "32-true", "16-mixed")


def _llama() -> Any:
    return transformers.LlamaConfig(**TINY, intermediate_size=128, num_key_value_heads=2,
                                    architectures=["LlamaForCausalLM"])


def _gemma2() -> Any:
    # Tied embeddings (tie_word_embeddings defaults to True) and a fp32 embedding-scale buffer.
    return transformers.Gemma2Config(**TINY, intermediate_size=128, num_key_value_heads=2, head_dim=16,
                                     architectures=["Gemma2ForCausalLM"])


def _mixtral() -> Any:
    return transformers.MixtralConfig(**TINY, intermediate_size=128, num_key_value_heads=2,
                                      num_local_experts=4, num_experts_per_tok=2,
                                      architectures=["MixtralForCausalLM"])


def _qwen2_moe() -> Any:
    return transformers.Qwen2MoeConfig(**TINY, intermediate_size=128, num_key_value_heads=2, num_experts=4,
                                       num_experts_per_tok=2, moe_intermediate_size=32,
                                       shared_expert_intermediate_size=64,
                                       architectures=["Qwen2MoeForCausalLM"])


def _deepseek_v3() -> Any:
    # qk_nope + qk_rope = v_head_dim: the CPU flash kernel runs (it needs one head dim for q, k and v).
    return transformers.DeepseekV3Config(**TINY, intermediate_size=128, num_key_value_heads=4,
                                         n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                         n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1,
                                         q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                                         qk_nope_head_dim=8, v_head_dim=16,
                                         architectures=["DeepseekV3ForCausalLM"])


def _opt() -> Any:
    return transformers.OPTConfig(**TINY, ffn_dim=128, word_embed_proj_dim=64,
                                  architectures=["OPTForCausalLM"])


def _saved(config: Any, tmp_path: Path) -> Path:
    config.save_pretrained(tmp_path)
    return tmp_path


def _profile(config: Any, tmp_path: Path, precision: str, target: str = "cuda") -> autoshard.ModelProfile:
    return autoshard.profile(_saved(config, tmp_path), batch_size=BATCH, seq_len=SEQ, precision=precision,
                             target=target, extrapolate=False)


# -- bf16-true -----------------------------------------------------------------------------------------------


def _meta_build(config: Any, dtype: torch.dtype) -> nn.Module:
    cls = getattr(transformers, config.architectures[0])
    with torch.device("meta"):
        return cls._from_config(config, dtype=dtype)


@pytest.mark.parametrize("make", [_llama, _gemma2], ids=["llama", "gemma2-tied"])
def test_bf16_true_profile_counts_the_bf16_meta_build_all_in_bf16(make, tmp_path):
    config = make()
    meta = _meta_build(config, torch.bfloat16)
    unique = {id(p): p for p in meta.parameters()}
    floating_buffers = [b for b in meta.buffers() if b.is_floating_point()]
    assert any(b.dtype == torch.float32 for b in floating_buffers)  # RoPE inv_freq: the case that failed
    p = _profile(config, tmp_path, "bf16-true")
    assert p.parameter_count == sum(t.numel() for t in unique.values())
    assert p.parameter_bytes == 2 * p.parameter_count  # every parameter bf16, tied ones once
    assert p.buffer_bytes == sum(2 * b.numel() if b.is_floating_point() else b.nbytes for b in meta.buffers())


def test_casting_keeps_ties_requires_grad_and_integer_buffers_under_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        model = transformers.Gemma2ForCausalLM._from_config(_gemma2())
        model.model.layers[0].mlp.up_proj.weight.requires_grad_(False)
        model.register_buffer("step", torch.zeros((), dtype=torch.int64))
        cast_floating_tensors(model, torch.bfloat16)
        assert model.lm_head.weight is model.model.embed_tokens.weight
        assert all(t.dtype == torch.bfloat16 for t in model.parameters())
        assert all(b.dtype == torch.bfloat16 for b in model.buffers() if b.is_floating_point())
        assert model.step.dtype == torch.int64
        assert not model.model.layers[0].mlp.up_proj.weight.requires_grad
        assert all(isinstance(p, nn.Parameter) for p in model.parameters())


def test_module_conversions_in_a_constructor_work_on_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    original = nn.Module._apply
    with FakeTensorMode(), fake_module_conversions():
        norm = nn.LayerNorm(4)
        weight = norm.weight
        assert norm.to(dtype=torch.float32).weight is weight  # nothing to convert: the same parameter
        frozen = nn.Linear(4, 4)
        frozen.bias.requires_grad_(False)
        frozen.register_buffer("scale", torch.ones(4))
        frozen.half()
        assert {t.dtype for t in (*frozen.parameters(), *frozen.buffers())} == {torch.float16}
        assert isinstance(frozen.bias, nn.Parameter) and not frozen.bias.requires_grad
    assert nn.Module._apply is original  # restored


def test_a_model_whose_constructor_calls_module_to_profiles(tmp_path):
    # transformers' DeepSeek-V4 builds its attention norms with `.to(dtype=torch.float32)`: under the fake build
    # torch refused to swap their weights ("Couldn't swap DeepseekV4RMSNorm.weight"), and autoshard blamed the
    # config.json.
    kinds = ["heavily_compressed_attention", "compressed_sparse_attention"] * 2
    config = transformers.DeepseekV4Config(
        vocab_size=1000, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        head_dim=32, q_lora_rank=32, o_lora_rank=32, o_groups=2, n_routed_experts=4, num_experts_per_tok=2,
        index_n_heads=2, index_head_dim=16, index_topk=8, qk_rope_head_dim=8, sliding_window=8,
        layer_types=kinds, mlp_layer_types=["hash_moe", "moe", "moe", "moe"], max_position_embeddings=256)
    config.architectures = ["DeepseekV4ForCausalLM"]
    with torch.device("meta"):
        expected = sum(p.numel() for p in transformers.DeepseekV4ForCausalLM(config).parameters())
    for precision in ("32-true", "bf16-true"):
        p = _profile(config, tmp_path / precision, precision)
        assert p.parameter_count == expected and p.peak_bytes > p.parameter_bytes


TRUNC_NORMAL_FILE = """
import torch
from torch import nn
from torch.nn.init import trunc_normal_


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)
        nn.init.trunc_normal_(self.a.weight, std=0.02)  # torchvision's ViT, ConvNeXt, Swin
        trunc_normal_(self.b.weight, std=0.02, a=-0.01, b=0.01)  # the narrow bounds take the other sampler

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def model():
    return Net()


def batch(batch_size):
    return torch.randn(batch_size, 16)
"""


def test_a_constructor_that_samples_a_truncated_normal_profiles(tmp_path):
    # torch 2.13's nn.init.trunc_normal_ asks its fake samples `mask.any()`: torchvision's ViT-B/16, ConvNeXt-T and
    # Swin-T could not be built from a model file ("model() raised DataDependentOutputException").
    path = tmp_path / "model.py"
    path.write_text(TRUNC_NORMAL_FILE)
    p = autoshard.profile(str(path), batch_size=4, target="cpu")
    assert p.parameter_count == 16 * 32 + 32 + 32 * 4 + 4
    assert torch.nn.init._no_grad_trunc_normal_.__module__ == "torch.nn.init"  # restored
    weight = torch.nn.init.trunc_normal_(torch.empty(1000), std=1.0, a=-0.5, b=0.5)  # real tensors still sampled
    assert weight.abs().max() <= 0.5 and weight.std() > 0.1


# -- loss inside forward -------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [_opt, _llama], ids=["opt", "llama"])
def test_loss_inside_forward_is_planned_by_every_strategy(make, tmp_path):
    path = _saved(make(), tmp_path)
    profile = autoshard.profile(path, batch_size=1, seq_len=16, precision="32-true", extrapolate=False)
    # The model returns its loss: the loss phase allocates nothing, so the trace has none (it raised
    # KeyError in the ZeRO memory model).
    assert "loss" not in dict(profile.phase_peaks)
    plan = autoshard.recommend(path, hardware="dgx-h100", precision="32-true", batch_size=1, seq_len=16)
    estimated = {e.strategy for e in plan.candidates if e.memory is not None and e.memory.gpu.total > 0}
    assert estimated >= set(strategy_names()) - {"fsdp_hybrid"}  # hybrid sharding needs more than one node


# -- routed experts (_grouped_mm) ----------------------------------------------------------------------------


_Operands = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


def _grouped_mm_cases(dtype: torch.dtype) -> dict[str, _Operands]:
    g, m, k, n = 2, 8, 16, 24
    offs = torch.tensor([3, m], dtype=torch.int32)
    return {
        "2d-3d": (torch.randn(m, k, dtype=dtype), torch.randn(g, k, n, dtype=dtype), offs),
        "2d-3d-padded-output": (torch.randn(m, k, dtype=dtype), torch.randn(g, 12, k, dtype=dtype).mT, offs),
        "2d-2d": (torch.randn(m, k, dtype=dtype).t(), torch.randn(m, n, dtype=dtype), offs),
        "3d-2d": (torch.randn(g, m, k, dtype=dtype), torch.randn(k, m, dtype=dtype), offs),  # offs split N
        "3d-3d": (torch.randn(g, m, k, dtype=dtype), torch.randn(g, k, n, dtype=dtype), None),
        "unaligned-strides": (torch.randn(m, k, dtype=dtype), torch.randn(g, k, 6, dtype=dtype), offs),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_grouped_mm_fake_output_matches_the_real_kernel(dtype):
    from torch._subclasses.fake_tensor import FakeTensorMode

    for layout, (a, b, offs) in _grouped_mm_cases(dtype).items():
        try:
            out = torch._grouped_mm(a, b, offs=offs)
            real: Any = (out.shape, out.stride(), out.dtype)
        except RuntimeError as exc:
            real = str(exc).splitlines()[0]
        with fake_ops.installed(), FakeTensorMode() as mode:
            fa, fb = mode.from_tensor(a), mode.from_tensor(b)
            try:
                out = torch._grouped_mm(fa, fb, offs=None if offs is None else mode.from_tensor(offs))
                fake: Any = (out.shape, out.stride(), out.dtype)
            except RuntimeError as exc:
                fake = str(exc).splitlines()[0]
        assert fake == real, layout


@pytest.mark.parametrize("layout", ["2d-3d", "2d-2d", "3d-2d", "3d-3d"])
def test_grouped_mm_flops_equal_the_matmuls_of_each_group(layout):
    a, b, offs = _grouped_mm_cases(torch.float32)[layout]
    groups = [(0, 3), (3, 8)]
    if layout == "2d-3d":
        expected = sum(2 * (e - s) * a.shape[1] * b.shape[2] for s, e in groups)
    elif layout == "2d-2d":
        expected = sum(2 * a.shape[0] * (e - s) * b.shape[1] for s, e in groups)
    elif layout == "3d-2d":
        expected = sum(2 * a.shape[1] * a.shape[2] * (e - s) for s, e in groups)
    else:
        expected = a.shape[0] * 2 * a.shape[1] * a.shape[2] * b.shape[2]
    counter = flops.counter()
    with counter:
        torch._grouped_mm(a, b, offs=offs)
    assert counter.get_total_flops() == expected


ATTENTION_SHAPES = [  # (query, key / value): equal heads, grouped-query, one key / value head, cross-length
    ((2, 8, 16, 64), (2, 8, 16, 64)),
    ((2, 8, 16, 64), (2, 2, 16, 64)),
    ((1, 12, 7, 32), (1, 1, 7, 32)),
    ((1, 4, 5, 16), (1, 2, 9, 16)),
]


@pytest.mark.parametrize(("q", "kv"), ATTENTION_SHAPES)
def test_attention_flops_equal_torchs_sdpa_formulas_where_torch_counts_the_shapes(q, kv):
    from torch.utils import flop_counter

    try:  # torch before 2.13 refuses fewer key / value heads than query heads: nothing to compare with there
        forward = flop_counter.sdpa_flop_count(q, kv, kv)
        backward = flop_counter.sdpa_backward_flop_count(q, q, kv, kv)
    except AssertionError:
        pytest.skip(f"torch {torch.__version__} has no formula for these shapes")
    assert flops.attention_flops(q, kv, kv) == forward
    assert flops.attention_backward_flops(q, q, kv, kv) == backward


def test_attention_flops_of_grouped_query_attention_count_every_query_head():
    gqa = flops.attention_flops((1, 8, 16, 64), (1, 2, 16, 64), (1, 2, 16, 64))
    assert gqa == flops.attention_flops((1, 8, 16, 64), (1, 8, 16, 64), (1, 8, 16, 64)) == 2 * 8 * 16 * 16 * 128
    with pytest.raises(ValueError, match="not a multiple"):
        flops.attention_flops((1, 8, 16, 64), (1, 3, 16, 64), (1, 3, 16, 64))


def test_grouped_mm_meta_overrides_a_meta_kernel_torch_registered_from_python():
    # torch 2.11 registers _grouped_mm's meta kernel from Python (torch/_meta_registrations.py) and, unless asked,
    # refuses a second Python kernel for it ("already a kernel registered from python"): what failed every trace
    # there. The same situation, made here: a Python meta kernel of torch's own kind, then a trace's.
    def torch_like_meta(mat_a: torch.Tensor, mat_b: torch.Tensor, offs: Any = None, bias: Any = None,
                        out_dtype: Any = None) -> torch.Tensor:
        raise RuntimeError("the earlier Python kernel ran")

    key = "aten/_grouped_mm/Meta"
    earlier = torch.library.Library("aten", "IMPL")
    earlier.impl("_grouped_mm", torch_like_meta, "Meta", allow_override=True)  # on 2.11, over torch's own
    a, b = torch.empty(6, 8, device="meta"), torch.empty(2, 8, 16, device="meta")
    offs = torch.empty(2, dtype=torch.int32, device="meta")
    try:
        with fake_ops.installed():
            assert torch._grouped_mm(a.float(), b.float(), offs=offs).shape == (6, 16)  # fp32: autoshard's rule
        assert key in torch.library._impls  # torch's bookkeeping as before the trace
        with pytest.raises(RuntimeError, match="the earlier Python kernel ran"):
            torch._grouped_mm(a, b, offs=offs)
    finally:
        earlier._destroy()


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("make", [_mixtral, _qwen2_moe, _deepseek_v3],
                         ids=["mixtral", "qwen2-moe", "deepseek-v3"])
def test_moe_models_trace_under_every_precision(make, precision, tmp_path):
    p = _profile(make(), tmp_path, precision)
    assert p.peak_bytes > p.parameter_bytes > 0
    assert p.forward_flops > 0 and p.backward_flops > p.forward_flops


def _attention_forward_flops(config: Any, d_qk: int, d_v: int) -> int:
    """``QKᵀ`` and ``AV`` over the full ``S × S`` (torch's ``sdpa_flop_count``), every layer."""
    return config.num_hidden_layers * 2 * BATCH * config.num_attention_heads * SEQ * SEQ * (d_qk + d_v)


def _head_dim(c: Any) -> int:
    return getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads


def _gqa_projections(c: Any) -> int:
    return 2 * c.hidden_size * _head_dim(c) * (c.num_attention_heads + c.num_key_value_heads)


def _llama_weights(c: Any) -> int:
    per_layer = _gqa_projections(c) + 3 * c.hidden_size * c.intermediate_size
    return c.num_hidden_layers * per_layer + c.vocab_size * c.hidden_size


def _mixtral_weights(c: Any) -> int:
    experts = c.num_experts_per_tok * 3 * c.hidden_size * c.intermediate_size
    router = c.hidden_size * c.num_local_experts
    return c.num_hidden_layers * (_gqa_projections(c) + router + experts) + c.vocab_size * c.hidden_size


def _qwen2_moe_weights(c: Any) -> int:
    experts = c.num_experts_per_tok * 3 * c.hidden_size * c.moe_intermediate_size
    router, shared_gate = c.hidden_size * c.num_experts, c.hidden_size
    shared = 3 * c.hidden_size * c.shared_expert_intermediate_size
    per_layer = _gqa_projections(c) + router + experts + shared + shared_gate
    return c.num_hidden_layers * per_layer + c.vocab_size * c.hidden_size


def _deepseek_v3_weights(c: Any) -> int:
    h, heads = c.hidden_size, c.num_attention_heads
    mla = (h * c.q_lora_rank + c.q_lora_rank * heads * (c.qk_nope_head_dim + c.qk_rope_head_dim)
           + h * (c.kv_lora_rank + c.qk_rope_head_dim)
           + c.kv_lora_rank * heads * (c.qk_nope_head_dim + c.v_head_dim)
           + heads * c.v_head_dim * h)
    dense = 3 * h * c.intermediate_size
    moe = (h * c.n_routed_experts + c.num_experts_per_tok * 3 * h * c.moe_intermediate_size
           + c.n_shared_experts * 3 * h * c.moe_intermediate_size)
    sparse_layers = c.num_hidden_layers - c.first_k_dense_replace
    dense_layers = c.first_k_dense_replace
    return c.num_hidden_layers * mla + dense_layers * dense + sparse_layers * moe + c.vocab_size * h


FLOP_CASES: list[tuple[str, Callable[[], Any], Callable[[Any], int], Callable[[Any], tuple[int, int]]]] = [
    ("llama-gqa", _llama, _llama_weights, lambda c: (_head_dim(c), _head_dim(c))),
    ("mixtral", _mixtral, _mixtral_weights, lambda c: (_head_dim(c), _head_dim(c))),
    ("qwen2-moe", _qwen2_moe, _qwen2_moe_weights, lambda c: (_head_dim(c), _head_dim(c))),
    ("deepseek-v3", _deepseek_v3, _deepseek_v3_weights,
     lambda c: (c.qk_nope_head_dim + c.qk_rope_head_dim, c.v_head_dim)),
]


@pytest.mark.parametrize("target", ["cuda", "cpu"])
@pytest.mark.parametrize(("make", "weights", "head_dims"), [c[1:] for c in FLOP_CASES],
                         ids=[c[0] for c in FLOP_CASES])
def test_step_flops_are_the_active_weights_plus_attention(make, weights, head_dims, target, tmp_path):
    # Per token, 2 FLOPs per active weight forward (attention projections, router, shared and top_k routed
    # experts, LM head) and twice that backward; attention as the CUDA flash kernel: QKᵀ and AV forward, the
    # scores recomputed plus four products backward (torch/utils/flop_counter.py sdpa_backward_flop_count).
    config = make()
    tokens = BATCH * SEQ
    attention = _attention_forward_flops(config, *head_dims(config))
    p = _profile(config, tmp_path, "bf16-mixed", target=target)
    assert p.forward_flops == pytest.approx(2 * weights(config) * tokens + attention, rel=0.01)
    assert p.backward_flops == pytest.approx(4 * weights(config) * tokens + 2.5 * attention, rel=0.01)


@pytest.mark.parametrize("target", ["cuda", "cpu"])
def test_llama_forward_flops_are_exactly_the_linears_and_the_sdpa_formula(tmp_path, target):
    # Grouped-query attention in fp32: the CPU runs its flash kernel (backward recomputes the scores: 2.5 x the
    # forward's attention FLOPs), a CUDA GPU the math path (no fused CUDA kernel takes fp32 grouped-query
    # attention, cuda_attention.runs_math_attention): its backward is the four products of two matmuls, 2 x.
    config = _llama()
    assert config.num_key_value_heads < config.num_attention_heads
    p = _profile(config, tmp_path, "32-true", target=target)
    attention = _attention_forward_flops(config, _head_dim(config), _head_dim(config))
    assert p.forward_flops == 2 * _llama_weights(config) * BATCH * SEQ + attention
    backward_attention = attention * 2 if target == "cuda" else attention * 5 // 2
    assert p.backward_flops == 4 * _llama_weights(config) * BATCH * SEQ + backward_attention


# -- errors --------------------------------------------------------------------------------------------------


class _Positive(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0].sum() + x.sum()  # boolean-mask indexing: a data-dependent shape


class _CountPositiveInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * x[x > 0].numel()


class _PositiveInBackward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _CountPositiveInBackward.apply(x)


def _net_source(gate: type[nn.Module]) -> ModelSource:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.gate = gate()
            self.head = nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.gate(self.proj(x))).sum()

    return ModelSource(name="net", kind="file", origin="tests", build_fn=Net,
                       batch_fn=lambda b: torch.randn(b, 8), loss_fn=lambda out, batch: out)


@pytest.mark.parametrize("target", ["cuda", "cpu"])
@pytest.mark.parametrize(("gate", "part"), [(_Positive, "forward"), (_PositiveInBackward, "backward")])
def test_data_dependent_shape_error_names_the_op_and_the_module(gate, part, target):
    with pytest.raises(ProfileError) as info:
        trace_timeline(_net_source(gate), ProfileOptions(batch_size=2, target=target), record=False)
    message = str(info.value)
    assert message.startswith(f"the {part} calls aten.nonzero")
    assert "(in module 'gate')" in message
    assert "depends on tensor values" in message


def test_a_trace_past_its_time_limit_stops_with_a_profile_error():
    source = _net_source(nn.ReLU)
    with pytest.raises(ProfileError, match=r"tracing net took longer than 0 s \(stopped in the \w+"):
        trace_timeline(source, ProfileOptions(batch_size=2, target="cpu"), record=False, time_limit_s=0.0)


def test_a_failing_flop_formula_is_an_internal_error_not_the_models(monkeypatch):
    # torch 2.11's SDPA formula refused grouped-query attention while a forward ran; autoshard then told the
    # user to "fix the error in your model file". A formula's failure is autoshard's (or torch's) bug.
    from autoshard.errors import InternalError, UserCodeError
    from autoshard.models.source import call_user

    def broken(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("formula broke")

    monkeypatch.setitem(flops.FLOP_FORMULAS, torch.ops.aten.mm, broken)

    def forward() -> torch.Tensor:
        with flops.counter():
            return torch.ones(2, 3) @ torch.ones(3, 4)

    with pytest.raises(InternalError, match="formula broke") as caught:
        call_user(forward, what="forward", user_file=None)
    assert not isinstance(caught.value, UserCodeError)

    def bad_model() -> torch.Tensor:  # the model's own error stays the user's
        with flops.counter():
            return torch.ones(2, 3) @ torch.ones(4, 4)

    with pytest.raises(UserCodeError):
        call_user(bad_model, what="forward", user_file=None)


# -- convolutions --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("groups", [1, 4, 16], ids=lambda g: f"groups-{g}")
def test_convolution_backward_flops_are_twice_the_forward_for_every_grouping(groups):
    # Each multiply-add of the forward appears once in the input gradient and once in the weight gradient.
    # torch 2.13's formula counted the weight gradient of a grouped convolution `groups` times over.
    conv = nn.Conv2d(16, 16, kernel_size=3, padding=1, groups=groups)
    x = torch.randn(2, 16, 8, 8, requires_grad=True)
    expected_forward = 2 * 2 * 16 * (16 // groups) * 9 * 8 * 8  # 2·N·C_out·(C_in / groups)·k²·H·W
    with flops.counter() as counted:
        out = conv(x)
    assert counted.get_total_flops() == expected_forward
    with flops.counter() as counted:
        out.sum().backward()
    assert counted.get_total_flops() == 2 * expected_forward


def test_convnext_builds_on_fake_tensors_and_its_step_counts_about_three_forwards(tmp_path):
    # ConvNeXt's constructor reads its drop-path rates back from a torch.linspace (.tolist()): under the fake
    # build that failed ("transformers cannot build ConvNextForImageClassification ...: DataDependentOutput...").
    # Its depthwise 7x7 convolutions made the step 7.7 x its forward under torch's backward formula.
    config = transformers.ConvNextConfig(depths=[1, 1, 2, 1], hidden_sizes=[16, 32, 64, 128], image_size=64,
                                         drop_path_rate=0.1, num_labels=10)
    config.architectures = ["ConvNextForImageClassification"]
    folder = tmp_path / "convnext"
    config.save_pretrained(folder)
    p = autoshard.profile(folder, batch_size=2, precision="32-true", target="cpu", extrapolate=False)
    real = transformers.ConvNextForImageClassification(config)
    assert p.parameter_count == sum(t.numel() for t in real.parameters())
    # The stem's input needs no gradient, so a little under 3 forwards.
    assert 2.8 * p.forward_flops <= p.flops_per_step <= 3.0 * p.forward_flops


class _RouterInFp32(nn.Module):
    """Switch Transformers' router (transformers 5.24): ``self.classifier = self.classifier.to(self.dtype)`` in
    its forward, fp32 whatever the model's dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.classifier = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.classifier = self.classifier.to(torch.float32)
        return self.classifier(self.proj(x).float()).sum()


@pytest.mark.parametrize("precision", ["32-true", "bf16-true"])
def test_a_forward_that_calls_module_to_profiles(precision):
    # Under the fake trace torch refused the swap ("Couldn't swap Linear.weight") and autoshard blamed the model.
    source = ModelSource(name="router", kind="file", origin="tests", build_fn=_RouterInFp32,
                         batch_fn=lambda b: torch.randn(b, 8), loss_fn=lambda out, batch: out)
    profile = autoshard.profile(source, batch_size=2, precision=precision, target="cpu", extrapolate=False)
    assert profile.parameter_count == 8 * 8 + 8 + 8 * 4 + 4
    # bf16-true: the classifier is fp32 after the first forward, and still the parameter the optimizer steps
    # (converted in place, as torch converts plain tensors): its AdamW moments are fp32 too.
    classifier_bytes = 4 * (8 * 4 + 4)
    proj_bytes = (2 if precision == "bf16-true" else 4) * (8 * 8 + 8)
    assert profile.optimizer_state_bytes == 2 * (classifier_bytes + proj_bytes) + 4 * 4  # + a step count each
