"""Which blocks of a model are alike, and Hugging Face configs that keep a chosen few of them.

A deep model is profiled from shallow copies of it (:mod:`autoshard.profiler.scaling`), which is exact only
when the copies are made of the same kinds of block as the model. Many configs mix kinds: DeepSeek-V2/V3's
first layers are dense and the rest MoE (``first_k_dense_replace``), Qwen2/3-MoE place experts every
``decoder_sparse_step`` layers except ``mlp_only_layers``, Gemma-2/3, Cohere2 and GPT-OSS alternate sliding
and global attention (``layer_types``), Llama-4 interleaves MoE layers and drops RoPE in some (``moe_layers``,
``no_rope_layers``).

:func:`layer_kinds` finds the kinds from a build of the model at full depth (on the meta device: nothing is
allocated), without knowing any config key: two blocks are of one kind when they have the same submodule
classes, parameter and buffer shapes, and the same values of the scalar attributes that differ between the
model's blocks (``sliding_window``, ``layer_type``, ``use_rope``...), per-block indices such as ``layer_idx``
left out. :func:`keep_layers` rewrites a config so that its blocks are the model's blocks at chosen positions;
the caller checks what it built with :meth:`LayerKinds.match`, so a config this module cannot rewrite is
detected rather than mis-profiled.

A composite config (CLIP and SigLIP: ``text_config`` + ``vision_config``; LLaVA: ``vision_config`` +
``text_config``) has no depth of its own but one stack per sub-config (:func:`towers`). Its blocks are then
numbered one tower after the other, in the order of ``config.sub_configs``, the depth being their sum; a tower's
blocks are never of a kind of another tower's (they run on other inputs), and :func:`keep_layers` maps the
chosen positions to each tower's depth.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from autoshard.errors import UsageError

__all__ = ["LayerKinds", "keep_layers", "layer_kinds", "towers"]

_ABSENT = "<absent>"
"""Stands for an attribute or submodule that one block has and another lacks."""

# Config keys listing layer indices (not a value per layer): Qwen2/3-MoE's dense layers, Llama-4's MoE layers,
# Bamba's attention layers (transformers 5.23 configuration_*.py), Zamba2's hybrid layers (derived from
# layers_block_type, but a saved config.json carries it and it overrides the derived list).
_INDEX_LIST_KEYS = ("mlp_only_layers", "moe_layers", "attn_layer_indices", "hybrid_layer_ids")
# Config keys counting the dense layers before the first MoE layer: DeepSeek-V2/V3, GLM-4-MoE, Dots1
# (first_k_dense_replace), AFMoE and LFM2-MoE (num_dense_layers).
_DENSE_PREFIX_KEYS = ("first_k_dense_replace", "num_dense_layers")

Feature = tuple[str, str, str]
"""``(what, path inside the block, name)``, e.g. ``("1attr", "self_attn", "sliding_window")``."""


@dataclass(frozen=True, slots=True)
class LayerKinds:
    """The kind of every block in each stack of ``num_layers`` blocks of a model."""

    stacks: tuple[str, ...]
    """Module names of the stacks (``("model.layers",)``; two in an encoder-decoder)."""
    kinds: tuple[tuple[int, ...], ...]
    """Per stack, each block's kind: an index into :attr:`labels`."""
    labels: tuple[str, ...]
    """Per kind, the block class and what sets the kind apart, e.g.
    ``DeepseekV3DecoderLayer[mlp=DeepseekV3MoE]``."""
    signatures: tuple[tuple[Any, ...], ...]
    """Per kind, what defines it (compared by :meth:`match`)."""
    varying: frozenset[tuple[str, str]]
    """The scalar attributes, as ``(path, name)``, whose values tell kinds apart."""
    presence_only: frozenset[tuple[str, str]] = frozenset()
    """Those of :attr:`varying` that only some blocks have, with one value wherever they are: kinds differ by
    having them, not by their value (a copy may change the value: MiniMax's attention keeps the depth)."""
    towers: tuple[str, ...] = ()
    """Per stack, the sub-config holding it (``"vision_config"``) when the stacks are a composite config's
    towers, their blocks numbered one stack after the other (:func:`towers`); empty otherwise, every stack then
    having all the model's blocks."""
    last_used: tuple[int, ...] = ()
    """Full-depth positions of towers' last blocks that run when the blocks after them are unused (LLaVA's
    ``vision_feature_layer=-2`` leaves the vision tower's last block unused): every copy keeps them as it
    keeps each stack's first and last block, since a phase may peak there."""

    def flat(self) -> tuple[int, ...]:
        """Each block's kind by full-depth position: the first stack's (towers: every stack's, in order)."""
        return tuple(k for kinds in self.kinds for k in kinds) if self.towers else self.kinds[0]

    def layout(self) -> tuple[tuple[str, int, int], ...]:
        """Per stack, its name and the full-depth positions ``[start, end)`` of its blocks (every position but
        for towers)."""
        if not self.towers:
            return tuple((name, 0, sys.maxsize) for name in self.stacks)
        ends = list(itertools.accumulate(len(kinds) for kinds in self.kinds))
        return tuple((name, end - len(kinds), end) for name, kinds, end in zip(self.stacks, self.kinds, ends,
                                                                               strict=True))

    def local(self, positions: Sequence[int]) -> tuple[tuple[int, ...], ...]:
        """Per stack, the positions inside it of the blocks at full-depth ``positions``."""
        return tuple(tuple(p - start for p in positions if start <= p < end) for _, start, end in self.layout())

    def alike_after_first(self) -> bool:
        """Whether in every stack all blocks but the first are of one kind (the first may differ, e.g. T5's
        relative position bias): then a stack of ``n`` blocks has the model's first ``n`` kinds."""
        return all(len(set(kinds[1:])) <= 1 for kinds in self.kinds)

    def counts(self) -> tuple[int, ...]:
        """How many blocks of each kind the model has, over all stacks."""
        flat = [k for kinds in self.kinds for k in kinds]
        return tuple(flat.count(k) for k in range(len(self.labels)))

    def match(self, model: nn.Module, num_layers: int | tuple[int, ...]) -> tuple[tuple[int, ...], ...] | None:
        """The kinds of the blocks of ``model`` (a shallow copy with ``num_layers`` blocks per stack, or per
        tower when a tuple), as indices into :attr:`labels` (``-1`` for a block of no kind of the full model);
        ``None`` when ``model`` does not have the same stacks."""
        if isinstance(num_layers, tuple):
            found = dict(_tower_stacks(model, self.towers, num_layers) or [])
        else:
            found = dict(_stacks(model, num_layers))
        if tuple(found) != self.stacks:
            return None
        known = {s: i for i, s in enumerate(self.signatures)}
        return tuple(
            tuple(known.get(_signature(*_features(block), self.varying, tower, self.presence_only), -1)
                  for block in found[name])
            for name, tower in zip(self.stacks, self.towers or ("",) * len(self.stacks), strict=True)
        )


def layer_kinds(model: nn.Module, num_layers: int) -> LayerKinds | None:
    """The kinds of the blocks of ``model``'s stacks of ``num_layers`` blocks.

    Args:
        model: the model at full depth (meta, fake or real tensors; nothing is run).
        num_layers: the model's depth (``num_hidden_layers``).

    Returns:
        The kinds, or ``None`` when no ``nn.ModuleList`` of ``num_layers`` blocks is found.

    Example:
        >>> class Block(nn.Module):
        ...     def __init__(self, i: int, wide: bool) -> None:
        ...         super().__init__()
        ...         self.layer_idx = i  # numbers the blocks: not a kind
        ...         self.mlp = nn.Linear(4, 16 if wide else 8)
        >>> model = nn.Module()
        >>> model.layers = nn.ModuleList(Block(i, wide=i >= 1) for i in range(4))
        >>> found = layer_kinds(model, 4)
        >>> found.kinds, found.labels
        (((0, 1, 1, 1),), ('Block[mlp.out_features=8]', 'Block[mlp.out_features=16]'))
    """
    stacks = _stacks(model, num_layers)
    tower_keys: tuple[str, ...] = ()
    if not stacks:
        config = getattr(model, "config", None)
        tower_keys = towers(config) if config is not None else ()
        depths = tuple(getattr(config, key).num_hidden_layers for key in tower_keys)
        stacks = (_tower_stacks(model, tower_keys, depths) or []) if sum(depths) == num_layers else []
        if not stacks:
            return None
    features = [[_features(block) for block in blocks] for _, blocks in stacks]
    varying: set[tuple[str, str]] = set()
    for per_block in features:
        keys = {key for _, attrs in per_block for key in attrs}
        for key in keys:
            values = [attrs.get(key, _ABSENT) for _, attrs in per_block]
            if len(set(map(repr, values))) > 1 and not _is_index(values):
                varying.add(key)
    frozen = frozenset(varying)
    # An attribute only some blocks have, with one value wherever it is (MiniMax's lightning attention keeps
    # num_hidden_layers): its presence tells kinds apart, its value is the config's, which a copy changes.
    presence_only = frozenset(
        key for key in frozen
        if len({repr(attrs[key]) for per_block in features for _, attrs in per_block if key in attrs}) == 1)
    signatures: list[tuple[Any, ...]] = []
    kinds = []
    for per_block, tower in zip(features, tower_keys or ("",) * len(features), strict=True):
        stack_kinds = []
        for structure, attrs in per_block:
            signature = _signature(structure, attrs, frozen, tower, presence_only)
            if signature not in signatures:
                signatures.append(signature)
            stack_kinds.append(signatures.index(signature))
        kinds.append(tuple(stack_kinds))
    return LayerKinds(
        stacks=tuple(name for name, _ in stacks),
        kinds=tuple(kinds),
        labels=_labels(signatures),
        signatures=tuple(signatures),
        varying=frozen,
        presence_only=presence_only,
        towers=tower_keys,
        last_used=_last_used(model.config, tower_keys) if tower_keys else (),
    )


def towers(config: Any) -> tuple[str, ...]:
    """The sub-configs of a composite config that has no depth of its own, each with a depth
    (``num_hidden_layers``), in the order of ``config.sub_configs``: ``("vision_config", "text_config")`` for
    CLIP, SigLIP and LLaVA; empty for any other config."""
    if any(isinstance(getattr(config, key, None), int) for key in ("num_hidden_layers", "n_layer", "num_layers")):
        return ()
    keys = tuple(key for key in getattr(config, "sub_configs", None) or {}
                 if isinstance(getattr(getattr(config, key, None), "num_hidden_layers", None), int)
                 and not isinstance(getattr(config, key).num_hidden_layers, bool))
    return keys if len(keys) >= 2 else ()


def _last_used(config: Any, keys: tuple[str, ...]) -> tuple[int, ...]:
    """:attr:`LayerKinds.last_used` for towers ``keys``: the vision tower's last block feeding
    ``vision_feature_layer`` (an index into its hidden states: the embeddings, then each block's output) when
    blocks after it are unused."""
    out = []
    start = 0
    for key in keys:
        depth = getattr(config, key).num_hidden_layers
        layer = getattr(config, "vision_feature_layer", None) if key == "vision_config" else None
        if isinstance(layer, int) and not isinstance(layer, bool) and -depth - 1 <= layer <= depth:
            used = layer % (depth + 1)  # blocks before `used` feed the features
            if 1 <= used < depth:
                out.append(start + used - 1)
        start += depth
    return tuple(out)


def keep_layers(data: Mapping[str, Any], config: Any, positions: Sequence[int]) -> dict[str, Any]:
    """``data`` rewritten so that the model's blocks are the full model's blocks at ``positions``.

    The depth keys are the caller's (``num_hidden_layers`` and its aliases). This rewrites what decides each
    block's kind: lists with one value per layer (``layer_types``, ``mlp_layer_types``, ``no_rope_layers``...)
    keep the listed positions; lists of layer indices (``mlp_only_layers``, ``moe_layers``,
    ``attn_layer_indices``) are renumbered; ``first_k_dense_replace`` / ``num_dense_layers`` count the kept
    dense layers; ``decoder_sparse_step`` becomes 1 with the layers it made dense listed in
    ``mlp_only_layers``. Other keys (e.g. Jamba's ``attn_layer_period``) are left as they are: check the
    result with :meth:`LayerKinds.match`.

    Args:
        data: the config.json's content.
        config: the config built from it (its computed per-layer lists are read from it).
        positions: increasing full-depth block positions, from 0.

    Returns:
        The new config.json content (``data`` itself is not changed).

    Raises:
        UsageError: ``positions`` is empty, not increasing, or out of range.
    """
    keys = towers(config)
    if keys:
        return _keep_tower_layers(data, config, keys, positions)
    return _keep(data, config, positions)


def _keep_tower_layers(data: Mapping[str, Any], config: Any, keys: tuple[str, ...],
                       positions: Sequence[int]) -> dict[str, Any]:
    """:func:`keep_layers` for a composite config: each tower keeps its blocks among ``positions`` (numbered
    tower after tower), at least one."""
    depths = [getattr(config, key).num_hidden_layers for key in keys]
    total = sum(depths)
    if (
        not positions
        or any(not isinstance(p, int) or isinstance(p, bool) for p in positions)
        or list(positions) != sorted(set(positions))
        or positions[0] < 0
        or positions[-1] >= total
    ):
        raise UsageError(f"keep_layers needs increasing block positions below {total}, but got {positions=}.")
    changed = dict(data)
    start = 0
    for key, depth in zip(keys, depths, strict=True):
        kept = [p - start for p in positions if start <= p < start + depth]
        start += depth
        if not kept:
            raise UsageError(f"keep_layers keeps no block of {key}: {positions=}.")
        sub = getattr(config, key)
        given = data.get(key)
        base = dict(given) if isinstance(given, Mapping) else sub.to_dict()
        base["num_hidden_layers"] = len(kept)
        changed[key] = _keep(base, sub, kept)
        if key == "vision_config" and "vision_feature_layer" in config.to_dict():
            changed["vision_feature_layer"] = _feature_layer(config.vision_feature_layer, depth, kept)
    return changed


def _feature_layer(layer: Any, depth: int, kept: list[int]) -> int:
    """LLaVA's ``vision_feature_layer`` (an index into the vision tower's hidden states: the embeddings, then
    each block's output) for a tower keeping the blocks at ``kept`` of ``depth``, so that the same blocks feed
    the features and the same are unused.

    Raises:
        UsageError: the blocks it leaves unused are not all kept (their count would not extrapolate), or it is
            not one index.
    """
    if isinstance(layer, bool) or not isinstance(layer, int) or not -depth - 1 <= layer <= depth:
        raise UsageError(f"vision_feature_layer={layer!r} is not one hidden-state index of {depth} blocks.")
    used = layer % (depth + 1)  # hidden states 0..used: the blocks before `used` feed the features
    if not set(range(used, depth)) <= set(kept):
        raise UsageError(f"vision_feature_layer={layer} leaves blocks {used}..{depth - 1} unused, and a copy "
                         "keeping fewer of them would count the others as used.")
    used_kept = sum(1 for p in kept if p < used)
    return used_kept - len(kept) - 1 if layer < 0 else used_kept


def _keep(data: Mapping[str, Any], config: Any, positions: Sequence[int]) -> dict[str, Any]:
    full = config.to_dict()
    depth = getattr(config, "num_hidden_layers", None)
    if (
        not isinstance(depth, int)
        or not positions
        or any(not isinstance(p, int) or isinstance(p, bool) for p in positions)
        or list(positions) != sorted(set(positions))
        or positions[0] < 0
        or positions[-1] >= depth
    ):
        raise UsageError(f"keep_layers needs increasing block positions below {depth}, but got {positions=}.")
    changed = dict(data)
    for key, value in full.items():
        if key in _INDEX_LIST_KEYS and isinstance(value, list) and value:
            listed = set(value)
            changed[key] = [j for j, i in enumerate(positions) if i in listed]
        elif isinstance(value, list) and len(value) == depth:  # one value per layer
            changed[key] = [value[i] for i in positions]
        elif key in _DENSE_PREFIX_KEYS and isinstance(value, int) and not isinstance(value, bool):
            changed[key] = sum(1 for i in positions if i < value)
    step = full.get("decoder_sparse_step")
    if isinstance(step, int) and step > 1 and isinstance(full.get("mlp_only_layers"), list):
        # Qwen2/3-MoE: layer i has experts iff i is not in mlp_only_layers and
        # (i + 1) % decoder_sparse_step == 0 (transformers 5.23 Qwen2MoeDecoderLayer.__init__).
        dense = set(full["mlp_only_layers"])
        changed["decoder_sparse_step"] = 1
        changed["mlp_only_layers"] = [j for j, i in enumerate(positions) if i in dense or (i + 1) % step]
    return changed


def _stacks(model: nn.Module, num_layers: int) -> list[tuple[str, nn.ModuleList]]:
    """``nn.ModuleList`` s of ``model`` holding ``num_layers`` blocks (modules with submodules), outermost
    only, in module order."""
    out: list[tuple[str, nn.ModuleList]] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) != num_layers or num_layers < 1:
            continue
        if any(name.startswith(outer + ".") for outer, _ in out):
            continue
        if all(any(True for _ in block.children()) for block in module):
            out.append((name, module))
    return out


def _tower_stacks(model: nn.Module, keys: tuple[str, ...],
                  depths: tuple[int, ...]) -> list[tuple[str, nn.ModuleList]] | None:
    """Per tower (sub-config ``keys`` of ``model.config``), its stack: the ``nn.ModuleList`` of ``depths``
    blocks inside the submodule built from that sub-config; ``None`` unless each tower has exactly one."""
    config = getattr(model, "config", None)
    if not keys or len(keys) != len(depths) or config is None:
        return None
    subs = [getattr(config, key, None) for key in keys]
    modules = dict(model.named_modules())
    # The submodule built from a sub-config holds that very object (T5Gemma's encoder and decoder: two configs
    # of one class), or one of its class where the towers' classes differ (a tower built from a copy of it).
    types = [type(sub) for sub in subs]
    distinct = len(set(types)) == len(types)
    if not distinct and not any(getattr(m, "config", None) is sub for m in modules.values() for sub in subs):
        return None

    def tower_of(module: nn.Module) -> int | None:
        held = getattr(module, "config", None)
        same = next((i for i, sub in enumerate(subs) if held is sub), None)
        if same is not None or not distinct:
            return same
        return types.index(type(held)) if type(held) in types else None

    found: dict[str, list[tuple[str, nn.ModuleList]]] = {key: [] for key in keys}
    for name, module in modules.items():
        if not isinstance(module, nn.ModuleList) or not name:
            continue
        owner = next((i for i in (tower_of(modules[prefix]) for prefix in _prefixes(name)) if i is not None), None)
        if owner is None:
            continue
        key = keys[owner]
        if (len(module) == depths[keys.index(key)] and all(any(True for _ in b.children()) for b in module)
                and not any(name.startswith(outer + ".") for outer, _ in found[key])):
            found[key].append((name, module))
    if any(len(stacks) != 1 for stacks in found.values()):
        return None
    return [found[key][0] for key in keys]


def _prefixes(name: str) -> list[str]:
    """The module names enclosing ``name``, innermost first (``a.b.c`` → ``a.b``, ``a``)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def _features(block: nn.Module) -> tuple[tuple[tuple[Any, ...], ...], dict[tuple[str, str], Any]]:
    """What a block is made of (submodule classes, parameter and buffer shapes and dtypes) and its scalar
    attributes by ``(submodule path, name)``."""
    structure: list[tuple[Any, ...]] = []
    attrs: dict[tuple[str, str], Any] = {}
    for path, module in block.named_modules():
        structure.append(("module", path, type(module).__name__))
        for name, tensor in (*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)):
            structure.append(("tensor", f"{path}.{name}".lstrip("."), tuple(tensor.shape), str(tensor.dtype)))
        for name, value in vars(module).items():
            if not name.startswith("_") and name != "training" and _is_scalar(value):
                attrs[(path, name)] = value
    return tuple(structure), attrs


def _is_scalar(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_is_scalar(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _is_index(values: list[Any]) -> bool:
    """Whether an attribute numbers the blocks (``layer_idx``): in the blocks that have it (a hybrid model's
    Mamba and attention mixers each number themselves), its position in the stack plus a constant."""
    offsets = {v - i for i, v in enumerate(values) if isinstance(v, int) and not isinstance(v, bool)}
    present = sum(1 for v in values if v is not _ABSENT)
    others = [v for v in values if v is not _ABSENT and (not isinstance(v, int) or isinstance(v, bool))]
    return present >= 2 and not others and len(offsets) == 1


def _signature(
    structure: tuple[tuple[Any, ...], ...],
    attrs: dict[tuple[str, str], Any],
    varying: frozenset[tuple[str, str]],
    tower: str = "",
    presence_only: frozenset[tuple[str, str]] = frozenset(),
) -> tuple[Any, ...]:
    signature = structure, tuple((key, ("<present>" if key in attrs else _ABSENT) if key in presence_only
                                  else repr(attrs.get(key, _ABSENT))) for key in sorted(varying))
    return (*signature, tower) if tower else signature


def _labels(signatures: list[tuple[Any, ...]]) -> tuple[str, ...]:
    """Per kind, the block class and the fewest features that tell the kinds apart (submodule classes first,
    then attributes, then tensors; outer before inner)."""
    described = [_describe(s) for s in signatures]
    keys = sorted({k for d in described for k in d}, key=lambda k: (k[0], k[1].count("."), k[1], k[2]))
    root = ("0module", "", "")
    telling = [k for k in keys if k != root and len({d.get(k, _ABSENT) for d in described}) > 1]
    chosen: list[Feature] = []

    def groups(keys: list[Feature]) -> int:
        return len({tuple(d.get(k, _ABSENT) for k in keys) for d in described})

    for key in telling:  # greedily, each chosen feature splits kinds the earlier ones left together
        if groups(chosen) == len(described):
            break
        if groups([*chosen, key]) > groups(chosen):
            chosen.append(key)
    out = []
    for d in described:
        parts = [_render(key, d.get(key, _ABSENT)) for key in chosen]
        out.append(d[root] + (f"[{', '.join(parts)}]" if parts else ""))
    return tuple(out)


def _describe(signature: tuple[Any, ...]) -> dict[Feature, str]:
    """A kind's features, keyed for sorting: ``0module`` < ``1attr`` < ``2tensor``."""
    structure, attrs = signature[:2]
    out: dict[Feature, str] = {}
    if len(signature) > 2:  # a tower's blocks (see towers)
        out[("0module", "", "tower")] = signature[2]
    for item in structure:
        if item[0] == "module":
            out[("0module", item[1], "")] = item[2]
        else:
            out[("2tensor", item[1], "")] = "x".join(map(str, item[2]))
    for (path, name), value in attrs:
        out[("1attr", path, name)] = value
    return out


def _render(key: Feature, value: str) -> str:
    what, path, name = key
    where = f"{path}.{name}" if path and name else path or name
    if value == _ABSENT or value == repr(_ABSENT):
        return f"no {where}"
    return f"{where}={value}" if what != "2tensor" else f"{where} {value}"
