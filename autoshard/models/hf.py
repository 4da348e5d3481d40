"""Loading a Hugging Face ``config.json`` as a model source, without downloading anything.

The config is built with ``transformers.AutoConfig.for_model`` from the JSON alone, and the model with
``_from_config`` (random weights): no Hub access, no checkpoint. The pieces live next to this module:
:mod:`~autoshard.models.hf_classes` chooses the class (``architectures[0]``, or an Auto class when the config
names none), :mod:`~autoshard.models.hf_build` builds it for training (KV cache off), and
:mod:`~autoshard.models.hf_inputs` makes its example batch (text, image, audio, image + text).
:mod:`~autoshard.models.hub` finds a Hub id's config.json in the local Hugging Face cache.

transformers is an optional dependency (``pip install -e '.[hf]'`` in the checkout, or transformers itself),
imported only by these modules.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from autoshard.errors import ModelSourceError, UsageError
from autoshard.models import hf_layers
from autoshard.models.fingerprint import config_fingerprint
from autoshard.models.hf_build import attention_implementation, build_model, training_config
from autoshard.models.hf_classes import (
    check_architectures,
    check_traceable,
    chunked_scan,
    linear_attention,
    model_class,
    moe_layout,
    mtp_layers_not_built,
)
from autoshard.models.hf_inputs import input_spec
from autoshard.models.hf_masks import call_without_padding
from autoshard.models.hf_spec import sequence_metadata
from autoshard.models.source import ModelSource

__all__ = ["load_config"]

_INSTALL_HINT = ("Install it with `pip install 'transformers>=4.45'` (in autoshard's checkout: "
                 "`pip install -e '.[hf]'`).")

# Keys of a saved config.json that describe the checkpoint rather than the architecture.
_NOT_CONFIG_KEYS = frozenset({"model_type", "_name_or_path", "transformers_version", "torch_dtype", "dtype"})

_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def load_config(path: str | os.PathLike[str], *, name: str | None = None) -> ModelSource:
    """Turn a Hugging Face ``config.json`` into a :class:`ModelSource` with random weights.

    Args:
        path: the ``config.json`` (or a directory holding one).
        name: the display name (e.g. a Hub id); default: the config's ``_name_or_path``, else the folder.

    Returns:
        A :class:`ModelSource` with ``kind="hf-config"``. Nothing is built or downloaded.

    Raises:
        ModelSourceError: the file is missing, is not valid JSON, has no or an unknown ``model_type``,
            transformers rejects it, or transformers is not installed.
    """
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "config.json"
    if not file.is_file():
        raise ModelSourceError(f"{file}: no such file.", hint="Check the path to the config.json.")
    data = _read_json(file)
    if name is not None:
        data["_name_or_path"] = name  # kept by with_num_layers, which rebuilds from the same data
    return _source_from_data(data, file)


def _read_json(file: Path) -> dict[str, Any]:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelSourceError(f"{file}: cannot read it: {exc}.") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        bom = text.startswith("\ufeff")  # an editor's byte-order mark, which transformers' reader refuses too
        raise ModelSourceError(
            f"{file}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}.",
            hint="Save it without the byte-order mark (UTF-8, not 'UTF-8 with BOM')." if bom else
            "Fix the JSON there (a trailing comma or a missing quote is the usual cause).",
        ) from None
    if not isinstance(data, dict):
        raise ModelSourceError(f"{file} holds a JSON {type(data).__name__}; a config.json holds an object.")
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ModelSourceError(
            f'{file} has no "model_type", so transformers cannot tell which model it describes.',
            hint='Add one, e.g. "model_type": "llama" (see the model\'s config on the Hugging Face Hub).',
        )
    return data


def _source_from_data(data: dict[str, Any], file: Path) -> ModelSource:
    transformers = _import_transformers()
    check_architectures(data, file)
    config = training_config(_build_config(transformers, data, file))
    choice = model_class(transformers, config, data, file)
    cls = choice.cls
    check_traceable(config, cls, file)
    inputs = input_spec(cls, config, file)
    attn, attn_chosen_by = attention_implementation(data, cls, file)
    num_layers = _num_layers(config)
    _check_depths(config, data, file)
    metadata: dict[str, Any] = {
        "model_type": data["model_type"],
        "architecture": cls.__name__,
        "architecture_chosen_by": choice.chosen_by,
        "inputs": inputs.modality,
        "attn_implementation": attn,
        "attn_implementation_chosen_by": attn_chosen_by,
        "use_cache": False,
        "transformers_version": transformers.__version__,
    }
    if inputs.image_tokens is not None:
        metadata["image_tokens"] = inputs.image_tokens
    metadata.update(sequence_metadata(config))
    if chunked_scan(config):
        metadata["reference_scan"] = True
    if linear_attention(config):
        metadata["reference_linear_attention"] = True
    experts, per_token, dense = moe_layout(config)
    if experts is not None:
        metadata["experts"] = experts
        if per_token is not None and not 1 <= per_token <= experts:
            raise ModelSourceError(f"{file}: {per_token} experts per token (num_experts_per_tok) of {experts}: each "
                                   f"token must go to between 1 and {experts}.", hint="Fix num_experts_per_tok.")
        if per_token is not None:
            metadata["experts_per_token"] = per_token
        if dense:
            metadata["dense_experts"] = True
    unbuilt = mtp_layers_not_built(config, cls)
    if unbuilt:
        metadata["mtp_layers_not_built"] = unbuilt
    defaulted = defaulted_sizes(config, data)
    if defaulted:
        metadata["defaulted_sizes"] = defaulted
    checkpoint_dtype = data.get("torch_dtype", data.get("dtype"))
    if checkpoint_dtype is not None:
        metadata["checkpoint_dtype"] = checkpoint_dtype
    build_fn = functools.partial(
        build_model, cls, config, attn, file=file, config_keys=frozenset(data),
        image_token_id=inputs.image_token_id,
    )
    return ModelSource(
        name=_display_name(data, file),
        kind="hf-config",
        origin=str(file),
        build_fn=build_fn,
        batch_fn=inputs.batch_fn,
        call_fn=call_without_padding,
        num_layers=num_layers,
        with_num_layers=None if num_layers is None else functools.partial(_with_num_layers, data, config, file),
        with_layers=None if num_layers is None else functools.partial(_with_num_layers, data, config, file),
        metadata=metadata,
        fingerprint=config_fingerprint(data),
        **inputs.seq_fields(),
    )


SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads")
"""The fields that size a model, by transformers' standard names (a config class maps them to its own, e.g. GPT-2's
``n_embd``, through ``attribute_map``)."""


def defaulted_sizes(config: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    """The size fields the config class has but ``data`` (the config.json) does not set: transformers filled them
    from the class's defaults, by the class's own name for each, with their values.

    Example:
        >>> from transformers import LlamaConfig
        >>> defaulted_sizes(LlamaConfig(), {"model_type": "llama", "hidden_size": 512})["num_hidden_layers"]
        32
        >>> "hidden_size" in defaulted_sizes(LlamaConfig(), {"model_type": "llama", "hidden_size": 512})
        False
    """
    mapping = dict(getattr(config, "attribute_map", {}) or {})
    out = {}
    for field in SIZE_FIELDS:
        own = mapping.get(field, field)
        if own in data or field in data or not hasattr(config, own):
            continue
        if field == "num_key_value_heads" and mapping.get("num_attention_heads", "num_attention_heads") in data:
            continue  # derived from the attention heads the file sets (multi-head attention), not a default
        value = getattr(config, own)
        if isinstance(value, int) and not isinstance(value, bool):
            out[own] = value
    return out


def _import_transformers() -> ModuleType:
    try:
        return importlib.import_module("transformers")
    except ImportError as exc:
        raise ModelSourceError(
            f"Reading a Hugging Face config.json needs the transformers package, which cannot be imported ({exc}).",
            hint=_INSTALL_HINT,
        ) from exc


def _build_config(transformers: ModuleType, data: Mapping[str, Any], file: Path) -> Any:
    model_type = data["model_type"]
    known = transformers.CONFIG_MAPPING
    if model_type not in known:
        close = difflib.get_close_matches(model_type, list(known.keys()), n=3)
        newer = "A newer transformers may know it: pip install -U transformers."
        hint = f"Did you mean {', '.join(close)}?" if close else newer
        if "auto_map" in data:  # the Hub's custom code (trust_remote_code) defines it
            hint = "It is custom code from the Hub (auto_map), which autoshard does not run: write a model.py."
        raise ModelSourceError(
            f"{file}: model_type {model_type!r} is unknown to transformers {transformers.__version__}.", hint=hint
        )
    kwargs = {key: _special_floats(value) for key, value in data.items() if key not in _NOT_CONFIG_KEYS}
    # transformers validates configs with exception types of its own (5.x: huggingface_hub StrictDataclassError),
    # so any exception here is the config being rejected.
    try:
        return transformers.AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:
        reason = " ".join(str(exc).split())
        raise ModelSourceError(
            f"{file}: transformers rejects this {model_type} config: {reason}",
            hint="Fix the value it names in the config.json.",
        ) from exc


def _special_floats(value: Any) -> Any:
    """``value`` with transformers 5.x's encoding of non-finite floats decoded: ``save_pretrained`` writes
    ``{"__float__": "Infinity"}`` (configuration_utils ``_encode_special_floats``), e.g. Bamba's
    time_step_limit."""
    if isinstance(value, dict):
        tag = value.get("__float__")
        if len(value) == 1 and tag in {"Infinity", "-Infinity", "NaN"}:
            return float(tag)
        return {key: _special_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_special_floats(item) for item in value]
    return value


def _check_depths(config: Any, data: Mapping[str, Any], file: Path) -> None:
    """Refuse a stack of fewer than one block: transformers builds it (``range(-1)`` is empty), and the model was
    planned as its embeddings and head alone, without a word (a new user's ``"num_hidden_layers": -1``).

    Raises:
        ModelSourceError: naming the config.json's own key.
    """
    for key in (*_LAYER_KEYS, "num_decoder_layers", "decoder_layers", "encoder_layers"):
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            named = next((k for k in (key, config.attribute_map.get(key, key)) if k in data), key)
            raise ModelSourceError(f"{file}: {named} is {value}: a model needs at least one block.",
                                   hint=f"Set {named} to the model's number of layers.")


def _num_layers(config: Any) -> int | None:
    for key in _LAYER_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    towers = hf_layers.towers(config)  # a composite config (CLIP, SigLIP, LLaVA): its towers' blocks in all
    return sum(getattr(config, key).num_hidden_layers for key in towers) if towers else None


def _with_num_layers(
    data: Mapping[str, Any], config: Any, file: Path, num_layers: int | tuple[int, ...]
) -> ModelSource:
    """The same config with ``num_layers`` blocks (in both stacks of an encoder-decoder), or, given a tuple of
    full-depth block positions, with the blocks at those positions (:func:`hf_layers.keep_layers`; the only
    form for a composite config, whose positions run tower after tower)."""
    positions = num_layers if isinstance(num_layers, tuple) else None
    depth = len(num_layers) if isinstance(num_layers, tuple) else num_layers
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise UsageError(f"with_num_layers needs a positive number of layers, but got {num_layers=}.")
    if hf_layers.towers(config):  # blocks numbered tower after tower: only chosen positions say how many of each
        if positions is None:
            raise UsageError(f"{config.model_type} has a stack per sub-config: give block positions, not a depth.")
        return _source_from_data(hf_layers.keep_layers(data, config, positions), file)
    changed = dict(data)
    keys = [config.attribute_map.get("num_hidden_layers", "num_hidden_layers")]
    keys += [key for key in ("num_decoder_layers", "decoder_layers") if isinstance(getattr(config, key, None), int)]
    for key in keys:
        changed[key] = depth
    layer_types = data.get("layer_types")
    if positions is not None:
        changed = hf_layers.keep_layers(changed, config, positions)
    elif isinstance(layer_types, list) and layer_types:  # per-layer lists must match the new depth
        changed["layer_types"] = [layer_types[i % len(layer_types)] for i in range(depth)]
    return _source_from_data(changed, file)


def _display_name(data: Mapping[str, Any], file: Path) -> str:
    name = data.get("_name_or_path")
    if isinstance(name, str) and name:
        return name
    return file.resolve().parent.name or str(data["model_type"])
