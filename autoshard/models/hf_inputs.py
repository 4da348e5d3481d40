"""Example training batches for Hugging Face models, one maker per modality.

Which maker feeds a model follows from the class (its ``main_input_name`` and the inputs its ``forward``
takes) and from the config, never from a list of model names:

* text (``input_ids``): random token ids, with labels as the head takes them;
* image (``pixel_values``): random images;
* audio features (``input_features``, Whisper): log-mel frames, decoder ids and labels;
* audio waveform (``input_values``, wav2vec2 / HuBERT): a raw 16 kHz waveform;
* image + text (``input_ids`` and ``pixel_values``): dual encoders (CLIP, SigLIP) get both and
  ``return_loss=True``; vision-language LMs (LLaVA) get one image and its placeholder tokens in the text.

Everything is built with the ordinary factory functions, so the same makers work on a real device, on the meta
device and under fake tensors.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import torch

from autoshard.errors import ModelSourceError, UsageError
from autoshard.models.hf_audio import audio_features_spec, waveform_spec
from autoshard.models.hf_spec import (
    InputSpec,
    LabelKind,
    _check_positive,
    _num_labels,
    _seq_bounds,
    _text_config,
    _vocab_size,
)
from autoshard.models.source import Batch

__all__ = ["InputSpec", "input_spec", "label_kind"]

DEFAULT_IMAGE_SIZE = 224
"""Image side of vision models whose config gives no ``image_size`` (the ImageNet convention, e.g. ResNet)."""

# Class tokens a vision tower puts before its patch features: CLIPVisionEmbeddings prepends class_embedding,
# SiglipVisionEmbeddings has none (transformers 5.23 modeling_clip.py / modeling_siglip.py). Towers not listed
# are refused, since the placeholder count would be a guess.
_CLASS_TOKENS = {"clip_vision_model": 1, "siglip_vision_model": 0}

# Inputs that give a vision-language model the geometry of its images (tiles, grids, masks); a model that
# takes one of them needs more than pixel_values and placeholders to see its images.
_IMAGE_GEOMETRY_CONFIG_KEYS = ("image_grid_pinpoints", "spatial_merge_size")


def input_spec(cls: type, config: Any, file: Path) -> InputSpec:
    """Choose the batch maker for ``cls`` built from ``config``.

    Args:
        cls: the transformers model class.
        config: its (training) config.
        file: the config.json, for messages.

    Returns:
        The :class:`InputSpec`.

    Raises:
        ModelSourceError: autoshard cannot build this model's inputs correctly (the message says why).
    """
    main = getattr(cls, "main_input_name", "input_ids")
    params = _forward_parameters(cls)
    labels = label_kind(cls.__name__)
    if cls.__name__.endswith("ForMultipleChoice"):
        raise ModelSourceError(
            f"{file}: {cls.__name__} takes input_ids of shape (batch, choices, seq_len), and the number of "
            "choices is a property of the data set, which autoshard cannot know.",
            hint='Set "architectures" to another head (e.g. the bare model), or write a model.py '
            "(docs/models.md).",
        )
    if "pixel_values" in params and "spatial_shapes" in params:
        raise ModelSourceError(
            f"{file}: {cls.__name__} takes images as variable-resolution patches (pixel_values per patch, "
            "pixel_attention_mask, spatial_shapes) and resizes its position embeddings to each image's patch grid "
            "by reading spatial_shapes' values, which autoshard's trace (shapes without data) cannot do yet.",
            hint="Profile a fixed-resolution SigLIP config of the same sizes instead (model_type siglip: the same "
                 "encoder blocks); a model.py of this class meets the same limit.",
        )
    if main == "input_ids" and "pixel_values" in params:
        if _image_token_id(config) is not None:
            return _vision_language_spec(cls, config, file, params)
        return _image_text_spec(cls, config, file, params)
    if main == "input_ids":
        text = _text_config(config)
        vocab_size = _vocab_size(cls, text, file)
        return InputSpec(
            batch_fn=functools.partial(
                _text_batch,
                vocab_size=vocab_size,
                labels=labels,
                num_labels=_num_labels(config),
                encoder_decoder=bool(getattr(config, "is_encoder_decoder", False)),
            ),
            modality="text",
            **_seq_bounds(text),
        )
    if main == "pixel_values" and not {"input_ids", "decoder_input_ids"} & set(params):
        return InputSpec(batch_fn=_image_batch_fn(config, labels), modality="image")
    if main == "pixel_values":
        raise ModelSourceError(
            f"{file}: {cls.__name__} turns images into text (it takes pixel_values and token ids); autoshard "
            "makes example batches for image models, image-text encoders and LLaVA-style models only.",
            hint="Write a model.py whose batch() returns this model's inputs (see docs/models.md).",
        )
    if main in ("input_features", "input_values"):

        if main == "input_features":
            return audio_features_spec(cls, config, file, params, labels)
        return waveform_spec(config, labels)
    raise ModelSourceError(
        f"{file}: {cls.__name__} takes {main!r}; autoshard makes example batches for text, image, audio "
        "(input_features, input_values) and image-text models only.",
        hint="Write a model.py whose batch() returns this model's inputs (see docs/models.md).",
    )


def label_kind(class_name: str) -> LabelKind:
    """What labels the head takes, from transformers' class naming.

    ``"tokens"`` (language-model heads), ``"per_token"`` / ``"per_sequence"`` (classification heads),
    ``"spans"``
    (extractive question answering: start and end positions) or ``"none"`` (bare models and heads that run
    without labels, whose output the default loss reduces).

    Example:
        >>> label_kind("BertForQuestionAnswering"), label_kind("LlamaModel")
        ('spans', 'none')
    """
    if class_name.endswith(("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration")):
        return "tokens"
    if class_name.endswith("ForTokenClassification"):
        return "per_token"
    if class_name.endswith(("ForSequenceClassification", "ForImageClassification", "ForAudioClassification")):
        return "per_sequence"
    if class_name.endswith("ForQuestionAnswering"):
        return "spans"
    return "none"


# --- text ---------------------------------------------------------------------------------------------------


def _text_batch(
    batch_size: int,
    seq_len: int,
    *,
    vocab_size: int,
    labels: LabelKind,
    num_labels: int,
    encoder_decoder: bool,
) -> dict[str, torch.Tensor]:
    """Random token ids; labels as the head takes them (see :func:`label_kind`).

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
        batch["labels"] = (
            torch.randint(0, vocab_size, (batch_size, seq_len)) if encoder_decoder else input_ids
        )
    elif labels == "per_token":
        batch["labels"] = torch.randint(0, num_labels, (batch_size, seq_len))
    elif labels == "per_sequence":
        batch["labels"] = torch.randint(0, num_labels, (batch_size,))
    elif labels == "spans":
        batch["start_positions"] = torch.randint(0, seq_len, (batch_size,))
        batch["end_positions"] = torch.randint(0, seq_len, (batch_size,))
    return batch





# --- images -------------------------------------------------------------------------------------------------


def _image_shape(vision_config: Any) -> tuple[int, int, int]:
    size = getattr(vision_config, "image_size", None) or DEFAULT_IMAGE_SIZE
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return getattr(vision_config, "num_channels", None) or 3, height, width


def _image_batch_fn(config: Any, labels: LabelKind) -> Callable[..., Batch]:
    # A classifier over a two-tower config (CLIPForImageClassification) sizes its images by the vision tower's.
    sized = config if getattr(config, "image_size", None) else getattr(config, "vision_config", None) or config
    return functools.partial(
        _image_batch, shape=_image_shape(sized), labels=labels, num_labels=_num_labels(config)
    )


def _image_batch(
    batch_size: int, *, shape: tuple[int, int, int], labels: LabelKind, num_labels: int
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


# --- image + text -------------------------------------------------------------------------------------------


def _image_text_spec(cls: type, config: Any, file: Path, params: Mapping[str, Any]) -> InputSpec:
    """Dual encoders (CLIP, SigLIP): a caption and an image per sample; the contrastive loss when the forward
    computes one (``return_loss``), else the default loss reduces the similarity logits."""
    vision = getattr(config, "vision_config", None)
    text = _text_config(config)
    if vision is None or text is config:
        raise ModelSourceError(
            f"{file}: {cls.__name__} takes input_ids and pixel_values, but its config has no text_config and "
            "vision_config to size them from.",
            hint="Write a model.py whose batch() returns this model's inputs (see docs/models.md).",
        )
    return InputSpec(
        batch_fn=functools.partial(
            _image_text_batch,
            vocab_size=_vocab_size(cls, text, file),
            image_shape=_image_shape(vision),
            return_loss="return_loss" in params,
        ),
        modality="image-text",
        **_seq_bounds(text),
    )


def _image_text_batch(
    batch_size: int, seq_len: int, *, vocab_size: int, image_shape: tuple[int, int, int], return_loss: bool
) -> dict[str, Any]:
    """Random captions of ``seq_len`` tokens and random images.

    Raises:
        UsageError: ``batch_size`` or ``seq_len`` is below 1.
    """
    _check_positive(batch_size=batch_size, seq_len=seq_len)
    batch: dict[str, Any] = {
        "input_ids": torch.randint(0, vocab_size, (batch_size, seq_len)),
        "pixel_values": torch.randn(batch_size, *image_shape),
    }
    if return_loss:
        batch["return_loss"] = True
    return batch


def _vision_language_spec(cls: type, config: Any, file: Path, params: Mapping[str, Any]) -> InputSpec:
    """LLaVA-style models: one image per sequence, its features replacing ``image_tokens`` placeholders.

    Gemma 3 (a ``mm_tokens_per_image`` in its config) average-pools its SigLIP patch grid to that many tokens
    (``Gemma3MultiModalProjector``, transformers 5.24 modeling_gemma3.py) and has no feature-select strategy.
    PaliGemma projects every SigLIP patch (``PaliGemmaModel.get_image_features``: the tower's last hidden state, no
    class token), as a ``"full"`` strategy would.
    """
    vision = getattr(config, "vision_config", None)
    paligemma = getattr(config, "model_type", None) == "paligemma"
    strategy = "full" if paligemma else getattr(config, "vision_feature_select_strategy", None)
    pooled = getattr(config, "mm_tokens_per_image", None)
    geometry = [key for key in _IMAGE_GEOMETRY_CONFIG_KEYS if getattr(config, key, None) is not None]
    tower = getattr(vision, "model_type", None)
    why = None
    if pooled is not None:
        why = _pooled_problem(pooled, vision)
    elif (paligemma and tower != "siglip_vision_model") or (not paligemma and tower not in _CLASS_TOKENS):
        why = f"its vision tower is {tower!r}"  # first: no strategy or geometry setting would change it
    elif strategy not in {"default", "full"}:
        why = f"vision_feature_select_strategy is {strategy!r}, not 'default' or 'full'"
    elif geometry:
        why = f"its config sets {geometry[0]}"
    if why is not None:
        raise ModelSourceError(
            f"{file}: autoshard cannot build the image inputs of {cls.__name__} yet ({why}); it builds them "
            "for "
            "LLaVA-style models with a CLIP or SigLIP vision tower.",
            hint="Write a model.py whose batch() returns this model's inputs (see docs/models.md).",
        )
    channels, height, width = _image_shape(vision)
    patch = getattr(vision, "patch_size", None)
    # The patch embedding is a convolution with stride patch_size: it drops the rows and columns past the last
    # whole patch (SigLIP-so400m-patch14-384: 384 px in 27 x 27 patches of 14), as the position table does.
    if not isinstance(patch, int) or patch < 1 or height < patch or width < patch:
        raise ModelSourceError(
            f"{file}: vision_config.image_size ({height}x{width}) holds no whole patch of its patch_size "
            f"({patch}).",
            hint="Fix vision_config in the config.json.",
        )
    # LlavaModel.get_image_features drops the first feature (the class token) when the strategy is "default"
    # (transformers 5.23 modeling_llava.py); "full" keeps every feature.
    image_tokens = pooled if pooled is not None else (
        (height // patch) * (width // patch) + _CLASS_TOKENS[cast(str, tower)]  # checked above
        - (strategy == "default"))
    text = _text_config(config)
    vocab_size = _vocab_size(cls, text, file)
    image_token_id = _image_token_id(config)
    if not isinstance(image_token_id, int) or not 0 <= image_token_id < vocab_size:
        raise ModelSourceError(
            f"{file}: image_token_id is {image_token_id}, outside the text vocabulary "
            f"(text_config.vocab_size = {vocab_size}).",
            hint='Set "image_token_id" (or "image_token_index") to a token id below the vocabulary size.',
        )
    bounds = _seq_bounds(text)
    default = max(bounds["default_seq_len"], image_tokens + 1)
    if bounds["max_seq_len"] is not None and bounds["max_seq_len"] <= image_tokens:
        raise ModelSourceError(
            f"{file}: one image takes {image_tokens} tokens, but the text model holds only "
            f"{bounds['max_seq_len']}.",
            hint="Fix image_size / patch_size in vision_config, or the text model's positions.",
        )
    return InputSpec(
        batch_fn=functools.partial(
            _vision_language_batch,
            vocab_size=vocab_size,
            image_token_id=image_token_id,
            image_tokens=image_tokens,
            image_shape=(channels, height, width),
            labels="labels" in params,
            token_types=("suffix" if paligemma else "image") if "token_type_ids" in params else None,
        ),
        modality="vision-language",
        accepts_seq_len=True,
        default_seq_len=default,
        max_seq_len=bounds["max_seq_len"],
        image_tokens=image_tokens,
        image_token_id=image_token_id,
    )


def _vision_language_batch(
    batch_size: int,
    seq_len: int,
    *,
    vocab_size: int,
    image_token_id: int,
    image_tokens: int,
    image_shape: tuple[int, int, int],
    labels: bool,
    token_types: str | None = None,
) -> dict[str, torch.Tensor]:
    """One image per sequence: ``image_tokens`` placeholders first, then random text; ``seq_len`` counts both.
    With ``labels``, the labels are the ids with the placeholders ignored (-100), as LLaVA's processors do. With
    ``token_types``, ``token_type_ids`` as the model's processor gives them: ``"image"`` marks the image's tokens
    1 and the text 0 (Gemma 3: the image block attends both ways in training); ``"suffix"`` marks the image, the
    prefix, 0 and the text, the suffix trained on, 1 (PaliGemma: the prefix attends both ways).

    Raises:
        UsageError: ``batch_size`` is below 1, or ``seq_len`` leaves no room for text after the image tokens.
    """
    _check_positive(batch_size=batch_size, seq_len=seq_len)
    if seq_len <= image_tokens:
        raise UsageError(
            f"seq_len={seq_len} leaves no room for text: one image takes {image_tokens} tokens of the "
            "sequence.",
            hint=f"Use --seq-len {image_tokens + 1} or more (image tokens included).",
        )
    text = torch.randint(0, vocab_size - 1, (batch_size, seq_len - image_tokens))
    text = text + (text >= image_token_id).long()  # every id but the placeholder
    placeholders = torch.full((batch_size, image_tokens), image_token_id, dtype=text.dtype)
    input_ids = torch.cat([placeholders, text], dim=1)
    batch = {"input_ids": input_ids, "pixel_values": torch.randn(batch_size, *image_shape)}
    if labels:
        batch["labels"] = torch.cat([torch.full_like(placeholders, -100), text], dim=1)
    if token_types is not None:
        image = input_ids == image_token_id
        batch["token_type_ids"] = (image if token_types == "image" else ~image).long()
    return batch


# --- helpers ------------------------------------------------------------------------------------------------


def _pooled_problem(tokens: Any, vision: Any) -> str | None:
    """Why Gemma 3's pooled image tokens cannot be counted (``None``: they can): the projector pools a square
    grid of ``image_size // patch_size`` patches a side to ``sqrt(tokens)`` a side, by a whole kernel."""
    if getattr(vision, "model_type", None) != "siglip_vision_model":
        return f"mm_tokens_per_image is set, but its vision tower is {getattr(vision, 'model_type', None)!r}"
    side = math.isqrt(tokens) if isinstance(tokens, int) and tokens > 0 else 0
    size, patch = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    if side * side != tokens or not isinstance(size, int) or not isinstance(patch, int) or patch < 1 \
            or (size // patch) % side:
        return (f"mm_tokens_per_image {tokens!r} does not pool its {size}/{patch}-patch grid into a square of "
                "whole kernels")
    return None


def _forward_parameters(cls: type[Any]) -> Mapping[str, Any]:
    try:
        return inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return {}


def _image_token_id(config: Any) -> int | None:
    for key in ("image_token_id", "image_token_index"):
        value = getattr(config, key, None)
        if value is not None:
            return value
    return None
