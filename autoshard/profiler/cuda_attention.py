"""CUDA's attention kernel choice where it differs from the CPU's, used by :mod:`autoshard.profiler.cuda_semantics`
while tracing for a CUDA target: the memory-efficient kernel for calls the CPU flash kernel refuses (DeepSeek's
multi-head latent attention), and the math path for calls no CUDA fused kernel takes but the CPU flash kernel does
(grouped-query attention in fp32).

Sources (torch 2.13): ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` (``select_sdp_backend``,
``check_head_dim_size_flash``, ``check_head_dim_size_mem_efficient``, ``can_use_mem_efficient_attention``,
``check_prefer_cudnn_attention``, ``check_cudnn_tensor_shapes``) and
``aten/src/ATen/native/transformers/attention.cpp`` (the efficient branch of ``scaled_dot_product_attention``:
``convert_boolean_attn_mask``, ``preprocess_mask``, ``should_compute_logsumexp``); the backend order from the
installed ``ATen/Context.h``; the installed ``ATen/native/transformers/sdp_utils_cpp.h``
(``check_batch_size_and_num_heads_dense``: a kernel without grouped-query support needs equal heads). Measured on an
H200 with torch 2.11 (``benchmarks/sdpa_probe.py``, ``docs/benchmarks/gpu_2026-11-28/sdpa_probe.json``):
``torch._fused_sdp_choice`` names the math backend for Mistral's fp32 call (32 query / 8 key heads,
``enable_gqa=True``, no mask, causal), the memory-efficient one for Llama-2's (32 / 32), cuDNN's for Mistral's in
bf16.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

__all__ = ["efficient_attention", "runs_math_attention", "takes_efficient_attention"]

_HALF_DTYPES = (torch.bfloat16, torch.float16)


def takes_efficient_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether CUDA runs memory-efficient attention where the CPU flash kernel refuses the call.

    The CPU flash kernel needs one head dim for q, k and v; CUDA's flash kernel too
    (``check_head_dim_size_flash``), but the memory-efficient one only needs ``d_qk`` (q and k)
    and ``d_v`` aligned (``check_head_dim_size_mem_efficient``): DeepSeek's multi-head latent
    attention (``d_qk`` 192, ``d_v`` 128). Its op has a meta kernel but no CPU one: fake tensors only.
    On sm90 / sm100 with a cuDNN runtime above 9.15.0 torch tries cuDNN first
    (``check_prefer_cudnn_attention``), which takes (192, 128) from cuDNN 9.11 on
    (``check_cudnn_tensor_shapes``) and saves the same: output, fp32 logsumexp, seed and offset.
    """
    if value.dim() != 4 or value.size(-1) == query.size(-1) or query.dim() != 4 or key.dim() != 4:
        return False
    tensors = (query, key, value)
    if not all(t.is_meta or is_fake(t) for t in tensors):
        return False
    # sdp_utils.cpp can_use_mem_efficient_attention on sm80+ (see Sources): fp32 / fp16 / bf16;
    # head dims and storage offsets aligned to minimum_gemm_alignment (8 elements for 16-bit,
    # 4 for fp32); last-dim stride 1; non-empty sequences; equal batch and heads. enable_gqa with
    # fewer key/value heads is left to the math path: the op's meta backward assumes equal heads.
    alignment = 8 if query.dtype in _HALF_DTYPES else 4
    return (
        query.dtype in (*_HALF_DTYPES, torch.float32)
        and query.size(-1) == key.size(-1)
        and all(t.size(-1) > 0 and t.size(-1) % alignment == 0 for t in (query, value))
        and all(t.storage_offset() % alignment == 0 and t.stride(-1) == 1 for t in tensors)
        and query.size(2) > 0
        and key.size(2) > 0
        and query.shape[:2] == key.shape[:2] == value.shape[:2]
    )


def runs_math_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, enable_gqa: bool) -> bool:
    """Whether CUDA runs the math path (``_scaled_dot_product_attention_math``) for a call the CPU flash kernel takes.

    Grouped-query attention (fewer key / value heads than query heads, ``enable_gqa=True``, as transformers passes it
    when there is no mask) in fp32: flash and cuDNN attention take 16-bit inputs only, and the memory-efficient
    kernel, the one fused kernel for fp32, has no grouped-query support (it needs equal heads). The math path repeats
    the key and value heads and keeps the ``b x heads x s x s`` probabilities for backward, where a fused kernel keeps
    the output and a logsumexp row per query. In 16-bit the flash or cuDNN kernel takes the call.
    """
    if not enable_gqa or query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return False
    return query.dtype == torch.float32 and (key.size(-3) != query.size(-3) or value.size(-3) != query.size(-3))


def efficient_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
) -> torch.Tensor:
    """``scaled_dot_product_attention``'s efficient-attention branch (attention.cpp, see Sources).

    Saved for backward: q, k, v, the mask, the output, a fp32 logsumexp of ``(b, h, s)`` rows
    padded to a multiple of 32, and the Philox seed and offset (dropout is regenerated).
    """
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:  # convert_boolean_attn_mask: additive, in q's dtype
            zero = torch.zeros((), dtype=query.dtype, device=attn_mask.device)
            attn_mask = torch.where(attn_mask.logical_not(), float("-inf"), zero)
        # preprocess_mask: pad_bias<8> unless every stride but the last (which must be 1) is a
        # multiple of 8, then expand to (b, h, s_q, s_k).
        strides = attn_mask.stride()
        if strides[-1] != 1 or any(stride % 8 for stride in strides[:-1]):
            length = attn_mask.size(-1)
            attn_mask = torch.nn.functional.pad(attn_mask, (0, 8 - length % 8))[..., :length]
        attn_mask = attn_mask.expand(query.size(0), query.size(1), query.size(2), key.size(2))
    # should_compute_logsumexp: only when a gradient is wanted.
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    return torch.ops.aten._scaled_dot_product_efficient_attention.default(
        query, key, value, attn_mask, needs_grad, dropout_p, is_causal, scale=scale
    )[0]
