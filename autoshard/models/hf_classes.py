"""Choosing the transformers class a config is built with, and refusing what autoshard cannot trace.

The class is ``architectures[0]`` of the config.json; an architecture the installed transformers does not
export is an error (naming close matches), never a silent switch to another head. Only a config without
``architectures`` falls back to the Auto classes, and the source's metadata says which one chose.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from autoshard.errors import ModelSourceError

__all__ = ["ModelClass", "check_traceable", "model_class"]

# Tried in this order when the config has no architectures. Masked LM comes before causal LM because
# encoder-only families (BERT, RoBERTa) also register a causal-LM head that only works with is_decoder=True,
# while decoder-only LMs (Llama, GPT-2) have no masked-LM head. Encoder-decoder configs try seq2seq first
# (BART also has a decoder-only *ForCausalLM).
_TASK_AUTO_CLASSES = (
    "AutoModelForMaskedLM",
    "AutoModelForCausalLM",
    "AutoModelForSeq2SeqLM",
    "AutoModelForSpeechSeq2Seq",
    "AutoModelForImageClassification",
    "AutoModel",
)
_ENCODER_DECODER_FIRST = ("AutoModelForSeq2SeqLM", "AutoModelForSpeechSeq2Seq")
"""Tried first for an encoder-decoder config: Whisper's and Speech2Text's heads are speech seq2seq ones, and
Whisper also has a decoder-only ``WhisperForCausalLM``, which the causal-LM class would pick (half the model,
its cross-attention unused)."""

# Config keys of a state-space (SSM) mixer's state size, and of the chunk size of a chunked (Mamba-2, SSD)
# scan. A state size without a chunk size is Mamba-1's selective scan, whose PyTorch path (without the
# mamba-ssm CUDA kernels) loops over the sequence one token at a time: transformers 5.23 Mamba, FalconMamba,
# Jamba and Zamba.
_SSM_STATE_KEYS = ("state_size", "mamba_d_state", "ssm_state_size")
_SSM_CHUNK_KEYS = ("chunk_size", "mamba_chunk_size")


def chunked_scan(config: Any) -> bool:
    """Whether the config has Mamba-2-style mixers (an SSM state size and a chunked scan), which autoshard traces
    through transformers' PyTorch path: more activation memory and more memory-bound time than the mamba-ssm
    kernels a GPU run uses (docs/models.md, "State-space models")."""
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    return any(any(getattr(part, k, None) is not None for k in _SSM_STATE_KEYS)
               and any(getattr(part, k, None) is not None for k in _SSM_CHUNK_KEYS) for part in (config, text))


def linear_attention(config: Any) -> bool:
    """Whether some layers are linear attention (``layer_types`` naming ``linear_attention``: Qwen3-Next, Qwen3.5,
    OLMo hybrid's gated DeltaNet), which transformers runs through its PyTorch chunked path
    (``torch_chunk_gated_delta_rule``) unless flash-linear-attention is installed: autoshard traces that path.
    transformers also names Mamba-2-style mixers so (Mamba2, Zamba2, Bamba): those are :func:`chunked_scan`'s."""
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    named = any("linear_attention" in (getattr(part, "layer_types", None) or ()) for part in (config, text))
    return named and not chunked_scan(config)


_EXPERT_FIELDS = ("num_local_experts", "n_routed_experts", "num_experts")
"""Where transformers' MoE configs (Mixtral, DeepSeek-V3, Qwen-MoE, OLMoE, gpt-oss, Llama 4, ...) keep the number
of routed experts per MoE layer."""

_TOP_K_FIELDS = ("num_experts_per_tok", "moe_topk")
"""Where they keep how many routed experts each token goes to."""

DENSE_EXPERT_MODEL_TYPES = ("llama4_text",)
"""MoE text models whose transformers code sends every token through every routed expert and zeroes the others'
outputs by the router's weights: ``Llama4TextMoe.forward`` repeats the hidden states once per expert
(``hidden_states.repeat(router_scores.shape[1], 1)``, transformers 5.x ``models/llama4/modeling_llama4.py``), so the
step computes all experts, not the top-k."""


def moe_layout(config: Any) -> tuple[int | None, int | None, bool]:
    """``(routed experts per MoE layer, experts per token, every expert computed)`` of a config, read from it or
    from its text config (a vision-language model's MoE language model): ``(None, None, False)`` without experts.

    Example:
        >>> import transformers
        >>> moe_layout(transformers.MixtralConfig())
        (8, 2, False)
    """
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config

    def first(fields: tuple[str, ...]) -> int | None:
        values = (getattr(part, k, None) for part in (config, text) for k in fields)
        return next((n for n in values if isinstance(n, int) and not isinstance(n, bool)), None)

    experts = first(_EXPERT_FIELDS)
    if experts is None or experts < 2:
        return None, None, False
    return experts, first(_TOP_K_FIELDS), getattr(text, "model_type", None) in DENSE_EXPERT_MODEL_TYPES


_MTP_FIELDS = ("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_hidden_layers")
"""Where configs declare multi-token-prediction layers (DeepSeek-V3 and GLM-4.5: ``num_nextn_predict_layers``;
Qwen3-Next's config.json: ``mtp_num_hidden_layers``)."""


def mtp_layers_not_built(config: Any, cls: type) -> int:
    """The multi-token-prediction layers ``config`` declares that ``cls``'s code never builds (its module does not
    mention MTP: DeepSeek-V3's in transformers 5.x, whose checkpoint holds one MTP module of ~14B parameters beside
    the 671B), 0 where none are declared or the code reads them.

    Example:
        >>> import transformers
        >>> mtp_layers_not_built(transformers.DeepseekV3Config(), transformers.DeepseekV3ForCausalLM)
        1
        >>> mtp_layers_not_built(transformers.LlamaConfig(), transformers.LlamaForCausalLM)
        0
    """
    import inspect
    import sys

    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    declared = next((n for part in (config, text) for k in _MTP_FIELDS
                     if isinstance(n := getattr(part, k, None), int) and not isinstance(n, bool) and n > 0), 0)
    if not declared:
        return 0
    try:
        code = inspect.getsource(sys.modules[cls.__module__]).lower()
    except (KeyError, OSError, TypeError):
        return 0  # the code cannot be read: nothing said rather than a guess
    return 0 if "mtp" in code or "nextn" in code else declared


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelClass:
    """The class a config is built with, and how it was chosen."""

    cls: type[nn.Module]
    """The transformers model class."""
    chosen_by: str
    """``"architectures[0]"``, or the Auto class that chose it when the config names none."""


def check_architectures(data: Mapping[str, Any], file: Path) -> None:
    """Refuse an ``architectures`` that is not a list of class names, in autoshard's words (checked before
    transformers reads the config: transformers 5.17 refuses a string there in its own)."""
    architectures = data.get("architectures")
    if architectures is not None and not (
        isinstance(architectures, list) and architectures and isinstance(architectures[0], str)
    ):
        raise ModelSourceError(
            f'{file}: "architectures" is {architectures!r}; it must be a list of class names.',
            hint='E.g. "architectures": ["LlamaForCausalLM"], or remove it to let autoshard choose.',
        )


def model_class(transformers: ModuleType, config: Any, data: Mapping[str, Any], file: Path) -> ModelClass:
    """The class named by ``architectures[0]``, or the first Auto class that knows the config. ``data`` has
    passed :func:`check_architectures` (before transformers read it).

    Raises:
        ModelSourceError: ``architectures[0]`` is not a model class of the installed transformers, takes
            another config class, or nothing knows the config.
    """
    if data.get("architectures") is not None:
        return ModelClass(cls=_named_class(transformers, config, data, file), chosen_by="architectures[0]")
    order = list(_TASK_AUTO_CLASSES)
    if getattr(config, "is_encoder_decoder", False):
        order = [*_ENCODER_DECODER_FIRST, *(a for a in order if a not in _ENCODER_DECODER_FIRST)]
    for auto_name in order:
        # _model_mapping (config class → model class) is how every Auto class resolves from_config.
        mapping = getattr(transformers, auto_name)._model_mapping
        if type(config) in mapping:
            return ModelClass(cls=mapping[type(config)], chosen_by=auto_name)
    raise ModelSourceError(
        f"{file}: transformers {transformers.__version__} has no model class for model_type "
        f"{data['model_type']!r}.",
        hint='Set "architectures" to a transformers class name, or write a model.py (docs/models.md).',
    )


def _named_class(
    transformers: ModuleType, config: Any, data: Mapping[str, Any], file: Path
) -> type[nn.Module]:
    name = data["architectures"][0]
    try:
        cls = getattr(transformers, name, None)
    except (ImportError, RuntimeError) as exc:  # a known class whose optional dependency is missing
        raise ModelSourceError(
            f"transformers cannot import {name}: {exc}", hint="Install what it names."
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        names = _model_class_names(transformers)
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.75)
        family = name.split("For")[0]
        close = close or sorted(n for n in names if n.startswith(f"{family}For") or n == f"{family}Model")[:4]
        if "auto_map" in data:
            hint = (
                "It is custom code from the Hub (auto_map), which autoshard does not run: write a model.py."
            )
        elif close:
            hint = f'Did you mean {", ".join(close)}? Or remove "architectures" to let autoshard choose.'
        else:
            hint = (
                'A newer transformers may have it (pip install -U transformers); or remove "architectures".'
            )
        raise ModelSourceError(
            f"{file}: architectures[0] is {name}, which transformers {transformers.__version__} does not "
            "have.",
            hint=hint,
        )
    expected = getattr(cls, "config_class", None)
    if isinstance(expected, type) and not isinstance(config, expected):
        raise ModelSourceError(
            f"{file}: architectures[0] is {name}, which takes a {expected.__name__}, but model_type "
            f"{data['model_type']!r} makes a {type(config).__name__}.",
            hint='Make "architectures" and "model_type" describe the same model.',
        )
    return cls


def _model_class_names(transformers: ModuleType) -> list[str]:
    """transformers' exported model class names (``*For*``, ``*Model``), to suggest close matches."""
    return [n for n in dir(transformers) if n[:1].isupper() and ("For" in n or n.endswith("Model"))]


def check_traceable(config: Any, cls: type, file: Path) -> None:
    """Refuse, before any slow work, a model whose step autoshard cannot trace in reasonable time.

    Mamba-1 mixers (a state size without a chunked scan, see ``_SSM_STATE_KEYS``) run a per-token Python loop
    without the mamba-ssm kernels: a tiny 2-layer Mamba took 22 s to trace at seq_len=512 and grows linearly
    with the sequence and the depth (measured under fake tensors, torch 2.13, transformers 5.23).

    RecurrentGemma's RG-LRU layers (``lru_width``) loop over the sequence the same way (``_rnn_scan`` in
    transformers 5.24's modeling_recurrent_gemma.py): its default 2B config took 50 s to profile at seq_len=128,
    and a recommend 179 s (2026-11-28, this machine).

    Raises:
        ModelSourceError: the config has Mamba-1 (selective-scan) mixer layers or RG-LRU recurrent layers.
    """
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    for part in (config, text):
        if getattr(part, "lru_width", None) is not None:
            raise ModelSourceError(
                f"{file}: autoshard cannot trace {cls.__name__} yet: its RG-LRU recurrent layers run a per-token "
                "Python loop in transformers' PyTorch code, see docs/models.md.",
                hint="Recurrent models with a chunked scan (Mamba2, Zamba2, Bamba, FalconH1) are supported.",
            )
        state = next((k for k in _SSM_STATE_KEYS if getattr(part, k, None) is not None), None)
        chunked = any(getattr(part, k, None) is not None for k in _SSM_CHUNK_KEYS)
        if state is not None and not chunked:
            raise ModelSourceError(
                f"{file}: autoshard cannot trace {cls.__name__} yet: its Mamba (selective-scan) mixer "
                "layers run a "
                "per-token Python loop without the mamba-ssm CUDA kernels, see docs/models.md.",
                hint="Mamba-2-style models (chunked scan: Mamba2, Zamba2, Bamba, FalconH1) are supported.",
            )
