"""Shape rules for ops whose fake (meta) kernel refuses what the real kernels run.

``aten::_grouped_mm`` (``torch._grouped_mm`` / ``F.grouped_mm``): transformers 5 runs every routed expert of a
mixture-of-experts model through it (``transformers/integrations/moe.py``, ``grouped_mm_experts_forward``),
after casting the tokens to the weights' dtype: fp32 under ``32-true``, ``bf16-mixed`` and ``16-mixed``
(autocast has no rule for the op: ``torch._C._dispatch_has_kernel_for_dispatch_key("aten::_grouped_mm",
"AutocastCUDA")`` is ``False``), bf16 under ``bf16-true``. torch 2.13's meta kernel
(``_meta_grouped_mm_common`` in ``torch/_meta_registrations.py``) accepts bf16 only, but the real kernels
accept fp32, bf16 and fp16:

* CUDA (``_grouped_mm_cuda``, ``aten/src/ATen/native/cuda/GroupedBlas.cpp``): bf16 inputs and output on sm90 /
  sm100 take the CUTLASS kernel; everything else takes ``_grouped_mm_fallback``, one ``mm_out`` per group into
  the output (``aten/src/ATen/native/GroupedMMUtils.h``), so no memory beyond the output.
* CPU (the ``CompositeExplicitAutograd`` kernel): the same validation, output and fallback.

Both check the inputs with ``_grouped_mm_validate_inputs``, take the output dtype from ``mat_a``
(``_resolve_grouped_mm_out_dtype``: an ``out_dtype`` other than ``mat_a``'s is refused) and allocate the
output with ``create_grouped_gemm_output_tensor``: its last dimension's stride padded to 16 bytes.
:func:`installed` registers :func:`grouped_mm_meta`, which does the same, as the op's ``Meta`` kernel while a
trace runs, and restores torch's own afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from autoshard.profiler.kernel_overrides import KernelOverrides

__all__ = ["grouped_mm_meta", "installed"]

_GROUPED_MM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""``_grouped_mm_validate_inputs`` (GroupedMMUtils.h, torch 2.13): Float32, BFloat16 or Float16."""
_ALIGNMENT_BYTES = 16
"""``check_valid_strides_and_return_transposed``, ``create_grouped_gemm_output_tensor``: 16-byte strides."""


def grouped_mm_meta(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The output of ``aten::_grouped_mm`` for any dtype the CUDA and CPU kernels accept.

    The four layouts (``offs`` splits the dimension written ``M``, ``N`` or ``K`` into groups):

    * 2D ``(M, K)`` × 3D ``(G, K, N)`` → ``(M, N)``: the experts' forward and the input gradient;
    * 2D ``(K, M)`` × 2D ``(M, N)`` → ``(G, K, N)``: the weight gradient;
    * 3D ``(G, M, K)`` × 2D ``(K, N)`` → ``(M, N)``;
    * 3D ``(G, M, K)`` × 3D ``(G, K, N)`` → ``(G, M, N)`` (a batched matmul, no ``offs``).

    Raises:
        RuntimeError: inputs the real kernels refuse, with their messages.
    """
    torch._check(mat_a.dtype in _GROUPED_MM_DTYPES,
                 lambda: f"Expected mat_a to be Float32, BFloat16 or Float16 matrix, got {mat_a.dtype}")
    torch._check(mat_b.dtype in _GROUPED_MM_DTYPES,
                 lambda: f"Expected mat_b to be Float32, BFloat16 or Float16 matrix, got {mat_b.dtype}")
    torch._check(mat_a.dim() in (2, 3), lambda: "mat_a has to be 2 or 3d")
    torch._check(mat_b.dim() in (2, 3), lambda: "mat_b has to be 2 or 3d")
    a_is_2d, b_is_2d = mat_a.dim() == 2, mat_b.dim() == 2
    if not (a_is_2d and b_is_2d):
        torch._check(mat_a.size(-1) == mat_b.size(-2),
                     lambda: "contraction dimension of mat_a and mat_b must match")
    _check_strides(mat_a)
    _check_strides(mat_b)
    torch._check((offs is not None) == (a_is_2d or b_is_2d),
                 lambda: "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are "
                         "3d")
    if offs is not None:
        torch._check(offs.dim() == 1, lambda: "offs has to be 1D")
        torch._check(offs.dtype == torch.int32, lambda: "Offsets have to be int32")
    torch._check(bias is None, lambda: "Bias not supported yet")
    dtype = mat_a.dtype if out_dtype is None else out_dtype
    torch._check(dtype == mat_a.dtype, lambda: "Grouped gemm output dtype must match `mat_a` dtype")
    groups = 0 if offs is None else offs.size(0)
    if a_is_2d and b_is_2d:
        size = [groups, mat_a.size(0), mat_b.size(1)]
    elif a_is_2d:
        torch._check(groups == mat_b.size(0), lambda: "matrix batch sizes have to match")
        size = [mat_a.size(0), mat_b.size(-1)]
    elif b_is_2d:
        torch._check(groups == mat_a.size(0), lambda: "matrix batch sizes have to match")
        size = [mat_a.size(1), mat_b.size(1)]
    else:
        torch._check(mat_a.size(0) == mat_b.size(0), lambda: "batched dimension has to match")
        size = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    alignment = _ALIGNMENT_BYTES // dtype.itemsize
    padded = (size[-1] + alignment - 1) // alignment * alignment
    stride = [padded, 1] if len(size) == 2 else [size[1] * padded, padded, 1]
    return torch.empty_strided(size, stride, dtype=dtype, device=mat_a.device)


def _check_strides(mat: torch.Tensor) -> None:
    """``check_valid_strides_and_return_transposed``: row- or column-major in the last two dimensions, the
    other stride a multiple of 16 bytes."""
    end = mat.dim() - 1
    sizes, strides = mat.shape, mat.stride()
    alignment = _ALIGNMENT_BYTES // mat.element_size()
    if strides[end - 1] == 1 and strides[end] >= max(1, sizes[end - 1]):
        torch._check(strides[end] % alignment == 0, lambda: "strides should be multiple of 16 bytes")
    elif strides[end] == 1 and strides[end - 1] >= max(1, sizes[end]):
        torch._check(strides[end - 1] % alignment == 0, lambda: "strides should be multiple of 16 bytes")
    else:
        torch._check(False, lambda: f"Invalid strides/sizes, got {list(strides)} for strides and "
                                    f"{list(sizes)} for sizes")


_KERNELS = (("_grouped_mm", grouped_mm_meta, "Meta"),)


_REGISTRATION = KernelOverrides(lambda: _KERNELS)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Use this module's shape rules for fake and meta tensors inside the block (process-wide; nestable).

    Example:
        >>> import torch
        >>> with installed():
        ...     a = torch.empty(6, 8, device="meta")
        ...     torch._grouped_mm(a, torch.empty(2, 8, 16, device="meta"),
        ...                       offs=torch.empty(2, dtype=torch.int32, device="meta")).shape
        torch.Size([6, 16])
    """
    _REGISTRATION.acquire()
    try:
        yield
    finally:
        _REGISTRATION.release()
