"""The model zoo: the Hugging Face architectures autoshard is held to, at their published size and tiny.

Each :class:`ZooModel` names a transformers config class and the keyword values of the published checkpoint's
``config.json`` (written out literally, with the checkpoint named above them), the parameter count its authors
published (with where), the sequence length a training run of it uses, and a tiny variant for CI: the same
architecture and the same heterogeneity (DeepSeek-V3's dense first layers, Gemma's local / global attention,
Jamba's attention / Mamba / MoE interleave), with hidden sizes near 64, a few layers, a vocabulary near 1000 and a
few tiny experts. Nothing here downloads anything: configs are built from their classes.

Used by ``benchmarks/zoo.py`` (the benchmark) and ``tests/models/test_zoo.py`` (CI).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["dense decoder", "MoE decoder", "encoder-decoder", "encoder", "vision", "vision-language", "audio",
               "hybrid"]
Size = Literal["published", "tiny"]
SIZES: tuple[Size, ...] = ("published", "tiny")

TINY_SEQ_LEN = 32
"""Tokens per sequence of the tiny text models (decoder tokens for encoder-decoders)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ZooModel:
    """One architecture of the zoo."""

    name: str
    """Short name used on the command line (``--only``) and in the report."""
    checkpoint: str
    """The Hub checkpoint whose ``config.json`` the published values come from (never downloaded)."""
    kind: Kind
    config_class: str
    """The transformers config class, e.g. ``"LlamaConfig"``."""
    architecture: str
    """The model class (``architectures[0]``), e.g. ``"LlamaForCausalLM"``."""
    published: dict[str, Any]
    """Keyword values of the published ``config.json`` (architecture fields)."""
    tiny: dict[str, Any]
    """Overrides of :attr:`published` for the tiny CI variant (nested configs are merged key by key)."""
    published_parameters: int
    """The parameter count the authors published."""
    published_active_parameters: int | None = None
    """Parameters active per token (MoE), as published."""
    parameters_source: str
    """Where :attr:`published_parameters` comes from."""
    seq_len: int | None
    """Tokens per sequence at the published size (decoder tokens for encoder-decoders, text tokens for
    CLIP / SigLIP, all positions image tokens included for LLaVA); ``None`` for image-only models."""
    tiny_seq_len: int | None = TINY_SEQ_LEN
    inputs: str
    """What one sample is, in words (for the report)."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def config_kwargs(self, size: Size) -> dict[str, Any]:
        """The keyword values for ``size`` (``architectures`` included)."""
        kwargs = copy.deepcopy(self.published)
        if size == "tiny":
            for key, value in self.tiny.items():
                if isinstance(value, dict) and isinstance(kwargs.get(key), dict):
                    kwargs[key] = {**kwargs[key], **value}
                else:
                    kwargs[key] = copy.deepcopy(value)
        elif size != "published":
            raise ValueError(f"size must be one of {SIZES}, but got {size!r}.")
        return {"architectures": [self.architecture], **kwargs}

    def config(self, size: Size) -> Any:
        """The transformers config at ``size``."""
        import transformers

        return getattr(transformers, self.config_class)(**self.config_kwargs(size))

    def sequence(self, size: Size) -> int | None:
        """Tokens per sequence at ``size``."""
        return self.seq_len if size == "published" else self.tiny_seq_len


_B = 1_000_000_000
_M = 1_000_000

# Tiny overrides shared by the Llama-like decoders: hidden 64, 4 heads of 16 (2 KV heads), 2 layers, vocab 1000.
_TINY_DECODER: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                                 "vocab_size": 1000, "max_position_embeddings": 128}
# The same without head_dim, for config classes that derive it: all heads for keys and values, or 2 of 4.
_TINY_MHA: dict[str, Any] = {k: v for k, v in _TINY_DECODER.items() if k != "head_dim"} | {"num_key_value_heads": 4}
_TINY_GQA: dict[str, Any] = {k: v for k, v in _TINY_DECODER.items() if k != "head_dim"}
_TINY_ENCODER: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                 "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 64}
_TINY_VISION: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "image_size": 32, "patch_size": 8}
_TEXT = "token ids"


def _decoder(name: str, checkpoint: str, config_class: str, architecture: str, published: dict[str, Any],
             parameters: int, source: str, *, tiny: dict[str, Any] | None = None, kind: Kind = "dense decoder",
             active: int | None = None, seq_len: int = 2048, notes: tuple[str, ...] = (),
             tiny_base: dict[str, Any] = _TINY_DECODER) -> ZooModel:
    return ZooModel(name=name, checkpoint=checkpoint, kind=kind, config_class=config_class,
                    architecture=architecture, published=published, tiny={**tiny_base, **(tiny or {})},
                    published_parameters=parameters, published_active_parameters=active, parameters_source=source,
                    seq_len=seq_len, inputs=_TEXT, notes=notes)


ZOO: tuple[ZooModel, ...] = (
    # -- dense decoders ----------------------------------------------------------------------------------------
    _decoder(
        "llama-3.1-8b", "meta-llama/Llama-3.1-8B", "LlamaConfig", "LlamaForCausalLM",
        # meta-llama/Llama-3.1-8B config.json
        dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
             rope_theta=500000.0, tie_word_embeddings=False, hidden_act="silu",
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192}),
        8_030_261_248, "Hub safetensors metadata of meta-llama/Llama-3.1-8B (model card: 8B)",
        tiny={"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
    _decoder(
        "llama-3.1-70b", "meta-llama/Llama-3.1-70B", "LlamaConfig", "LlamaForCausalLM",
        # meta-llama/Llama-3.1-70B config.json
        dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
             num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
             rope_theta=500000.0, tie_word_embeddings=False, hidden_act="silu",
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192}),
        70_553_706_496, "Hub safetensors metadata of meta-llama/Llama-3.1-70B (model card: 70B)",
        tiny={"num_hidden_layers": 12,  # deep enough that autoshard extrapolates (AUTO_MIN_LAYERS = 12)
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
    _decoder(
        "qwen2.5-7b", "Qwen/Qwen2.5-7B", "Qwen2Config", "Qwen2ForCausalLM",
        # Qwen/Qwen2.5-7B config.json
        dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
             num_key_value_heads=4, vocab_size=152064, max_position_embeddings=131072, rms_norm_eps=1e-6,
             rope_theta=1000000.0, tie_word_embeddings=False, hidden_act="silu", use_sliding_window=False,
             sliding_window=131072, max_window_layers=28),
        7_610_000_000, "Qwen/Qwen2.5-7B model card: 7.61B (6.53B non-embedding)"),
    _decoder(
        "qwen3-8b", "Qwen/Qwen3-8B", "Qwen3Config", "Qwen3ForCausalLM",
        # Qwen/Qwen3-8B config.json
        dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
             num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
             rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, hidden_act="silu",
             attention_bias=False),
        8_200_000_000, "Qwen/Qwen3-8B model card: 8.2B (6.95B non-embedding)"),
    _decoder(
        "mistral-7b", "mistralai/Mistral-7B-v0.1", "MistralConfig", "MistralForCausalLM",
        # mistralai/Mistral-7B-v0.1 config.json
        dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768, rms_norm_eps=1e-5,
             rope_theta=10000.0, sliding_window=4096, tie_word_embeddings=False, hidden_act="silu"),
        7_241_732_096, "Hub safetensors metadata of mistralai/Mistral-7B-v0.1 (paper: 7B)",
        tiny={"sliding_window": 16}),
    _decoder(
        "gemma-2-9b", "google/gemma-2-9b", "Gemma2Config", "Gemma2ForCausalLM",
        # google/gemma-2-9b config.json
        dict(hidden_size=3584, intermediate_size=14336, num_hidden_layers=42, num_attention_heads=16,
             num_key_value_heads=8, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
             rms_norm_eps=1e-6, rope_theta=10000.0, sliding_window=4096, query_pre_attn_scalar=256,
             attn_logit_softcapping=50.0, final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh",
             tie_word_embeddings=True),
        9_240_000_000, "Hub safetensors metadata of google/gemma-2-9b: 9.24B (Gemma 2 report: 9B)",
        tiny={"num_hidden_layers": 4, "sliding_window": 16, "query_pre_attn_scalar": 16}),  # local, global, ×2
    ZooModel(
        name="gemma-3-4b-text", checkpoint="google/gemma-3-4b-pt (text_config)", kind="dense decoder",
        config_class="Gemma3TextConfig", architecture="Gemma3ForCausalLM",
        # google/gemma-3-4b-pt config.json, text_config
        published=dict(hidden_size=2560, intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
                       num_key_value_heads=4, head_dim=256, vocab_size=262208, max_position_embeddings=131072,
                       rms_norm_eps=1e-6, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                       rope_scaling={"rope_type": "linear", "factor": 8.0}, sliding_window=1024,
                       sliding_window_pattern=6, query_pre_attn_scalar=256, hidden_activation="gelu_pytorch_tanh",
                       final_logit_softcapping=None, attn_logit_softcapping=None, tie_word_embeddings=True),
        # 12 layers, 5 local then 1 global, twice: deep enough that autoshard extrapolates (AUTO_MIN_LAYERS = 12).
        tiny={**_TINY_DECODER, "num_hidden_layers": 12, "sliding_window": 16, "query_pre_attn_scalar": 16},
        published_parameters=3_884_000_000,
        parameters_source="Gemma 3 technical report, Table 1 (4B): 675M embedding + 3,209M non-embedding "
                          "(the 417M SigLIP vision encoder is not in the text model)",
        seq_len=2048, inputs=_TEXT),
    _decoder(
        "phi-3-mini", "microsoft/Phi-3-mini-4k-instruct", "Phi3Config", "Phi3ForCausalLM",
        # microsoft/Phi-3-mini-4k-instruct config.json
        dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096,
             original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=2047,
             tie_word_embeddings=False, hidden_act="silu", pad_token_id=32000, bos_token_id=1, eos_token_id=32000),
        3_800_000_000, "Phi-3 technical report (arXiv 2404.14219): phi-3-mini, 3.8B",
        tiny={"num_key_value_heads": 4, "original_max_position_embeddings": 128, "sliding_window": 16,
              "pad_token_id": 999, "eos_token_id": 999}),
    _decoder(
        "phi-4", "microsoft/phi-4", "Phi3Config", "Phi3ForCausalLM",
        # microsoft/phi-4 config.json
        dict(hidden_size=5120, intermediate_size=17920, num_hidden_layers=40, num_attention_heads=40,
             num_key_value_heads=10, vocab_size=100352, max_position_embeddings=16384,
             original_max_position_embeddings=16384, rms_norm_eps=1e-5, rope_theta=250000.0, sliding_window=None,
             tie_word_embeddings=False, hidden_act="silu", pad_token_id=100349, bos_token_id=100257,
             eos_token_id=100257),
        14_000_000_000, "Phi-4 technical report (arXiv 2412.08905): 14B",
        tiny={"original_max_position_embeddings": 128, "pad_token_id": 999, "bos_token_id": 998,
              "eos_token_id": 998}),
    _decoder(
        "falcon-7b", "tiiuae/falcon-7b", "FalconConfig", "FalconForCausalLM",
        # tiiuae/falcon-7b config.json
        dict(hidden_size=4544, num_hidden_layers=32, num_attention_heads=71, vocab_size=65024,
             multi_query=True, new_decoder_architecture=False, parallel_attn=True, bias=False, alibi=False,
             layer_norm_epsilon=1e-5, tie_word_embeddings=True),
        7_000_000_000, "tiiuae/falcon-7b model card: 7B",
        tiny={"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
              "max_position_embeddings": 128}, tiny_base={}),
    _decoder(
        "gpt-neox-20b", "EleutherAI/gpt-neox-20b", "GPTNeoXConfig", "GPTNeoXForCausalLM",
        # EleutherAI/gpt-neox-20b config.json
        dict(hidden_size=6144, intermediate_size=24576, num_hidden_layers=44, num_attention_heads=64,
             vocab_size=50432, max_position_embeddings=2048, rotary_pct=0.25, rotary_emb_base=10000,
             use_parallel_residual=True, layer_norm_eps=1e-5, tie_word_embeddings=False, hidden_act="gelu_fast"),
        20_554_567_680, "GPT-NeoX-20B paper (arXiv 2204.06745), Table 1: 20,554,567,680",
        tiny=_TINY_MHA, tiny_base={}),
    _decoder(
        "opt-6.7b", "facebook/opt-6.7b", "OPTConfig", "OPTForCausalLM",
        # facebook/opt-6.7b config.json
        dict(hidden_size=4096, ffn_dim=16384, num_hidden_layers=32, num_attention_heads=32, vocab_size=50272,
             max_position_embeddings=2048, word_embed_proj_dim=4096, do_layer_norm_before=True,
             activation_function="relu", enable_bias=True, tie_word_embeddings=True),
        6_700_000_000, "OPT paper (arXiv 2205.01068), Table 1: 6.7B",
        tiny={"hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "vocab_size": 1000, "max_position_embeddings": 128, "word_embed_proj_dim": 64}, tiny_base={}),
    _decoder(
        "bloom-7b1", "bigscience/bloom-7b1", "BloomConfig", "BloomForCausalLM",
        # bigscience/bloom-7b1 config.json
        dict(hidden_size=4096, n_layer=30, n_head=32, vocab_size=250880, layer_norm_epsilon=1e-5,
             apply_residual_connection_post_layernorm=False, tie_word_embeddings=True),
        7_069_016_064, "bigscience/bloom-7b1 model card: 7,069,016,064 parameters",
        tiny={"hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000}, tiny_base={}),
    _decoder(
        "gpt-j-6b", "EleutherAI/gpt-j-6b", "GPTJConfig", "GPTJForCausalLM",
        # EleutherAI/gpt-j-6b config.json
        dict(n_embd=4096, n_layer=28, n_head=16, n_positions=2048, rotary_dim=64, vocab_size=50400,
             activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=False),
        6_053_381_344, "EleutherAI/gpt-j-6b model card: n_parameters 6,053,381,344",
        tiny={"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, "rotary_dim": 8, "vocab_size": 1000},
        tiny_base={}),
    _decoder(
        "starcoder2-7b", "bigcode/starcoder2-7b", "Starcoder2Config", "Starcoder2ForCausalLM",
        # bigcode/starcoder2-7b config.json
        dict(hidden_size=4608, intermediate_size=18432, num_hidden_layers=32, num_attention_heads=36,
             num_key_value_heads=4, vocab_size=49152, max_position_embeddings=16384, rope_theta=1000000.0,
             sliding_window=4096, use_bias=True, norm_epsilon=1e-5, hidden_act="gelu_pytorch_tanh",
             tie_word_embeddings=True, bos_token_id=0, eos_token_id=0),
        7_000_000_000, "StarCoder 2 paper (arXiv 2402.19173): StarCoder2-7B, 7B",
        tiny={**_TINY_GQA, "sliding_window": 16}, tiny_base={}),
    _decoder(
        "olmo-2-7b", "allenai/OLMo-2-1124-7B", "Olmo2Config", "Olmo2ForCausalLM",
        # allenai/OLMo-2-1124-7B config.json
        dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=32, vocab_size=100352, max_position_embeddings=4096, rms_norm_eps=1e-6,
             rope_theta=500000.0, tie_word_embeddings=False, hidden_act="silu", attention_bias=False),
        7_000_000_000, "allenai/OLMo-2-1124-7B model card: 7B",
        tiny=_TINY_MHA, tiny_base={}),
    # -- mixture-of-experts decoders ---------------------------------------------------------------------------
    _decoder(
        "mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "MixtralConfig", "MixtralForCausalLM",
        # mistralai/Mixtral-8x7B-v0.1 config.json
        dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768, rms_norm_eps=1e-5,
             rope_theta=1000000.0, sliding_window=None, num_local_experts=8, num_experts_per_tok=2,
             router_aux_loss_coef=0.02, tie_word_embeddings=False, hidden_act="silu"),
        46_700_000_000, "Mistral AI, 'Mixtral of experts' (2023-12-11): 46.7B total, 12.9B active per token",
        kind="MoE decoder", active=12_900_000_000,
        tiny={"num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 32}),
    _decoder(
        "qwen1.5-moe-a2.7b", "Qwen/Qwen1.5-MoE-A2.7B", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
        # Qwen/Qwen1.5-MoE-A2.7B config.json
        dict(hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
             shared_expert_intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
             num_key_value_heads=16, num_experts=60, num_experts_per_tok=4, decoder_sparse_step=1,
             norm_topk_prob=False, vocab_size=151936, max_position_embeddings=8192, rms_norm_eps=1e-6,
             rope_theta=1000000.0, qkv_bias=True, tie_word_embeddings=False, hidden_act="silu"),
        14_300_000_000, "Qwen blog 'Qwen1.5-MoE' (2024-03-28): 14.3B total, 2.7B activated",
        kind="MoE decoder", active=2_700_000_000,
        tiny={**_TINY_MHA, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 128, "num_experts": 4,
              "num_experts_per_tok": 2}, tiny_base={}),
    _decoder(
        "qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
        # Qwen/Qwen3-30B-A3B config.json
        dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48,
             num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
             decoder_sparse_step=1, norm_topk_prob=True, vocab_size=151936, max_position_embeddings=40960,
             rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, hidden_act="silu"),
        30_500_000_000, "Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated",
        kind="MoE decoder", active=3_300_000_000,
        tiny={"moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2}),
    _decoder(
        "deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", "DeepseekV2Config", "DeepseekV2ForCausalLM",
        # deepseek-ai/DeepSeek-V2-Lite config.json
        dict(hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408, num_hidden_layers=27,
             num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64, n_shared_experts=2,
             num_experts_per_tok=6, first_k_dense_replace=1, topk_method="greedy", n_group=1, topk_group=1,
             routed_scaling_factor=1.0, norm_topk_prob=False, kv_lora_rank=512, q_lora_rank=None,
             qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=102400,
             max_position_embeddings=163840, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
             hidden_act="silu", attention_bias=False),
        15_700_000_000, "DeepSeek-V2 paper (arXiv 2405.04434), DeepSeek-V2-Lite: 15.7B total, 2.4B activated",
        kind="MoE decoder", active=2_400_000_000,
        notes=("active per token: autoshard counts 2,661,150,208; without the input embedding (102400 x 2048 = "
               "209,715,200, a lookup, no matmul) 2.45B, the figure DeepSeek's 2.4B appears to round",),
        tiny_base={},
        tiny={**_TINY_MHA, "num_hidden_layers": 4, "moe_intermediate_size": 32,
              "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "kv_lora_rank": 16,
              "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}),
    _decoder(
        "deepseek-v3", "deepseek-ai/DeepSeek-V3", "DeepseekV3Config", "DeepseekV3ForCausalLM",
        # deepseek-ai/DeepSeek-V3 config.json
        dict(hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=61,
             num_attention_heads=128, num_key_value_heads=128, n_routed_experts=256, n_shared_experts=1,
             num_experts_per_tok=8, first_k_dense_replace=3, n_group=8, topk_group=4, topk_method="noaux_tc",
             routed_scaling_factor=2.5, norm_topk_prob=True, kv_lora_rank=512, q_lora_rank=1536,
             qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280,
             max_position_embeddings=163840, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
             hidden_act="silu", attention_bias=False,
             rope_scaling={"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                           "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
        671_000_000_000, "DeepSeek-V3 technical report (arXiv 2412.19437): 671B total, 37B activated; "
                         "the Hub's 685B adds the 14B multi-token-prediction module",
        kind="MoE decoder", active=37_000_000_000,
        # 12 layers, the first 3 dense as published: deep enough that autoshard extrapolates (AUTO_MIN_LAYERS).
        tiny_base={},
        tiny={**_TINY_MHA, "num_hidden_layers": 12, "moe_intermediate_size": 32,
              "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 2,
              "topk_group": 1, "kv_lora_rank": 16, "q_lora_rank": 32, "qk_nope_head_dim": 16,
              "qk_rope_head_dim": 8, "v_head_dim": 16,
              "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                               "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}},
        notes=("transformers builds no multi-token-prediction (MTP) module",)),
    # -- hybrid ------------------------------------------------------------------------------------------------
    _decoder(
        "jamba-v0.1", "ai21labs/Jamba-v0.1", "JambaConfig", "JambaForCausalLM",
        # ai21labs/Jamba-v0.1 config.json
        dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=8, vocab_size=65536, max_position_embeddings=262144, rms_norm_eps=1e-6,
             num_experts=16, num_experts_per_tok=2, expert_layer_period=2, expert_layer_offset=1,
             attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
             mamba_dt_rank=256, mamba_conv_bias=True, mamba_proj_bias=False, use_mamba_kernels=True,
             tie_word_embeddings=False, hidden_act="silu"),
        52_000_000_000, "Jamba paper (arXiv 2403.19887) and ai21labs/Jamba-v0.1 model card: 52B total, "
                        "12B active",
        kind="hybrid", active=12_000_000_000,
        # 16 layers with attention every 4th (offset 2), MoE every 2nd: deep enough to be extrapolated.
        tiny_base={},
        tiny={**_TINY_GQA, "num_hidden_layers": 16, "attn_layer_period": 4, "attn_layer_offset": 2,
              "num_experts": 4, "intermediate_size": 32, "mamba_d_state": 4, "mamba_dt_rank": 8,
              "use_mamba_kernels": False},
        notes=("autoshard may refuse Mamba layers in one line: an accepted outcome",)),
    # -- encoder-decoders --------------------------------------------------------------------------------------
    ZooModel(
        name="t5-large", checkpoint="google-t5/t5-large", kind="encoder-decoder", config_class="T5Config",
        architecture="T5ForConditionalGeneration",
        # google-t5/t5-large config.json
        published=dict(d_model=1024, d_ff=4096, d_kv=64, num_heads=16, num_layers=24, num_decoder_layers=24,
                       vocab_size=32128, relative_attention_num_buckets=32, feed_forward_proj="relu",
                       layer_norm_epsilon=1e-6, tie_word_embeddings=True, decoder_start_token_id=0,
                       pad_token_id=0, eos_token_id=1),
        tiny=dict(d_model=64, d_ff=128, d_kv=16, num_heads=4, num_layers=2, num_decoder_layers=2,
                  vocab_size=1000),
        published_parameters=770 * _M, parameters_source="T5 paper (arXiv 1910.10683), section 3.7: Large, 770M",
        seq_len=512, inputs="512 encoder and 512 decoder token ids"),
    ZooModel(
        name="bart-large", checkpoint="facebook/bart-large", kind="encoder-decoder", config_class="BartConfig",
        architecture="BartForConditionalGeneration",
        # facebook/bart-large config.json
        published=dict(d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                       decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, vocab_size=50265,
                       max_position_embeddings=1024, activation_function="gelu", scale_embedding=False,
                       tie_word_embeddings=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                       decoder_start_token_id=2),
        tiny=dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000,
                  max_position_embeddings=64),
        published_parameters=400 * _M, parameters_source="fairseq examples/bart README: bart.large, 400M",
        seq_len=1024, inputs="1024 encoder and 1024 decoder token ids"),
    ZooModel(
        name="whisper-large-v3", checkpoint="openai/whisper-large-v3", kind="audio", config_class="WhisperConfig",
        architecture="WhisperForConditionalGeneration",
        # openai/whisper-large-v3 config.json
        published=dict(d_model=1280, encoder_layers=32, decoder_layers=32, encoder_attention_heads=20,
                       decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120, vocab_size=51866,
                       num_mel_bins=128, max_source_positions=1500, max_target_positions=448,
                       activation_function="gelu", scale_embedding=False, tie_word_embeddings=True,
                       pad_token_id=50256, bos_token_id=50257, eos_token_id=50257, decoder_start_token_id=50258),
        tiny=dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000,
                  num_mel_bins=16, max_source_positions=32, max_target_positions=32, pad_token_id=999,
                  bos_token_id=998, eos_token_id=998, decoder_start_token_id=997),
        published_parameters=1550 * _M, parameters_source="Whisper paper (arXiv 2212.04356), Table 1: large, 1550M",
        # 30 s of audio: 3000 mel frames, 1500 encoder positions (max_source_positions); 448 decoder tokens.
        seq_len=448, tiny_seq_len=16,
        inputs="30 s of log-mel frames (2 × max_source_positions) and max_target_positions decoder tokens"),
    # -- encoders ----------------------------------------------------------------------------------------------
    ZooModel(
        name="bert-base", checkpoint="google-bert/bert-base-uncased", kind="encoder", config_class="BertConfig",
        architecture="BertForMaskedLM",
        # google-bert/bert-base-uncased config.json
        published=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                       vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu"),
        tiny=_TINY_ENCODER, published_parameters=110 * _M,
        parameters_source="BERT paper (arXiv 1810.04805), section 3: BERT-BASE, 110M",
        seq_len=512, inputs=_TEXT),
    ZooModel(
        name="roberta-large", checkpoint="FacebookAI/roberta-large", kind="encoder", config_class="RobertaConfig",
        architecture="RobertaForMaskedLM",
        # FacebookAI/roberta-large config.json
        published=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                       vocab_size=50265, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
                       bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5, hidden_act="gelu"),
        tiny={**_TINY_ENCODER, "max_position_embeddings": 66}, published_parameters=355 * _M,
        parameters_source="fairseq examples/roberta README: roberta.large, 355M",
        seq_len=512, inputs=_TEXT),
    ZooModel(
        name="deberta-v3-large", checkpoint="microsoft/deberta-v3-large", kind="encoder",
        config_class="DebertaV2Config", architecture="DebertaV2ForMaskedLM",
        # microsoft/deberta-v3-large config.json
        published=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                       vocab_size=128100, max_position_embeddings=512, type_vocab_size=0, relative_attention=True,
                       position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
                       pos_att_type=["p2c", "c2p"], max_relative_positions=-1, position_biased_input=False,
                       layer_norm_eps=1e-7, hidden_act="gelu", pad_token_id=0),
        tiny={**_TINY_ENCODER, "position_buckets": 16}, published_parameters=435 * _M,
        parameters_source="microsoft/deberta-v3-large model card: 304M backbone + 131M embedding",
        seq_len=512, inputs=_TEXT),
    ZooModel(
        name="modernbert-base", checkpoint="answerdotai/ModernBERT-base", kind="encoder",
        config_class="ModernBertConfig", architecture="ModernBertForMaskedLM",
        # answerdotai/ModernBERT-base config.json
        published=dict(hidden_size=768, intermediate_size=1152, num_hidden_layers=22, num_attention_heads=12,
                       vocab_size=50368, max_position_embeddings=8192, global_attn_every_n_layers=3,
                       local_attention=128, global_rope_theta=160000.0, local_rope_theta=10000.0,
                       hidden_activation="gelu", norm_eps=1e-5, norm_bias=False, pad_token_id=50283,
                       bos_token_id=50281, eos_token_id=50282, cls_token_id=50281, sep_token_id=50282,
                       tie_word_embeddings=True),
        # 3 layers: global, local, local as published.
        tiny={**_TINY_ENCODER, "num_hidden_layers": 3, "local_attention": 8, "pad_token_id": 999,
              "bos_token_id": 998, "eos_token_id": 997, "cls_token_id": 998, "sep_token_id": 997},
        published_parameters=149 * _M, parameters_source="answerdotai/ModernBERT-base model card: 149M",
        seq_len=8192, inputs=_TEXT),
    # -- vision ------------------------------------------------------------------------------------------------
    ZooModel(
        name="vit-b-16", checkpoint="google/vit-base-patch16-224", kind="vision", config_class="ViTConfig",
        architecture="ViTForImageClassification",
        # google/vit-base-patch16-224 config.json (1000 ImageNet classes)
        published=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                       image_size=224, patch_size=16, num_channels=3, num_labels=1000, hidden_act="gelu",
                       layer_norm_eps=1e-12, qkv_bias=True),
        tiny={**_TINY_VISION, "num_labels": 10}, published_parameters=86 * _M,
        parameters_source="ViT paper (arXiv 2010.11929), Table 1: ViT-Base, 86M",
        seq_len=None, tiny_seq_len=None, inputs="one 224×224 RGB image (196 patches + CLS)"),
    ZooModel(
        name="swin-b", checkpoint="microsoft/swin-base-patch4-window7-224", kind="vision", config_class="SwinConfig",
        architecture="SwinForImageClassification",
        # microsoft/swin-base-patch4-window7-224 config.json (1000 ImageNet classes)
        published=dict(embed_dim=128, depths=[2, 2, 18, 2], num_heads=[4, 8, 16, 32], window_size=7,
                       image_size=224, patch_size=4, num_channels=3, mlp_ratio=4.0, num_labels=1000,
                       qkv_bias=True, hidden_act="gelu", use_absolute_embeddings=False),
        # 4 stages, a patch merging between each; 2×2 windows on a 16×16 token grid.
        tiny=dict(embed_dim=16, depths=[2, 2, 2, 2], num_heads=[1, 2, 4, 8], window_size=2, image_size=32,
                  patch_size=2, num_labels=10),
        published_parameters=88 * _M, parameters_source="Swin Transformer paper (arXiv 2103.14030), Table 1: "
                                                        "Swin-B 224², 88M",
        seq_len=None, tiny_seq_len=None, inputs="one 224×224 RGB image"),
    ZooModel(
        name="clip-vit-l-14", checkpoint="openai/clip-vit-large-patch14", kind="vision-language",
        config_class="CLIPConfig", architecture="CLIPModel",
        # openai/clip-vit-large-patch14 config.json
        published=dict(
            projection_dim=768,
            text_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                             vocab_size=49408, max_position_embeddings=77, projection_dim=768,
                             hidden_act="quick_gelu"),
            vision_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                               num_attention_heads=16, image_size=224, patch_size=14, projection_dim=768,
                               hidden_act="quick_gelu")),
        tiny=dict(projection_dim=32,
                  text_config={**_TINY_ENCODER, "max_position_embeddings": 32, "projection_dim": 32},
                  vision_config={**_TINY_VISION, "projection_dim": 32}),
        published_parameters=428 * _M, parameters_source="Hub safetensors metadata of "
                                                         "openai/clip-vit-large-patch14: 428M",
        seq_len=77, tiny_seq_len=16, inputs="one 224×224 image and its 77-token caption (contrastive loss)"),
    ZooModel(
        name="siglip-base", checkpoint="google/siglip-base-patch16-224", kind="vision-language",
        config_class="SiglipConfig", architecture="SiglipModel",
        # google/siglip-base-patch16-224 config.json
        published=dict(
            text_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                             vocab_size=32000, max_position_embeddings=64),
            vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                               num_attention_heads=12, image_size=224, patch_size=16)),
        tiny=dict(text_config={**_TINY_ENCODER, "max_position_embeddings": 16},
                  vision_config=_TINY_VISION),
        published_parameters=203 * _M, parameters_source="Hub safetensors metadata of "
                                                         "google/siglip-base-patch16-224: 203M",
        seq_len=64, tiny_seq_len=16, inputs="one 224×224 image and its 64-token caption (sigmoid loss)"),
    ZooModel(
        name="llava-1.5-7b", checkpoint="llava-hf/llava-1.5-7b-hf", kind="vision-language",
        config_class="LlavaConfig", architecture="LlavaForConditionalGeneration",
        # llava-hf/llava-1.5-7b-hf config.json
        published=dict(
            image_token_index=32000, image_seq_length=576, projector_hidden_act="gelu", vision_feature_layer=-2,
            vision_feature_select_strategy="default", tie_word_embeddings=False,
            text_config=dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                             num_attention_heads=32, num_key_value_heads=32, vocab_size=32064,
                             max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False),
            vision_config=dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096,
                               num_hidden_layers=24, num_attention_heads=16, image_size=336, patch_size=14,
                               projection_dim=768, hidden_act="quick_gelu")),
        # 16 image tokens (32×32 image, 8×8 patches) inside a 32-token sequence.
        tiny=dict(image_token_index=1000, image_seq_length=16,
                  text_config={**_TINY_DECODER, "num_key_value_heads": 4, "head_dim": 16, "vocab_size": 1024},
                  vision_config={**_TINY_VISION, "num_hidden_layers": 3, "projection_dim": 32}),
        published_parameters=7 * _B, parameters_source="LLaVA-1.5 paper (arXiv 2310.03744): 7B (Vicuna-7B + "
                                                       "CLIP ViT-L/336px + MLP projector)",
        seq_len=2048, inputs="one 336×336 image and 2048 positions, 576 of them image tokens"),
    ZooModel(
        name="gemma-3-4b", checkpoint="google/gemma-3-4b-pt", kind="vision-language",
        config_class="Gemma3Config", architecture="Gemma3ForConditionalGeneration",
        # google/gemma-3-4b-pt config.json
        published=dict(
            boi_token_index=255999, eoi_token_index=256000, image_token_index=262144, mm_tokens_per_image=256,
            text_config=dict(model_type="gemma3_text", hidden_size=2560, intermediate_size=10240,
                             num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                             vocab_size=262208, max_position_embeddings=131072, rms_norm_eps=1e-6,
                             rope_theta=1000000.0, rope_local_base_freq=10000.0,
                             rope_scaling={"rope_type": "linear", "factor": 8.0}, sliding_window=1024,
                             sliding_window_pattern=6, query_pre_attn_scalar=256,
                             hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
                             attn_logit_softcapping=None, tie_word_embeddings=True),
            vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                               num_hidden_layers=27, num_attention_heads=16, image_size=896, patch_size=14,
                               vision_use_head=False)),
        # 16 image tokens (32×32 image, 4×4 patches: 8×8 pooled 2×2) inside a 32-token sequence; six text layers,
        # five local and one global.
        tiny=dict(image_token_index=1000, boi_token_index=998, eoi_token_index=999, mm_tokens_per_image=16,
                  text_config={**_TINY_DECODER, "num_hidden_layers": 6, "vocab_size": 1024, "sliding_window": 16,
                               "query_pre_attn_scalar": 16},
                  vision_config={**_TINY_VISION, "patch_size": 4}),
        published_parameters=4_301_000_000,
        parameters_source="Gemma 3 technical report (arXiv 2503.19786), Table 1 (4B): 417M vision encoder + "
                          "675M embedding + 3,209M non-embedding",
        seq_len=2048, inputs="one 896×896 image and 2048 positions, 256 of them image tokens"),
)
"""Every architecture, in report order."""

BY_NAME: dict[str, ZooModel] = {m.name: m for m in ZOO}


def get(name: str) -> ZooModel:
    """The zoo entry called ``name``.

    Raises:
        KeyError: no entry has that name (the message lists them).
    """
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no zoo model {name!r}; the zoo has {', '.join(BY_NAME)}") from None
