"""Example batches of audio models for :mod:`autoshard.models.hf_inputs`: Whisper-style log-mel features and
raw waveforms (wav2vec2, HuBERT)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from autoshard.errors import ModelSourceError
from autoshard.models.hf_spec import (
    InputSpec,
    LabelKind,
    _check_positive,
    _num_labels,
    _seq_bounds,
    _text_config,
    _vocab_size,
)

__all__ = ["WAVEFORM_SAMPLES", "audio_features_spec", "waveform_spec"]

WAVEFORM_SAMPLES = 250_000
"""Raw-audio length of ``input_values`` models: wav2vec 2.0 pre-trains on crops of 250k samples, 15.6 s at
16 kHz (Baevski et al. 2020, "wav2vec 2.0", section 4.2); transformers' Wav2Vec2FeatureExtractor samples at
16 kHz."""


# --- audio --------------------------------------------------------------------------------------------------


def audio_features_spec(
    cls: type, config: Any, file: Path, params: Mapping[str, Any], labels: LabelKind
) -> InputSpec:
    """Whisper-style log-mel inputs: ``(batch, num_mel_bins, 2 * max_source_positions)``, since the encoder's
    second convolution has stride 2 and WhisperEncoder refuses any other length (transformers 5.23)."""
    mel_bins = getattr(config, "num_mel_bins", None)
    source_positions = getattr(config, "max_source_positions", None)
    if not isinstance(mel_bins, int) or not isinstance(source_positions, int):
        raise ModelSourceError(
            f"{file}: {cls.__name__} takes 'input_features', and autoshard builds those only for "
            "Whisper-style "
            "configs (num_mel_bins and max_source_positions).",
            hint="Write a model.py whose batch() returns this model's inputs (see docs/models.md).",
        )
    decoder = "decoder_input_ids" in params
    frames = 2 * source_positions
    features = functools.partial(_audio_features_batch, shape=(mel_bins, frames))
    if not decoder:  # encoder-only heads (WhisperForAudioClassification): no text
        return InputSpec(
            batch_fn=functools.partial(features, labels=labels, num_labels=_num_labels(config), vocab_size=0),
            modality="audio-features",
        )
    text = _text_config(config)
    vocab_size = _vocab_size(cls, text, file)
    bounds = _seq_bounds(text)
    return InputSpec(
        batch_fn=functools.partial(features, labels=labels, num_labels=0, vocab_size=vocab_size),
        modality="audio-features",
        **bounds,
    )


def _audio_features_batch(
    batch_size: int,
    seq_len: int | None = None,
    *,
    shape: tuple[int, int],
    labels: LabelKind,
    num_labels: int,
    vocab_size: int,
) -> dict[str, torch.Tensor]:
    """Random log-mel ``input_features`` of ``shape`` (mel bins, frames); with ``seq_len`` also decoder ids
    and token labels of that length.

    Raises:
        UsageError: ``batch_size`` or ``seq_len`` is below 1.
    """
    _check_positive(batch_size=batch_size)
    batch = {"input_features": torch.randn(batch_size, *shape)}
    if seq_len is not None:
        _check_positive(seq_len=seq_len)
        batch["decoder_input_ids"] = torch.randint(0, vocab_size, (batch_size, seq_len))
        if labels == "tokens":
            batch["labels"] = torch.randint(0, vocab_size, (batch_size, seq_len))
    elif labels == "per_sequence":
        batch["labels"] = torch.randint(0, num_labels, (batch_size,))
    return batch


def waveform_spec(config: Any, labels: LabelKind) -> InputSpec:
    """Raw-waveform encoders (wav2vec2, HuBERT): :data:`WAVEFORM_SAMPLES` samples; class labels for
    audio-classification heads. CTC heads get no labels: Wav2Vec2ForCTC checks ``labels.max()`` in forward,
    which a trace without data cannot answer, so the default loss reduces the CTC logits instead."""
    return InputSpec(
        batch_fn=functools.partial(
            _waveform_batch,
            labels="per_sequence" if labels == "per_sequence" else "none",
            num_labels=_num_labels(config),
        ),
        modality="audio-waveform",
    )


def _waveform_batch(batch_size: int, *, labels: LabelKind, num_labels: int) -> dict[str, torch.Tensor]:
    """Random 16 kHz waveforms of :data:`WAVEFORM_SAMPLES` samples.

    Raises:
        UsageError: ``batch_size`` is below 1.
    """
    _check_positive(batch_size=batch_size)
    batch = {"input_values": torch.randn(batch_size, WAVEFORM_SAMPLES)}
    if labels == "per_sequence":
        batch["labels"] = torch.randint(0, num_labels, (batch_size,))
    return batch
