"""Example batches of non-text Hugging Face models (``autoshard.models.hf_inputs``): audio, image + text and
vision-language configs, built from transformers config classes at tiny sizes and saved with
save_pretrained."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import autoshard
from autoshard.errors import ModelSourceError, UsageError
from autoshard.models import load_source
from autoshard.models.hf_audio import WAVEFORM_SAMPLES

transformers = pytest.importorskip("transformers")

VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
TEXT = {**VISION, "vocab_size": 128, "max_position_embeddings": 32}
LLAMA = {**TEXT, "num_key_value_heads": 2, "max_position_embeddings": 64}
IMAGE_SIDE, PATCH = 32, 8
PATCHES = (IMAGE_SIDE // PATCH) ** 2
# Audio encoders keep transformers' default feature extractor strides (total stride 320), only narrower, so a
# waveform gives as many frames as the real model (781 for 250k samples).
SPEECH = {
    **VISION,
    "conv_dim": (16,) * 7,
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    "layerdrop": 0.0,  # deterministic real step: every layer runs
}


def clip_vision() -> dict[str, Any]:
    return transformers.CLIPVisionConfig(**VISION, image_size=IMAGE_SIDE, patch_size=PATCH).to_dict()


def siglip_vision() -> dict[str, Any]:
    return transformers.SiglipVisionConfig(**VISION, image_size=IMAGE_SIDE, patch_size=PATCH).to_dict()


def llava(vision: dict[str, Any] | None = None, **changes: Any) -> Any:
    text = transformers.LlamaConfig(**LLAMA).to_dict()
    # vision_feature_layer=-1: the last vision layer feeds the projector, so each vision weight gets a grad.
    kwargs = {"image_token_id": 127, "vision_feature_layer": -1, **changes}
    return transformers.LlavaConfig(vision_config=vision or clip_vision(), text_config=text, **kwargs)


def gemma3(vision: dict[str, Any] | None = None, **changes: Any) -> Any:
    """Gemma 3's image-text model: SigLIP's 4 x 4 patches average-pooled to ``mm_tokens_per_image`` tokens."""
    text = transformers.Gemma3TextConfig(**LLAMA, head_dim=8, sliding_window=8).to_dict()
    kwargs = {"mm_tokens_per_image": 4, "image_token_index": 127, "boi_token_index": 125, "eoi_token_index": 126,
              **changes}
    return transformers.Gemma3Config(vision_config=vision or siglip_vision(), text_config=text, **kwargs)


def paligemma() -> Any:
    """PaliGemma: every SigLIP patch (4 x 4) projected into a Gemma text model."""
    text = transformers.GemmaConfig(**LLAMA, head_dim=8).to_dict()
    config = transformers.PaliGemmaConfig(vision_config={**siglip_vision(), "vision_use_head": False},
                                          text_config=text, image_token_index=127, projection_dim=32)
    config.text_config.num_image_tokens = PATCHES
    return config


CONFIGS: dict[str, Callable[[], Any]] = {
    "clip": lambda: transformers.CLIPConfig(
        text_config={**TEXT, "projection_dim": 16}, vision_config=clip_vision(), projection_dim=16
    ),
    "siglip": lambda: transformers.SiglipConfig(text_config=TEXT, vision_config=siglip_vision()),
    "llava": llava,
    "gemma3": gemma3,
    "paligemma": paligemma,
    "whisper": lambda: transformers.WhisperConfig(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=16,
        max_source_positions=30,
        max_target_positions=32,
        vocab_size=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=3,
    ),
    "wav2vec2-ctc": lambda: transformers.Wav2Vec2Config(**SPEECH, vocab_size=32),
    "hubert": lambda: transformers.HubertConfig(**SPEECH),
}
ARCHITECTURES = {
    "clip": "CLIPModel",
    "siglip": "SiglipModel",
    "llava": "LlavaForConditionalGeneration",
    "gemma3": "Gemma3ForConditionalGeneration",
    "paligemma": "PaliGemmaForConditionalGeneration",
    "whisper": "WhisperForConditionalGeneration",
    "wav2vec2-ctc": "Wav2Vec2ForCTC",
    "hubert": "HubertModel",
}


@pytest.fixture
def save(tmp_path: Path) -> Callable[..., Path]:
    """``save(name, config=None, architecture=None)``: save_pretrained a tiny config; returns the folder."""

    def write(name: str, config: Any = None, architecture: str | None = None) -> Path:
        config = CONFIGS[name]() if config is None else config
        config.architectures = [architecture or ARCHITECTURES[name]]
        folder = tmp_path / name
        config.save_pretrained(folder)
        return folder

    return write


# name, modality, seq_len (None: no text length), expected shapes of a batch of 2, whether output.loss exists
CASES = [
    ("clip", "image-text", 16, {"input_ids": (2, 16), "pixel_values": (2, 3, 32, 32)}, True),
    ("siglip", "image-text", 16, {"input_ids": (2, 16), "pixel_values": (2, 3, 32, 32)}, True),
    (
        "llava",
        "vision-language",
        24,
        {"input_ids": (2, 24), "pixel_values": (2, 3, 32, 32), "labels": (2, 24)},
        True,
    ),
    (
        "gemma3",
        "vision-language",
        24,
        {"input_ids": (2, 24), "pixel_values": (2, 3, 32, 32), "labels": (2, 24), "token_type_ids": (2, 24)},
        True,
    ),
    (
        "paligemma",
        "vision-language",
        24,
        {"input_ids": (2, 24), "pixel_values": (2, 3, 32, 32), "labels": (2, 24), "token_type_ids": (2, 24)},
        True,
    ),
    (
        "whisper",
        "audio-features",
        16,
        {"input_features": (2, 16, 60), "decoder_input_ids": (2, 16), "labels": (2, 16)},
        True,
    ),
    ("wav2vec2-ctc", "audio-waveform", None, {"input_values": (2, WAVEFORM_SAMPLES)}, False),
    ("hubert", "audio-waveform", None, {"input_values": (2, WAVEFORM_SAMPLES)}, False),
]


@pytest.mark.parametrize(
    ("name", "modality", "seq_len", "shapes", "has_loss"), CASES, ids=[c[0] for c in CASES]
)
def test_non_text_config_trains_one_real_step_on_cpu(
    name: str,
    modality: str,
    seq_len: int | None,
    shapes: dict[str, tuple[int, ...]],
    has_loss: bool,
    save: Callable[..., Path],
) -> None:
    source = load_source(save(name))
    assert (source.metadata["inputs"], source.metadata["architecture"]) == (modality, ARCHITECTURES[name])
    assert source.accepts_seq_len == (seq_len is not None)
    torch.manual_seed(0)
    module = source.build()
    module.train()
    batch = source.batch(2, seq_len)
    assert {
        key: tuple(value.shape) for key, value in batch.items() if isinstance(value, torch.Tensor)
    } == shapes
    output = autoshard.models.call_model(module, batch)
    assert (getattr(output, "loss", None) is not None) == has_loss
    loss = autoshard.models.default_loss(output, batch)
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    # Every input reaches the model: each part two levels down (vision tower, projector and language model;
    # encoder and decoder; feature extractor) trains.
    for part_name, part in module.named_modules():
        trainable = [p for p in part.parameters() if p.requires_grad]
        if part_name and part_name.count(".") < 2 and trainable:
            assert any(p.grad is not None for p in trainable), part_name


@pytest.mark.parametrize(
    ("name", "modality", "seq_len", "shapes", "has_loss"), CASES, ids=[c[0] for c in CASES]
)
def test_non_text_config_profiles_under_fake_tensors(
    name: str,
    modality: str,
    seq_len: int | None,
    shapes: dict[str, tuple[int, ...]],
    has_loss: bool,
    save: Callable[..., Path],
) -> None:
    folder = save(name)
    real_count = sum(p.numel() for p in load_source(folder).build().parameters())
    profile = autoshard.profile(folder, batch_size=1, seq_len=seq_len, precision="32-true")
    assert profile.parameter_count == real_count
    assert profile.seq_len == seq_len
    # the step's activations and gradients come on top of the weights
    assert profile.peak_bytes > profile.parameter_bytes + profile.gradient_bytes


def test_dual_encoders_get_return_loss_exactly_when_their_forward_takes_it(save: Callable[..., Path]) -> None:
    import inspect

    for name in ("clip", "siglip"):
        source = load_source(save(name))
        takes = (
            "return_loss" in inspect.signature(getattr(transformers, ARCHITECTURES[name]).forward).parameters
        )
        assert ("return_loss" in source.batch(2, 8)) == takes


@pytest.mark.parametrize(
    ("vision", "strategy", "image_tokens"),
    [
        (clip_vision, "default", PATCHES),  # CLIP's class token dropped
        (clip_vision, "full", PATCHES + 1),  # kept
        (siglip_vision, "full", PATCHES),  # SigLIP has no class token
        (siglip_vision, "default", PATCHES - 1),  # LLaVA drops the first feature anyway
        # An image side that is not a multiple of the patch (SigLIP-so400m-patch14-384: 27 x 27 patches of 14 px):
        # the patch convolution drops the remainder (it was refused as "not a multiple of its patch_size").
        (lambda: {**siglip_vision(), "image_size": IMAGE_SIDE + PATCH - 2}, "full", PATCHES),
    ],
    ids=["clip-default", "clip-full", "siglip-full", "siglip-default", "siglip-side-not-a-multiple"],
)
def test_llava_gets_as_many_image_tokens_as_its_vision_tower_gives_features(
    vision: Callable[[], dict[str, Any]], strategy: str, image_tokens: int, save: Callable[..., Path]
) -> None:
    config = llava(vision(), vision_feature_select_strategy=strategy)
    source = load_source(save("llava", config))
    assert source.metadata["image_tokens"] == image_tokens
    batch = source.batch(1, 20)
    assert int((batch["input_ids"] == 127).sum()) == image_tokens
    assert int((batch["labels"] == -100).sum()) == image_tokens
    output = autoshard.models.call_model(source.build(), batch)  # transformers checks the count itself
    assert torch.isfinite(output.loss)


def test_gemma3_gets_its_pooled_image_tokens_marked_as_the_image_block(save: Callable[..., Path]) -> None:
    source = load_source(save("gemma3"))
    assert source.metadata["image_tokens"] == 4  # 4 x 4 patches pooled 2 x 2
    batch = source.batch(2, 12)
    image = batch["input_ids"] == 127
    assert image.sum(dim=1).tolist() == [4, 4]
    assert torch.equal(batch["token_type_ids"], image.long())  # its bidirectional image block in training
    assert int((batch["labels"] == -100).sum()) == 8
    output = autoshard.models.call_model(source.build(), batch)  # transformers checks the count itself
    assert torch.isfinite(output.loss)


def test_paligemma_gets_every_patch_and_the_text_marked_as_the_suffix(save: Callable[..., Path]) -> None:
    source = load_source(save("paligemma"))
    assert source.metadata["image_tokens"] == PATCHES  # SigLIP: no class token, nothing pooled
    batch = source.batch(1, 20)
    image = batch["input_ids"] == 127
    assert int(image.sum()) == PATCHES
    # PaliGemma's processor: the image (the prefix) 0, attending both ways; the text trained on (the suffix) 1.
    assert torch.equal(batch["token_type_ids"], (~image).long())
    output = autoshard.models.call_model(source.build(), batch)
    assert torch.isfinite(output.loss)


def test_llava_seq_len_must_leave_room_for_text_after_the_image(save: Callable[..., Path]) -> None:
    source = load_source(save("llava"))
    with pytest.raises(UsageError, match=f"seq_len={PATCHES} leaves no room for text"):
        source.batch(1, PATCHES)


def test_llava_image_token_outside_the_vocabulary_is_a_config_error(save: Callable[..., Path]) -> None:
    with pytest.raises(ModelSourceError, match=r"image_token_id is 500, outside the text vocabulary"):
        load_source(save("llava", llava(image_token_id=500)))


def test_question_answering_heads_get_start_and_end_positions(save: Callable[..., Path]) -> None:
    config = transformers.BertConfig(**TEXT)
    source = load_source(save("bert-qa", config, "BertForQuestionAnswering"))
    batch = source.batch(2, 8)
    assert set(batch) == {"input_ids", "start_positions", "end_positions"}
    output = autoshard.models.call_model(source.build(), batch)
    assert output.loss is not None and torch.isfinite(output.loss)


def _refused() -> list[Any]:
    return [
        pytest.param(
            lambda: transformers.BertConfig(**TEXT), "BertForMultipleChoice", "number of choices", id="mc"
        ),
        pytest.param(
            lambda: transformers.Qwen2VLConfig(),
            "Qwen2VLForConditionalGeneration",
            # the tower, which nothing in the config can change, not its unset feature-select strategy (a probe
            # set the strategy as told and only then learnt of the tower)
            "(its vision tower is 'qwen2_vl_vision')",
            id="qwen2-vl",
        ),
        pytest.param(
            lambda: transformers.Idefics2Config(),
            "Idefics2ForConditionalGeneration",
            "cannot build the image inputs of Idefics2ForConditionalGeneration",
            id="idefics2",
        ),
        pytest.param(
            lambda: transformers.LlavaNextConfig(),
            "LlavaNextForConditionalGeneration",
            "its config sets image_grid_pinpoints",
            id="llava-next",
        ),
        pytest.param(  # transformers' default: 14 x 14 patches cannot pool to 16 x 16 tokens
            lambda: transformers.Gemma3Config(),
            "Gemma3ForConditionalGeneration",
            "mm_tokens_per_image 256 does not pool its 224/16-patch grid",
            id="gemma3-default",
        ),
        pytest.param(
            lambda: gemma3(clip_vision()),
            "Gemma3ForConditionalGeneration",
            "its vision tower is 'clip_vision_model'",
            id="gemma3-clip",
        ),
        pytest.param(  # NaFlex: position embeddings resized to each image's grid, read from spatial_shapes
            lambda: transformers.Siglip2Config(),
            "Siglip2ForImageClassification",
            "takes images as variable-resolution patches",
            id="siglip2",
        ),
        pytest.param(
            lambda: transformers.BlipConfig(),
            "BlipForConditionalGeneration",
            "turns images into text",
            id="blip",
        ),
    ]


@pytest.mark.parametrize(("config", "architecture", "expected"), _refused())
def test_inputs_autoshard_cannot_build_are_refused_in_two_lines(
    config: Callable[[], Any], architecture: str, expected: str, save: Callable[..., Path]
) -> None:
    with pytest.raises(ModelSourceError) as info:
        load_source(save("refused", config(), architecture))
    assert expected in info.value.message
    assert str(info.value).count("\n") == 1 and "model.py" in str(info.value)


@pytest.mark.parametrize("name", ["vit", "wav2vec2-ctc"])
def test_seq_len_for_a_config_without_token_inputs_is_refused_in_its_terms(
    name: str, save: Callable[..., Path]
) -> None:
    # It used to point at "batch() in .../config.json" and a model file the user does not have.
    vit = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                 image_size=32, patch_size=8)
    folder = save(name, vit, "ViTForImageClassification") if name == "vit" else save(name)
    source = load_source(folder)
    with pytest.raises(UsageError) as info:
        source.batch(2, 128)
    assert str(info.value).startswith(f"--seq-len does not apply to {source.name}: its inputs are not a token")
    assert "model file" not in str(info.value) and info.value.hint == "Drop --seq-len."


@pytest.mark.parametrize("architecture", ["CLIPForImageClassification", "SiglipForImageClassification"])
def test_an_image_classifier_over_a_two_tower_config_gets_its_vision_towers_image_size(
        architecture: str, save: Callable[..., Path]) -> None:
    """CLIPForImageClassification takes the whole CLIPConfig, whose image size is its vision_config's: the
    images were built at the 224 default and the forward refused them (a CLIP config.json without
    "architectures", which the image-classification Auto class picks)."""
    name = "clip" if architecture.startswith("CLIP") else "siglip"
    source = load_source(save(name, architecture=architecture))
    batch = source.batch(2)
    assert tuple(batch["pixel_values"].shape) == (2, 3, IMAGE_SIDE, IMAGE_SIDE)
    torch.manual_seed(0)
    output = autoshard.models.call_model(source.build(), batch)
    assert torch.isfinite(autoshard.models.default_loss(output, batch))
