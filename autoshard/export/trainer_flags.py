"""How the installed transformers spells the two HF Trainer switches whose names changed: checkpointing
(``--activation_checkpointing``; ``--gradient_checkpointing`` is its deprecated alias in transformers 5.24, "will be
removed in v6") and FSDP (``--fsdp`` alone turns it on; the option string ``"full_shard auto_wrap"`` is deprecated
there, its warning naming a removal in v5.20 already past). An older transformers without the new forms gets the
old ones; without transformers installed, the new ones (what ``pip install transformers`` brings).

Read from ``TrainingArguments``' dataclass fields (transformers 5.24 ``training_args.py``: ``activation_checkpointing``
and ``fsdp`` with ``nargs="?"``, ``const=True``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any


@functools.lru_cache(maxsize=1)
def _fields() -> dict[str, Any] | None:
    """``TrainingArguments``' fields by name, ``None`` without transformers."""
    try:
        from transformers import TrainingArguments
    except ImportError:
        return None
    return {f.name: f for f in dataclasses.fields(TrainingArguments)}


def checkpointing_flag() -> str:
    """``--activation_checkpointing``, or ``--gradient_checkpointing`` where the installed transformers has only
    that name."""
    fields = _fields()
    return "--gradient_checkpointing" if fields is not None and "activation_checkpointing" not in fields \
        else "--activation_checkpointing"


def fsdp_switch_alone() -> bool:
    """Whether ``--fsdp`` alone turns FSDP on (its options then all in ``fsdp_config.json``); else it takes the
    option string (``"full_shard auto_wrap"``)."""
    fields = _fields()
    return fields is None or "fsdp" not in fields or fields["fsdp"].metadata.get("const") is True
