"""The fake-tensor trace against the same step on real CPU tensors, and against published formulas."""

from __future__ import annotations

import pytest
import torch

from autoshard.errors import ProfileError, UsageError, UserCodeError
from autoshard.models.source import ModelSource
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.trace import trace
from tests.profiler import models

GROUND_TRUTH_CASES = [
    ("mlp", models.mlp_source, 64, "32-true", "adamw", False),
    ("mlp-sgd", models.mlp_source, 64, "32-true", "sgd", False),
    ("cnn-batchnorm", models.cnn_source, 8, "32-true", "adamw", False),
    ("cnn-bf16", models.cnn_source, 8, "bf16-mixed", "adam", False),
    ("gpt", models.gpt_source, 4, "32-true", "adamw", False),
    ("gpt-bf16-mixed", models.gpt_source, 4, "bf16-mixed", "adamw", False),
    ("gpt-bf16-true", models.gpt_source, 4, "bf16-true", "adamw", False),
    ("gpt-checkpointing", models.gpt_source, 4, "32-true", "adamw", True),
    ("gpt-adafactor", models.gpt_source, 4, "32-true", "adafactor", False),
]


@pytest.mark.parametrize(
    ("make", "batch", "precision", "optimizer", "checkpointing"),
    [c[1:] for c in GROUND_TRUTH_CASES],
    ids=[c[0] for c in GROUND_TRUTH_CASES],
)
def test_fake_trace_peak_and_breakdown_match_real_cpu_tensors(make, batch, precision, optimizer, checkpointing):
    torch.manual_seed(0)
    options = ProfileOptions(batch_size=batch, precision=precision, optimizer=optimizer,
                             activation_checkpointing=checkpointing, target="cpu")
    fake = trace(make(), options, fake=True)
    real = trace(make(), options, fake=False)
    assert fake.peak_bytes == pytest.approx(real.peak_bytes, rel=0.02)
    # In every case tested so far the agreement is exact; the tolerance above is the issue's, this is ours.
    assert fake.peak_bytes == real.peak_bytes
    for kind, value in real.peak_breakdown.to_dict().items():
        assert fake.peak_breakdown.to_dict()[kind] == pytest.approx(value, rel=0.02, abs=4096), kind
    assert fake.peak_phase == real.peak_phase
    assert fake.forward_flops == real.forward_flops
    assert fake.optimizer_state_bytes == real.optimizer_state_bytes


def test_hf_model_from_tiny_config_matches_real_cpu_tensors():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)

    def batch(b: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 256, (b, 64))
        return {"input_ids": ids, "labels": ids}

    source = ModelSource(name="hf-llama", kind="hf-config", origin="tests",
                         build_fn=lambda: transformers.LlamaForCausalLM(config), batch_fn=batch)
    options = ProfileOptions(batch_size=2, precision="32-true", target="cpu")
    fake, real = trace(source, options, fake=True), trace(source, options, fake=False)
    assert fake.peak_bytes == pytest.approx(real.peak_bytes, rel=0.02)
    assert fake.block_class == "LlamaDecoderLayer"


def test_steady_state_model_states_are_what_the_optimizer_keeps():
    options = ProfileOptions(batch_size=4, precision="32-true", optimizer="adamw", target="cpu")
    p = trace(models.gpt_source(), options)
    # fp32 AdamW: 4 B weights + 4 B grads + 8 B (exp_avg, exp_avg_sq), plus one 4-byte `step` scalar per tensor.
    n_tensors = len(list(models.gpt_source().build().parameters()))
    assert p.parameter_bytes == 4 * p.parameter_count
    assert p.gradient_bytes == 4 * p.parameter_count
    assert p.optimizer_state_bytes == 8 * p.parameter_count + 4 * n_tensors


def test_mixed_precision_adam_model_states_are_16_bytes_per_parameter():
    # ZeRO paper (Rajbhandari et al. 2020, sec. 3.1): mixed-precision Adam keeps 2 + 2 + 12 = 16 bytes per
    # parameter. torch AMP keeps fp32 weights (4) + fp32 grads (4) + Adam moments (8): also 16.
    p = trace(models.gpt_source(), ProfileOptions(batch_size=2, precision="bf16-mixed", target="cuda"))
    per_param = p.model_state_bytes / p.parameter_count
    assert per_param == pytest.approx(16, rel=0.01)


@pytest.mark.parametrize("flash", [True, False], ids=["flash", "no-flash"])
def test_gpt_layer_activations_match_korthikanti_formula(flash):
    # Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. (1):
    # one layer saves s*b*h*(34 + 5*a*s/h) bytes with 16-bit activations and 1-byte dropout masks; flash
    # attention removes the 5*a*s/h term. Configured like the paper: 16-bit everything, dropout 0.1.
    s, b, h, a = 128, 2, 256, 4
    source = models.gpt_source(4, flash=flash, hidden=h, heads=a, seq=s, vocab=512)
    p = trace(source, ProfileOptions(batch_size=b, precision="bf16-true", target="cuda"))
    expected = s * b * h * (34 + (0 if flash else 5 * a * s / h))
    interior = p.blocks[1]  # layer 0 also saves the embedding dropout's output; interior layers are pure
    assert interior.activation_bytes == pytest.approx(expected, rel=0.10)


def test_activation_checkpointing_saves_only_block_inputs():
    base = ProfileOptions(batch_size=4, precision="32-true", target="cpu")
    plain = trace(models.gpt_source(), base)
    ckpt = trace(models.gpt_source(), ProfileOptions(batch_size=4, precision="32-true", target="cpu",
                                                     activation_checkpointing=True))
    assert ckpt.peak_bytes < plain.peak_bytes
    hidden_state_bytes = 4 * 128 * 128 * 4  # batch x seq x hidden x fp32
    assert all(b.activation_bytes == hidden_state_bytes for b in ckpt.blocks)
    # Recomputation runs each block's forward again in backward.
    assert ckpt.backward_flops > plain.backward_flops


def test_gradient_accumulation_multiplies_step_flops_and_keeps_model_states():
    one = trace(models.mlp_source(), ProfileOptions(batch_size=8, precision="32-true", target="cpu"))
    four = trace(models.mlp_source(), ProfileOptions(batch_size=8, precision="32-true", target="cpu",
                                                     grad_accumulation=4))
    assert four.flops_per_step == 4 * one.flops_per_step
    assert four.samples_per_step == 32
    assert four.gradient_bytes == one.gradient_bytes
    # Accumulating into existing gradients needs a temporary gradient at least once per micro-step.
    assert four.peak_bytes >= one.peak_bytes


def test_repeated_block_is_found_with_per_block_figures():
    p = trace(models.gpt_source(4), ProfileOptions(batch_size=2, precision="32-true", target="cpu"))
    assert p.block_class == "GPTLayer"
    assert [b.name for b in p.blocks] == ["layers.0", "layers.1", "layers.2", "layers.3"]
    assert len({b.parameters for b in p.blocks}) == 1
    assert all(b.forward_flops > 0 and b.backward_flops == pytest.approx(2 * b.forward_flops, rel=0.05)
               for b in p.blocks)


def _boolean_mask_source() -> ModelSource:
    class Masked(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)
            return y[y > 0].sum()

    return ModelSource(name="masked", kind="file", origin="tests", build_fn=Masked,
                       batch_fn=lambda b: torch.randn(b, 8))


def test_value_dependent_shapes_give_a_profile_error_naming_op_and_module():
    with pytest.raises(ProfileError) as info:
        trace(_boolean_mask_source(), ProfileOptions(batch_size=2, target="cpu"))
    message = str(info.value)
    assert "nonzero" in message or "index" in message
    assert "depends on tensor values" in message


def _layerdrop_source(layerdrop: float) -> ModelSource:
    class LayerDropped(torch.nn.Module):  # transformers 5.17's LayerDrop: the draw even at layerdrop 0
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                if self.training:
                    p = torch.rand([])
                    if p < layerdrop:
                        continue
                x = layer(x)
            return x.sum()

    return ModelSource(name="layerdrop", kind="file", origin="tests", build_fn=LayerDropped,
                       batch_fn=lambda b: torch.randn(b, 16))


@pytest.mark.parametrize("layerdrop", [0.0, 0.5])
def test_layerdrop_draws_are_traced_as_keeping_every_layer(layerdrop: float):
    # A fake draw has no value; reading it as rand's top (1.0) keeps every layer: the most a step can take.
    p = trace(_layerdrop_source(layerdrop), ProfileOptions(batch_size=4, target="cpu"))
    assert p.forward_flops == 3 * 2 * 4 * 16 * 16
    with pytest.raises(ProfileError, match="depends on tensor values"):  # other values still cannot be read
        trace(_boolean_mask_source(), ProfileOptions(batch_size=2, target="cpu"))


def test_forward_raising_gives_user_code_error():
    class Broken(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    source = ModelSource(name="broken", kind="file", origin="tests", build_fn=Broken,
                         batch_fn=lambda b: torch.randn(b, 2))
    with pytest.raises(UserCodeError, match="forward raised RuntimeError.*boom"):
        trace(source, ProfileOptions(batch_size=1, target="cpu"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch size must be a positive integer"),
        ({"batch_size": 2, "seq_len": -1}, "sequence length must be a positive integer"),
        ({"batch_size": 2, "grad_accumulation": 0}, "gradient accumulation"),
        ({"batch_size": 2, "precision": "fp8"}, "unknown precision"),
        ({"batch_size": 2, "optimizer": "adamm"}, "Did you mean 'adam'"),
    ],
)
def test_nonsensical_options_are_rejected(kwargs, message):
    with pytest.raises(UsageError, match=message):
        ProfileOptions(**kwargs)


@pytest.mark.parametrize(("target", "weight_dtype", "expected_stat_dtype_bytes"), [
    ("cuda", torch.bfloat16, 4),   # CUDA layer_norm keeps mean / rstd in the accumulate type
    ("cpu", torch.float32, 4),     # CPU's mixed-type kernel (bf16 input, fp32 weight) too
    ("cpu", torch.bfloat16, 2),    # CPU with bf16 weight keeps them in bf16
])
def test_layer_norm_statistics_are_counted_in_the_dtype_the_real_kernel_uses(target, weight_dtype,
                                                                             expected_stat_dtype_bytes):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autoshard.profiler.tracker import Category, MemoryTracker

    with FakeTensorMode():
        x = torch.randn(64, 256, dtype=torch.bfloat16)
        w, b = torch.ones(256, dtype=weight_dtype), torch.zeros(256, dtype=weight_dtype)
        tracker = MemoryTracker()
        tracker.norm_stats_fp32 = "always" if target == "cuda" else "mixed"
        with tracker:
            kept = torch.ops.aten.native_layer_norm.default(x, [256], w, b, 1e-5)  # noqa: F841 (keep alive)
    output_bytes = 64 * 256 * 2
    assert tracker.totals[Category.TEMPORARIES] == output_bytes + 2 * 64 * expected_stat_dtype_bytes


@pytest.mark.parametrize("frozen_before", [False, True])
def test_a_trace_leaves_the_processs_frozen_objects_as_it_found_them(frozen_before: bool, monkeypatch):
    """A tracing session freezes older objects for its garbage collections and unfreezes them after; where the
    process froze objects of its own (a server after fork, say), it freezes and unfreezes nothing."""
    import gc

    from autoshard.profiler.trace import trace_timelines

    calls: list[str] = []
    freeze, unfreeze = gc.freeze, gc.unfreeze
    gc.unfreeze()
    gc.collect()  # from Python 3.12 a collection puts the interpreter's immortal objects in the frozen generation
    if frozen_before:
        gc.freeze()
    monkeypatch.setattr(gc, "freeze", lambda: (calls.append("freeze"), freeze())[1])
    monkeypatch.setattr(gc, "unfreeze", lambda: (calls.append("unfreeze"), unfreeze())[1])
    try:
        options = ProfileOptions(batch_size=1, precision="32-true", optimizer="adamw", target="cpu")
        trace_timelines(models.gpt_source(), options, (1, 2))
        assert calls == ([] if frozen_before else ["freeze", "unfreeze"])
    finally:
        unfreeze()


def test_a_trace_freezes_older_objects_although_the_interpreter_keeps_immortal_ones_frozen(monkeypatch):
    # Python 3.12+ holds its immortal objects in the frozen generation (375 in 3.12.1): counting them as the
    # process's own freeze left every session of a 3.12 process without the freeze its collections rely on.
    import gc

    from autoshard.profiler import collection

    gc.unfreeze()
    gc.collect()
    own = gc.get_freeze_count()
    assert own == collection.interpreter_frozen_count()
    seen = []
    with collection.older_objects_frozen():
        seen.append(gc.get_freeze_count())
    assert seen[0] > own  # this session froze the process's objects


def _batch_norm_mlp() -> ModelSource:
    """A tabular model: BatchNorm1d over (batch, features), one value per channel at micro-batch 1."""
    from autoshard.runtime.planning import module_source

    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4))
    return module_source(model, (torch.randn(2, 16), torch.randint(0, 4, (2,))),
                         loss_fn=torch.nn.functional.cross_entropy)


def test_batch_norm_over_features_traces_at_micro_batch_one_as_the_planner_traces_it():
    """The planner traces micro-batches 1, 2 and 3. BatchNorm1d refused one value per channel in training and,
    past that check, the fake running-variance update divided by zero: every such model failed to plan
    ("forward raised ValueError: Expected more than 1 value per channel when training")."""
    import torch.nn.functional as F

    checks = (F.batch_norm, F._verify_batch_size)
    peaks = [trace(_batch_norm_mlp(), ProfileOptions(batch_size=b, target="cpu"), fake=True).peak_bytes
             for b in (1, 2, 3)]
    assert peaks[0] < peaks[1] < peaks[2]
    assert (F.batch_norm, F._verify_batch_size) == checks  # the checks are back after the trace
    real = trace(_batch_norm_mlp(), ProfileOptions(batch_size=2, target="cpu"), fake=False)
    assert real.peak_bytes == peaks[1]
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        torch.nn.BatchNorm1d(4).train()(torch.randn(1, 4))  # outside a trace, torch's checks hold


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_census_at_the_second_micro_batch_leaves_the_measured_steps_as_they_were(precision, checkpointing):
    """The planner's sessions take the op census at micro-batch 2 too (the memory traffic's part per micro-batch
    and part per sample), in an unmeasured forward and backward: every profile and timeline is the same as
    without it, event for event."""
    import dataclasses

    from autoshard.profiler.trace import trace_timelines

    def same(a: object, b: object) -> bool:
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and torch.equal(a, b)
        if dataclasses.is_dataclass(a) and not isinstance(a, type):
            return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
                       if f.name not in ("trace_seconds", "census"))
        if isinstance(a, (list, tuple)):
            return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return a == b

    options = ProfileOptions(batch_size=1, precision=precision, optimizer="adamw", target="cuda",
                             checkpointing="full" if checkpointing else "none")
    from autoshard.models import load_source

    source = load_source("tiny-llama")  # SDPA, whose composite a FLOP counter decomposes: it must not be measured
    plain = trace_timelines(source, options, (1, 2, 3))
    counted = trace_timelines(source, options, (1, 2, 3), census_twice=True)
    for (profile, _, timeline), (profile_2, _, timeline_2) in zip(plain, counted, strict=True):
        assert same(profile, profile_2) and same(timeline, timeline_2)  # the peaks' snapshots are in the profile
    assert plain[1][0].census is None and counted[1][0].census is not None
    assert counted[1][0].census.matmul_flops == 2 * counted[0][0].census.matmul_flops  # FLOPs scale with samples


def test_two_profiles_of_the_same_step_are_equal_whatever_their_timing() -> None:
    """A notebook probe's two identical profile() calls compared unequal: only trace_seconds differed."""
    import autoshard

    first = autoshard.profile("tiny-gpt2", batch_size=2, seq_len=16, target="cpu")
    second = autoshard.profile("tiny-gpt2", batch_size=2, seq_len=16, target="cpu")
    assert first == second
    assert first != autoshard.profile("tiny-gpt2", batch_size=3, seq_len=16, target="cpu")
