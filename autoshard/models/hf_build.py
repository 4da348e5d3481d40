"""Building a Hugging Face model for a training step, with random weights.

* The config is made a *training* config once, when the source is loaded: ``use_cache=False`` in it and in
  every sub-config (text_config, decoder, ...), as transformers' own ``gradient_checkpointing_enable()`` does
  for training. With the KV cache on, a checkpointed block that is recomputed in backward appends its keys and
  values to the cache a second time, and the recomputed attention no longer matches the mask. A model given as an
  object (a ``model.py``'s, ``fit(model)``'s) gets the same in place wherever autoshard checkpoints its blocks
  (:func:`kv_cache_off`).
* A build that allocates nothing (meta device, fake tensors) skips weight initialization and turns off the
  stochastic layer skipping of LayerDrop and SpecAugment's random masks: both branch on random values, which a
  trace without data cannot read, and the traced step is then the one where every layer runs (the peak).
* The attention implementation is the config.json's ``attn_implementation`` when it names one (transformers'
  config takes the key), else SDPA where the class supports it (:func:`attention_implementation`).
* An exception from transformers while building is the config's fault, reported as :class:`ModelSourceError`.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import sys
import types
from collections.abc import Iterator, Set
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

from autoshard.errors import ModelSourceError

__all__ = ["allocates_nothing", "attention_implementation", "build_model", "every_layer_runs_in", "kv_cache_off",
           "sub_configs", "training_config", "used_by_spec_augment_alone"]

_FLASH = ("flash_attention_2", "flash_attention_3")
"""Implementations built as SDPA: the flash-attn package is a CUDA build, absent where autoshard traces, and on a
GPU SDPA's flash backend runs the same algorithm (FlashAttention-2, Dao 2023) in 16 bits."""
ATTENTION = ("eager", "sdpa", *_FLASH)
"""The ``attn_implementation`` values a config.json may name."""


def _has_attention(cls: Any) -> bool:
    """Whether the modeling file of transformers class ``cls`` defines an attention module (transformers names
    them ``...Attention``: ``ViTSelfAttention``, ``WhisperAttention``, ``SwinSelfAttention``); ConvNeXt, ResNet and
    Mamba define none. A class outside a module (a test's) is taken to have one."""
    module = sys.modules.get(getattr(cls, "__module__", ""))
    if module is None:
        return True
    return any(isinstance(v, type) and issubclass(v, nn.Module) and "Attention" in v.__name__
               for v in vars(module).values())


def training_config(config: Any) -> Any:
    """A copy of ``config`` with the KV cache off in it and in every sub-config that has the setting.

    Example:
        >>> from transformers import LlavaConfig, WhisperConfig
        >>> training_config(WhisperConfig()).use_cache, training_config(LlavaConfig()).text_config.use_cache
        (False, False)
    """
    config = copy.deepcopy(config)
    _cache_off(config)
    return config


def kv_cache_off(model: nn.Module) -> list[Any]:
    """Turn the KV cache off, in place, in every transformers config the model's modules hold (``model.config``,
    and the copies some submodules keep, as T5's encoder and decoder stacks do) and in their sub-configs, as
    :func:`training_config` does for the models autoshard builds; returns the configs where it was on (to turn it on
    again). For a model given as an object (a ``model.py``'s, ``fit(model)``'s) whose blocks autoshard
    checkpoints: transformers turns the cache off itself only under its own ``gradient_checkpointing_enable()``,
    and a recomputed block would append its keys and values a second time (see the module docstring). A module
    without a transformers config is left alone.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8))
        >>> len(kv_cache_off(model)), model.config.use_cache, kv_cache_off(model), kv_cache_off(nn.Linear(2, 2))
        (1, False, [], [])
    """
    return [part for config in module_configs(model) for part in _cache_off(config)]


def module_configs(model: nn.Module) -> Iterator[Any]:
    """Each transformers config the model's modules hold (``model.config``, and the copies some submodules keep),
    once."""
    seen: set[int] = set()
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is None or id(config) in seen or not _is_config(config, config):
            continue
        seen.add(id(config))
        yield config


def _cache_off(config: Any) -> list[Any]:
    """``use_cache = False`` in ``config`` and every sub-config that has the setting; those that had it on."""
    turned = []
    for part in sub_configs(config):
        if hasattr(part, "use_cache"):
            if part.use_cache:
                turned.append(part)
            part.use_cache = False
    return turned


def sub_configs(config: Any) -> Iterator[Any]:
    """``config`` and, recursively, every config held in one of its attributes (text_config, decoder, ...)."""
    seen: set[int] = set()
    stack = [config]
    while stack:
        part = stack.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        yield part
        stack.extend(value for value in vars(part).values() if _is_config(value, config))


def attention_implementation(data: dict[str, Any], cls: Any, file: Path) -> tuple[str, str]:
    """The attention implementation to build ``cls`` with, and what chose it.

    The config.json's ``attn_implementation`` (or ``_attn_implementation``) when set: ``eager`` and ``sdpa`` as
    named, the flash-attn implementations as ``sdpa`` (see :data:`_FLASH`). Otherwise ``sdpa`` where the class
    supports it, else ``eager``.

    Raises:
        ModelSourceError: the config.json names an implementation not in :data:`ATTENTION`.

    Example:
        >>> class Model:
        ...     _supports_sdpa = True
        >>> attention_implementation({}, Model, Path("config.json"))
        ('sdpa', 'autoshard (SDPA, which the class supports)')
        >>> attention_implementation({"attn_implementation": "eager"}, Model, Path("config.json"))
        ('eager', 'config.json')
    """
    named = data.get("attn_implementation", data.get("_attn_implementation"))
    if named is None:
        if getattr(cls, "_supports_sdpa", False) is True:
            return "sdpa", "autoshard (SDPA, which the class supports)"
        if not _has_attention(cls):  # a CNN or a state-space model: nothing to choose
            return "eager", "autoshard (the model has no attention)"
        return "eager", "autoshard (the class has no SDPA path)"
    if named not in ATTENTION:
        raise ModelSourceError(
            f"{file}: attn_implementation is {named!r}; autoshard builds models with "
            f"{', '.join(repr(a) for a in ATTENTION)}.",
            hint="Set one of those, or remove the key for SDPA where the model supports it.",
        )
    if named in _FLASH:
        return "sdpa", f"config.json ({named}, built as SDPA: its flash kernel on a GPU)"
    return named, "config.json"


def build_model(
    cls: Any,
    config: Any,
    attn: str,
    *,
    file: Path,
    config_keys: Set[str] = frozenset(),
    image_token_id: int | None = None,
) -> nn.Module:
    """Build ``cls`` with random weights on the current default device / tensor mode.

    Args:
        cls: the transformers model class.
        config: its training config (see :func:`training_config`).
        attn: the attention implementation (``"sdpa"`` falls back to ``"eager"`` when the class refuses it).
        file: the config.json, for messages.
        config_keys: the keys the config.json sets, to tell the user's values from transformers' defaults.
        image_token_id: for vision-language models, the image placeholder token (see
            :func:`_static_placeholders`).

    Raises:
        ModelSourceError: transformers cannot build the model from this config.
    """
    skip_init = allocates_nothing()
    config = copy.deepcopy(config)
    if skip_init:
        _every_layer_runs(config)
    with _no_weight_init() if skip_init else contextlib.nullcontext():
        try:
            module = _from_config(cls, config, attn)
        except Exception as exc:  # transformers raises anything (AssertionError, ValueError, ...)
            raise _config_error(exc, cls, config, file, config_keys) from exc
    if skip_init:
        cast(Any, module).tie_weights()  # a PreTrainedModel: transformers ties weights inside the init that was skipped
        if image_token_id is not None:
            _static_placeholders(module, image_token_id)
    return module


def _from_config(cls: Any, config: Any, attn: str) -> nn.Module:
    try:
        return cls._from_config(copy.deepcopy(config), attn_implementation=attn)
    except ValueError as exc:
        refused_sdpa = "sdpa" in str(exc) or "scaled_dot_product" in str(exc)
        if attn != "sdpa" or not refused_sdpa:
            raise
        return cls._from_config(copy.deepcopy(config), attn_implementation="eager")


def _config_error(
    exc: Exception, cls: Any, config: Any, file: Path, config_keys: Set[str]
) -> ModelSourceError:
    """The build failure in the config's terms: a padding index outside the vocabulary, else transformers'
    own words."""
    for part in sub_configs(config):
        pad, vocab = getattr(part, "pad_token_id", None), getattr(part, "vocab_size", None)
        if isinstance(pad, int) and isinstance(vocab, int) and not 0 <= pad < vocab:
            where = "" if part is config else f" (in {type(part).__name__})"
            origin = (
                ""
                if part is not config or "pad_token_id" in config_keys
                else f", the {type(part).__name__} default, since the config.json does not set it"
            )
            return ModelSourceError(
                f"{file}: pad_token_id is {pad}{origin}{where}, outside the vocabulary (vocab_size = "
                f"{vocab}).",
                hint='Set "pad_token_id" to a token id below vocab_size, or to null, in the config.json.',
            )
    reason = " ".join(str(exc).split()) or "(no message)"
    if isinstance(exc, ImportError):  # transformers' requires_backends: "... requires the scipy library ..."
        return ModelSourceError(
            f"{file}: transformers cannot build {cls.__name__}: a package it needs is missing: {reason}",
            hint="Install the package it names in this environment (pip install ...); the config is not at fault.",
        )
    return ModelSourceError(
        f"{file}: transformers cannot build {cls.__name__} from this config: {type(exc).__name__}: {reason}",
        hint="Fix the value it names in the config.json (run with --debug for the full traceback).",
    )


SPEC_AUGMENT_OFF = "_autoshard_spec_augment_off"
"""Set on a config whose SpecAugment the trace turned off: the parameters only SpecAugment uses (wav2vec2's
``masked_spec_embed``) then train in the real step, though the trace leaves them without a gradient."""


def _every_layer_runs(config: Any) -> None:
    """Turn off LayerDrop (``*layerdrop``) and SpecAugment (``apply_spec_augment``) in ``config`` and its
    sub-configs, in place."""
    for part in sub_configs(config):
        for key, value in list(vars(part).items()):
            if key.endswith("layerdrop") and isinstance(value, float) and value > 0:
                setattr(part, key, 0.0)
        if getattr(part, "apply_spec_augment", False) is True:
            part.apply_spec_augment = False
            setattr(part, SPEC_AUGMENT_OFF, True)


def every_layer_runs_in(model: nn.Module) -> None:
    """:func:`_every_layer_runs` on every transformers config the model's modules hold, in place: for a model given
    as an object (a ``model.py``'s, or ``fit(model)``'s fake copy) built without allocating, as the configs
    autoshard builds from are. SpecAugment's random masks are a boolean-mask assignment whose size depends on
    values (``aten.nonzero``), which a trace without data cannot run."""
    for config in module_configs(model):
        _every_layer_runs(config)


def used_by_spec_augment_alone(model: nn.Module, name: str) -> bool:
    """Whether parameter ``name`` of ``model`` is SpecAugment's mask embedding in a module whose SpecAugment the
    trace turned off (:data:`SPEC_AUGMENT_OFF`): it has no gradient in the trace but trains in the real step."""
    owner_name, _, leaf = name.rpartition(".")
    if leaf != "masked_spec_embed":
        return False
    owner = model.get_submodule(owner_name) if owner_name else model
    return getattr(getattr(owner, "config", None), SPEC_AUGMENT_OFF, False) is True


def _static_placeholders(module: nn.Module, image_token_id: int) -> None:
    """Make LLaVA's image placeholder mask computable without data.

    ``get_placeholder_mask`` checks that the number of placeholder tokens matches the image features, which
    reads tensor values; a trace without data cannot. autoshard's batch puts exactly the right number of
    placeholders (the real-tensor tests run transformers' own check), so the fake build keeps only the mask.
    """
    for part in module.modules():
        if callable(getattr(type(part), "get_placeholder_mask", None)):
            # torch types a Module's attributes Tensor | Module (nn.Module.__getattr__), whatever __setattr__ takes.
            part.get_placeholder_mask = types.MethodType(  # type: ignore[assignment]
                _placeholder_mask_fn(image_token_id), part
            )


def _placeholder_mask_fn(image_token_id: int) -> Any:
    def placeholder_mask(
        _self: nn.Module, input_ids: torch.Tensor, inputs_embeds: torch.Tensor, image_features: torch.Tensor
    ) -> torch.Tensor:
        return (input_ids == image_token_id).unsqueeze(-1).to(inputs_embeds.device)

    return placeholder_mask


def _is_config(value: Any, root: Any) -> bool:
    base = next(
        (c for c in type(root).__mro__ if c.__name__ in {"PreTrainedConfig", "PretrainedConfig"}), None
    )
    return base is not None and isinstance(value, base)


def allocates_nothing() -> bool:
    """Whether tensors created now are fake or on the meta device (so weight init can be skipped)."""
    probe = torch.empty(0)
    return probe.is_meta or isinstance(probe, FakeTensor)


def _no_weight_init() -> contextlib.AbstractContextManager[Any]:
    """transformers' own switch that skips weight initialization; random init is data-dependent (e.g.
    ``trunc_normal_`` loops on ``mask.any()``), which fake tensors cannot run."""
    # transformers 5.x keeps it in transformers.initialization, 4.x in transformers.modeling_utils.
    for module_name in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        no_init = getattr(module, "no_init_weights", None)
        if no_init is not None:
            return no_init()
    return contextlib.nullcontext()
