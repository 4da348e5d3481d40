"""CUDA kernel and autocast semantics for a training step traced on CPU tensors.

The profiler traces a step on CPU tensors (usually fake ones) but must report what a CUDA GPU
would allocate. CPU and CUDA differ where memory is concerned in three ways, and
:class:`CudaSemantics` makes the CPU follow CUDA in each while it is active:

* ``aten::dropout`` in training: CUDA runs the fused ``native_dropout`` and saves a bool mask
  (1 byte/element); CPU saves a mask in the input's dtype (4 bytes/element in fp32).
* ``aten::scaled_dot_product_attention`` with ``dropout_p > 0``: CUDA's flash and
  memory-efficient kernels regenerate the dropout mask from a Philox seed and keep no
  ``s x s`` tensor; CPU falls back to the math path, which materialises the attention matrix
  and a float mask. Likewise a value head dim other than the query/key one (DeepSeek's
  multi-head latent attention): CUDA's memory-efficient kernel takes it, CPU's flash kernel
  refuses it. The other way round, grouped-query attention in fp32: CPU's flash kernel takes it,
  no CUDA fused kernel does, and CUDA's math path keeps the attention probabilities. Also fp16
  ``softmax``/``log_softmax`` with ``dtype=torch.float32``: CUDA converts inside the kernel; CPU
  first makes an fp32 copy of the input.
* autocast: the CUDA autocast policy (which ops run in lower precision, which in fp32, which
  promote) is not the CPU one, and ``torch.autocast("cuda")`` is disabled on a CPU-only build.

Why the dispatcher and not a ``TorchFunctionMode``: CUDA autocast *is* a dispatcher key
(``AutocastCUDA``) with one kernel per ATen op; a ``TorchFunctionMode`` only sees Python-level
calls and is popped for the whole duration of each call it handles (``handle_torch_function``
in torch/overrides.py, torch 2.13), so it cannot see what ``F.multi_head_attention_forward``
or the C++ ``cross_entropy_loss`` call inside, nor honour ``torch.autocast(..., enabled=False)``
blocks in user code, and checkpoint recompute does not restore it. So, while a
:class:`CudaSemantics` is active, this module registers Python kernels with
``torch.library``: on ``AutocastCPU`` the CUDA policy for every op that has an
``AutocastCUDA`` kernel (and a fallthrough for the CPU-only ones), and on ``AutogradCPU`` the
CUDA kernel choices above. CPU autocast then behaves as CUDA autocast, including inside C++
composites and in the recompute of ``torch.utils.checkpoint`` (which restores the CPU
autocast state captured in forward).

Sources (torch 2.13.0):
    * ``torch/include/ATen/autocast_mode.h`` (installed): ``AT_FORALL_LOWER_PRECISION_FP``,
      ``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``,
      ``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE``, ``AT_FORALL_PROMOTE``, ``CastPolicy`` and
      the ``WrapFunction_`` wrappers; ``aten/src/ATen/autocast_mode.cpp``
      ``TORCH_LIBRARY_IMPL(aten, Autocast, m)`` and ``cached_cast``. The op set is
      cross-checked against ``torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastCUDA")``
      in tests/profiler/test_cuda_semantics.py.
    * ``aten/src/ATen/native/Dropout.cpp``: ``dropout`` / ``is_fused_kernel_acceptable``.
    * ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``: ``select_sdp_backend``,
      ``check_head_dim_size_flash``, ``can_use_mem_efficient_attention``; ``attention.cpp``:
      ``scaled_dot_product_attention``'s efficient-attention branch, ``preprocess_mask``. Read at
      upstream revisions (no tag pinned); the default order flash, efficient, math, cuDNN is the
      installed ``ATen/Context.h``'s ``sdp_priority_order``.
    * ``aten/src/ATen/native/SoftMax.cpp``: ``softmax`` / ``log_softmax`` with ``dtype``.
"""

from __future__ import annotations

import contextlib
import enum
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch

from autoshard.profiler.cuda_autocast_policy import (
    APPEND_DTYPE_TARGETS,
    CUDA_AUTOCAST_POLICIES,
    CastPolicy,
)
from autoshard.profiler.cuda_kernel_choices import kernel_choices
from autoshard.profiler.kernel_overrides import KernelOverrides

__all__ = ["CUDA_AUTOCAST_POLICIES", "CastPolicy", "CudaSemantics", "kernels_registered"]


_AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)
_NO_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


class CudaSemantics:
    """Makes a step on CPU (real or fake) tensors allocate what it would on a CUDA GPU.

    While active (in this thread): training-mode dropout saves a bool mask like CUDA's fused
    ``native_dropout``; ``scaled_dot_product_attention`` runs the CPU flash kernel with
    ``dropout_p`` set to 0 (CUDA flash / memory-efficient kernels keep no ``s x s`` tensor with
    or without dropout, only a Philox seed and offset, which are not modelled), or, on fake
    tensors whose value head dim differs from the query one, the memory-efficient kernel; fp16
    ``softmax``/``log_softmax`` with ``dtype=torch.float32`` skips the fp32 copy of its input
    (fake tensors only: the CPU kernel has no such path); and CPU autocast follows the CUDA
    policy, so ``torch.autocast("cpu", dtype=...)`` behaves as ``torch.autocast("cuda", ...)``.

    With ``autocast_dtype`` set, the context is also an autocast region, as if the code ran
    under ``torch.autocast("cuda", dtype=autocast_dtype)``. Autocast caches the lower-precision
    copies of leaf fp32 tensors that require grad (the weights) until the outermost region
    exits; nested regions (:meth:`autocast_enabled`, or ``torch.autocast("cpu")`` in user code)
    share that cache. Casts made outside any region (a bare ``torch.autocast("cpu")`` block
    inside :meth:`autocast_disabled`, such as the autocast state that checkpoint recompute
    restores by itself) are not cached: each use makes its own copy.

    Run the whole step, backward included, inside: activation-checkpoint recompute happens
    during backward and needs the kernels. The recommended training-loop pattern, autocast
    around forward and loss only, reads::

        semantics = CudaSemantics(torch.bfloat16)
        with semantics:
            loss = loss_fn(model(batch))
            with semantics.autocast_disabled():
                loss.backward()

    The kernels are registered process-wide while any instance is active; CPU autocast in
    another thread of the same process sees the CUDA policy meanwhile. An instance can be
    entered again after it exits, but not while it is active.

    Args:
        autocast_dtype: ``torch.bfloat16`` or ``torch.float16`` to open an autocast region,
            or ``None`` for CUDA kernel semantics only.

    Raises:
        ValueError: if ``autocast_dtype`` is not ``None``, ``torch.bfloat16`` or
            ``torch.float16``.

    Example:
        >>> import torch
        >>> from autoshard.profiler.cuda_semantics import CudaSemantics
        >>> with CudaSemantics(torch.bfloat16):
        ...     torch.exp(torch.ones(2, dtype=torch.bfloat16)).dtype  # exp is on CUDA's fp32 list
        torch.float32
    """

    def __init__(self, autocast_dtype: torch.dtype | None = None) -> None:
        if autocast_dtype is not None and autocast_dtype not in _AUTOCAST_DTYPES:
            raise ValueError(
                f"autocast_dtype must be None, torch.bfloat16 or torch.float16, but got {autocast_dtype=}."
            )
        self.autocast_dtype = autocast_dtype
        self._exit_stack: contextlib.ExitStack | None = None

    def __enter__(self) -> CudaSemantics:
        if self._exit_stack is not None:
            raise RuntimeError("this CudaSemantics is already active; nest a new instance instead.")
        with contextlib.ExitStack() as stack:
            _KERNELS.acquire()
            stack.callback(_KERNELS.release)
            _active_in_thread().append(self)
            stack.callback(_active_in_thread().remove, self)
            if self.autocast_dtype is not None:
                # torch.autocast sets the enabled flag, the dtype, the nesting counter and the
                # cache flag as torch.autocast("cuda") would on a GPU (torch/amp/autocast_mode.py).
                stack.enter_context(torch.autocast("cpu", dtype=self.autocast_dtype))
                stack.enter_context(_region_frame(_Frame.OPEN))
            self._exit_stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            stack.__exit__(*exc_info)

    def autocast_is_enabled(self) -> bool:
        """Whether ops called now in this thread are autocast (always ``False`` when inactive)."""
        return self in _active_in_thread() and torch.is_autocast_enabled("cpu")

    @contextlib.contextmanager
    def autocast_enabled(self, enabled: bool = True) -> Iterator[None]:
        """Runs a block with autocast on (in ``autocast_dtype``) or off.

        Like a nested ``torch.autocast("cuda", enabled=enabled)`` block: it shares the cast
        cache of the region it is in. Turned on where no region is open (inside
        :meth:`autocast_disabled`, e.g. the recompute of a checkpointed block during backward),
        it opens a region of its own whose cache is dropped when the block ends, as the
        recompute's own autocast block does on a GPU.

        Raises:
            RuntimeError: if this instance is not active in this thread.
            ValueError: if ``enabled`` but the instance has no ``autocast_dtype``.
        """
        self._require_active()
        if enabled and self.autocast_dtype is None:
            raise ValueError("autocast_enabled(True) needs CudaSemantics(autocast_dtype=...), but got None.")
        with (
            torch.autocast("cpu", dtype=self.autocast_dtype, enabled=enabled),
            _region_frame(_Frame.OPEN if enabled else _Frame.INHERIT),
        ):
            yield

    @contextlib.contextmanager
    def autocast_disabled(self) -> Iterator[None]:
        """Runs a block outside the autocast region, as code after a ``torch.autocast`` block.

        No op is autocast and the region's cast cache is set aside; the CUDA kernel semantics
        stay on. Meant for ``loss.backward()`` in the recommended training-loop pattern.

        Raises:
            RuntimeError: if this instance is not active in this thread.
        """
        self._require_active()
        with torch.autocast("cpu", enabled=False), _region_frame(_Frame.STEP_OUT):
            yield

    def _require_active(self) -> None:
        if self not in _active_in_thread():
            raise RuntimeError("enter the CudaSemantics (`with semantics:`) before changing its autocast state.")


# --- thread-local state --------------------------------------------------------------------

_LOCAL = threading.local()
_CastCache = dict[int, tuple["weakref.ref[torch.Tensor]", torch.Tensor]]


class _Frame(enum.Enum):
    OPEN = "open"  # an autocast region: shares the enclosing region's cache, or starts one
    INHERIT = "inherit"  # a nested block that changes nothing about the cache
    STEP_OUT = "step_out"  # outside any region until the block ends


def _active_in_thread() -> list[CudaSemantics]:
    if not hasattr(_LOCAL, "active"):
        _LOCAL.active = []
    return _LOCAL.active


def _is_active() -> bool:
    return bool(getattr(_LOCAL, "active", None))


def _regions() -> list[_CastCache | None]:
    """One entry per open region frame; the last is the current cache, ``None`` outside regions."""
    if not hasattr(_LOCAL, "regions"):
        _LOCAL.regions = []
    return _LOCAL.regions


@contextlib.contextmanager
def _region_frame(frame: _Frame) -> Iterator[None]:
    regions = _regions()
    current = regions[-1] if regions else None
    owned: _CastCache | None = None
    if frame is _Frame.STEP_OUT:
        regions.append(None)
    elif frame is _Frame.OPEN and current is None:
        owned = {}
        regions.append(owned)
    else:
        regions.append(current)
    try:
        yield
    finally:
        regions.pop()
        if owned is not None:
            # autocast_mode.cpp clear_cache(): dropped when the outermost region exits.
            owned.clear()


def _region_cache() -> _CastCache | None:
    regions = getattr(_LOCAL, "regions", None)
    return regions[-1] if regions else None


# --- autocast kernels (CUDA policy on the AutocastCPU key) ---------------------------------


def _is_eligible(value: object) -> bool:
    # at::autocast::is_eligible with the CUDA device check read as "CPU": the emulation runs
    # on CPU tensors in place of CUDA ones.
    return (
        isinstance(value, torch.Tensor)
        and value.device.type == "cpu"
        and value.is_floating_point()
        and value.dtype != torch.float64
    )


def _cached_cast(to_dtype: torch.dtype, value: Any, lower_dtype: torch.dtype) -> Any:
    """``at::autocast::cached_cast`` (autocast_mode.cpp, torch 2.13)."""
    if not _is_eligible(value) or value.dtype == to_dtype:
        return value
    can_cache = (
        to_dtype == lower_dtype
        and value.dtype == torch.float32
        and value.requires_grad
        and value.is_leaf
        and not value._is_view()
        and torch.is_autocast_cache_enabled()
    )
    cache = _region_cache() if can_cache else None
    if cache is None:
        return value.to(to_dtype)
    hit = cache.get(id(value))
    if hit is not None and hit[0]() is value:
        return hit[1]
    casted = value.to(to_dtype)
    cache[id(value)] = (weakref.ref(value), casted)
    return casted


def _argument_kind(argument: torch._C.Argument) -> str | None:
    """``"tensor"``, ``"optional"`` or ``"list"`` for Tensor, Tensor? and Tensor[] arguments."""
    type_ = argument.type
    if isinstance(type_, torch._C.TensorType):
        return "tensor"
    if isinstance(type_, torch._C.OptionalType) and isinstance(type_.getElementType(), torch._C.TensorType):
        return "optional"
    if isinstance(type_, torch._C.ListType) and isinstance(type_.getElementType(), torch._C.TensorType):
        return "list"
    return None  # includes Tensor?[] (index_put's indices), which autocast leaves alone


class _BoundCall:
    """An op's arguments, one value per schema argument, defaults filled in."""

    def __init__(self, op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.arguments = op._schema.arguments
        self.values: list[Any] = []
        for index, argument in enumerate(self.arguments):
            if not argument.kwarg_only and index < len(args):
                self.values.append(args[index])
            elif argument.name in kwargs:
                self.values.append(kwargs[argument.name])
            else:
                self.values.append(argument.default_value)

    def call(self, op: torch._ops.OpOverload, **extra_kwargs: Any) -> Any:
        positional = [v for a, v in zip(self.arguments, self.values, strict=True) if not a.kwarg_only]
        keywords = {a.name: v for a, v in zip(self.arguments, self.values, strict=True) if a.kwarg_only}
        return op(*positional, **keywords, **extra_kwargs)

    def cast_tensors(self, to_dtype: torch.dtype, lower_dtype: torch.dtype) -> None:
        for index, argument in enumerate(self.arguments):
            kind, value = _argument_kind(argument), self.values[index]
            if kind in ("tensor", "optional"):
                self.values[index] = _cached_cast(to_dtype, value, lower_dtype)
            elif kind == "list":
                self.values[index] = [_cached_cast(to_dtype, v, lower_dtype) for v in value]

    def promote_dtype(self, lower_dtype: torch.dtype) -> torch.dtype:
        """``at::autocast::promote_type``: Tensor and Tensor[] arguments count, Tensor? not."""
        current = lower_dtype
        for argument, value in zip(self.arguments, self.values, strict=True):
            kind = _argument_kind(argument)
            tensors = [value] if kind == "tensor" else value if kind == "list" else []
            for tensor in tensors:
                if not _is_eligible(tensor):
                    continue
                if current == torch.float32 or tensor.dtype == torch.float32:
                    current = torch.float32
                elif tensor.dtype != lower_dtype:
                    raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
        return current

    def first_tensor(self) -> Any:
        return self.values[0]


def _resolve(qualified_name: str) -> torch._ops.OpOverload:
    namespace, _, name = qualified_name.partition("::")
    packet_name, _, overload = name.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet_name), overload or "default")


def _autocast_kernel(qualified_name: str, policy: CastPolicy) -> Callable[..., Any]:
    """A Python kernel for ``AutocastCPU`` applying ``policy`` as ``AutocastCUDA`` would."""
    op = _resolve(qualified_name)
    if policy is CastPolicy.BANNED:

        def banned(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(
                "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss raise under CUDA "
                "autocast (aten/src/ATen/autocast_mode.cpp); use binary_cross_entropy_with_logits "
                "or torch.nn.BCEWithLogitsLoss."
            )

        return banned

    dtype_index = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"), None)
    if policy is CastPolicy.FP32_SET_OPT_DTYPE and dtype_index is None:
        raise AssertionError(f"{qualified_name} has no dtype argument to set")
    redispatch = _resolve(APPEND_DTYPE_TARGETS[qualified_name]) if policy is CastPolicy.FP32_APPEND_DTYPE else op

    def kernel(*args: Any, **kwargs: Any) -> Any:
        bound = _BoundCall(op, args, kwargs)
        lower_dtype = torch.get_autocast_dtype("cpu")
        with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
            if policy is CastPolicy.LOWER_PRECISION:
                bound.cast_tensors(lower_dtype, lower_dtype)
            elif policy is CastPolicy.FP32:
                bound.cast_tensors(torch.float32, lower_dtype)
            elif policy is CastPolicy.PROMOTE:
                bound.cast_tensors(bound.promote_dtype(lower_dtype), lower_dtype)
            elif policy is CastPolicy.FP32_SET_OPT_DTYPE:
                # An explicit dtype is respected; an ineligible first argument leaves the call alone.
                index = cast(int, dtype_index)  # checked above for this policy
                if _is_eligible(bound.first_tensor()) and bound.values[index] is None:
                    bound.values[index] = torch.float32
            elif policy is CastPolicy.FP32_APPEND_DTYPE:
                first = bound.first_tensor()
                out_dtype = torch.float32 if _is_eligible(first) else first.dtype
                return bound.call(redispatch, dtype=out_dtype)
            return bound.call(op)

    return kernel


# --- registration ----------------------------------------------------------------------------


_cpu_only_found: tuple[int, tuple[str, ...]] = (-1, ())


def _cpu_only_autocast_ops() -> tuple[str, ...]:
    """ATen ops with an AutocastCPU kernel but none on AutocastCUDA: CUDA falls through.

    Asking the dispatcher about each of its ~3,100 ``aten`` ops takes ~10 ms; the answer is kept until an op
    is registered (the count of op names changes)."""
    global _cpu_only_found
    names = torch._C._dispatch_get_all_op_names()
    if _cpu_only_found[0] != len(names):
        _cpu_only_found = (len(names), tuple(
            name
            for name in names
            if name.startswith("aten::")
            and name not in CUDA_AUTOCAST_POLICIES
            and torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU")
        ))
    return _cpu_only_found[1]


def _kernel_table() -> Iterator[tuple[str, Callable[..., Any], str]]:
    for name in _cpu_only_autocast_ops():
        yield name, torch.library.fallthrough_kernel, "AutocastCPU"
    for name, policy in CUDA_AUTOCAST_POLICIES.items():
        yield name, _autocast_kernel(name, policy), "AutocastCPU"
    yield from kernel_choices(_is_active)


_KERNELS = KernelOverrides(lambda: (
    (name.removeprefix("aten::"), kernel, key) for name, kernel, key in _kernel_table()
))


@contextlib.contextmanager
def kernels_registered() -> Iterator[None]:
    """Keep the CUDA-semantics kernels registered for the whole block, so that the :class:`CudaSemantics`
    regions entered inside it (forward and backward of every step of a trace) do not each register ~200
    kernels and remove them again. Outside a region the kernels behave as ATen's own, but for CPU autocast:
    while they are registered, ``torch.autocast("cpu")`` anywhere in the process follows CUDA's op lists (as
    inside :class:`CudaSemantics`)."""
    _KERNELS.acquire()
    try:
        yield
    finally:
        _KERNELS.release()

