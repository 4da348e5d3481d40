"""Loading a Hugging Face ``config.json`` as a model source, without downloading anything.

The config is built with ``transformers.AutoConfig.for_model`` from the JSON alone, and the model with
``_from_config`` (random weights): no Hub access, no checkpoint. The model class is ``architectures[0]`` when
transformers has it, else the first auto class (seq2seq LM for encoder-decoders, masked LM, causal LM, image
classification, bare model) that knows the config. Batches are random token ids (text models) or random images
(vision models), with labels where the head computes a loss, so ``output.loss`` exists.

transformers is an optional dependency (``pip install 'autoshard[hf]'``); it is imported only here.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import functools
import importlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

from autoshard.errors import ModelSourceError, UsageError
from autoshard.models.source import Batch, ModelSource

__all__ = ["load_config"]

_INSTALL_HINT = "Install it with `pip install 'autoshard[hf]'` (or `pip install transformers`)."

# Keys of a saved config.json that describe the checkpoint rather than the architecture.
_NOT_CONFIG_KEYS = frozenset({"model_type", "_name_or_path", "transformers_version", "torch_dtype", "dtype"})

# Tried in this order when architectures[0] is absent or unknown to the installed transformers. Masked LM comes
# before causal LM because encoder-only families (BERT, RoBERTa) also register a causal-LM head that only works
# with is_decoder=True, while decoder-only LMs (Llama, GPT-2) have no masked-LM head. Encoder-decoder configs try
# seq2seq first (BART also has a decoder-only *ForCausalLM).
_TASK_AUTO_CLASSES = (
    "AutoModelForMaskedLM",
    "AutoModelForCausalLM",
    "AutoModelForSeq2SeqLM",
    "AutoModelForImageClassification",
    "AutoModel",
)

_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
_POSITION_KEYS = ("max_position_embeddings", "n_positions")

# Config attributes whose presence means rotary/relative positions: no learned table bounds the sequence.
_UNBOUNDED_POSITION_KEYS = (
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rotary_dim",
    "rotary_pct",
    "rotary_emb_base",
    "partial_rotary_factor",
)

# RoBERTa-style embeddings number positions from padding_idx + 1 (transformers'
# create_position_ids_from_input_ids), so max_position_embeddings = 514 allows 512 tokens.
_PADDING_OFFSET_POSITIONS = frozenset(
    {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text", "roberta-prelayernorm", "ibert"}
)

DEFAULT_SEQ_LEN = 512
"""Sequence length of text models whose config gives no maximum."""
MAX_DEFAULT_SEQ_LEN = 2048
"""Cap on the default sequence length, so a 128k-context config does not default to a 128k trace."""
DEFAULT_IMAGE_SIZE = 224
"""Image side of vision models whose config gives no ``image_size`` (the ImageNet convention, e.g. ResNet)."""


def load_config(path: str | os.PathLike[str]) -> ModelSource:
    """Turn a Hugging Face ``config.json`` into a :class:`ModelSource` with random weights.

    Args:
        path: the ``config.json`` (or a directory holding one).

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
    return _source_from_data(_read_json(file), file)


def _read_json(file: Path) -> dict[str, Any]:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelSourceError(f"{file}: cannot read it: {exc}.") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelSourceError(
            f"{file}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}.",
            hint="Fix the JSON there (a trailing comma or a missing quote is the usual cause).",
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
    config = _build_config(transformers, data, file)
    cls = _model_class(transformers, config, data, file)
    attn = "sdpa" if getattr(cls, "_supports_sdpa", False) is True else "eager"
    inputs = getattr(cls, "main_input_name", "input_ids")
    if inputs == "input_ids":
        batch_fn, seq_fields = _text_batch_fn(cls, config, file), _seq_len_fields(config)
    elif inputs == "pixel_values":
        batch_fn, seq_fields = _image_batch_fn(cls, config), {}
    else:
        raise ModelSourceError(
            f"{file}: {cls.__name__} takes {inputs!r}; autoshard makes example batches only for text (input_ids) and "
            "image (pixel_values) models.",
            hint="Write a model.py whose batch() returns this model's inputs (see docs/models.md).",
        )
    num_layers = _num_layers(config)
    metadata: dict[str, Any] = {
        "model_type": data["model_type"],
        "architecture": cls.__name__,
        "attn_implementation": attn,
        "transformers_version": transformers.__version__,
    }
    checkpoint_dtype = data.get("torch_dtype", data.get("dtype"))
    if checkpoint_dtype is not None:
        metadata["checkpoint_dtype"] = checkpoint_dtype
    return ModelSource(
        name=_display_name(data, file),
        kind="hf-config",
        origin=str(file),
        build_fn=functools.partial(_build_model, cls, config, attn),
        batch_fn=batch_fn,
        num_layers=num_layers,
        with_num_layers=None if num_layers is None else functools.partial(_with_num_layers, data, config, file),
        metadata=metadata,
        **seq_fields,
    )


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
        raise ModelSourceError(
            f"{file}: model_type {model_type!r} is unknown to transformers {transformers.__version__}.", hint=hint
        )
    kwargs = {key: value for key, value in data.items() if key not in _NOT_CONFIG_KEYS}
    # transformers validates configs with exception types of its own (5.x: huggingface_hub StrictDataclassError),
    # so any exception here is the config being rejected.
    try:
        return transformers.AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:  # noqa: BLE001
        reason = " ".join(str(exc).split())
        raise ModelSourceError(
            f"{file}: transformers rejects this {model_type} config: {reason}",
            hint="Fix the value it names in the config.json.",
        ) from exc


def _model_class(transformers: ModuleType, config: Any, data: Mapping[str, Any], file: Path) -> type[nn.Module]:
    architectures = data.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        name = architectures[0]
        try:
            cls = getattr(transformers, name, None)
        except (ImportError, RuntimeError) as exc:  # a known class whose optional dependency is missing
            raise ModelSourceError(f"transformers cannot import {name}: {exc}", hint="Install what it names.") from exc
        if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
            expected = getattr(cls, "config_class", None)
            if isinstance(expected, type) and not isinstance(config, expected):
                raise ModelSourceError(
                    f"{file}: architectures[0] is {name}, which takes a {expected.__name__}, but model_type "
                    f"{data['model_type']!r} makes a {type(config).__name__}.",
                    hint='Make "architectures" and "model_type" describe the same model.',
                )
            return cls
    order = list(_TASK_AUTO_CLASSES)
    if getattr(config, "is_encoder_decoder", False):
        order.remove("AutoModelForSeq2SeqLM")
        order.insert(0, "AutoModelForSeq2SeqLM")
    for auto_name in order:
        # _model_mapping (config class → model class) is how every Auto class resolves from_config.
        mapping = getattr(transformers, auto_name)._model_mapping
        if type(config) in mapping:
            return mapping[type(config)]
    raise ModelSourceError(
        f"{file}: transformers {transformers.__version__} has no model class for model_type {data['model_type']!r}.",
        hint='Set "architectures" to a transformers class name, or write a model.py (docs/models.md).',
    )


def _build_model(cls: Any, config: Any, attn: str) -> nn.Module:
    """Build ``cls`` with random weights on the current default device / tensor mode."""
    skip_init = _allocates_nothing()
    with _no_weight_init() if skip_init else contextlib.nullcontext():
        try:
            module = cls._from_config(copy.deepcopy(config), attn_implementation=attn)
        except ValueError as exc:
            refused_sdpa = "sdpa" in str(exc) or "scaled_dot_product" in str(exc)
            if attn != "sdpa" or not refused_sdpa:
                raise
            module = cls._from_config(copy.deepcopy(config), attn_implementation="eager")
    if skip_init:
        module.tie_weights()  # transformers ties weights inside the init that was skipped
    return module


def _allocates_nothing() -> bool:
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


def _text_batch_fn(cls: type, config: Any, file: Path) -> Callable[..., Batch]:
    vocab_size = getattr(config, "vocab_size", None)
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise ModelSourceError(
            f"{file}: the {cls.__name__} config has no vocab_size, so autoshard cannot make token ids.",
            hint='Add "vocab_size" to the config.json, or write a model.py (docs/models.md).',
        )
    return functools.partial(
        _text_batch,
        vocab_size=vocab_size,
        labels=_label_kind(cls.__name__),
        num_labels=getattr(config, "num_labels", 2),
        encoder_decoder=bool(getattr(config, "is_encoder_decoder", False)),
    )


def _text_batch(
    batch_size: int, seq_len: int, *, vocab_size: int, labels: str, num_labels: int, encoder_decoder: bool
) -> dict[str, torch.Tensor]:
    """Random token ids; ``labels`` as the head expects them (see :func:`_label_kind`).

    Raises:
        UsageError: ``batch_size`` or ``seq_len`` is below 1.
    """
    _check_positive(batch_size=batch_size, seq_len=seq_len)
    input_ids = torch.randint(0, vocab_size, (batch_size, seq_len))
    batch = {"input_ids": input_ids}
    if encoder_decoder:
        # Explicit decoder inputs: some configs have no decoder_start_token_id to derive them from the labels.
        batch["decoder_input_ids"] = torch.randint(0, vocab_size, (batch_size, seq_len))
    if labels == "tokens":
        batch["labels"] = torch.randint(0, vocab_size, (batch_size, seq_len)) if encoder_decoder else input_ids
    elif labels == "per_token":
        batch["labels"] = torch.randint(0, num_labels, (batch_size, seq_len))
    elif labels == "per_sequence":
        batch["labels"] = torch.randint(0, num_labels, (batch_size,))
    return batch


def _image_batch_fn(cls: type, config: Any) -> Callable[..., Batch]:
    size = getattr(config, "image_size", None) or DEFAULT_IMAGE_SIZE
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return functools.partial(
        _image_batch,
        shape=(getattr(config, "num_channels", None) or 3, height, width),
        labels=_label_kind(cls.__name__),
        num_labels=getattr(config, "num_labels", 2),
    )


def _image_batch(
    batch_size: int, *, shape: tuple[int, int, int], labels: str, num_labels: int
) -> dict[str, torch.Tensor]:
    """Random images of ``shape`` (channels, height, width), with class labels for classification heads.

    Raises:
        UsageError: ``batch_size`` is below 1.
    """
    _check_positive(batch_size=batch_size)
    batch = {"pixel_values": torch.randn(batch_size, *shape)}
    if labels == "per_sequence":
        batch["labels"] = torch.randint(0, num_labels, (batch_size,))
    return batch


def _check_positive(**values: int) -> None:
    for key, value in values.items():
        if value < 1:
            raise UsageError(f"{key} must be at least 1, but got {key}={value}.")


def _label_kind(class_name: str) -> str:
    """What labels the head takes, from transformers' class naming: ``"tokens"`` (language-model heads),
    ``"per_token"``, ``"per_sequence"`` (classification heads) or ``"none"`` (bare models and other heads, whose
    output the default loss reduces)."""
    if class_name.endswith(("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration")):
        return "tokens"
    if class_name.endswith("ForTokenClassification"):
        return "per_token"
    if class_name.endswith(("ForSequenceClassification", "ForImageClassification")):
        return "per_sequence"
    return "none"


def _seq_len_fields(config: Any) -> dict[str, Any]:
    positions = next((getattr(config, k) for k in _POSITION_KEYS if isinstance(getattr(config, k, None), int)), None)
    if positions is None:
        return {"accepts_seq_len": True, "default_seq_len": DEFAULT_SEQ_LEN, "max_seq_len": None}
    unbounded = any(getattr(config, key, None) is not None for key in _UNBOUNDED_POSITION_KEYS)
    max_seq_len = None
    if not unbounded:
        max_seq_len = positions
        if config.model_type in _PADDING_OFFSET_POSITIONS:
            max_seq_len -= (getattr(config, "pad_token_id", None) or 0) + 1
    default = min(positions, MAX_DEFAULT_SEQ_LEN, max_seq_len or positions)
    return {"accepts_seq_len": True, "default_seq_len": default, "max_seq_len": max_seq_len}


def _num_layers(config: Any) -> int | None:
    for key in _LAYER_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _with_num_layers(data: Mapping[str, Any], config: Any, file: Path, num_layers: int) -> ModelSource:
    """The same config with ``num_layers`` blocks (in both stacks of an encoder-decoder)."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise UsageError(f"with_num_layers needs a positive number of layers, but got {num_layers=}.")
    changed = dict(data)
    keys = [config.attribute_map.get("num_hidden_layers", "num_hidden_layers")]
    keys += [key for key in ("num_decoder_layers", "decoder_layers") if isinstance(getattr(config, key, None), int)]
    for key in keys:
        changed[key] = num_layers
    layer_types = data.get("layer_types")
    if isinstance(layer_types, list) and layer_types:  # per-layer lists must match the new depth
        changed["layer_types"] = [layer_types[i % len(layer_types)] for i in range(num_layers)]
    return _source_from_data(changed, file)


def _display_name(data: Mapping[str, Any], file: Path) -> str:
    name = data.get("_name_or_path")
    if isinstance(name, str) and name:
        return name
    return file.resolve().parent.name or str(data["model_type"])
