"""References for the model zoo, computed without autoshard: parameter counts and analytic FLOPs per step.

**Parameters.** :func:`meta_parameter_count` builds the model as transformers does
(``cls._from_config(config)`` under ``torch.device("meta")``: nothing is allocated) and counts unique parameters
(tied weights once): the exact reference.

**FLOPs.** :func:`analytic_flops` writes the FLOPs of one training step from the config alone, family by family,
as a list of :class:`Term`. The convention, shared with PaLM's MFU accounting (Chowdhery et al. 2022, arXiv
2204.02311, appendix B) and Megatron-LM (Narayanan et al. 2021, arXiv 2104.04473, section 5.1, the ``96·B·s·l·h²``
formula) and Chinchilla (Hoffmann et al. 2022, arXiv 2203.15556, appendix F):

* a matrix product of an ``m × k`` by a ``k × n`` matrix is ``2·m·k·n`` FLOPs; a linear layer with ``N_w`` weight
  elements costs ``2·N_w`` per token forward and twice that backward (input and weight gradients), so the step is
  ``6·N_w·T`` for ``T`` tokens. Only weight matrices count: biases, norms, activations, softmax, rotary, embedding
  look-ups are elementwise and counted by nobody (torch's ``FlopCounterMode`` counts matmuls, convolutions and
  attention kernels only). The LM head counts whether or not it is tied to the embedding (it is a matmul).
* mixture of experts: the router, the ``top_k`` routed experts each token goes to, and the shared experts.
* attention: forward ``2·S_q·S_k·(d_qk + d_v)`` per sequence per head (``QKᵀ`` and ``AV``), with the model's own
  head dims (MLA: ``d_qk = qk_nope + qk_rope``, ``d_v = v_head_dim``), × 3 for the step. **Causal attention is
  counted full (``S × S``), not halved** — the convention of torch's ``FlopCounterMode`` SDPA formula
  (``torch/utils/flop_counter.py``, ``sdpa_flop_count``) and of PaLM's appendix B (``6·N + 12·L·H·Q·T``).
  **Sliding-window layers are counted full too** (Mistral, Gemma 2/3, StarCoder2, Phi-3, ModernBERT's local
  layers): transformers' eager and SDPA paths apply the window as a mask over the full score matrix, so the FLOPs
  executed are the full ones; a kernel that skips masked blocks (flash-attention's window) does less work.
  The backward of attention is 2 × forward here (no recomputation of the scores: torch's flash / efficient SDPA
  backward formula adds one ``QKᵀ`` more, which this convention leaves out, as MFU accounting does).
* inputs that need no gradient (pixels, mel frames) make the first convolution's backward compute only the weight
  gradient: backward 1 × forward; a layer whose output does not reach the loss (LLaVA's last vision layer, whose
  output ``vision_feature_layer = -2`` skips) has no backward at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

TermKind = Literal["matmul", "attention", "conv"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Term:
    """One part of the step's FLOPs."""

    name: str
    kind: TermKind
    forward_flops: int
    backward_multiple: int = 2
    """Backward FLOPs as a multiple of forward (2: input and weight gradients; 1: weight gradient only)."""

    @property
    def step_flops(self) -> int:
        """Forward plus backward."""
        return self.forward_flops * (1 + self.backward_multiple)


@dataclass(frozen=True, kw_only=True, slots=True)
class FlopEstimate:
    """The analytic FLOPs of one training step (one micro-batch, forward and backward)."""

    terms: tuple[Term, ...]
    sdpa_recompute_flops: int = 0
    """Not in :attr:`step_flops`: what torch's fused SDPA backward formula adds by recomputing ``QKᵀ``
    (``2·S_q·S_k·d_qk`` per head and sequence; ``torch/utils/flop_counter.py``, ``sdpa_backward_flop_count``),
    which a counter of the fused kernels reports and this convention leaves out."""

    @property
    def step_flops(self) -> int:
        """Every term."""
        return sum(t.step_flops for t in self.terms)

    @property
    def forward_flops(self) -> int:
        """Forward only."""
        return sum(t.forward_flops for t in self.terms)

    def step_flops_of(self, kind: TermKind) -> int:
        """The step FLOPs of one kind of term."""
        return sum(t.step_flops for t in self.terms if t.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"step_flops": self.step_flops, "forward_flops": self.forward_flops,
                "sdpa_recompute_flops": self.sdpa_recompute_flops,
                "by_kind": {k: self.step_flops_of(k) for k in ("matmul", "attention", "conv")},
                "terms": [asdict(t) | {"step_flops": t.step_flops} for t in self.terms]}


class _Terms:
    """Accumulates forward FLOPs by (name, kind, backward multiple)."""

    def __init__(self) -> None:
        self._flops: dict[tuple[str, TermKind, int], int] = {}
        self._recompute = 0

    def add(self, name: str, kind: TermKind, forward_flops: int, backward_multiple: int = 2) -> None:
        key = (name, kind, backward_multiple)
        self._flops[key] = self._flops.get(key, 0) + forward_flops

    def linear(self, name: str, weights: int, tokens: int, backward_multiple: int = 2) -> None:
        """A linear layer (or several) with ``weights`` weight elements applied to ``tokens`` tokens."""
        self.add(name, "matmul", 2 * weights * tokens, backward_multiple)

    def attention(self, name: str, *, sequences: int, heads: int, s_q: int, s_k: int, d_qk: int, d_v: int,
                  backward_multiple: int = 2) -> None:
        """``QKᵀ`` and ``AV`` of ``sequences`` sequences, full ``s_q × s_k`` score matrices."""
        self.add(name, "attention", 2 * sequences * heads * s_q * s_k * (d_qk + d_v), backward_multiple)
        if backward_multiple:
            self._recompute += 2 * sequences * heads * s_q * s_k * d_qk

    def estimate(self) -> FlopEstimate:
        terms = tuple(Term(name=n, kind=k, forward_flops=f, backward_multiple=b)
                      for (n, k, b), f in self._flops.items() if f)
        return FlopEstimate(terms=terms, sdpa_recompute_flops=self._recompute)


# -- parameters ----------------------------------------------------------------------------------------------


def meta_parameter_count(config: Any, architecture: str) -> int:
    """Unique parameters of transformers' own build of ``architecture`` from ``config``, on the meta device."""
    import torch
    import transformers

    cls = getattr(transformers, architecture)
    with torch.device("meta"):
        model = cls._from_config(config)
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


# -- FLOPs ---------------------------------------------------------------------------------------------------


def analytic_flops(config: Any, *, batch_size: int, seq_len: int | None) -> FlopEstimate:
    """FLOPs of one training step of ``config``'s model on ``batch_size`` samples.

    Args:
        config: a transformers config of a model type in :data:`FAMILIES`.
        batch_size: samples per step.
        seq_len: tokens per sequence (decoder tokens for encoder-decoders, text tokens for CLIP / SigLIP, all
            positions for LLaVA); ignored by image-only models.

    Raises:
        KeyError: the model type has no formula here.
    """
    model_type = config.model_type
    if model_type not in FAMILIES:
        raise KeyError(f"no FLOP formula for model_type {model_type!r}; formulas exist for {', '.join(FAMILIES)}")
    terms = _Terms()
    FAMILIES[model_type](terms, config, batch_size, seq_len)
    return terms.estimate()


def _get(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


# -- decoders --------------------------------------------------------------------------------------------------

_GATED_MLP = frozenset({"llama", "qwen2", "qwen3", "mistral", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2",
                        "deepseek_v3", "gemma2", "gemma3_text", "phi3", "olmo2", "jamba"})


def _decoder(terms: _Terms, cfg: Any, batch: int, seq_len: int | None, *, prefix: str = "") -> None:
    """A decoder-only language model, layer by layer, then the LM head."""
    if seq_len is None:
        raise ValueError("a decoder needs a sequence length")
    tokens, h = batch * seq_len, cfg.hidden_size
    for i in range(cfg.num_hidden_layers):
        if _is_mamba_layer(cfg, i):
            _mamba(terms, cfg, batch, seq_len, prefix)
        else:
            _self_attention(terms, cfg, batch, seq_len, prefix)
        _feed_forward(terms, cfg, i, tokens, prefix)
    terms.linear(f"{prefix}LM head", h * cfg.vocab_size, tokens)


def _heads(cfg: Any) -> tuple[int, int, int]:
    """Query heads, key / value heads, head dim."""
    heads = cfg.num_attention_heads
    if cfg.model_type == "falcon":
        kv = 1 if cfg.multi_query and not cfg.new_decoder_architecture else cfg.num_kv_heads
    else:
        kv = _get(cfg, "num_key_value_heads", default=heads)
    head_dim = _get(cfg, "head_dim", default=cfg.hidden_size // heads)
    return heads, kv, head_dim


def _self_attention(terms: _Terms, cfg: Any, batch: int, seq_len: int, prefix: str) -> None:
    tokens, h = batch * seq_len, cfg.hidden_size
    if cfg.model_type in ("deepseek_v2", "deepseek_v3"):  # multi-head latent attention (DeepSeek-V2 paper, §2.1)
        heads, nope, rope, v = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        q_rank, kv_rank = cfg.q_lora_rank, cfg.kv_lora_rank
        q = h * heads * (nope + rope) if q_rank is None else h * q_rank + q_rank * heads * (nope + rope)
        weights = q + h * (kv_rank + rope) + kv_rank * heads * (nope + v) + heads * v * h
        terms.linear(f"{prefix}attention projections", weights, tokens)
        terms.attention(f"{prefix}attention scores", sequences=batch, heads=heads, s_q=seq_len, s_k=seq_len,
                        d_qk=nope + rope, d_v=v)
        return
    heads, kv, head_dim = _heads(cfg)
    weights = h * heads * head_dim + 2 * h * kv * head_dim + heads * head_dim * h  # q, k, v, o
    terms.linear(f"{prefix}attention projections", weights, tokens)
    terms.attention(f"{prefix}attention scores", sequences=batch, heads=heads, s_q=seq_len, s_k=seq_len,
                    d_qk=head_dim, d_v=head_dim)


def _feed_forward(terms: _Terms, cfg: Any, layer: int, tokens: int, prefix: str) -> None:
    h, model_type = cfg.hidden_size, cfg.model_type
    experts = _moe_experts(cfg, layer)
    if experts:
        routed, top_k, expert_ff, shared_ff, shared_gate = experts
        terms.linear(f"{prefix}router", h * routed, tokens)
        terms.linear(f"{prefix}routed experts (top-{top_k})", top_k * 3 * h * expert_ff, tokens)
        if shared_ff:
            terms.linear(f"{prefix}shared experts", 3 * h * shared_ff + (h if shared_gate else 0), tokens)
        return
    if model_type in _GATED_MLP:
        terms.linear(f"{prefix}MLP", 3 * h * cfg.intermediate_size, tokens)
        return
    ff = {"falcon": lambda: cfg.ffn_hidden_size, "opt": lambda: cfg.ffn_dim, "bloom": lambda: 4 * h,
          "gptj": lambda: cfg.n_inner or 4 * h}.get(model_type, lambda: cfg.intermediate_size)()
    terms.linear(f"{prefix}MLP", 2 * h * ff, tokens)


def _moe_experts(cfg: Any, layer: int) -> tuple[int, int, int, int, bool] | None:
    """``(routed experts, top_k, expert FFN size, shared FFN size, shared gate)`` of an MoE layer, else ``None``."""
    model_type = cfg.model_type
    if model_type == "mixtral":
        return cfg.num_local_experts, cfg.num_experts_per_tok, cfg.intermediate_size, 0, False
    if model_type in ("qwen2_moe", "qwen3_moe"):
        sparse = (layer not in (cfg.mlp_only_layers or []) and cfg.num_experts > 0
                  and (layer + 1) % cfg.decoder_sparse_step == 0)
        if not sparse:
            return None
        shared = getattr(cfg, "shared_expert_intermediate_size", 0) if model_type == "qwen2_moe" else 0
        return cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size, shared, bool(shared)
    if model_type in ("deepseek_v2", "deepseek_v3"):
        if layer < cfg.first_k_dense_replace:
            return None
        shared = (cfg.n_shared_experts or 0) * cfg.moe_intermediate_size
        return cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size, shared, False
    if model_type == "jamba":
        if cfg.num_experts > 1 and layer % cfg.expert_layer_period == cfg.expert_layer_offset:
            return cfg.num_experts, cfg.num_experts_per_tok, cfg.intermediate_size, 0, False
    return None


def _is_mamba_layer(cfg: Any, layer: int) -> bool:
    return cfg.model_type == "jamba" and layer % cfg.attn_layer_period != cfg.attn_layer_offset


def _mamba(terms: _Terms, cfg: Any, batch: int, seq_len: int, prefix: str) -> None:
    """A Mamba mixer (Gu & Dao 2023, arXiv 2312.00752) as transformers' Jamba runs it without CUDA kernels."""
    tokens, h = batch * seq_len, cfg.hidden_size
    inner, state, rank, width = cfg.mamba_expand * h, cfg.mamba_d_state, cfg.mamba_dt_rank, cfg.mamba_d_conv
    # in_proj (x and z), x_proj (dt, B, C), dt_proj, out_proj
    terms.linear(f"{prefix}Mamba projections", h * 2 * inner + inner * (rank + 2 * state) + rank * inner
                 + inner * h, tokens)
    # Depthwise causal conv1d, padded by width - 1 on both sides: seq_len + width - 1 outputs, sliced afterwards.
    terms.add(f"{prefix}Mamba conv1d", "conv", 2 * width * inner * batch * (seq_len + width - 1))
    # The scan's read-out: states (inner × d_state) times C (d_state) per token, a batched matmul.
    terms.add(f"{prefix}Mamba scan read-out", "matmul", 2 * inner * state * tokens)


# -- encoders --------------------------------------------------------------------------------------------------


def _encoder_layers(terms: _Terms, *, prefix: str, layers: int, hidden: int, ffn_weights: int, heads: int,
                    sequences: int, seq_len: int, head_dim: int | None = None, backward_multiple: int = 2) -> None:
    """``layers`` post-/pre-norm transformer layers with q, k, v, o of ``hidden × heads·head_dim``."""
    head_dim = head_dim or hidden // heads
    tokens = sequences * seq_len
    terms.linear(f"{prefix}attention projections", layers * 4 * hidden * heads * head_dim, tokens, backward_multiple)
    terms.linear(f"{prefix}MLP", layers * ffn_weights, tokens, backward_multiple)
    for _ in range(layers):
        terms.attention(f"{prefix}attention scores", sequences=sequences, heads=heads, s_q=seq_len, s_k=seq_len,
                        d_qk=head_dim, d_v=head_dim, backward_multiple=backward_multiple)


def _bert(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """BERT / RoBERTa / DeBERTa-v2 masked LM: the MLM head (dense + decoder) runs on every token."""
    if seq_len is None:
        raise ValueError("an encoder needs a sequence length")
    h, tokens = cfg.hidden_size, batch * seq_len
    _encoder_layers(terms, prefix="", layers=cfg.num_hidden_layers, hidden=h,
                    ffn_weights=2 * h * cfg.intermediate_size, heads=cfg.num_attention_heads, sequences=batch,
                    seq_len=seq_len)
    if cfg.model_type == "deberta-v2" and cfg.relative_attention:
        # Disentangled attention (He et al. 2021, arXiv 2006.03654, eq. 4): each layer projects the 2k relative
        # position embeddings through the query and key projections (once, not per sample), then scores
        # content-to-position and position-to-content: two more (S × d) · (d × 2k) products per head.
        span = cfg.position_buckets if cfg.position_buckets > 0 else (
            cfg.max_relative_positions if cfg.max_relative_positions > 0 else cfg.max_position_embeddings)
        kinds = len(cfg.pos_att_type or ())
        head_dim = h // cfg.num_attention_heads
        terms.linear("relative-position projections", cfg.num_hidden_layers * kinds * h * h, 2 * span)
        terms.add("disentangled attention scores", "attention",
                  cfg.num_hidden_layers * kinds * 2 * batch * cfg.num_attention_heads * seq_len * 2 * span
                  * head_dim)
    terms.linear("MLM head", h * h + h * cfg.vocab_size, tokens)


def _modernbert(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """ModernBERT masked LM: fused Wqkv, gated MLP (Wi: h → 2·ff), head dense + decoder on every token."""
    if seq_len is None:
        raise ValueError("an encoder needs a sequence length")
    h = cfg.hidden_size
    _encoder_layers(terms, prefix="", layers=cfg.num_hidden_layers, hidden=h,
                    ffn_weights=3 * h * cfg.intermediate_size, heads=cfg.num_attention_heads, sequences=batch,
                    seq_len=seq_len)
    terms.linear("MLM head", h * h + h * cfg.vocab_size, batch * seq_len)


# -- encoder-decoders ------------------------------------------------------------------------------------------


def _seq2seq(terms: _Terms, *, batch: int, enc_len: int, dec_len: int, hidden: int, heads: int, head_dim: int,
             enc_layers: int, dec_layers: int, enc_ffn: int, dec_ffn: int, vocab: int) -> None:
    """Encoder self-attention; decoder self- and cross-attention (q, o on decoder tokens, k, v on encoder
    tokens); the LM head on decoder tokens. ``*_ffn`` are weight elements of one layer's feed-forward."""
    inner = heads * head_dim
    _encoder_layers(terms, prefix="encoder ", layers=enc_layers, hidden=hidden, ffn_weights=enc_ffn, heads=heads,
                    sequences=batch, seq_len=enc_len, head_dim=head_dim)
    _encoder_layers(terms, prefix="decoder ", layers=dec_layers, hidden=hidden, ffn_weights=dec_ffn, heads=heads,
                    sequences=batch, seq_len=dec_len, head_dim=head_dim)
    terms.linear("cross-attention q, o", dec_layers * 2 * hidden * inner, batch * dec_len)
    terms.linear("cross-attention k, v", dec_layers * 2 * hidden * inner, batch * enc_len)
    for _ in range(dec_layers):
        terms.attention("cross-attention scores", sequences=batch, heads=heads, s_q=dec_len, s_k=enc_len,
                        d_qk=head_dim, d_v=head_dim)
    terms.linear("LM head", hidden * vocab, batch * dec_len)


def _t5(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """T5: encoder and decoder see ``seq_len`` tokens each; gated-GELU variants have two input matrices."""
    if seq_len is None:
        raise ValueError("T5 needs a sequence length")
    h, ff = cfg.d_model, cfg.d_ff
    ffn = (3 if cfg.is_gated_act else 2) * h * ff
    _seq2seq(terms, batch=batch, enc_len=seq_len, dec_len=seq_len, hidden=h, heads=cfg.num_heads,
             head_dim=cfg.d_kv, enc_layers=cfg.num_layers, dec_layers=cfg.num_decoder_layers, enc_ffn=ffn,
             dec_ffn=ffn, vocab=cfg.vocab_size)


def _bart(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """BART: encoder and decoder see ``seq_len`` tokens each."""
    if seq_len is None:
        raise ValueError("BART needs a sequence length")
    h = cfg.d_model
    _seq2seq(terms, batch=batch, enc_len=seq_len, dec_len=seq_len, hidden=h, heads=cfg.encoder_attention_heads,
             head_dim=h // cfg.encoder_attention_heads, enc_layers=cfg.encoder_layers,
             dec_layers=cfg.decoder_layers, enc_ffn=2 * h * cfg.encoder_ffn_dim, dec_ffn=2 * h * cfg.decoder_ffn_dim,
             vocab=cfg.vocab_size)


def _whisper(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """Whisper: two convolutions (kernel 3; the second of stride 2) turn ``2·max_source_positions`` mel frames
    (30 s) into ``max_source_positions`` encoder positions; the decoder sees ``seq_len`` tokens."""
    h, enc_len = cfg.d_model, cfg.max_source_positions
    dec_len = cfg.max_target_positions if seq_len is None else seq_len
    frames = 2 * enc_len
    terms.add("conv1 (mel frames, weight gradient only)", "conv", 2 * 3 * cfg.num_mel_bins * h * frames * batch, 1)
    terms.add("conv2", "conv", 2 * 3 * h * h * enc_len * batch)
    _seq2seq(terms, batch=batch, enc_len=enc_len, dec_len=dec_len, hidden=h, heads=cfg.encoder_attention_heads,
             head_dim=h // cfg.encoder_attention_heads, enc_layers=cfg.encoder_layers,
             dec_layers=cfg.decoder_layers, enc_ffn=2 * h * cfg.encoder_ffn_dim, dec_ffn=2 * h * cfg.decoder_ffn_dim,
             vocab=cfg.vocab_size)


# -- vision and vision-language --------------------------------------------------------------------------------


def _patches(cfg: Any) -> int:
    size, patch = cfg.image_size, cfg.patch_size
    height, width = (size, size) if isinstance(size, int) else size
    return (height // patch) * (width // patch)


def _patch_embedding(terms: _Terms, cfg: Any, batch: int, prefix: str) -> None:
    """A ``patch × patch`` stride-``patch`` convolution on pixels (which need no gradient)."""
    channels = getattr(cfg, "num_channels", 3)
    terms.add(f"{prefix}patch embedding (weight gradient only)", "conv",
              2 * channels * cfg.patch_size ** 2 * cfg.hidden_size * _patches(cfg) * batch, 1)


def _vit_tower(terms: _Terms, cfg: Any, batch: int, prefix: str, *, cls_token: bool = True,
               forward_only_layers: int = 0) -> int:
    """Patch embedding and encoder layers; the last ``forward_only_layers`` get no backward. Returns tokens."""
    seq = _patches(cfg) + (1 if cls_token else 0)
    h = cfg.hidden_size
    _patch_embedding(terms, cfg, batch, prefix)
    kwargs = dict(hidden=h, ffn_weights=2 * h * cfg.intermediate_size, heads=cfg.num_attention_heads,
                  sequences=batch, seq_len=seq)
    trained = cfg.num_hidden_layers - forward_only_layers
    _encoder_layers(terms, prefix=prefix, layers=trained, **kwargs)
    if forward_only_layers:
        _encoder_layers(terms, prefix=f"{prefix}unused last layer (forward only) ", layers=forward_only_layers,
                        backward_multiple=0, **kwargs)
    return seq


def _vit(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """ViT image classification: the classifier reads the CLS token."""
    _vit_tower(terms, cfg, batch, "")
    terms.linear("classifier", cfg.hidden_size * cfg.num_labels, batch)


def _swin(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """Swin (Liu et al. 2021, arXiv 2103.14030): window attention over ``M × M`` windows per stage (``M`` is the
    window, or the stage's resolution when smaller), patch merging (``4C → 2C``) between stages, classifier on the
    pooled feature."""
    side = cfg.image_size // cfg.patch_size
    channels = getattr(cfg, "num_channels", 3)
    dim = cfg.embed_dim
    terms.add("patch embedding (weight gradient only)", "conv",
              2 * channels * cfg.patch_size ** 2 * dim * side * side * batch, 1)
    for stage, (depth, heads) in enumerate(zip(cfg.depths, cfg.num_heads, strict=True)):
        tokens = side * side
        window = min(cfg.window_size, side)
        mlp = int(cfg.mlp_ratio * dim)
        terms.linear("attention projections", depth * 4 * dim * dim, batch * tokens)
        terms.linear("MLP", depth * 2 * dim * mlp, batch * tokens)
        windows = batch * tokens // (window * window)
        for _ in range(depth):
            terms.attention("window attention scores", sequences=windows, heads=heads, s_q=window * window,
                            s_k=window * window, d_qk=dim // heads, d_v=dim // heads)
        if stage < len(cfg.depths) - 1:
            side //= 2
            terms.linear("patch merging", 4 * dim * 2 * dim, batch * side * side)
            dim *= 2
    terms.linear("classifier", dim * cfg.num_labels, batch)


def _text_tower(terms: _Terms, cfg: Any, batch: int, seq_len: int, prefix: str) -> None:
    h = cfg.hidden_size
    _encoder_layers(terms, prefix=prefix, layers=cfg.num_hidden_layers, hidden=h,
                    ffn_weights=2 * h * cfg.intermediate_size, heads=cfg.num_attention_heads, sequences=batch,
                    seq_len=seq_len)


def _clip(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """CLIP: text tower on ``seq_len`` tokens, vision tower on patches + CLS, one projection each on the pooled
    token, and the ``batch × batch`` similarity matmul of the contrastive loss."""
    text, vision = cfg.text_config, cfg.vision_config
    text_len = text.max_position_embeddings if seq_len is None else seq_len
    _text_tower(terms, text, batch, text_len, "text ")
    _vit_tower(terms, vision, batch, "vision ")
    terms.linear("projections", (text.hidden_size + vision.hidden_size) * cfg.projection_dim, batch)
    terms.add("similarity logits", "matmul", 2 * batch * batch * cfg.projection_dim)


def _siglip(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """SigLIP: text tower and its head on the last token; vision tower (no CLS) and its attention-pooling head
    (one learned probe query attending to every patch, then an MLP on the probe); similarity logits."""
    text, vision = cfg.text_config, cfg.vision_config
    text_len = text.max_position_embeddings if seq_len is None else seq_len
    _text_tower(terms, text, batch, text_len, "text ")
    terms.linear("text head", text.hidden_size * getattr(text, "projection_size", text.hidden_size), batch)
    patches = _vit_tower(terms, vision, batch, "vision ", cls_token=False)
    h = vision.hidden_size
    terms.linear("pooling head q, out, MLP (probe)", 2 * h * h + 2 * h * vision.intermediate_size, batch)
    terms.linear("pooling head k, v", 2 * h * h, batch * patches)
    terms.attention("pooling head scores", sequences=batch, heads=vision.num_attention_heads, s_q=1, s_k=patches,
                    d_qk=h // vision.num_attention_heads, d_v=h // vision.num_attention_heads)
    terms.add("similarity logits", "matmul", 2 * batch * batch * text.hidden_size)


def _llava(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """LLaVA: CLIP vision tower (its layers after ``vision_feature_layer`` run forward only), a two-layer MLP
    projector on the patch features (CLS dropped), and the language model on all ``seq_len`` positions."""
    vision, text = cfg.vision_config, cfg.text_config
    layer = cfg.vision_feature_layer
    if not isinstance(layer, int):
        raise ValueError("the formula covers one vision_feature_layer, not a list")
    unused = -1 - layer if layer < 0 else vision.num_hidden_layers - layer
    _vit_tower(terms, vision, batch, "vision ", forward_only_layers=unused)
    patches = _patches(vision)
    terms.linear("projector", vision.hidden_size * text.hidden_size + text.hidden_size ** 2, batch * patches)
    _decoder(terms, text, batch, seq_len, prefix="text ")


def _gemma3(terms: _Terms, cfg: Any, batch: int, seq_len: int | None) -> None:
    """Gemma 3's image-text model: the whole SigLIP tower (no class token; its last hidden state feeds the
    projector), the patch grid average-pooled to ``mm_tokens_per_image`` (no FLOPs) and projected by one matmul
    per pooled token, then the language model on all ``seq_len`` positions."""
    vision, text = cfg.vision_config, cfg.text_config
    _vit_tower(terms, vision, batch, "vision ", cls_token=False)
    terms.linear("projector", vision.hidden_size * text.hidden_size, batch * cfg.mm_tokens_per_image)
    _decoder(terms, text, batch, seq_len, prefix="text ")


FAMILIES: dict[str, Callable[[_Terms, Any, int, int | None], None]] = {
    **dict.fromkeys(("llama", "qwen2", "qwen3", "mistral", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2",
                     "deepseek_v3", "gemma2", "gemma3_text", "phi3", "falcon", "gpt_neox", "opt", "bloom", "gptj",
                     "starcoder2", "olmo2", "jamba"), _decoder),
    **dict.fromkeys(("bert", "roberta", "deberta-v2"), _bert),
    "modernbert": _modernbert,
    "t5": _t5,
    "bart": _bart,
    "whisper": _whisper,
    "vit": _vit,
    "swin": _swin,
    "clip": _clip,
    "siglip": _siglip,
    "llava": _llava,
    "gemma3": _gemma3,
}
"""The formula for each ``model_type``."""


# -- checking the formulas themselves ----------------------------------------------------------------------------


def example_inputs(config: Any, architecture: str, *, batch_size: int, seq_len: int | None) -> dict[str, Any]:
    """Random inputs with labels for one training step of the real model (what :func:`analytic_flops` assumes):
    token ids, images at the config's size, 30 s of mel frames, LLaVA's image tokens at the start."""
    import torch

    model_type = config.model_type
    out: dict[str, Any] = {}
    text = getattr(config, "text_config", None) or config
    if model_type in ("vit", "swin"):
        vision = config
    else:
        vision = getattr(config, "vision_config", None)
    if vision is not None:
        size = vision.image_size
        out["pixel_values"] = torch.randn(batch_size, getattr(vision, "num_channels", 3), size, size)
    if model_type in ("vit", "swin"):
        out["labels"] = torch.randint(0, config.num_labels, (batch_size,))
        return out
    if model_type == "whisper":
        frames = 2 * config.max_source_positions
        out["input_features"] = torch.randn(batch_size, config.num_mel_bins, frames)
        out["decoder_input_ids"] = torch.randint(0, config.vocab_size, (batch_size, seq_len or 1))
        out["labels"] = torch.randint(0, config.vocab_size, (batch_size, seq_len or 1))
        return out
    if seq_len is None:
        raise ValueError(f"{model_type} needs a sequence length")
    ids = torch.randint(0, min(text.vocab_size, 900), (batch_size, seq_len))
    if model_type == "llava":
        ids[:, : config.image_seq_length] = config.image_token_index
    if model_type == "gemma3":  # its pooled image tokens first, marked as the image block
        ids[:, : config.mm_tokens_per_image] = config.image_token_index
        out["token_type_ids"] = (ids == config.image_token_index).long()
    out["input_ids"] = ids
    if model_type in ("clip", "siglip"):
        out["return_loss"] = True
        return out
    if config.is_encoder_decoder:
        out["decoder_input_ids"] = torch.randint(0, text.vocab_size, (batch_size, seq_len))
    out["labels"] = torch.randint(0, text.vocab_size, (batch_size, seq_len))
    return out


def counted_flops(config: Any, architecture: str, *, batch_size: int, seq_len: int | None) -> dict[str, int]:
    """FLOPs torch's ``FlopCounterMode`` counts in one real forward and backward of the model, by aten op.

    Eager attention (the score products are plain matmuls) and, for mixtures of experts, transformers' eager
    experts (a loop of linear layers over the tokens routed to each expert: ``FlopCounterMode`` has no formula
    for ``_grouped_mm``). For tiny configs only: this allocates the model. Note that ``FlopCounterMode`` counts a
    grouped convolution's backward as if it were dense (``conv_backward_flop`` ignores ``groups``, torch 2.13).
    """
    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    options = {"attn_implementation": "eager"}
    if config.model_type in MOE_MODEL_TYPES:
        options["experts_implementation"] = "eager"
    model = getattr(transformers, architecture)._from_config(config, **options)
    model.train()
    inputs = example_inputs(config, architecture, batch_size=batch_size, seq_len=seq_len)
    with FlopCounterMode(display=False) as counter:
        model(**inputs).loss.backward()
    return {str(op): int(n) for op, n in counter.get_flop_counts()["Global"].items()}


MOE_MODEL_TYPES = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "jamba"})
