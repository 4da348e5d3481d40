"""Registering Python kernels over ATen's for as long as a trace needs them, then restoring ATen's own.

:mod:`autoshard.profiler.cuda_semantics` (CUDA autocast and kernel choices) and :mod:`autoshard.profiler.fake_ops`
(shape rules for fake tensors) both override ATen kernels while a trace runs. Registration is process-wide and
counted: the kernels are registered when the first user acquires them and removed when the last releases them,
so nested or concurrent traces share one registration.
"""

from __future__ import annotations

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

    def acquire(self) -> None:
        """Register the kernels unless another user already did."""
        with self._lock:
            if self._users == 0:
                library = torch.library.Library("aten", "IMPL")
                with warnings.catch_warnings():
                    # "Overriding a previously registered kernel": intended, and undone on release.
                    warnings.simplefilter("ignore")
                    for name, kernel, dispatch_key in self._table():
                        library.impl(name, kernel, dispatch_key)
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
