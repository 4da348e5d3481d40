"""The CUDA kernel choices :class:`~autoshard.profiler.cuda_semantics.CudaSemantics` makes the CPU follow, as
``AutogradCPU`` kernels: fused dropout's bool mask, scaled-dot-product attention's fused kernels (no ``s x s``
matrix, no dropout mask kept) or its math path where CUDA takes that one, and fp16 softmax with an fp32 result
converted inside the kernel. Each kernel behaves as ATen's own unless ``is_active()`` says a
:class:`~autoshard.profiler.cuda_semantics.CudaSemantics` region is active in this thread. Sources: the module
docstring of :mod:`autoshard.profiler.cuda_semantics`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import is_fake

from autoshard.profiler.cuda_attention import (
    efficient_attention,
    runs_math_attention,
    takes_efficient_attention,
)


def kernel_choices(is_active: Callable[[], bool]) -> Iterator[tuple[str, Callable[..., Any], str]]:
    """``(op name, kernel, dispatch key)`` for each CUDA kernel choice, active only while ``is_active()``."""

    def _dropout(input: torch.Tensor, p: float, train: bool) -> torch.Tensor:
        # Dropout.cpp: CUDA takes native_dropout when train and is_fused_kernel_acceptable
        # (0 < p < 1 and numel > 0); its backward saves the bool mask.
        if is_active() and train and 0.0 < p < 1.0 and input.numel() > 0:
            return torch.ops.aten.native_dropout.default(input, p, train)[0]
        return torch.ops.aten.dropout.default.decompose(input, p, train)

    def _scaled_dot_product_attention(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        *,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        if is_active():
            if takes_efficient_attention(query, key, value):
                return efficient_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)
            if runs_math_attention(query, key, value, enable_gqa):  # what CUDA runs, dropout mask and all
                return torch.ops.aten._scaled_dot_product_attention_math.default(
                    query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
                )[0]
            # CUDA flash / memory-efficient attention apply dropout inside the kernel, so the memory
            # is that of dropout_p=0; on CPU dropout_p > 0 would select the math path.
            dropout_p = 0.0
            backends = torch.backends.cuda
            if not backends.flash_sdp_enabled() and not backends.math_sdp_enabled():
                # The model pinned CUDA's memory-efficient or cuDNN kernel (torch.nn.attention.sdpa_kernel), which
                # the CPU has not: "No viable backend" blamed the model. CUDA runs the one pinned.
                if backends.mem_efficient_sdp_enabled() and not enable_gqa:
                    return efficient_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)
                backends.enable_flash_sdp(True)  # cuDNN's fused kernel holds what flash's does: traced as flash
                try:
                    return torch.ops.aten.scaled_dot_product_attention.default.decompose(
                        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
                finally:
                    backends.enable_flash_sdp(False)
        return torch.ops.aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )

    def _half_to_float_kernel(
        composite: torch._ops.OpOverload, fused: torch._ops.OpOverload
    ) -> Callable[..., torch.Tensor]:
        # SoftMax.cpp: on CUDA, fp16 input with dtype=float32 calls _softmax(input, dim,
        # half_to_float=True) without an fp32 copy of the input. The CPU kernel rejects
        # half_to_float, so only fake (or meta) tensors take this path.
        def kernel(input: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
            if (
                is_active()
                and input.dtype == torch.float16
                and dtype == torch.float32
                and (input.is_meta or is_fake(input))
            ):
                return fused(input, dim, True)
            return composite.decompose(input, dim, dtype)

        return kernel

    aten = torch.ops.aten
    yield "aten::dropout", _dropout, "AutogradCPU"
    yield "aten::scaled_dot_product_attention", _scaled_dot_product_attention, "AutogradCPU"
    yield "aten::softmax.int", _half_to_float_kernel(aten.softmax.int, aten._softmax.default), "AutogradCPU"
    yield (
        "aten::log_softmax.int",
        _half_to_float_kernel(aten.log_softmax.int, aten._log_softmax.default),
        "AutogradCPU",
    )
