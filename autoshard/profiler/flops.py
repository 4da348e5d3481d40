"""Counting a traced step's FLOPs: torch's ``FlopCounterMode`` plus the kernels it does not know.

torch's counter (``torch/utils/flop_counter.py``, torch 2.13) has formulas for matmuls, convolutions and the
CUDA attention kernels. The trace runs on CPU tensors, so three kinds of work a GPU does would count as zero:

* **Routed experts** (``aten::_grouped_mm``, which transformers 5 uses for every mixture-of-experts layer):
  :func:`grouped_mm_flops`, ``2·M·K·N`` summed over the groups — the same as one matmul over all the rows.
* **Attention**: a CPU trace runs ``aten::_scaled_dot_product_flash_attention_for_cpu`` (and its backward)
  where a GPU runs the flash or memory-efficient kernel. They are counted as torch 2.13 counts those CUDA
  kernels (``sdpa_flop_count``, ``sdpa_backward_flop_count`` in ``torch/utils/flop_counter.py``): forward
  ``QKᵀ`` and ``AV``, backward the scores recomputed plus four products (``dV``, ``dP``, ``dQ``, ``dK``), i.e.
  2.5 × forward. Grouped-query attention (fewer key / value heads than query heads) counts every query head,
  as the kernels compute them. The formulas are autoshard's own (:func:`attention_flops`,
  :func:`attention_backward_flops`): torch's before 2.13 refuse fewer key / value heads than query heads
  (torch 2.11: "sdpa_flop_count: query/key/value shapes are incompatible"), which failed every GQA model.
  Both targets take that kernel whenever the CPU flash kernel accepts the shapes (for ``"cuda"``,
  ``cuda_semantics`` re-dispatches SDPA with ``dropout_p=0``). Where the value head dim differs from the
  query one (DeepSeek's multi-head latent attention) the CPU flash kernel refuses the call; target ``"cuda"``
  then runs ``aten::_scaled_dot_product_efficient_attention`` on the fake tensors, as a GPU does, which
  torch's own table counts (forward ``2·S²·(d_qk + d_v)`` per head, backward ``2·S²·(3·d_qk + 2·d_v)``:
  2.5 × only when the head dims are equal). Target ``"cpu"`` runs its math path there, as with
  ``dropout_p > 0``: torch counts its ``bmm`` calls as they run, the forward as the kernel's, the backward
  without the recomputation (2 × forward). No op is counted twice: a fused kernel calls no other op and the
  math path calls no fused kernel.

* **LSTMs** (``aten::mkldnn_rnn_layer`` and its backward, which ``nn.LSTM`` runs on a CPU, a call per layer and
  direction): :func:`rnn_layer_flops`, every token through the gate weights, backward 2 × forward. GRU and RNN
  layers run as ``mm`` / ``addmm`` there and torch counts them. The op census files each LSTM time step as a
  kernel of the batch by the hidden state (:func:`autoshard.profiler.op_census` ``_recurrence``): a GPU runs
  them one after the other.

* **FFTs** (``aten::_fft_r2c``, ``_fft_c2r``, ``_fft_c2c``: ``torch.fft``, in spectral layers such as a Fourier
  neural operator's or FNet's token mixing): :func:`fft_flops`, the convention of FFTW's benchmarks, ``5·N·log2 N``
  per complex transform of ``N`` points and ``2.5·N·log2 N`` per real one (M. Frigo and S. G. Johnson, benchFFT,
  "FFT Benchmark Methodology", fftw.org/speed/method.html). torch 2.13 has no formula for them: a spectral
  layer's transforms counted 0 FLOPs. The op census files them as kernels of their own kind (``fft``), which the
  step-time model prices by their bytes at the memory bandwidth or their FLOPs at the fp32 rate, whichever is
  longer: at a few FLOPs per byte they are memory-bound.

* **Complex matmuls** (``mm``, ``bmm``, ``addmm``, ``baddbmm`` of ``complex64`` / ``complex128`` tensors, e.g. a
  spectral layer's ``einsum`` over its complex weights): torch's formulas count ``2·M·K·N`` whatever the dtype,
  while a complex multiply-add is four real multiplies and four real adds: :data:`FLOP_FORMULAS` counts them 4 ×.

One of its formulas is wrong: the weight gradient of a grouped (e.g. depthwise) convolution counts every input
channel for each output channel, ``groups`` times the work (:func:`conv_backward_flops` corrects it).

**Causal attention is counted over the full ``S × S`` score matrix, not halved**, as torch's formulas do (its
comment: "We aren't accounting for causal attention here"). That is the MFU convention of PaLM (Chowdhery et
al. 2022, arXiv 2204.02311, appendix B: ``6·N + 12·L·H·Q·T`` per token counts full attention) and of
Megatron-LM (Narayanan et al. 2021, arXiv 2104.04473, section 5.1: the ``s/6h`` term of
``96·B·s·l·h²·(1 + s/6h + V/16lh)`` is the full product), so throughput computed from these FLOPs compares
with published MFU figures. A causal flash kernel skips the masked blocks and does about half the ``S × S``
work: the op census records that share (:func:`autoshard.profiler.op_census.causal_work_fraction`) for the
step-time model to price, and leaves the count itself whole. One difference remains: those conventions take the
attention backward as 2 × forward, while the kernels' backward recomputes the scores (2.5 ×), and this count is of
the work the kernels do (as it counts the recomputation of activation checkpointing). Per layer and sequence the
step counts ``14·S²·H·d`` where PaLM counts ``12·S²·H·d``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["FFT_OPS", "FLOP_FORMULAS", "attention_backward_flops", "attention_flops", "conv_backward_flops",
           "counter", "fft_flops", "grouped_mm_flops", "rnn_layer_flops", "uncounted_line"]

aten = torch.ops.aten


def grouped_mm_flops(a_shape: torch.Size, b_shape: torch.Size, *args: Any,
                     out_shape: torch.Size | None = None, **kwargs: Any) -> int:
    """FLOPs of ``aten::_grouped_mm`` (layouts as in :func:`autoshard.profiler.fake_ops.grouped_mm_meta`).

    Every row the offsets cover is one row of a matmul with the contraction ``K``: 2D × 3D ``(M, K)`` ×
    ``(G, K, N)`` is ``2·M·K·N``; 2D × 2D ``(K, M)`` × ``(M, N)`` (the weight gradient, grouped along ``M``)
    is ``2·K·M·N``; 3D × 2D and 3D × 3D are ``2·K`` per output element. Rows past the last offset (none in
    transformers without expert parallelism) are counted as computed.
    """
    if out_shape is None:
        raise ValueError("grouped_mm_flops needs the output shape.")
    if len(a_shape) == 2 and len(b_shape) == 2:
        k, m = a_shape
        return 2 * k * m * b_shape[1]
    return 2 * math.prod(out_shape) * a_shape[-1]


def _attention_dims(query: torch.Size, key: torch.Size, value: torch.Size) -> tuple[int, int, int, int, int]:
    """``(batch × query heads, s_q, s_k, d_qk, d_v)`` of ``(b, h, s, d)`` inputs; key / value heads may divide
    the query heads (grouped-query attention: the kernels compute every query head)."""
    b, h_q, s_q, d_q = query
    b_k, h_kv, s_k, d_k = key
    b_v, h_v, s_v, d_v = value
    if not (b == b_k == b_v and h_kv == h_v and d_q == d_k and s_k == s_v):
        raise ValueError(f"attention FLOPs: incompatible shapes q={tuple(query)}, k={tuple(key)}, "
                         f"v={tuple(value)}.")
    if h_kv < 1 or h_q % h_kv:
        raise ValueError(f"attention FLOPs: {h_q} query heads are not a multiple of {h_kv} key / value heads.")
    return b * h_q, s_q, s_k, d_q, d_v


def attention_flops(query: torch.Size, key: torch.Size, value: torch.Size) -> int:
    """FLOPs of a fused attention forward: ``QKᵀ`` and ``AV`` over the full score matrix.

    Example:
        >>> attention_flops((1, 8, 16, 64), (1, 2, 16, 64), (1, 2, 16, 64))  # GQA: all 8 query heads
        524288
    """
    bh, s_q, s_k, d_qk, d_v = _attention_dims(query, key, value)
    return 2 * bh * s_q * s_k * (d_qk + d_v)


def attention_backward_flops(grad_out: torch.Size, query: torch.Size, key: torch.Size, value: torch.Size) -> int:
    """FLOPs of a fused attention backward: the scores recomputed (``QKᵀ``), then ``dP = dO·Vᵀ``,
    ``dV = Pᵀ·dO``, ``dQ = dS·K`` and ``dK = dSᵀ·Q``; 2.5 × the forward when the head dims are equal.

    Example:
        >>> attention_backward_flops((1, 8, 16, 64), (1, 8, 16, 64), (1, 2, 16, 64), (1, 2, 16, 64))
        1310720
    """
    bh, s_q, s_k, d_qk, d_v = _attention_dims(query, key, value)
    if tuple(grad_out) != (query[0], query[1], s_q, d_v):
        raise ValueError(f"attention FLOPs: grad_out {tuple(grad_out)} does not match q={tuple(query)}, "
                         f"v={tuple(value)}.")
    return 2 * bh * s_q * s_k * (3 * d_qk + 2 * d_v)


def _flash_cpu_flops(query: torch.Size, key: torch.Size, value: torch.Size, *args: Any,
                     out_shape: Any = None, **kwargs: Any) -> int:
    """``_scaled_dot_product_flash_attention_for_cpu(query, key, value, ...)`` as the CUDA flash kernel."""
    return attention_flops(query, key, value)


def _flash_cpu_backward_flops(grad_out: torch.Size, query: torch.Size, key: torch.Size, value: torch.Size,
                              *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """``_scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, ...)`` as the CUDA
    flash kernel's backward."""
    return attention_backward_flops(grad_out, query, key, value)


def conv_backward_flops(grad_out_shape: torch.Size, x_shape: torch.Size, w_shape: torch.Size, bias: Any,
                        stride: Any, padding: Any, dilation: Any, transposed: bool, output_padding: Any,
                        groups: int, output_mask: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """FLOPs of ``aten::convolution_backward``: torch's formula (``conv_backward_flop``), with the weight
    gradient of a grouped convolution divided by its ``groups``.

    torch 2.13 computes the weight gradient as a convolution of the input with the output gradient, their batch
    and channel dimensions swapped, over every input channel: right for ``groups=1``, ``groups`` times too much
    otherwise (each output channel sees ``C_in / groups`` input channels, as the forward formula counts):
    ConvNeXt-T's convolutions (depthwise 7×7) counted 51.9 GFLOP in backward against 0.59 in forward, and its
    step 77.5 GFLOP where forward + 2 × forward is 26.7. The input gradient is counted as torch does.

    Example:
        >>> x, w, out = torch.Size([1, 8, 4, 4]), torch.Size([8, 1, 3, 3]), torch.Size([1, 8, 4, 4])
        >>> args = (out, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 8)
        >>> conv_backward_flops(*args, [False, True, False], out_shape=(None, w, None))  # 2·N·H·W·C·9
        2304
    """
    from torch.utils.flop_counter import conv_backward_flop

    torch_formula: Callable[..., int] = conv_backward_flop  # as registered: wrapped to take out_val
    common = (grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed, output_padding, groups)
    grad_input = torch_formula(*common, [bool(output_mask[0]), False, False], out_val=out_shape)
    grad_weight = torch_formula(*common, [False, bool(output_mask[1]), False], out_val=out_shape)
    return int(grad_input) + int(grad_weight) // max(1, int(groups))


def rnn_layer_flops(input_shape: torch.Size, w_ih: torch.Size, w_hh: torch.Size, *args: Any,
                    out_shape: Any = None, **kwargs: Any) -> int:
    """FLOPs of ``aten::mkldnn_rnn_layer``, one layer and direction of ``nn.LSTM`` on a CPU (oneDNN): at every
    step, the input and the hidden state times their gate weights (``w_ih``: ``gates·H × I``, ``w_hh``:
    ``gates·H × H``), ``2·(w_ih + w_hh)`` per token; the gates' elementwise work is left out, as torch leaves
    out a linear layer's bias. torch 2.13 has no formula for it: an LSTM counted 0 FLOPs.

    Example:
        >>> rnn_layer_flops(torch.Size([4, 8, 16]), torch.Size([128, 16]), torch.Size([128, 32]))  # 32 tokens
        393216
    """
    tokens = math.prod(input_shape) // w_ih[-1]  # (T, B, I), (B, T, I) or packed (sum of lengths, I)
    return 2 * tokens * (math.prod(w_ih) + math.prod(w_hh))


def _rnn_layer_backward_flops(input_shape: torch.Size, w_ih: torch.Size, w_hh: torch.Size, *args: Any,
                              out_shape: Any = None, **kwargs: Any) -> int:
    """``aten::mkldnn_rnn_layer_backward``: the input and hidden-state gradients and the two weight gradients,
    2 × the forward's products (:func:`rnn_layer_flops`), as for a linear layer."""
    return 2 * rnn_layer_flops(input_shape, w_ih, w_hh)


def fft_flops(shape: Sequence[int], dims: Sequence[int], *, complex_input: bool) -> int:
    """FLOPs of the FFTs of a tensor of ``shape`` over ``dims`` (the full signal's shape: a real transform's real
    side), by FFTW's convention: ``5·N·log2 N`` per complex transform of ``N = prod(shape[d] for d in dims)``
    points, ``2.5·N·log2 N`` per real one, times the transforms the other dimensions batch.

    Example:
        >>> fft_flops((2, 4, 16, 16), (2, 3), complex_input=True)  # 8 transforms of 256 points
        81920
        >>> fft_flops((2, 4, 16, 16), (2, 3), complex_input=False)
        40960
    """
    points = math.prod(int(shape[d]) for d in dims)
    if points <= 1:
        return 0
    transforms = math.prod(int(n) for n in shape) // points
    per_point = 5.0 if complex_input else 2.5
    return round(transforms * per_point * points * math.log2(points))


def _fft_r2c_flops(x_shape: torch.Size, dims: Sequence[int], *args: Any, out_shape: Any = None,
                   **kwargs: Any) -> int:
    """``aten::_fft_r2c(self, dim, normalization, onesided)``: a real transform of the input's points."""
    return fft_flops(x_shape, dims, complex_input=False)


def _fft_c2r_flops(x_shape: torch.Size, dims: Sequence[int], *args: Any, out_shape: Any = None,
                   **kwargs: Any) -> int:
    """``aten::_fft_c2r(self, dim, normalization, last_dim_size)``: a real transform of the output's points."""
    return fft_flops(out_shape if out_shape is not None else x_shape, dims, complex_input=False)


def _fft_c2c_flops(x_shape: torch.Size, dims: Sequence[int], *args: Any, out_shape: Any = None,
                   **kwargs: Any) -> int:
    """``aten::_fft_c2c(self, dim, normalization, forward)``: a complex transform of the input's points."""
    return fft_flops(x_shape, dims, complex_input=True)


FFT_OPS = frozenset({aten._fft_r2c, aten._fft_c2r, aten._fft_c2c})
"""The FFT ops :data:`FLOP_FORMULAS` counts (the op census files them as their own kind, ``fft``)."""


def _complex_times_four(op: Any) -> Callable[..., int]:
    """torch's formula for ``op`` (a matmul), times 4 when an operand is complex: a complex multiply-add is four
    real multiplies and four real adds. Takes the raw arguments (``_get_raw``), to see the dtype."""
    from torch.utils.flop_counter import flop_registry

    torch_formula = flop_registry[op]  # torch's, as registered: wrapped to take the raw arguments

    def count(*args: Any, **kwargs: Any) -> int:
        flops = int(torch_formula(*args, **kwargs))
        complex_ = any(isinstance(a, torch.Tensor) and a.is_complex() for a in args)
        return 4 * flops if complex_ else flops

    count._get_raw = True  # type: ignore[attr-defined]  # FlopCounterMode passes the tensors, not their shapes
    return count


FLOP_FORMULAS: dict[Any, Callable[..., int]] = {
    aten._grouped_mm: grouped_mm_flops,
    aten.convolution_backward: conv_backward_flops,
    aten._scaled_dot_product_flash_attention_for_cpu: _flash_cpu_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _flash_cpu_backward_flops,
    aten.mkldnn_rnn_layer: rnn_layer_flops,
    aten.mkldnn_rnn_layer_backward: _rnn_layer_backward_flops,
    aten._fft_r2c: _fft_r2c_flops,
    aten._fft_c2r: _fft_c2r_flops,
    aten._fft_c2c: _fft_c2c_flops,
    **{op: _complex_times_four(op) for op in (aten.mm, aten.bmm, aten.addmm, aten.baddbmm)},
}
"""Formulas added to torch's, by op (``FlopCounterMode(custom_mapping=...)``; they receive shapes)."""


def counter(*, census: bool = False) -> FlopCounterMode:
    """A ``FlopCounterMode`` (no display) that also counts :data:`FLOP_FORMULAS`' ops; with ``census``, a
    :class:`~autoshard.profiler.op_census.CensusCounter` that also takes the step's op census.

    A formula that fails (torch's or autoshard's) raises :class:`~autoshard.errors.InternalError`: it runs
    while the user's forward is on the stack, and is not the user's fault.
    """
    mode: FlopCounterMode
    if census:
        from autoshard.profiler.op_census import CensusCounter

        mode = CensusCounter(display=False, custom_mapping=FLOP_FORMULAS)
    else:
        mode = FlopCounterMode(display=False, custom_mapping=FLOP_FORMULAS)
    mode.flop_registry = {op: _guarded(op, formula) for op, formula in mode.flop_registry.items()}
    return mode


def _guarded(op: Any, formula: Callable[..., int]) -> Callable[..., int]:
    def count(*args: Any, **kwargs: Any) -> int:
        try:
            return formula(*args, **kwargs)
        except Exception as exc:  # any failure of a formula is autoshard's (or torch's), never the model's
            from autoshard.errors import InternalError

            raise InternalError(f"counting the FLOPs of {op}: {type(exc).__name__}: {exc}") from exc

    return count


def uncounted_line(ops: tuple[str, ...]) -> str | None:
    """The "Assumed:" line of a profile or plan whose step ran custom ops (``torch.library``) without a FLOP
    formula: they count 0 FLOPs and are priced as memory-bound kernels, by their bytes (a probe's custom matmul
    left 26 % of a model's FLOPs out, silently); ``None`` when there were none.

    Example:
        >>> uncounted_line(("mylib::mm",))[:60]
        'Assumed: custom ops without a FLOP formula count 0 FLOPs (my'
    """
    if not ops:
        return None
    first = ops[0].replace("::", ".")
    return (f"Assumed: custom ops without a FLOP formula count 0 FLOPs ({', '.join(ops[:4])}"
            f"{', ...' if len(ops) > 4 else ''}) and are priced by the bytes they move, as elementwise kernels: "
            "right for an activation, far under for a matmul or attention. Register a formula in the model file, "
            f"e.g. @torch.utils.flop_counter.register_flop_formula(torch.ops.{first}) on a function of the argument "
            "shapes returning the FLOPs.")
