"""Batches of token ids longer than the plan's sequence length are said, and tokens/s counts the tokens the batches
hold (a long-context probe: a plan for 64 tokens trained on 512-token batches without a word, reporting 1,319
tokens/s where it ran ~10,500, and a plan made on the data reported no tokens/s at all)."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from autoshard.runtime import fit


def _llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64))


def _batches(*lengths: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for n in lengths:
        ids = torch.randint(0, 64, (2, n), generator=g)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})
    return out


def test_a_plan_made_on_the_data_has_its_sequence_length_and_longer_batches_are_warned_of_once() -> None:
    with pytest.warns(UserWarning, match=r"step 3: a batch holds sequences of 32 tokens, and the plan is for 8 "
                                         r"\(its seq_len\)") as caught:
        result = fit(_llama(), _batches(8, 8, 32, 32, 48), max_steps=5, optimizer="sgd", progress=False)
    said = [str(w.message) for w in caught]
    assert sum("sequences of" in m for m in said) == 1
    assert not any("elements per sample" in m for m in said)  # the same cause, said once
    assert result.plan.seq_len == 8
    for step, length in zip(result.steps, (8, 8, 32, 32, 48), strict=True):
        assert step.tokens_per_s == pytest.approx(step.samples_per_s * length)


def test_a_given_plan_is_held_to_its_seq_len_and_counts_the_tokens_trained() -> None:
    plan = fit(_llama(), _batches(8), max_steps=1, optimizer="sgd", progress=False).plan
    with pytest.warns(UserWarning, match=r"step 1: a batch holds sequences of 32 tokens, and the plan is for 8"):
        result = fit(_llama(), _batches(32, 32), plan=plan, max_steps=2, optimizer="sgd", progress=False)
    assert result.steps[1].tokens_per_s == pytest.approx(result.steps[1].samples_per_s * 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # batches as long as the plan's: nothing to say
        fit(_llama(), _batches(8, 8), plan=plan, max_steps=2, optimizer="sgd", progress=False)


def test_fit_says_what_recommend_says_of_a_sequence_past_the_models_positions() -> None:
    """fit() on batches past a rotary model's max_position_embeddings said nothing, where profile and recommend
    print a Scope: line (a long-context probe)."""
    model = _llama()
    model.config.max_position_embeddings = 16
    result = fit(model, _batches(32), max_steps=1, optimizer="sgd", progress=False)
    assert [n for n in result.notes if n.startswith("Scope: sequence 32 is past the 16 positions LlamaForCausalLM "
                                                    "was made for (max_position_embeddings)")]
    short = fit(_llama(), _batches(32), max_steps=1, optimizer="sgd", progress=False)  # 64 positions
    assert not [n for n in short.notes if n.startswith("Scope:")]


def test_integer_targets_that_only_reach_the_loss_are_not_counted_as_tokens() -> None:
    """A multi-label classifier's (x, multi-hot long targets) batches reported 6 "tokens" a sample: the targets,
    which go to loss_fn, were taken for token ids (a probe's multi-label MLP)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 16, generator=g), (torch.rand(32, 6, generator=g) > 0.5).long()
    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 6))
    result = fit(net, torch.utils.data.TensorDataset(x, y), batch_size=8, max_steps=2, optimizer="sgd",
                 loss_fn=lambda out, t: torch.nn.functional.binary_cross_entropy_with_logits(out, t.float()),
                 progress=False)
    assert result.plan.seq_len is None
    assert all(step.tokens_per_s is None for step in result.steps)

    class Tagger(torch.nn.Module):  # token ids in, per-token classes out: the ids are tokens, the tags are not
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.head = torch.nn.Embedding(64, 8), torch.nn.Linear(8, 3)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.emb(ids))

    ids, tags = torch.randint(0, 64, (32, 12), generator=g), torch.randint(0, 3, (32, 5), generator=g)
    tagged = fit(Tagger(), torch.utils.data.TensorDataset(ids, tags), batch_size=8, max_steps=1, optimizer="sgd",
                 loss_fn=lambda out, t: out.mean(),
                 progress=False)
    assert tagged.plan.seq_len == 12
    assert tagged.steps[0].tokens_per_s == pytest.approx(tagged.steps[0].samples_per_s * 12)
