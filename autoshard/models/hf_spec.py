"""What every Hugging Face input maker shares: :class:`InputSpec`, the label kinds, and reading sequence
bounds, the text config, the vocabulary and the label count from a config (:mod:`autoshard.models.hf_inputs` and
:mod:`autoshard.models.hf_audio` both build on it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from autoshard.errors import ModelSourceError, UsageError
from autoshard.models.source import Batch

Modality = Literal["text", "image", "audio-features", "audio-waveform", "image-text", "vision-language"]
LabelKind = Literal["tokens", "per_token", "per_sequence", "spans", "none"]

DEFAULT_SEQ_LEN = 512
"""Sequence length of text models whose config gives no maximum."""
MAX_DEFAULT_SEQ_LEN = 2048
"""Cap on the default sequence length, so a 128k-context config does not default to a 128k trace."""
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_target_positions")

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
    {
        "roberta",
        "xlm-roberta",
        "xlm-roberta-xl",
        "camembert",
        "data2vec-text",
        "roberta-prelayernorm",
        "ibert",
    }
)


@dataclass(frozen=True, kw_only=True, slots=True)
class InputSpec:
    """How to make a model's example batch, and how long its text may be."""

    batch_fn: Callable[..., Batch]
    """``batch_fn(batch_size)``, or ``batch_fn(batch_size, seq_len=N)`` when :attr:`accepts_seq_len`."""
    modality: Modality
    """Which maker: text, image, audio features or waveform, image + text, vision-language."""
    accepts_seq_len: bool = False
    """Whether the batch has a text length to set (``--seq-len``)."""
    default_seq_len: int | None = None
    """The text length used when the user gives none."""
    max_seq_len: int | None = None
    """The longest text the model supports (learned positions), if bounded."""
    image_tokens: int | None = None
    """Image placeholder tokens in each sequence (vision-language LMs), counted in the sequence length."""
    image_token_id: int | None = None
    """The placeholder token of those images (vision-language LMs)."""

    def seq_fields(self) -> dict[str, Any]:
        """The :class:`~autoshard.models.source.ModelSource` fields about sequence length."""
        return {
            "accepts_seq_len": self.accepts_seq_len,
            "default_seq_len": self.default_seq_len,
            "max_seq_len": self.max_seq_len,
        }


def _seq_bounds(text_config: Any) -> dict[str, Any]:
    """Default and maximum text length from the positions the (text) config declares."""
    key, positions = next(
        ((k, getattr(text_config, k)) for k in _POSITION_KEYS if isinstance(getattr(text_config, k, None), int)),
        (None, None),
    )
    if positions is None:
        return {"accepts_seq_len": True, "default_seq_len": DEFAULT_SEQ_LEN, "max_seq_len": None}
    if positions < 1:  # it was refused as "seq_len must be at least 1", of a seq_len nobody gave
        raise ModelSourceError(f"the config's {key} is {positions}: the model has no position for a token.",
                               hint=f"Set {key} in config.json to the longest sequence the model takes.")
    unbounded = any(getattr(text_config, key, None) is not None for key in _UNBOUNDED_POSITION_KEYS)
    max_seq_len = None
    if not unbounded:
        max_seq_len = positions
        if getattr(text_config, "model_type", None) in _PADDING_OFFSET_POSITIONS:
            max_seq_len -= (getattr(text_config, "pad_token_id", None) or 0) + 1
    default = min(positions, MAX_DEFAULT_SEQ_LEN, max_seq_len or positions)
    return {"accepts_seq_len": True, "default_seq_len": default, "max_seq_len": max_seq_len}


def trained_positions(config: Any) -> int | None:
    """The positions a rotary (or otherwise unbounded) text config declares (``max_position_embeddings``): the
    context it was made for, which a longer sequence runs past without a bound; ``None`` for learned positions
    (a bound, :attr:`InputSpec.max_seq_len`) or a config that declares none."""
    text = _text_config(config)
    if not any(getattr(text, key, None) is not None for key in _UNBOUNDED_POSITION_KEYS):
        return None
    return next((getattr(text, k) for k in _POSITION_KEYS if isinstance(getattr(text, k, None), int)), None)


def sequence_metadata(config: Any) -> dict[str, Any]:
    """What a source's metadata says about the sequences a (text) config was made for, for the "Scope:" lines
    (:func:`autoshard.models.scope.scope_lines`): ``trained_positions`` (:func:`trained_positions`),
    ``rope_reach`` and ``rope_scaling`` (:func:`rope_reach`) and ``sliding_window``; only the keys it has."""
    out: dict[str, Any] = {}
    positions = trained_positions(config)
    if positions is not None:
        out["trained_positions"] = positions
    if (reach := rope_reach(config)) is not None:
        out["rope_reach"], out["rope_scaling"] = reach
    window = getattr(_text_config(config), "sliding_window", None)
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        out["sliding_window"] = window
    return out


def rope_reach(config: Any) -> tuple[int, str] | None:
    """The positions a rotary config's RoPE scaling reaches and its name (``"yarn, factor 4"``), ``None`` without
    scaling (``rope_parameters``' type ``default``; ``rope_scaling`` before transformers 5).

    The reach is the larger of ``max_position_embeddings`` and the original context times the factor: Qwen2.5's
    yarn (factor 4 over 32,768) reaches 131,072, Llama 3.1's llama3 type declares its 131,072 already (factor 8
    over 8,192 gives less).

    Example:
        >>> from transformers import Qwen2Config
        >>> rope_reach(Qwen2Config(max_position_embeddings=32768, rope_scaling={"rope_type": "yarn", "factor": 4.0}))
        (131072, 'yarn, factor 4')
    """
    text = _text_config(config)
    positions = trained_positions(config)
    params = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None)
    if positions is None or not isinstance(params, dict):
        return None
    kind = params.get("rope_type") or params.get("type")
    factor = params.get("factor")
    if kind in (None, "default") or not isinstance(factor, (int, float)) or factor <= 1:
        return None
    original = params.get("original_max_position_embeddings")
    base = original if isinstance(original, int) and original > 0 else positions
    return max(positions, int(base * factor)), f"{kind}, factor {factor:g}"


def _text_config(config: Any) -> Any:
    """The config of the text part (``text_config`` of multimodal models; the config itself otherwise)."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def _vocab_size(cls: type, config: Any, file: Path) -> int:
    vocab_size = getattr(config, "vocab_size", None)
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise ModelSourceError(
            f"{file}: the {cls.__name__} config has no vocab_size, so autoshard cannot make token ids.",
            hint='Add "vocab_size" to the config.json, or write a model.py (docs/models.md).',
        )
    return vocab_size


def _num_labels(config: Any) -> int:
    return getattr(config, "num_labels", 2)


def _check_positive(**values: int) -> None:
    for key, value in values.items():
        if value < 1:
            raise UsageError(f"{key} must be at least 1, but got {key}={value}.")
