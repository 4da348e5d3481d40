"""The attention masks transformers builds for SDPA, under fake tensors as in a real step of autoshard's batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoshard.models import load_source
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.trace import trace

transformers = pytest.importorskip("transformers")


def test_bart_traced_with_fake_tensors_holds_what_the_real_step_holds(tmp_path: Path) -> None:
    """BART's decoder makes its padding mask itself (all ones): a real step then skips SDPA's 4D masks, while
    transformers, unable to read a fake mask, built two [4, 1, 128, 128] fp32 masks in the trace (+524,288 bytes,
    +1.4 % of the peak: a new probe's finding, 2026-11-30). The fake trace and the real one now agree to the byte."""
    transformers.BartConfig(vocab_size=1024, d_model=128, encoder_layers=2, decoder_layers=2,
                            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
                            decoder_ffn_dim=256, max_position_embeddings=256,
                            architectures=["BartForConditionalGeneration"]).save_pretrained(tmp_path)
    source = load_source(str(tmp_path))
    options = ProfileOptions(batch_size=4, seq_len=128, precision="32-true", optimizer="adamw", target="cpu")
    assert trace(source, options, fake=True).peak_bytes == trace(source, options, fake=False).peak_bytes


def test_a_real_padding_mask_is_still_read(tmp_path: Path) -> None:
    """Outside fake tensors nothing changes: a real mask with padding still gets its 4D mask."""
    import torch

    from autoshard.models.hf_masks import masks_without_padding

    masking_utils = pytest.importorskip("transformers.masking_utils")
    padded = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    with masks_without_padding():
        assert not masking_utils._ignore_bidirectional_mask_sdpa(padded, 3)
        assert masking_utils._ignore_bidirectional_mask_sdpa(torch.ones(1, 3, dtype=torch.bool), 3)
    assert masking_utils._ignore_bidirectional_mask_sdpa.__name__ == "_ignore_bidirectional_mask_sdpa"  # restored
