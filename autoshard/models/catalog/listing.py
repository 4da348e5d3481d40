"""What ``autoshard models`` lists — each catalog entry's name, parameter count, default sequence length and
reference — as data, so that listing the catalog imports no torch (building 25 models on the meta device to count
their parameters took seconds, most of it importing torch).

:func:`measure` computes the same rows from the catalog itself, and ``tests/models/test_catalog_listing.py``
checks that :data:`LISTING` equals it: a catalog entry added or changed without its row here fails that test,
which prints the rows to paste (``python -m autoshard.models.catalog.listing`` prints them too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LISTING", "CatalogListing", "measure", "render"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CatalogListing:
    """One catalog entry as ``autoshard models`` shows it."""

    name: str
    parameters: int
    """Parameters of the module the entry builds (every tensor, counted on the meta device)."""
    default_seq_len: int | None
    """The sequence length used when none is given; ``None`` for models without one."""
    reference: str | None
    """Where the entry's hyperparameters come from."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``autoshard models --json``)."""
        return {"name": self.name, "parameters": self.parameters, "default_seq_len": self.default_seq_len,
                "reference": self.reference}


LISTING: tuple[CatalogListing, ...] = (
    CatalogListing(name='bert-base-uncased', parameters=109_514_298, default_seq_len=512,
                   reference='https://huggingface.co/google-bert/bert-base-uncased/blob/main/config.json'),
    CatalogListing(name='bert-large-uncased', parameters=335_174_458, default_seq_len=512,
                   reference='https://huggingface.co/google-bert/bert-large-uncased/blob/main/config.json'),
    CatalogListing(name='gpt2', parameters=124_439_808, default_seq_len=1024,
                   reference='https://huggingface.co/openai-community/gpt2/blob/main/config.json'),
    CatalogListing(name='gpt2-large', parameters=774_030_080, default_seq_len=1024,
                   reference='https://huggingface.co/openai-community/gpt2-large/blob/main/config.json'),
    CatalogListing(name='gpt2-medium', parameters=354_823_168, default_seq_len=1024,
                   reference='https://huggingface.co/openai-community/gpt2-medium/blob/main/config.json'),
    CatalogListing(name='gpt2-xl', parameters=1_557_611_200, default_seq_len=1024,
                   reference='https://huggingface.co/openai-community/gpt2-xl/blob/main/config.json'),
    CatalogListing(name='llama-2-13b', parameters=13_015_864_320, default_seq_len=4096,
                   reference='https://huggingface.co/meta-llama/Llama-2-13b-hf/blob/main/config.json'),
    CatalogListing(name='llama-2-70b', parameters=68_976_648_192, default_seq_len=4096,
                   reference='https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json'),
    CatalogListing(name='llama-2-7b', parameters=6_738_415_616, default_seq_len=4096,
                   reference='https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json'),
    CatalogListing(name='llama-3-70b', parameters=70_553_706_496, default_seq_len=8192,
                   reference='https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json'),
    CatalogListing(name='llama-3-8b', parameters=8_030_261_248, default_seq_len=8192,
                   reference='https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json'),
    CatalogListing(name='mistral-7b', parameters=7_241_732_096, default_seq_len=8192,
                   reference='https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json'),
    CatalogListing(name='resnet50', parameters=25_557_032, default_seq_len=None,
                   reference='https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet50.html'),
    CatalogListing(name='t5-3b', parameters=2_851_598_336, default_seq_len=512,
                   reference='https://huggingface.co/google-t5/t5-3b/blob/main/config.json'),
    CatalogListing(name='t5-base', parameters=222_903_552, default_seq_len=512,
                   reference='https://huggingface.co/google-t5/t5-base/blob/main/config.json'),
    CatalogListing(name='t5-large', parameters=737_668_096, default_seq_len=512,
                   reference='https://huggingface.co/google-t5/t5-large/blob/main/config.json'),
    CatalogListing(name='t5-small', parameters=60_506_624, default_seq_len=512,
                   reference='https://huggingface.co/google-t5/t5-small/blob/main/config.json'),
    CatalogListing(name='tiny-bert', parameters=179_264, default_seq_len=128,
                   reference='autoshard test model: BERT architecture, tiny dimensions'),
    CatalogListing(name='tiny-gpt2', parameters=173_824, default_seq_len=128,
                   reference='autoshard test model: GPT-2 architecture, tiny dimensions'),
    CatalogListing(name='tiny-llama', parameters=223_552, default_seq_len=128,
                   reference='autoshard test model: Llama architecture, tiny dimensions'),
    CatalogListing(name='tiny-mistral', parameters=223_552, default_seq_len=128,
                   reference='autoshard test model: Mistral architecture, tiny dimensions'),
    CatalogListing(name='tiny-resnet', parameters=130_962, default_seq_len=None,
                   reference='autoshard test model: ResNet-50 architecture, tiny dimensions'),
    CatalogListing(name='tiny-t5', parameters=295_936, default_seq_len=128,
                   reference='autoshard test model: T5 architecture, tiny dimensions'),
    CatalogListing(name='tiny-vit', parameters=114_250, default_seq_len=None,
                   reference='autoshard test model: ViT-B/16 architecture, tiny dimensions'),
    CatalogListing(name='vit-b-16', parameters=86_567_656, default_seq_len=None,
                   reference='https://pytorch.org/vision/stable/models/generated/torchvision.models.vit_b_16.html'),
)
"""Every catalog entry, by name."""


def measure() -> tuple[CatalogListing, ...]:
    """The rows computed from the catalog: each entry built on the meta device (imports torch and every family)."""
    import torch

    from autoshard.models import catalog

    rows = []
    for name in catalog.names():
        source = catalog.get(name)
        with torch.device("meta"):
            parameters = sum(p.numel() for p in source.build().parameters())
        reference = source.metadata.get("reference")
        rows.append(CatalogListing(name=name, parameters=parameters, default_seq_len=source.default_seq_len,
                                   reference=None if reference is None else str(reference)))
    return tuple(rows)


def render(rows: tuple[CatalogListing, ...]) -> str:
    """The Python text of :data:`LISTING` for ``rows`` (what to paste above when the catalog changes)."""
    lines = [f"    CatalogListing(name={r.name!r}, parameters={r.parameters:_}, "
             f"default_seq_len={r.default_seq_len!r},\n                   reference={r.reference!r}),"
             for r in rows]
    return "LISTING: tuple[CatalogListing, ...] = (\n" + "\n".join(lines) + "\n)"


if __name__ == "__main__":
    print(render(measure()))
