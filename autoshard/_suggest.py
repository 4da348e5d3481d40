"""Suggesting close names for a mistyped one (catalog models, hardware profiles)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_names(name: str, candidates: Iterable[str], *, n: int = 3) -> list[str]:
    """Up to ``n`` candidates close to ``name``: those containing it (or contained in it) first, then the
    closest by edit similarity.

    >>> close_names("h100", ["a100-sxm-80gb", "h100-sxm-80gb", "h100-pcie-80gb", "dgx-h100"])
    ['dgx-h100', 'h100-pcie-80gb', 'h100-sxm-80gb']
    >>> close_names("llama2-7b", ["llama-2-7b", "llama-2-13b", "gpt2"], n=1)
    ['llama-2-7b']
    """
    key = name.lower()
    pool = sorted(set(candidates))
    contained = sorted((c for c in pool if key and (key in c.lower() or c.lower() in key)), key=len)
    similar = difflib.get_close_matches(key, pool, n=n, cutoff=0.5)
    out: list[str] = []
    for c in [*similar[:1], *sorted(contained[:n]), *similar[1:]]:
        if c not in out:
            out.append(c)
    return out[:n]
