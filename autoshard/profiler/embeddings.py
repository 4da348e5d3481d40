"""Embedding tables whose training no plan can reproduce as written: found on the built model, before any step.

* ``sparse=True`` (``nn.Embedding`` / ``nn.EmbeddingBag``): the weight's gradient is a sparse COO tensor. The
  tracer measures dense tensors (it failed inside its own bookkeeping: "Cannot access storage of
  SparseTensorImpl", blamed on the user's model), and FSDP2 and DeepSpeed reduce and step dense flat gradients
  only; :func:`refuse_sparse_gradients` says so before tracing.
* ``max_norm`` set: forward renormalises, in place, the rows it looks up (``aten::embedding_renorm_``). One
  process holding the whole model trains it as a plain loop does; under DDP each rank writes its own batch's rows
  in its own replica, under FSDP2 and ZeRO the write lands on a gathered (or 16-bit) copy the next step replaces (a
  probe: no row of a ``max_norm=1`` table stayed within the norm under FSDP2 or ZeRO-3, and the losses left DDP's
  from step 5). :func:`renormed_embeddings` names them for the plan's caveat
  (:func:`autoshard.planner.caveats.renormed_embeddings`).
"""

from __future__ import annotations

from torch import nn

from autoshard.errors import ProfileError

__all__ = ["refuse_sparse_gradients", "renormed_embeddings", "some_tables", "sparse_embeddings"]

_TABLES = (nn.Embedding, nn.EmbeddingBag)


def _trainable_tables(module: nn.Module) -> list[tuple[str, nn.Embedding | nn.EmbeddingBag]]:
    return [(name or type(m).__name__, m) for name, m in module.named_modules()
            if isinstance(m, _TABLES) and m.weight.requires_grad]


def sparse_embeddings(module: nn.Module) -> tuple[str, ...]:
    """Names of the trainable embedding tables built with ``sparse=True``.

    Example:
        >>> net = nn.ModuleDict({"user": nn.Embedding(10, 4, sparse=True), "item": nn.Embedding(10, 4)})
        >>> sparse_embeddings(net)
        ('user',)
    """
    return tuple(name for name, m in _trainable_tables(module) if m.sparse)


def renormed_embeddings(module: nn.Module) -> tuple[str, ...]:
    """Names of the trainable embedding tables with ``max_norm`` set (renormalised in place in forward).

    Example:
        >>> renormed_embeddings(nn.ModuleList([nn.Embedding(10, 4, max_norm=1.0), nn.EmbeddingBag(10, 4)]))
        ('0',)
    """
    return tuple(name for name, m in _trainable_tables(module) if m.max_norm is not None)


def some_tables(names: tuple[str, ...]) -> str:
    """The first three names, and how many more.

    Example:
        >>> some_tables(("a", "b", "c", "d"))
        'a, b, c and 1 more'
    """
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def refuse_sparse_gradients(module: nn.Module) -> None:
    """Refuse a model whose embedding tables make sparse gradients, in words, before its step is traced.

    Raises:
        ProfileError: naming the tables, with the dense alternative.
    """
    names = sparse_embeddings(module)
    if not names:
        return
    raise ProfileError(
        f"Embedding tables built with sparse=True ({some_tables(names)}) give sparse gradients, which autoshard cannot "
        "plan or train: its trace measures dense tensors, and FSDP2 and DeepSpeed reduce and step dense "
        "gradients only.",
        hint="Build them with sparse=False (their gradient is then dense, as large as the table, and the plan "
             "counts it so); SparseAdam takes sparse gradients only, so use AdamW or SGD with them.")
