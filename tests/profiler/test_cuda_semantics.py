"""CUDA kernel and autocast emulation on CPU tensors (autoshard.profiler.cuda_semantics).

The strongest check here compares the emulation, op by op, with the real ``AutocastCUDA`` kernels
of the installed torch: forward passes on *fake* CUDA tensors work on a CPU-only build (only
autograd on them aborts), so a subprocess enables CUDA autocast and records each op's output
dtype and the ATen ops it ran; the same ops run in-process on fake CPU tensors under
:class:`CudaSemantics`. Run this file as a script to print that ground truth.
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
import subprocess
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointError, checkpoint

from autoshard.profiler.cuda_autocast_policy import TORCH_2_13_POLICIES
from autoshard.profiler.cuda_semantics import CUDA_AUTOCAST_POLICIES, CastPolicy, CudaSemantics

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


# --- an op table, runnable on any device --------------------------------------------------------


class _Inputs:
    """Builds the inputs of one case on one device (deterministic shapes, random values)."""

    def __init__(self, device: str) -> None:
        self.device = device

    def f(self, *shape: int, dtype: torch.dtype = FP32) -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=dtype)

    def b(self, *shape: int) -> torch.Tensor:
        return self.f(*shape, dtype=BF16)

    def h(self, *shape: int) -> torch.Tensor:
        return self.f(*shape, dtype=FP16)

    def long(self, *shape: int, high: int) -> torch.Tensor:
        return torch.randint(0, high, shape, device=self.device)


@dataclass(frozen=True)
class _Op:
    name: str
    run: Callable[[_Inputs], Any]
    expected: torch.dtype
    """Output dtype under autocast (``autocast`` below), from the CUDA op lists."""
    autocast: torch.dtype = BF16
    device_specific: bool = False
    """CPU and CUDA pick different kernels (SDPA backend): compare dtypes only, not the ATen ops run."""


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


OPS: list[_Op] = [
    # lower-precision list
    _Op("F.linear", lambda t: F.linear(t.f(4, 8), t.f(16, 8)), BF16),
    _Op("F.linear 3d bias", lambda t: F.linear(t.f(2, 4, 8), t.f(16, 8), t.f(16)), BF16),
    _Op("F.linear fp16", lambda t: F.linear(t.f(4, 8), t.f(16, 8)), FP16, autocast=FP16),
    _Op("torch.matmul", lambda t: torch.matmul(t.f(2, 4, 8), t.f(8, 3)), BF16),
    _Op("Tensor.__matmul__", lambda t: t.f(4, 8) @ t.f(8, 3), BF16),
    _Op("torch.mm", lambda t: torch.mm(t.f(4, 8), t.f(8, 3)), BF16),
    _Op("torch.bmm", lambda t: torch.bmm(t.f(2, 4, 8), t.f(2, 8, 3)), BF16),
    _Op("torch.addmm", lambda t: torch.addmm(t.f(4, 3), t.f(4, 8), t.f(8, 3)), BF16),
    _Op("torch.baddbmm", lambda t: torch.baddbmm(t.f(2, 4, 3), t.f(2, 4, 8), t.f(2, 8, 3)), BF16),
    _Op("torch.addbmm", lambda t: torch.addbmm(t.f(4, 3), t.f(2, 4, 8), t.f(2, 8, 3)), BF16),
    _Op("torch.addmv", lambda t: torch.addmv(t.f(4), t.f(4, 8), t.f(8)), BF16),
    _Op("torch.addr", lambda t: torch.addr(t.f(4, 3), t.f(4), t.f(3)), BF16),
    _Op("torch.mv", lambda t: torch.mv(t.f(4, 8), t.f(8)), BF16),
    _Op("torch.einsum", lambda t: torch.einsum("bij,jk->bik", t.f(2, 4, 8), t.f(8, 3)), BF16),
    _Op("torch.linalg.multi_dot", lambda t: torch.linalg.multi_dot([t.f(4, 8), t.f(8, 3), t.f(3, 2)]), BF16),
    _Op("torch.linalg.vecdot", lambda t: torch.linalg.vecdot(t.f(4, 8), t.f(4, 8)), BF16),
    _Op("F.conv1d", lambda t: F.conv1d(t.f(2, 3, 16), t.f(4, 3, 3)), BF16),
    _Op("F.conv2d", lambda t: F.conv2d(t.f(2, 3, 8, 8), t.f(4, 3, 3, 3), t.f(4)), BF16),
    _Op("F.conv2d padding=same", lambda t: F.conv2d(t.f(2, 3, 8, 8), t.f(4, 3, 3, 3), padding="same"), BF16),
    _Op("F.conv3d", lambda t: F.conv3d(t.f(1, 2, 4, 4, 4), t.f(3, 2, 3, 3, 3)), BF16),
    _Op("F.conv_transpose1d", lambda t: F.conv_transpose1d(t.f(2, 3, 8), t.f(3, 4, 3)), BF16),
    _Op("F.conv_transpose2d", lambda t: F.conv_transpose2d(t.f(2, 3, 8, 8), t.f(3, 4, 3, 3)), BF16),
    _Op("F.conv_transpose3d", lambda t: F.conv_transpose3d(t.f(1, 2, 4, 4, 4), t.f(2, 3, 3, 3, 3)), BF16),
    _Op("F.prelu", lambda t: F.prelu(t.f(2, 3, 4), t.f(3)), BF16),
    # CUDA runs the fused _thnn_fused_lstm_cell kernel, CPU the unfused composite (not modelled).
    _Op("torch.lstm_cell", lambda t: _first(torch.lstm_cell(t.f(2, 8), (t.f(2, 4), t.f(2, 4)), t.f(16, 8), t.f(16, 4), t.f(16), t.f(16))),
        BF16, device_specific=True),
    _Op("torch.gru_cell", lambda t: torch.gru_cell(t.f(2, 8), t.f(2, 4), t.f(12, 8), t.f(12, 4), t.f(12), t.f(12)), BF16),
    _Op("F.scaled_dot_product_attention", lambda t: F.scaled_dot_product_attention(*(t.f(2, 2, 8, 4) for _ in "qkv")),
        BF16, device_specific=True),
    # fp32 list
    _Op("torch.exp", lambda t: torch.exp(t.b(4, 8)), FP32),
    _Op("Tensor.log", lambda t: t.b(4, 8).abs().log(), FP32),
    _Op("torch.rsqrt", lambda t: torch.rsqrt(t.b(4, 8).abs()), FP32),
    _Op("torch.reciprocal", lambda t: torch.reciprocal(t.b(4, 8)), FP32),
    _Op("Tensor.pow", lambda t: t.b(4, 8).pow(2), FP32),
    _Op("Tensor.__pow__", lambda t: t.b(4, 8) ** 2, FP32),
    _Op("torch.pow(scalar, tensor)", lambda t: torch.pow(2.0, t.b(4, 8)), FP32),
    _Op("F.softplus", lambda t: F.softplus(t.b(4, 8)), FP32),
    _Op("F.layer_norm", lambda t: F.layer_norm(t.b(2, 4, 8), (8,), t.f(8), t.f(8)), FP32),
    _Op("F.group_norm", lambda t: F.group_norm(t.b(2, 4, 8), 2), FP32),
    # fp32 where CUDA autocast has rms_norm in its fp32 list (torch 2.13); torch 2.11 has no entry for it.
    _Op("F.rms_norm", lambda t: F.rms_norm(t.b(2, 4, 8), (8,), t.f(8)),
        FP32 if torch._C._dispatch_has_kernel_for_dispatch_key("aten::rms_norm", "AutocastCUDA") else BF16),
    _Op("F.cosine_similarity", lambda t: F.cosine_similarity(t.b(4, 8), t.b(4, 8)), FP32),
    _Op("F.mse_loss", lambda t: F.mse_loss(t.b(4, 8), t.b(4, 8)), FP32),
    _Op("F.l1_loss", lambda t: F.l1_loss(t.b(4, 8), t.b(4, 8)), FP32),
    _Op("F.smooth_l1_loss", lambda t: F.smooth_l1_loss(t.b(4, 8), t.b(4, 8)), FP32),
    _Op("F.huber_loss", lambda t: F.huber_loss(t.b(4, 8), t.b(4, 8)), FP32),
    _Op("F.kl_div", lambda t: F.kl_div(t.b(4, 8), t.b(4, 8), reduction="batchmean"), FP32),
    _Op("F.binary_cross_entropy_with_logits",
        lambda t: F.binary_cross_entropy_with_logits(t.b(4, 8), t.b(4, 8).sigmoid()), FP32),
    _Op("F.nll_loss", lambda t: F.nll_loss(t.b(4, 8), t.long(4, high=8)), FP32),
    _Op("F.cross_entropy", lambda t: F.cross_entropy(t.b(4, 8), t.long(4, high=8)), FP32),
    _Op("F.cross_entropy label_smoothing",
        lambda t: F.cross_entropy(t.b(4, 8), t.long(4, high=8), label_smoothing=0.1), FP32),
    _Op("F.cross_entropy 3d", lambda t: F.cross_entropy(t.b(2, 8, 5), t.long(2, 5, high=8)), FP32),
    _Op("torch.cdist", lambda t: torch.cdist(t.b(4, 8), t.b(3, 8)), FP32),
    _Op("torch.logsumexp", lambda t: torch.logsumexp(t.b(4, 8), dim=-1), FP32),
    _Op("F.interpolate nearest", lambda t: F.interpolate(t.b(1, 2, 4, 4), scale_factor=2), FP32),
    _Op("F.interpolate bilinear", lambda t: F.interpolate(t.b(1, 2, 4, 4), scale_factor=2, mode="bilinear"), FP32),
    # fp32_set_opt_dtype and fp32_append_dtype
    _Op("F.softmax", lambda t: F.softmax(t.b(4, 8), dim=-1), FP32),
    _Op("F.softmax fp16", lambda t: F.softmax(t.h(4, 8), dim=-1), FP32, autocast=FP16),
    _Op("F.softmax explicit dtype", lambda t: F.softmax(t.b(4, 8), dim=-1, dtype=BF16), BF16),
    _Op("F.log_softmax", lambda t: F.log_softmax(t.b(4, 8), dim=-1), FP32),
    _Op("Tensor.sum", lambda t: t.b(4, 8).sum(), FP32),
    _Op("Tensor.sum dim", lambda t: t.b(4, 8).sum(dim=-1), FP32),
    _Op("Tensor.sum int64", lambda t: t.long(4, 8, high=5).sum(), torch.int64),
    _Op("torch.cumsum", lambda t: torch.cumsum(t.b(4, 8), dim=-1), FP32),
    _Op("torch.prod", lambda t: torch.prod(t.b(4, 8)), FP32),
    _Op("torch.linalg.vector_norm", lambda t: torch.linalg.vector_norm(t.b(4, 8)), FP32),
    _Op("aten.norm.Scalar", lambda t: torch.ops.aten.norm.Scalar(t.b(4, 8), 2), FP32),
    _Op("aten.norm.ScalarOpt_dim", lambda t: torch.ops.aten.norm.ScalarOpt_dim(t.b(4, 8), 2, [1]), FP32),
    # promote list (and cat, which promotes by itself)
    _Op("torch.addcmul mixed", lambda t: torch.addcmul(t.f(4, 8), t.b(4, 8), t.b(4, 8)), FP32),
    _Op("torch.addcmul bf16", lambda t: torch.addcmul(t.b(4, 8), t.b(4, 8), t.b(4, 8)), BF16),
    _Op("torch.atan2", lambda t: torch.atan2(t.b(4, 8), t.f(4, 8)), FP32),
    _Op("torch.dot", lambda t: torch.dot(t.b(8), t.f(8)), FP32),
    _Op("F.bilinear", lambda t: F.bilinear(t.b(4, 3), t.b(4, 5), t.f(2, 3, 5)), FP32),
    _Op("Tensor.scatter_add", lambda t: t.b(4, 8).scatter_add(1, t.long(4, 8, high=8), t.f(4, 8)), FP32),
    _Op("torch.cat", lambda t: torch.cat([t.f(2, 8), t.b(2, 8)]), FP32),
    # not on any CUDA list: the op runs in its inputs' dtype
    _Op("F.gelu", lambda t: F.gelu(t.b(4, 8)), BF16),
    _Op("F.silu", lambda t: F.silu(t.f(4, 8)), FP32),
    _Op("F.embedding", lambda t: F.embedding(t.long(4, high=10), t.f(10, 8)), FP32),
    _Op("Tensor.mean", lambda t: t.b(4, 8).mean(-1), BF16),
    _Op("torch.add", lambda t: t.b(4, 8) + t.f(4, 8), FP32),
]


def _trace_ops(device: str, op: _Op, semantics: bool) -> dict[str, Any]:
    """Runs ``op`` on fake ``device`` tensors under autocast and records what it did."""
    log = _OpLog()
    with FakeTensorMode(), torch.no_grad():
        inputs = _Inputs(device)
        if semantics:
            with CudaSemantics(op.autocast), log:
                out = op.run(inputs)
        else:  # the real AutocastCUDA kernels (torch.autocast("cuda") refuses to start on CPU-only torch)
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", op.autocast)
            torch.autocast_increment_nesting()
            try:
                with log:
                    out = op.run(inputs)
            finally:
                torch.autocast_decrement_nesting()
                torch.set_autocast_enabled("cuda", False)
                torch.clear_autocast_cache()
    return {"dtype": str(out.dtype), "ops": log.ops}


class _OpLog(TorchDispatchMode):
    """Records (ATen op, output dtypes and shapes) below autograd and autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[list[Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.namespace != "prim":
            outs = out if isinstance(out, (tuple, list)) else (out,)
            shapes = [[list(o.shape), str(o.dtype)] for o in outs if isinstance(o, torch.Tensor)]
            self.ops.append([str(func), shapes])
        return out


def _ground_truth() -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for op in OPS:
        try:
            results[op.name] = _trace_ops("cuda", op, semantics=False)
        except Exception as error:  # e.g. ops whose fake CUDA kernel needs the CUDA runtime
            results[op.name] = {"error": str(error).splitlines()[0]}
    return results


@pytest.fixture(scope="module")
def autocast_cuda_ground_truth() -> dict[str, dict[str, Any]]:
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_emulated_output_dtype_matches_the_cuda_op_lists(op: _Op) -> None:
    assert _trace_ops("cpu", op, semantics=True)["dtype"] == str(op.expected)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_emulation_runs_the_same_aten_ops_as_real_autocast_cuda(
    op: _Op, autocast_cuda_ground_truth: dict[str, dict[str, Any]]
) -> None:
    truth = autocast_cuda_ground_truth[op.name]
    if "error" in truth:
        pytest.skip(f"no ground truth on fake CUDA tensors: {truth['error']}")
    emulated = _trace_ops("cpu", op, semantics=True)
    assert emulated["dtype"] == truth["dtype"]
    if not op.device_specific:
        assert _casts_unordered(emulated["ops"]) == _casts_unordered(truth["ops"])


def _casts_unordered(ops: list[list[Any]]) -> list[Any]:
    """Sorts each run of consecutive casts: the C++ wrapper casts an op's arguments in the
    order the compiler evaluates a call's arguments (right to left with GCC); every cast is
    alive when the op runs, so the order changes no peak."""
    out: list[Any] = []
    run: list[str] = []
    for op in ops + [["end", []]]:
        if op[0] == "aten._to_copy.default":
            run.append(json.dumps(op))
            continue
        out.extend(sorted(run))
        run = []
        out.append(json.dumps(op))
    return out[:-1]


_ON_2_13 = pytest.mark.skipif(not torch.__version__.startswith("2.13."),
                               reason=f"the table is torch 2.13's; torch {torch.__version__} autocasts other ops")


def _autocast_cuda_registrations() -> set[str]:
    return {
        name
        for name in torch._C._dispatch_get_all_op_names()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA")
    }


@_ON_2_13
def test_policy_table_is_exactly_the_autocast_cuda_registrations() -> None:
    assert set(CUDA_AUTOCAST_POLICIES) == set(TORCH_2_13_POLICIES) == _autocast_cuda_registrations()


def test_the_emulation_applies_only_policies_the_installed_torch_registers() -> None:
    # torch 2.11 has no AutocastCUDA kernel for rms_norm: there F.rms_norm keeps a bf16 input bf16 on a GPU.
    registered = _autocast_cuda_registrations()
    assert set(CUDA_AUTOCAST_POLICIES) == set(TORCH_2_13_POLICIES) & registered
    x, w = torch.randn(4, 8, dtype=BF16), torch.ones(8, dtype=BF16)
    with CudaSemantics(BF16):
        out = F.rms_norm(x, (8,), w)
    assert out.dtype == (FP32 if "aten::rms_norm" in registered else BF16)


_HEADER = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
_MACRO_POLICIES = {
    "AT_FORALL_LOWER_PRECISION_FP": CastPolicy.LOWER_PRECISION,
    "AT_FORALL_FP32": CastPolicy.FP32,
    "AT_FORALL_FP32_SET_OPT_DTYPE": CastPolicy.FP32_SET_OPT_DTYPE,
    "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE": CastPolicy.FP32_APPEND_DTYPE,
    "AT_FORALL_PROMOTE": CastPolicy.PROMOTE,
}


def _header_policies() -> dict[str, CastPolicy]:
    """The op lists of the installed autocast_mode.h, as ``aten::op.overload`` -> policy."""
    policies: dict[str, CastPolicy] = {}
    for macro, policy in _MACRO_POLICIES.items():
        body = re.search(rf"#define {macro}\(_\)((?:.*\\\n)*.*\n)", _HEADER.read_text()).group(1)
        if policy is CastPolicy.FP32_APPEND_DTYPE:
            names = re.findall(r'"([\w.]+)"', body)
        else:
            names = [".".join(m) if m[1] else m[0] for m in re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body)]
        policies.update({f"aten::{name}": policy for name in names})
    return policies


@pytest.mark.skipif(not _HEADER.exists(), reason="torch installed without C++ headers")
@_ON_2_13
def test_policies_are_the_op_lists_of_the_installed_autocast_header() -> None:
    # autocast_mode.cpp adds two convolutions and one banned op next to the header's lists.
    extra = {
        "aten::cudnn_convolution": CastPolicy.LOWER_PRECISION,
        "aten::cudnn_convolution_transpose": CastPolicy.LOWER_PRECISION,
        "aten::binary_cross_entropy": CastPolicy.BANNED,
    }
    assert CUDA_AUTOCAST_POLICIES == {**_header_policies(), **extra}


def test_binary_cross_entropy_is_refused_under_autocast_as_on_cuda() -> None:
    x, y = torch.rand(4), torch.rand(4)
    with CudaSemantics():
        assert F.binary_cross_entropy(x, y).dtype == FP32
    with CudaSemantics(BF16), pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
        F.binary_cross_entropy(x, y)
    assert CUDA_AUTOCAST_POLICIES["aten::binary_cross_entropy"] is CastPolicy.BANNED


def test_autocast_disabled_in_user_code_is_honoured() -> None:
    # HF rotary embeddings do this with device_type=x.device.type, i.e. "cpu" here, "cuda" on a GPU.
    with CudaSemantics(BF16):
        with torch.autocast("cpu", enabled=False):
            assert F.linear(torch.randn(2, 4), torch.randn(3, 4)).dtype == FP32
        assert F.linear(torch.randn(2, 4), torch.randn(3, 4)).dtype == BF16


@pytest.mark.parametrize("autocast_dtype", [FP32, torch.float64, torch.int8])
def test_unsupported_autocast_dtype_is_rejected(autocast_dtype: torch.dtype) -> None:
    with pytest.raises(ValueError, match="autocast_dtype"):
        CudaSemantics(autocast_dtype)


def test_an_active_instance_cannot_be_entered_again() -> None:
    semantics = CudaSemantics()
    with semantics, pytest.raises(RuntimeError, match="already active"):
        semantics.__enter__()
    with semantics:  # but again after it exits
        pass


def test_cpu_behaviour_is_restored_on_exit() -> None:
    with CudaSemantics(BF16):
        pass
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::exp", "AutocastCPU")
    with torch.autocast("cpu", dtype=BF16):  # CPU's own list has no exp
        assert torch.exp(torch.ones(2, dtype=BF16)).dtype == BF16
    assert _saved_dtypes(lambda x: F.dropout(x, 0.5), torch.randn(8, requires_grad=True)) == [FP32]


# --- dropout and attention: what autograd saves ---------------------------------------------------


def _saved(fn: Callable[..., Any], *args: Any) -> list[torch.Tensor]:
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return saved


def _saved_dtypes(fn: Callable[..., Any], *args: Any) -> list[torch.dtype]:
    return [t.dtype for t in _saved(fn, *args)]


@pytest.mark.parametrize(
    "dropout",
    [lambda x: F.dropout(x, 0.1), lambda x: nn.Dropout(0.1)(x), lambda x: torch.dropout(x, 0.1, True)],
    ids=["F.dropout", "nn.Dropout", "torch.dropout"],
)
def test_training_dropout_saves_a_bool_mask_like_cuda_native_dropout(dropout: Callable[..., Any]) -> None:
    with FakeTensorMode():
        x = torch.randn(4, 16, requires_grad=True)
        assert _saved_dtypes(dropout, x) == [FP32]  # CPU: a mask in x's dtype
        with CudaSemantics():
            assert _saved_dtypes(dropout, x) == [torch.bool]


@pytest.mark.parametrize(
    "dropout",
    [lambda x: F.dropout(x, 0.1, training=False), lambda x: F.dropout(x, 0.0), lambda x: F.dropout1d(x, 0.1)],
    ids=["eval", "p=0", "dropout1d"],
)
def test_dropout_cuda_does_not_fuse_is_left_as_on_cpu(dropout: Callable[..., Any]) -> None:
    with FakeTensorMode():
        x = torch.randn(4, 16, 2, requires_grad=True)
        expected = _saved_dtypes(dropout, x)
        with CudaSemantics():
            assert _saved_dtypes(dropout, x) == expected


@pytest.mark.parametrize("mask", [None, "causal", "float"])
def test_attention_with_dropout_saves_no_seq_by_seq_tensor(mask: str | None) -> None:
    b, h, s, d = 2, 4, 256, 16
    with FakeTensorMode():
        q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in "qkv")
        kwargs: dict[str, Any] = {"dropout_p": 0.1, "is_causal": mask == "causal"}
        if mask == "float":
            kwargs["attn_mask"] = torch.zeros(b, 1, s, s)
        attention = lambda: F.scaled_dot_product_attention(q, k, v, **kwargs)  # noqa: E731
        assert _attention_matrices(_saved(attention), s) >= 2  # CPU math path: weights, mask, ...
        with CudaSemantics(), _OpLog() as log:
            saved = _saved(attention)
        assert _attention_matrices(saved, s) == (1 if mask == "float" else 0)  # the mask itself
        assert any("flash_attention" in op for op, _ in log.ops)


def _attention_matrices(saved: list[torch.Tensor], seq: int) -> int:
    """How many distinct storages of ``(..., seq, seq)`` tensors were saved."""
    return len({t.untyped_storage()._cdata for t in saved if t.dim() >= 2 and tuple(t.shape[-2:]) == (seq, seq)})


def test_fp16_softmax_to_fp32_makes_no_fp32_copy_of_its_input_like_cuda() -> None:
    with FakeTensorMode():
        x = torch.randn(2, 4, 64, 64, dtype=FP16, requires_grad=True)
        with CudaSemantics(), _OpLog() as log:
            y = F.softmax(x, dim=-1, dtype=FP32)
        assert [op for op, _ in log.ops if op != "aten.detach.default"] == ["aten._softmax.default"]
        assert y.dtype == FP32
        y.sum().backward()
        assert x.grad is not None and x.grad.dtype == FP16


def test_real_cpu_tensors_work_too() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 32, dtype=FP16)
    with CudaSemantics(BF16):
        y = F.dropout(F.linear(torch.randn(8, 32), torch.randn(16, 32)), 0.5)
        p = F.softmax(x, dim=-1, dtype=FP32)  # the CPU kernel has no half-to-float path: falls back
    assert y.dtype == BF16
    assert torch.allclose(p.sum(-1), torch.ones(64))


# --- a GPT-like block, forward and backward ---------------------------------------------------------


class _Block(nn.Module):
    def __init__(self, hidden: int = 64, heads: int = 4, p: float = 0.1) -> None:
        super().__init__()
        self.heads, self.p = heads, p
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = (
            t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(h, -1)
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, s, h)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class _GPT(nn.Module):
    def __init__(self, vocab: int = 100, hidden: int = 64, layers: int = 2, checkpointed: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(_Block(hidden) for _ in range(layers))
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.checkpointed = checkpointed
        self.wrap_recompute: Callable[[nn.Module], Callable[..., Any]] = lambda block: block

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = checkpoint(self.wrap_recompute(block), x, use_reentrant=False) if self.checkpointed else block(x)
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tokens.view(-1))


SEQ = 128


def test_gpt_block_forward_and_backward_in_bf16_saves_what_cuda_would() -> None:
    with FakeTensorMode():
        model, tokens = _GPT(), torch.randint(0, 100, (2, SEQ))
        saved_on_cpu = _saved(model, tokens)
        with CudaSemantics(BF16) as semantics, _OpLog() as log:
            saved: list[torch.Tensor] = []
            with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
                loss = model(tokens)
            with semantics.autocast_disabled():
                loss.backward()
    matmuls = [shapes for op, shapes in log.ops if op.split(".")[1] in ("mm", "addmm", "bmm")]
    assert matmuls and all(dtype == "torch.bfloat16" for shapes in matmuls for _, dtype in shapes)
    assert sum(t.dtype == torch.bool for t in saved) == 2 * len(model.blocks)  # two dropouts a block
    assert _attention_matrices(saved, SEQ) == 0
    assert loss.dtype == FP32  # cross_entropy: log_softmax in bf16, nll_loss on the fp32 list
    assert {p.grad.dtype for p in model.parameters()} == {FP32}
    assert _bytes(saved) < 0.7 * _bytes(saved_on_cpu)


def _bytes(tensors: list[torch.Tensor]) -> int:
    storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


# --- the cast cache ------------------------------------------------------------------------------


def _casts_of(log: _OpLog, shape: list[int]) -> int:
    return sum(op == "aten._to_copy.default" and outs == [[shape, "torch.bfloat16"]] for op, outs in log.ops)


def test_a_weight_used_twice_is_cast_once_per_region() -> None:
    with FakeTensorMode():
        w, x = nn.Parameter(torch.randn(8, 8)), torch.randn(4, 8)
        twice = lambda: F.linear(F.linear(x, w), w)  # noqa: E731
        with _OpLog() as log:
            with CudaSemantics(BF16):
                twice()
            with CudaSemantics(BF16):
                twice()
        assert _casts_of(log, [8, 8]) == 2
        with _OpLog() as log, CudaSemantics(), torch.autocast("cpu", dtype=BF16, cache_enabled=False):
            twice()
        assert _casts_of(log, [8, 8]) == 2


def test_cached_casts_are_released_when_the_region_exits() -> None:
    with FakeTensorMode():
        w, x = nn.Parameter(torch.randn(8, 8)), torch.randn(4, 8)
        with _CastRefs() as casts, torch.no_grad():
            with CudaSemantics(BF16):
                F.linear(x, w)
                assert casts.alive() == 1  # nothing but the cache holds the bf16 weight
            gc.collect()
            assert casts.alive() == 0


class _CastRefs(TorchDispatchMode):
    """Weak references to every tensor ``_to_copy`` makes."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[weakref.ref[torch.Tensor]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default:
            self.refs.append(weakref.ref(out))
        return out

    def alive(self) -> int:
        return sum(ref() is not None for ref in self.refs)


# --- activation checkpointing --------------------------------------------------------------------


CHECKPOINT_PATTERNS = ["backward in region", "backward after region", "backward after region, wrapped recompute"]


def _forward_backward(pattern: str) -> _OpLog:
    """Runs a checkpointed GPT step; returns the ops logged in backward."""
    semantics = CudaSemantics(BF16)
    backward_log = _OpLog()
    with FakeTensorMode(), semantics:
        model, tokens = _GPT(checkpointed=True), torch.randint(0, 100, (2, SEQ))
        if pattern.endswith("wrapped recompute"):  # what autoshard.profiler.gpu does

            def wrap(block: nn.Module) -> Callable[..., Any]:
                enabled = semantics.autocast_is_enabled()

                def run(*args: Any) -> Any:
                    with semantics.autocast_enabled(enabled):
                        return block(*args)

                return run

            model.wrap_recompute = wrap
        loss = model(tokens)
        outside = semantics.autocast_disabled() if "after region" in pattern else contextlib.nullcontext()
        with outside, backward_log:
            loss.backward()
    return backward_log


@pytest.mark.parametrize("pattern", CHECKPOINT_PATTERNS)
def test_checkpoint_recompute_makes_the_forward_cast_and_kernel_decisions(pattern: str) -> None:
    # checkpoint's default determinism check raises CheckpointError if a recomputed saved
    # tensor differs in shape or dtype from forward's; getting here means they all matched.
    recomputed = [op for op, _ in _forward_backward(pattern).ops]
    assert recomputed.count("aten.native_dropout.default") == 2 * 2  # two blocks, two dropouts each
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in recomputed


@pytest.mark.parametrize("pattern", CHECKPOINT_PATTERNS)
def test_checkpoint_recompute_recasts_weights_only_outside_the_autocast_region(pattern: str) -> None:
    # Inside the region the forward casts are still cached; outside it, as after a
    # torch.autocast block on a GPU, each block's recompute casts its weights again.
    fc1_casts = _casts_of(_forward_backward(pattern), [4 * 64, 64])
    assert fc1_casts == (0 if pattern == "backward in region" else 2)


def test_backward_outside_cuda_semantics_trips_checkpoint_determinism_check() -> None:
    # Recompute then runs CPU kernels (float dropout masks): the reason to keep backward inside.
    with FakeTensorMode():
        model, tokens = _GPT(checkpointed=True), torch.randint(0, 100, (2, SEQ))
        with CudaSemantics(BF16):
            loss = model(tokens)
        with pytest.raises(CheckpointError):
            loss.backward()


def test_autocast_enabled_opens_a_region_inside_autocast_disabled() -> None:
    semantics = CudaSemantics(BF16)
    with FakeTensorMode():
        w, x = nn.Parameter(torch.randn(8, 8)), torch.randn(4, 8)
        with semantics, _OpLog() as log:
            assert semantics.autocast_is_enabled()
            with semantics.autocast_disabled():
                assert not semantics.autocast_is_enabled()
                assert F.linear(x, w).dtype == FP32
                with semantics.autocast_enabled():
                    F.linear(F.linear(x, w), w)  # one cast: a region of its own
                with semantics.autocast_enabled():
                    F.linear(x, w)  # another region, another cast
        assert _casts_of(log, [8, 8]) == 2
    assert not semantics.autocast_is_enabled()
    with pytest.raises(RuntimeError, match="enter the CudaSemantics"):
        with semantics.autocast_disabled():
            pass


def test_composite_python_functions_are_emulated_inside() -> None:
    # nn.TransformerEncoderLayer calls F.multi_head_attention_forward, a Python composite whose
    # inner F.linear / SDPA / dropout a TorchFunctionMode handler would not see.
    with FakeTensorMode():
        layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=96, dropout=0.1, batch_first=True)
        x = torch.randn(2, SEQ, 64, requires_grad=True)
        with CudaSemantics(BF16):
            saved = _saved(layer, x)
    assert sum(t.dtype == torch.bool for t in saved) == 3  # attention output, two MLP dropouts
    assert _attention_matrices(saved, SEQ) == 0


if __name__ == "__main__":
    print(json.dumps(_ground_truth()))


def test_kernels_stay_registered_across_regions_inside_kernels_registered_and_go_after() -> None:
    from autoshard.profiler.cuda_semantics import kernels_registered

    def registered() -> bool:
        return torch._C._dispatch_has_kernel_for_dispatch_key("aten::exp", "AutocastCPU")

    with kernels_registered():
        assert registered()
        with CudaSemantics(BF16):
            assert torch.exp(torch.ones(2, dtype=BF16)).dtype == FP32
        assert registered()  # the region's exit left them: the block holds them
        with torch.autocast("cpu", dtype=BF16):  # plain CPU autocast sees CUDA's lists meanwhile (documented)
            assert torch.exp(torch.ones(2, dtype=BF16)).dtype == FP32
    assert not registered()
    with torch.autocast("cpu", dtype=BF16):
        assert torch.exp(torch.ones(2, dtype=BF16)).dtype == BF16


def test_a_cuda_trace_leaves_no_kernel_registered() -> None:
    from autoshard.models import load_source
    from autoshard.profiler.options import ProfileOptions
    from autoshard.profiler.trace import trace_timelines

    trace_timelines(load_source("tiny-gpt2"), ProfileOptions(batch_size=1, seq_len=16, target="cuda"), (1, 2))
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::exp", "AutocastCPU")
