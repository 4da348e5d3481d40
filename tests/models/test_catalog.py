"""The built-in model catalog: published parameter counts, allocation-free builds, real tiny training steps,
layer rescaling, name lookup, and (when transformers is installed) logit parity with the reference ports."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from autoshard.errors import ModelSourceError, UsageError
from autoshard.models import ModelSource, call_model, catalog, load_source
from autoshard.models.catalog.bert import BertLayer
from autoshard.models.catalog.gpt2 import GPT2Block
from autoshard.models.catalog.llama import LlamaDecoderLayer, MistralDecoderLayer
from autoshard.models.catalog.resnet import Bottleneck
from autoshard.models.catalog.t5 import T5Block
from autoshard.models.catalog.vit import ViTEncoderBlock

# Published counts, restated here independently of the entries (sources are cited next to each entry).
PUBLISHED_PARAMETERS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "bert-base-uncased": 109_514_298,  # BertForMaskedLM; BertModel with pooler is 109,482,240
    "bert-large-uncased": 335_174_458,  # BertForMaskedLM; BertModel with pooler is 335,141,888
    "t5-small": 60_506_624,
    "t5-base": 222_903_552,
    "t5-large": 737_668_096,
    "t5-3b": 2_851_598_336,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "mistral-7b": 7_241_732_096,
    "resnet50": 25_557_032,
    "vit-b-16": 86_567_656,
}
TINY = ["tiny-bert", "tiny-gpt2", "tiny-llama", "tiny-mistral", "tiny-resnet", "tiny-t5", "tiny-vit"]
ALL = sorted([*PUBLISHED_PARAMETERS, *TINY])

# (default_seq_len, max_seq_len) per family prefix; None, None for vision models (no sequence length).
SEQ_LENS: dict[str, tuple[int | None, int | None]] = {
    "gpt2": (1024, 1024),
    "bert": (512, 512),
    "t5": (512, None),
    "llama-2": (4096, None),
    "llama-3": (8192, None),
    "mistral": (8192, None),
    "resnet": (None, None),
    "vit": (None, None),
    "tiny-gpt2": (128, 128),
    "tiny-bert": (128, 128),
    "tiny-t5": (128, None),
    "tiny-llama": (128, None),
    "tiny-mistral": (128, None),
    "tiny-resnet": (None, None),
    "tiny-vit": (None, None),
}

BLOCKS: dict[str, type[nn.Module]] = {
    "gpt2": GPT2Block,
    "bert": BertLayer,
    "t5": T5Block,
    "llama": LlamaDecoderLayer,
    "mistral": MistralDecoderLayer,
    "resnet": Bottleneck,
    "vit": ViTEncoderBlock,
}


def _family(name: str) -> str:
    """The key of :data:`BLOCKS` naming ``name``'s family (``tiny-t5`` → ``t5``, ``resnet50`` → ``resnet``)."""
    return next(family for family in BLOCKS if name.removeprefix("tiny-").startswith(family))


def _seq_lens(name: str) -> tuple[int | None, int | None]:
    """``SEQ_LENS`` under the longest key ``name`` starts with."""
    return SEQ_LENS[max((k for k in SEQ_LENS if name.startswith(k)), key=len)]


def _num_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _meta_build(source: ModelSource) -> nn.Module:
    with torch.device("meta"):
        return source.build()


def test_catalog_lists_the_published_models_and_one_tiny_model_per_family() -> None:
    assert catalog.names() == ALL
    assert {_family(n) for n in TINY} == set(BLOCKS)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_parameter_count_equals_published(name: str) -> None:
    source = catalog.get(name)
    assert _num_params(_meta_build(source)) == PUBLISHED_PARAMETERS[name]
    assert source.metadata["published_parameters"] == PUBLISHED_PARAMETERS[name]
    assert source.metadata["reference"].startswith("https://")
    assert source.metadata["counted_module"]


@pytest.mark.parametrize("name", ALL)
def test_build_under_meta_device_allocates_nothing(name: str) -> None:
    module = _meta_build(catalog.get(name))
    assert all(t.is_meta for t in [*module.parameters(), *module.buffers()])


@pytest.mark.parametrize("name", ALL)
def test_build_under_fake_tensor_mode_gives_only_fake_tensors(name: str) -> None:
    with FakeTensorMode():
        module = catalog.get(name).build()
    assert all(isinstance(t, FakeTensor) for t in [*module.parameters(), *module.buffers()])


@pytest.mark.parametrize("name", ALL)
def test_training_step_traces_under_fake_tensor_mode_at_default_sequence_length(name: str) -> None:
    source = catalog.get(name)
    if source.with_num_layers is not None:
        source = source.with_num_layers(1)  # one block exercises every op; the full depth adds nothing new
    with FakeTensorMode():
        module = source.build()
        batch = source.batch(1)
        assert source.loss_fn is not None
        loss = source.loss_fn(call_model(module, batch), batch)
        loss.backward()
    assert loss.shape == ()
    assert all(p.grad is not None for p in module.parameters())


@pytest.mark.parametrize("name", TINY)
def test_tiny_model_trains_one_real_step_on_cpu_with_finite_loss_and_gradients(name: str) -> None:
    torch.manual_seed(0)
    source = catalog.get(name)
    module = source.build().train()
    assert _num_params(module) * 4 < 4 * 2**20  # a few MB at most in fp32
    batch = source.batch(2)
    assert source.loss_fn is not None
    loss = source.loss_fn(call_model(module, batch), batch)
    loss.backward()
    assert loss.shape == () and math.isfinite(loss.item())
    for param_name, param in module.named_parameters():
        assert param.grad is not None, param_name
        assert torch.isfinite(param.grad).all(), param_name


@pytest.mark.parametrize("name", ALL)
def test_entry_fields_follow_the_catalog_convention(name: str) -> None:
    source = catalog.get(name)
    default_seq_len, max_seq_len = _seq_lens(name)
    assert (source.name, source.kind, source.origin) == (name, "catalog", f"catalog:{name}")
    assert source.optimizer_fn is None and source.loss_fn is not None
    assert source.accepts_seq_len is (default_seq_len is not None)
    assert (source.default_seq_len, source.max_seq_len) == (default_seq_len, max_seq_len)
    if max_seq_len is not None:
        with pytest.raises(UsageError):
            source.batch(1, seq_len=max_seq_len + 1)


@pytest.mark.parametrize("name", ALL)
def test_batch_has_the_documented_keys_and_shapes(name: str) -> None:
    source = catalog.get(name)
    with torch.device("meta"):
        batch = source.batch(3)
        if source.accepts_seq_len:
            short = source.batch(3, seq_len=16)
    if source.accepts_seq_len:
        keys = {"input_ids", "labels", "decoder_input_ids"} if _family(name) == "t5" else {"input_ids", "labels"}
        assert set(batch) == keys
        assert all(t.shape == (3, source.default_seq_len) and t.dtype == torch.int64 for t in batch.values())
        assert all(t.shape == (3, 16) for t in short.values())
    else:
        size = source.metadata["image_size"]
        assert batch["pixel_values"].shape == (3, 3, size, size)
        assert batch["labels"].shape == (3,)


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"batch_size": 2, "seq_len": 0}])
def test_token_batch_rejects_empty_sizes(kwargs: dict[str, int]) -> None:
    with pytest.raises(UsageError):
        catalog.get("tiny-gpt2").batch_fn(**kwargs)


@pytest.mark.parametrize("name", [n for n in ALL if _family(n) != "resnet"])
def test_with_num_layers_changes_the_count_of_repeated_blocks(name: str) -> None:
    source = catalog.get(name)
    block = BLOCKS[_family(name)]
    stacks = 2 if _family(name) == "t5" else 1  # T5 repeats its block in the encoder and in the decoder
    full = _meta_build(source)
    assert source.num_layers is not None
    assert sum(isinstance(m, block) for m in full.modules()) == stacks * source.num_layers
    assert source.with_num_layers is not None
    scaled = source.with_num_layers(3)
    assert scaled.num_layers == 3 and (scaled.name, scaled.origin) == (source.name, source.origin)
    assert sum(isinstance(m, block) for m in _meta_build(scaled).modules()) == stacks * 3
    assert "published_parameters" not in scaled.metadata
    assert scaled.with_num_layers is not None
    rescaled = scaled.with_num_layers(1)
    assert rescaled.num_layers == 1 and rescaled.metadata["catalog_num_layers"] == source.num_layers


@pytest.mark.parametrize("n", [0, -1])
def test_with_num_layers_rejects_non_positive_depth(n: int) -> None:
    source = catalog.get("tiny-llama")
    assert source.with_num_layers is not None
    with pytest.raises(UsageError, match="positive"):
        source.with_num_layers(n)


@pytest.mark.parametrize("name", ["resnet50", "tiny-resnet"])
def test_resnet_has_no_homogeneous_stack_to_rescale(name: str) -> None:
    source = catalog.get(name)
    assert source.num_layers is None and source.with_num_layers is None
    assert isinstance(_meta_build(source).stages, nn.ModuleList)


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("llama2-7b", "llama-2-7b"),
        ("gpt-2", "gpt2"),
        ("resnet-50", "resnet50"),
        ("mistral7b", "mistral-7b"),
        ("vit-b16", "vit-b-16"),
        ("t5_small", "t5-small"),
    ],
)
def test_unknown_name_raises_and_suggests_close_names(typo: str, suggestion: str) -> None:
    with pytest.raises(ModelSourceError) as info:
        load_source(typo)
    assert info.value.hint is not None and suggestion in info.value.hint


def test_lookup_ignores_case() -> None:
    assert catalog.get("Llama-2-7B").name == "llama-2-7b"


def test_tiny_mistral_sliding_window_hides_keys_beyond_the_window() -> None:
    torch.manual_seed(0)
    source = catalog.get("tiny-mistral")
    module = source.build().eval()
    ids = source.batch(1)["input_ids"]
    changed = ids.clone()
    changed[0, 0] = (ids[0, 0] + 1) % 1024  # tiny-mistral's vocabulary size
    with torch.no_grad():
        delta = (module(ids) - module(changed)).abs().amax(dim=-1)[0]
    # Through 2 layers of a 32-token window (itself included) token 0 reaches positions 0..62 and no further.
    assert (delta[:63] > 0).all() and (delta[63:] == 0).all()


# --- parity with the Hugging Face reference ports --------------------------------------------------------

_HF_RENAMES: dict[str, list[tuple[str, str]]] = {
    "gpt2": [(r"^transformer\.", "")],
    "llama": [(r"^model\.", "")],
    "bert": [
        (r"^bert\.embeddings\.LayerNorm", "embeddings.layer_norm"),
        (r"^bert\.embeddings\.", "embeddings."),
        (r"^bert\.encoder\.layer\.(\d+)\.attention\.self\.", r"layers.\1."),
        (r"^bert\.encoder\.layer\.(\d+)\.attention\.output\.dense", r"layers.\1.attention_output"),
        (r"^bert\.encoder\.layer\.(\d+)\.attention\.output\.LayerNorm", r"layers.\1.attention_norm"),
        (r"^bert\.encoder\.layer\.(\d+)\.intermediate\.dense", r"layers.\1.intermediate"),
        (r"^bert\.encoder\.layer\.(\d+)\.output\.dense", r"layers.\1.output"),
        (r"^bert\.encoder\.layer\.(\d+)\.output\.LayerNorm", r"layers.\1.output_norm"),
        (r"^cls\.predictions\.transform\.dense", "head_transform"),
        (r"^cls\.predictions\.transform\.LayerNorm", "head_norm"),
        (r"^cls\.predictions\.decoder", "decoder"),
        (r"^cls\.predictions\.bias", "decoder.bias"),
    ],
    "t5": [
        (
            r"^(encoder|decoder)\.block\.0\.layer\.0\.SelfAttention\.relative_attention_bias",
            r"\1.relative_attention_bias",
        ),
        (r"^(encoder|decoder)\.block\.(\d+)\.layer\.0\.SelfAttention\.", r"\1.blocks.\2.self_attention."),
        (r"^(encoder|decoder)\.block\.(\d+)\.layer\.0\.layer_norm", r"\1.blocks.\2.self_attention_norm"),
        (r"^decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.", r"decoder.blocks.\1.cross_attention."),
        (r"^decoder\.block\.(\d+)\.layer\.1\.layer_norm", r"decoder.blocks.\1.cross_attention_norm"),
        (r"^encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.", r"encoder.blocks.\1."),
        (r"^encoder\.block\.(\d+)\.layer\.1\.layer_norm", r"encoder.blocks.\1.ff_norm"),
        (r"^decoder\.block\.(\d+)\.layer\.2\.DenseReluDense\.", r"decoder.blocks.\1."),
        (r"^decoder\.block\.(\d+)\.layer\.2\.layer_norm", r"decoder.blocks.\1.ff_norm"),
        (r"^(encoder|decoder)\.final_layer_norm", r"\1.final_norm"),
        (r"^(encoder|decoder)\.embed_tokens\.", "shared."),
    ],
}


def _hf_twin(name: str, config: Any) -> tuple[nn.Module, str]:
    """The transformers model with ``config``'s hyperparameters, and its rename-table key."""
    transformers = pytest.importorskip("transformers")
    c = config
    if name == "tiny-gpt2":
        return transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=c.vocab_size,
                n_positions=c.max_positions,
                n_embd=c.hidden_size,
                n_layer=c.num_layers,
                n_head=c.num_heads,
                bos_token_id=0,
                eos_token_id=0,
            )
        ), "gpt2"
    if name == "tiny-bert":
        return transformers.BertForMaskedLM(
            transformers.BertConfig(
                vocab_size=c.vocab_size,
                hidden_size=c.hidden_size,
                num_hidden_layers=c.num_layers,
                num_attention_heads=c.num_heads,
                intermediate_size=c.intermediate_size,
                max_position_embeddings=c.max_positions,
            )
        ), "bert"
    if name == "tiny-t5":
        return transformers.T5ForConditionalGeneration(
            transformers.T5Config(
                vocab_size=c.vocab_size,
                d_model=c.d_model,
                d_kv=c.d_kv,
                d_ff=c.d_ff,
                num_layers=c.num_layers,
                num_heads=c.num_heads,
            )
        ), "t5"
    kwargs = dict(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads,
        rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_theta,
        attn_implementation="eager",
    )
    if name == "tiny-mistral":
        return transformers.MistralForCausalLM(
            transformers.MistralConfig(sliding_window=c.sliding_window, **kwargs)
        ), "llama"
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**kwargs)), "llama"


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-bert", "tiny-t5", "tiny-llama", "tiny-mistral"])
def test_tiny_logits_match_transformers_with_the_same_weights(name: str) -> None:
    torch.manual_seed(0)
    source = catalog.get(name)
    module = source.build().eval()
    reference, renames = _hf_twin(name, module.config)
    reference.eval()
    assert _num_params(reference) == _num_params(module)
    state = {}
    for key, value in reference.state_dict().items():
        for pattern, replacement in _HF_RENAMES[renames]:
            key, hits = re.subn(pattern, replacement, key)
            if hits:
                break
        if renames == "gpt2" and re.search(r"(c_attn|c_proj|c_fc)\.weight$", key):
            value = value.t()  # GPT-2's Conv1D stores (in, out)
        state[key] = value
    module.load_state_dict(state, strict=True)
    # 200 tokens: beyond T5's 128-token bucket range and Mistral's 32-token window (tiny-gpt2/bert stop at 128).
    batch = source.batch(2, seq_len=min(200, source.max_seq_len or 200))
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        torch.testing.assert_close(module(**inputs), reference(**inputs).logits, rtol=1e-4, atol=1e-4)
