"""Registering Python kernels over ATen's for as long as a trace needs them, then restoring ATen's own.

:mod:`autoshard.profiler.cuda_semantics` (CUDA autocast and kernel choices) and :mod:`autoshard.profiler.fake_ops`
(shape rules for fake tensors) both override ATen kernels while a trace runs. Registration is process-wide and
counted: the kernels are registered when the first user acquires them and removed when the last releases them,
so nested or concurrent traces share one registration.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["KernelOverrides"]

KernelTable = Callable[[], Iterable[tuple[str, Callable[..., Any], str]]]
"""Returns ``(op name without "aten::", kernel, dispatch key)`` triples."""


class KernelOverrides:
    """Kernels registered on the ``aten`` library while at least one user holds them, in any thread.

    Args:
        table: the kernels to register, called at each first acquisition.
    """

    def __init__(self, table: KernelTable) -> None:
        self._table = table
        self._lock = threading.Lock()
        self._users = 0
        self._library: torch.library.Library | None = None
        self._keys_held_before: set[str] = set()

    def acquire(self) -> None:
        """Register the kernels unless another user already did."""
        with self._lock:
            if self._users == 0:
                library = torch.library.Library("aten", "IMPL")
                # torch keeps the keys of kernels registered from Python in ``torch.library._impls``. torch 2.11
                # registers some of its own meta kernels so (``_grouped_mm``'s, torch/_meta_registrations.py)
                # and refuses to override them unless asked (``allow_override``, default False there, True in
                # 2.13). Releasing drops our keys from that set: the ones torch held are put back then.
                override = {"allow_override": True} if _IMPL_TAKES_ALLOW_OVERRIDE else {}
                table = list(self._table())
                held: set[str] = getattr(torch.library, "_impls", set())
                self._keys_held_before = {k for k in (_impl_key(n, d) for n, _, d in table) if k in held}
                with warnings.catch_warnings():
                    # "Overriding a previously registered kernel": intended, and undone on release.
                    warnings.simplefilter("ignore")
                    for name, kernel, dispatch_key in table:
                        library.impl(name, kernel, dispatch_key, **override)
                self._library = library
            self._users += 1

    def release(self) -> None:
        """Deregister the kernels when the last user releases them."""
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._library is not None:
                # Library._destroy (torch/library.py, torch 2.13) deregisters every kernel and restores the
                # previous ones; it is private but the only deterministic way.
                self._library._destroy()
                self._library = None
                held = getattr(torch.library, "_impls", None)
                if held is not None:
                    held.update(self._keys_held_before)


_IMPL_TAKES_ALLOW_OVERRIDE = "allow_override" in inspect.signature(torch.library.Library.impl).parameters
"""``Library.impl(..., allow_override=...)``: present in the torch releases autoshard runs on (2.11, 2.13)."""


def _impl_key(name: str, dispatch_key: str) -> str:
    """The key ``Library.impl`` files a kernel under in ``torch.library._impls`` (torch/library.py)."""
    return f"aten/{name.split('::')[-1]}/{dispatch_key}"
