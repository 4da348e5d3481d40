"""Hugging Face ``config.json`` sources: ``autoshard.models.hf.load_config``, from configs only (no Hub)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from autoshard.errors import ModelSourceError, UsageError
from autoshard.models import load_source
from autoshard.models.hf import load_config
from tests.models.tiny_configs import TINY_LLAMA

pytest.importorskip("transformers")

TINY: dict[str, dict[str, Any]] = {
    "llama": {**TINY_LLAMA, "bos_token_id": 1, "eos_token_id": 2},
    "gpt2": {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": 32,
        "n_layer": 2,
        "n_head": 4,
        "vocab_size": 128,
        "n_positions": 64,
        "bos_token_id": 0,
        "eos_token_id": 0,
    },
    "bert": {
        "model_type": "bert",
        "architectures": ["BertForMaskedLM"],
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "vocab_size": 128,
        "max_position_embeddings": 64,
    },
    "t5": {
        "model_type": "t5",
        "architectures": ["T5ForConditionalGeneration"],
        "d_model": 32,
        "d_ff": 64,
        "d_kv": 8,
        "num_heads": 4,
        "num_layers": 2,
        "num_decoder_layers": 2,
        "vocab_size": 128,
    },
    "vit": {
        "model_type": "vit",
        "architectures": ["ViTForImageClassification"],
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "image_size": 32,
        "patch_size": 8,
        "num_labels": 10,
    },
}

# meta-llama/Llama-2-7b-hf config.json (architecture fields as published).
LLAMA_2_7B = {
    "_name_or_path": "meta-llama/Llama-2-7b-hf",
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 4096,
    "vocab_size": 32000,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float16",
    "transformers_version": "4.31.0.dev0",
}
LLAMA_2_7B_PARAMETERS = 6_738_415_616  # Touvron et al. 2023 report "7B"; this is the exact count of the HF checkpoint


def without(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in keys}


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # parameters() yields tied weights once


@pytest.mark.parametrize(
    ("name", "architecture", "batch_keys", "batch_shapes"),
    [
        ("llama", "LlamaForCausalLM", {"input_ids", "labels"}, {"input_ids": (2, 16)}),
        ("gpt2", "GPT2LMHeadModel", {"input_ids", "labels"}, {"input_ids": (2, 16)}),
        ("bert", "BertForMaskedLM", {"input_ids", "labels"}, {"input_ids": (2, 16)}),
        ("t5", "T5ForConditionalGeneration", {"input_ids", "decoder_input_ids", "labels"}, {"labels": (2, 16)}),
        ("vit", "ViTForImageClassification", {"pixel_values", "labels"}, {"pixel_values": (2, 3, 32, 32)}),
    ],
)
def test_tiny_config_trains_one_real_step_on_cpu(
    name: str,
    architecture: str,
    batch_keys: set[str],
    batch_shapes: dict[str, tuple[int, ...]],
    write_config: Callable[..., Path],
    train_step: Callable[..., torch.Tensor],
) -> None:
    source = load_config(write_config(TINY[name], folder=name))
    assert (source.kind, source.name, source.metadata["architecture"]) == ("hf-config", name, architecture)
    torch.manual_seed(0)
    module = source.build()
    supports_sdpa = getattr(type(module), "_supports_sdpa", False) is True  # T5 gained it in transformers 5
    assert source.metadata["attn_implementation"] == ("sdpa" if supports_sdpa else "eager")
    assert module.config._attn_implementation == source.metadata["attn_implementation"]
    batch = source.batch(2, 16) if source.accepts_seq_len else source.batch(2)
    assert set(batch) == batch_keys
    assert {key: tuple(batch[key].shape) for key in batch_shapes} == batch_shapes
    loss = train_step(source, module, batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert any(p.grad is not None for p in module.parameters())


@pytest.mark.parametrize("name", sorted(TINY))
def test_build_allocates_nothing_under_meta_device(name: str, write_config: Callable[..., Path]) -> None:
    source = load_config(write_config(TINY[name], folder=name))
    real_count = parameter_count(source.build())
    with torch.device("meta"):
        module = source.build()
        batch = source.batch(2)
    assert all(p.is_meta for p in module.parameters())
    assert all(t.is_meta for t in batch.values())
    assert parameter_count(module) == real_count


def _fake_step_cases() -> list[Any]:
    import transformers

    old = int(transformers.__version__.split(".")[0]) < 5
    # transformers 4.x BERT checks `pad_token_id in input_ids` in forward when no attention_mask is given, which
    # fake tensors cannot answer; 5.x dropped that check.
    bert_4x = pytest.mark.xfail(old, reason="transformers 4.x BERT reads input_ids values", strict=True)
    return [pytest.param(name, marks=bert_4x) if name == "bert" else name for name in sorted(TINY)]


@pytest.mark.parametrize("name", _fake_step_cases())
def test_build_and_step_run_under_fake_tensor_mode(name: str, write_config: Callable[..., Path]) -> None:
    source = load_config(write_config(TINY[name], folder=name))
    real_count = parameter_count(source.build())
    with FakeTensorMode():
        module = source.build()
        batch = source.batch(2)
        output = module(**batch)
        output.loss.backward()
    assert all(isinstance(p, FakeTensor) for p in module.parameters())
    assert parameter_count(module) == real_count  # tied embeddings stay tied when weight init is skipped


def test_llama_2_7b_config_builds_on_meta_with_the_published_parameter_count(
    write_config: Callable[..., Path],
) -> None:
    source = load_source(write_config(LLAMA_2_7B, folder="Llama-2-7b-hf").parent)
    with torch.device("meta"):
        module = source.build()
    assert parameter_count(module) == LLAMA_2_7B_PARAMETERS
    assert next(module.parameters()).dtype == torch.get_default_dtype()  # not the checkpoint's float16
    assert source.name == "meta-llama/Llama-2-7b-hf"
    assert (source.default_seq_len, source.max_seq_len, source.num_layers) == (2048, None, 32)
    assert source.metadata["checkpoint_dtype"] == "float16"


@pytest.mark.parametrize(
    ("data", "default_seq_len", "max_seq_len"),
    [
        (TINY["llama"], 64, None),  # rotary: not bounded by the table
        ({**TINY["llama"], "max_position_embeddings": 131072}, 2048, None),
        (TINY["gpt2"], 64, 64),  # learned positions: n_positions bounds it
        ({**TINY["gpt2"], "n_positions": 4096}, 2048, 4096),
        (TINY["bert"], 64, 64),
        (TINY["t5"], 512, None),  # relative buckets: no maximum in the config
        ({**without(TINY["bert"], "architectures"), "model_type": "roberta", "max_position_embeddings": 66}, 64, 64),
    ],
    ids=["llama", "llama-128k", "gpt2", "gpt2-4k", "bert", "t5", "roberta-padding-offset"],
)
def test_sequence_length_default_and_bound_come_from_positions(
    data: dict[str, Any], default_seq_len: int, max_seq_len: int | None, write_config: Callable[..., Path]
) -> None:
    source = load_config(write_config(data))
    assert (source.accepts_seq_len, source.default_seq_len, source.max_seq_len) == (True, default_seq_len, max_seq_len)


def test_vision_model_takes_no_seq_len(write_config: Callable[..., Path]) -> None:
    source = load_config(write_config(TINY["vit"]))
    assert (source.accepts_seq_len, source.default_seq_len, source.max_seq_len) == (False, None, None)
    with pytest.raises(UsageError, match="--seq-len does not apply to .*: its inputs are not a token sequence"):
        source.batch(2, seq_len=16)


def test_seq_len_beyond_learned_positions_is_a_usage_error(write_config: Callable[..., Path]) -> None:
    source = load_config(write_config(TINY["gpt2"]))
    assert source.batch(1, seq_len=64)["input_ids"].shape == (1, 64)
    with pytest.raises(UsageError, match="exceeds the longest sequence"):
        source.batch(1, seq_len=65)


@pytest.mark.parametrize(
    ("name", "layer_counts"),
    [
        ("llama", lambda m: [len(m.model.layers)]),
        ("gpt2", lambda m: [len(m.transformer.h)]),
        ("t5", lambda m: [len(m.encoder.block), len(m.decoder.block)]),
    ],
)
def test_with_num_layers_rebuilds_every_stack_with_that_depth(
    name: str, layer_counts: Callable[[torch.nn.Module], list[int]], write_config: Callable[..., Path]
) -> None:
    source = load_config(write_config(TINY[name]))
    assert source.num_layers == 2 and source.with_num_layers is not None
    deeper = source.with_num_layers(5)
    with torch.device("meta"):
        module = deeper.build()
    assert deeper.num_layers == 5
    assert all(count == 5 for count in layer_counts(module))
    assert (deeper.name, deeper.origin) == (source.name, source.origin)


@pytest.mark.parametrize(
    ("name", "call", "expected"),
    [
        ("llama", lambda s: s.with_num_layers(0), "positive number of layers, but got num_layers=0"),
        ("llama", lambda s: s.batch(0), "batch_size must be at least 1, but got batch_size=0"),
        ("llama", lambda s: s.batch(2, seq_len=0), "seq_len must be at least 1, but got seq_len=0"),
        ("vit", lambda s: s.batch(-1), "batch_size must be at least 1, but got batch_size=-1"),
    ],
)
def test_non_positive_sizes_are_usage_errors(
    name: str, call: Callable[[Any], object], expected: str, write_config: Callable[..., Path]
) -> None:
    source = load_config(write_config(TINY[name]))
    with pytest.raises(UsageError, match=expected.replace("(", r"\(")):
        call(source)


@pytest.mark.parametrize(
    ("data", "architecture"),
    [
        (without(TINY["llama"], "architectures"), "LlamaForCausalLM"),
        (without(TINY["gpt2"], "architectures"), "GPT2LMHeadModel"),
        (without(TINY["bert"], "architectures"), "BertForMaskedLM"),
        (without(TINY["t5"], "architectures"), "T5ForConditionalGeneration"),
        (without(TINY["vit"], "architectures"), "ViTForImageClassification"),
        ({**TINY["bert"], "architectures": ["BertModel"]}, "BertModel"),
    ],
    ids=["llama", "gpt2", "bert", "t5", "vit", "bare-bert"],
)
def test_model_class_falls_back_by_task_when_architectures_does_not_name_one(
    data: dict[str, Any], architecture: str, write_config: Callable[..., Path]
) -> None:
    assert load_config(write_config(data)).metadata["architecture"] == architecture


def test_bare_model_without_labels_trains_on_the_default_loss(
    write_config: Callable[..., Path], train_step: Callable[..., torch.Tensor]
) -> None:
    source = load_config(write_config({**TINY["bert"], "architectures": ["BertModel"]}))
    batch = source.batch(2, 8)
    assert set(batch) == {"input_ids"}
    assert torch.isfinite(train_step(source, source.build(), batch))


@pytest.mark.parametrize(
    ("named", "built", "chosen_by"),
    [("eager", "eager", "config.json"), ("sdpa", "sdpa", "config.json"),
     ("flash_attention_2", "sdpa", "config.json (flash_attention_2, built as SDPA")],
)
def test_the_configs_attention_implementation_is_the_one_built_and_traced(
    named: str, built: str, chosen_by: str, write_config: Callable[..., Path]
) -> None:
    """transformers' config takes ``attn_implementation``; a user who trains with eager attention says so there,
    and the step autoshard traces is that one (eager attention keeps its score matrices: more memory)."""
    from autoshard import profile

    source = load_config(write_config({**TINY["gpt2"], "attn_implementation": named}, folder=named))
    assert source.metadata["attn_implementation"] == built
    assert source.metadata["attn_implementation_chosen_by"].startswith(chosen_by)
    assert source.build().config._attn_implementation == built
    default = load_config(write_config(TINY["gpt2"], folder="default"))
    assert default.metadata["attn_implementation_chosen_by"].startswith("autoshard")
    assert default.fingerprint != source.fingerprint or named == "sdpa"
    peak = profile(source, batch_size=2, seq_len=64, extrapolate=False).peak_bytes
    default_peak = profile(default, batch_size=2, seq_len=64, extrapolate=False).peak_bytes
    assert (peak > default_peak) if built == "eager" else (peak == default_peak)


def test_name_falls_back_to_the_folder(write_config: Callable[..., Path]) -> None:
    assert load_config(write_config(TINY["llama"], folder="my-llama")).name == "my-llama"
    named = {**TINY["llama"], "_name_or_path": "org/tiny-llama"}
    assert load_config(write_config(named, folder="x")).name == "org/tiny-llama"


def test_the_sizes_a_file_leaves_to_transformers_defaults_are_named(write_config: Callable[..., Path]) -> None:
    # {"model_type": "llama"} alone built Llama-2-7B's shape from LlamaConfig's defaults, and nothing said so
    sparse = load_config(write_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4},
                                      folder="sparse"))
    assert sparse.metadata["defaulted_sizes"] == {"vocab_size": 32000, "intermediate_size": 11008,
                                                  "num_hidden_layers": 32}  # KV heads follow the heads set
    gpt2 = load_config(write_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2}, folder="g"))
    assert gpt2.metadata["defaulted_sizes"] == {"vocab_size": 50257}  # its own names, through attribute_map
    assert "defaulted_sizes" not in load_config(write_config(TINY["llama"], folder="full")).metadata


def test_an_moe_configs_experts_per_layer_are_recorded(write_config: Callable[..., Path]) -> None:
    mixtral = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "num_local_experts": 4,
               "num_experts_per_tok": 2, **{k: v for k, v in TINY["llama"].items() if k not in ("model_type",
                                                                                             "architectures")}}
    assert load_config(write_config(mixtral, folder="moe")).metadata["experts"] == 4
    assert "experts" not in load_config(write_config(TINY["llama"], folder="dense")).metadata


# --- bad configs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{\n  "model_type": "llama",\n  "hidden_size": 32,\n}\n', [":4:1: invalid JSON: Expecting property name"]),
        ('\ufeff{"model_type": "llama"}', ["invalid JSON: Unexpected UTF-8 BOM", "without the byte-order mark"]),
        ("[1, 2]", ["holds a JSON list"]),
        ('{"hidden_size": 32}', ['has no "model_type"', '"model_type": "llama"']),
        ('{"model_type": "lama"}', ["model_type 'lama' is unknown to transformers", "Did you mean llama"]),
        ('{"model_type": "zzzzzzzz"}', ["model_type 'zzzzzzzz' is unknown", "pip install -U transformers"]),
        (  # a Hub repository with its own modeling code (trust_remote_code)
            '{"model_type": "my_custom", "auto_map": {"AutoModelForCausalLM": "modeling_my.MyForCausalLM"}}',
            ["model_type 'my_custom' is unknown", "custom code from the Hub (auto_map)", "write a model.py"],
        ),
        (
            '{"model_type": "llama", "rope_scaling": {"rope_type": "linear"}}',
            ["transformers rejects this llama config", "Missing required keys", "'factor'"],
        ),
        (
            '{"model_type": "speech_to_text", "architectures": ["Speech2TextForConditionalGeneration"]}',
            ["Speech2TextForConditionalGeneration takes 'input_features'", "only for Whisper-style", "model.py"],
        ),
        (
            '{"model_type": "llama", "architectures": ["LlamaForCasualLM"]}',
            ["architectures[0] is LlamaForCasualLM, which transformers", "Did you mean LlamaForCausalLM"],
        ),
        (
            '{"model_type": "llama", "architectures": ["LlamaForSomethingNew"]}',
            ["architectures[0] is LlamaForSomethingNew, which transformers", "Did you mean LlamaForCausalLM"],
        ),
        (
            '{"model_type": "bert", "architectures": ["LlamaForCausalLM"]}',
            ["architectures[0] is LlamaForCausalLM, which takes a LlamaConfig", "'bert' makes a BertConfig"],
        ),
        (
            '{"model_type": "llama", "attn_implementation": "flex_attention"}',
            ["attn_implementation is 'flex_attention'", "'eager', 'sdpa'"],
        ),
    ],
    ids=[
        "invalid-json",
        "byte-order-mark",
        "not-an-object",
        "no-model-type",
        "misspelt-model-type",
        "unknown-model-type",
        "hub-custom-code",
        "rejected-values",
        "audio-features-not-whisper",
        "misspelt-architecture",
        "unknown-architecture",
        "architecture-of-another-family",
        "unbuilt-attention",
    ],
)
def test_bad_config_gives_a_precise_short_error(text: str, expected: list[str], tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ModelSourceError) as info:
        load_config(path)
    message = str(info.value)
    for part in expected:
        assert part in message
    assert message.count("\n") <= 1, message


def test_missing_config_is_a_model_source_error(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="no such file"):
        load_config(tmp_path / "absent" / "config.json")


def test_missing_transformers_names_the_extra_to_install(
    write_config: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(TINY["llama"])
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` raise ImportError
    with pytest.raises(ModelSourceError) as info:
        load_config(path)
    assert "needs the transformers package" in info.value.message
    assert "pip install 'transformers>=4.45'" in str(info.value.hint)


def test_a_package_the_model_class_needs_is_named_not_the_config(
    write_config: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers' ``requires_backends`` raises ImportError from a constructor (Mask2Former's loss needs scipy):
    autoshard said "Fix the value it names in the config.json"."""
    import transformers

    def needs_scipy(*args: Any, **kwargs: Any) -> None:
        raise ImportError("LlamaForCausalLM requires the scipy library but it was not found in your environment.")

    path = write_config(TINY["llama"])
    monkeypatch.setattr(transformers.LlamaForCausalLM, "__init__", needs_scipy)
    with pytest.raises(ModelSourceError) as info:
        load_source(str(path)).build()
    assert "a package it needs is missing" in info.value.message and "scipy" in info.value.message
    assert "config is not at fault" in str(info.value.hint)


@pytest.mark.parametrize(("mtp", "said"), [(1, True), (0, False)])
def test_mtp_layers_transformers_does_not_build_are_said(tmp_path: Path, mtp: int, said: bool) -> None:
    # DeepSeek-V3 profiled as 671.03B where its checkpoint holds 685B, and nothing said its MTP module was left out
    # (architectures probe)
    import transformers

    from autoshard.models.scope import scope_lines

    config = transformers.DeepseekV3Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=16, num_nextn_predict_layers=mtp)
    (tmp_path / "dsv3").mkdir()
    config.to_json_file(tmp_path / "dsv3" / "config.json")
    source = load_source(str(tmp_path / "dsv3" / "config.json"))
    assert source.metadata.get("mtp_layers_not_built") == (1 if said else None)
    lines = [line for line in scope_lines(source, 1) if "multi-token-prediction" in line]
    assert bool(lines) is said
    if said:
        assert "declares 1 multi-token-prediction layer(s)" in lines[0] and "DeepseekV3ForCausalLM" in lines[0]


def test_a_config_with_no_positions_is_refused_naming_the_key(tmp_path: Path) -> None:
    """max_position_embeddings 0 was refused as "seq_len must be at least 1, but got seq_len=0", of a sequence
    length the user never gave (a bad-input probe)."""
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY_LLAMA, "max_position_embeddings": 0}), encoding="utf-8")
    with pytest.raises(ModelSourceError, match="the config's max_position_embeddings is 0"):
        load_source(path)
