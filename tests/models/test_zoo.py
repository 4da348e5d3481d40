"""The model zoo in CI: every tiny architecture of ``benchmarks/zoo_models.py``, profiled and planned by autoshard
and held to references computed without it — transformers' own build on the meta device (parameters) and the
analytic formula of ``benchmarks/zoo_flops.py`` (FLOPs per training step).

Tests here fail for the architectures autoshard does not handle yet: that is what they are for, and nothing is
marked xfail. The one accepted refusal is a hybrid (Mamba) model refused in one line. The heavier checks
(``recommend`` with every candidate's memory, the real forward that checks the formula itself) run for five
representative models by default and for the whole zoo under ``-m slow``; so does each strategy's memory model
evaluated directly on a traced workload.
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.benchmark_scripts import load

pytest.importorskip("transformers")

zoo = load("zoo")
zoo_flops = load("zoo_flops")
ZOO = zoo.ZOO
REPRESENTATIVE = frozenset({"llama-3.1-8b", "mixtral-8x7b", "t5-large", "vit-b-16", "llava-1.5-7b"})
"""One dense decoder, one MoE, one encoder-decoder, one vision and one vision-language model."""
PUBLISHED_PARAMETERS_RTOL = 0.05
"""The published config's meta build must be within 5 % of the published count: authors round ("7B", "14B")
and count differently (T5's 770M counts 737.7M of weights as built; Phi-4's "14B" is 14.66B)."""
FLOPS_RTOL_PCT = 3.0
"""Target: autoshard's FLOPs per step within 3 % of the formula."""
BATCH_SIZE = 1


def _names(heavy: bool = False) -> list[Any]:
    """Every zoo name; with ``heavy``, all but the representative ones are marked slow."""
    return [pytest.param(m.name, marks=pytest.mark.slow) if heavy and m.name not in REPRESENTATIVE else m.name
            for m in ZOO]


@functools.cache
def _folder(name: str) -> Path:
    """The tiny config of ``name`` written with ``save_pretrained`` (once per process)."""
    folder = Path(tempfile.mkdtemp(prefix=f"zoo-{name}-"))
    zoo.get(name).config("tiny").save_pretrained(folder)
    return folder


@functools.cache
def _profile(name: str) -> Any:
    """``autoshard.profile`` of the tiny model, or the AutoshardError it raised (any other exception raises)."""
    import autoshard
    from autoshard.errors import AutoshardError

    try:
        return autoshard.profile(_folder(name), batch_size=BATCH_SIZE, seq_len=zoo.get(name).sequence("tiny"))
    except AutoshardError as exc:
        return exc


def _profiled(name: str) -> Any:
    """The profile; a refusal fails the test, except a hybrid's, which is an accepted outcome (skipped)."""
    from autoshard.errors import AutoshardError

    result = _profile(name)
    if isinstance(result, AutoshardError):
        _refusal_is_one_line(result)
        if zoo.get(name).kind == "hybrid":
            pytest.skip(f"autoshard refuses this hybrid model, an accepted outcome: {result.message}")
        pytest.fail(f"autoshard refused {name}: {result}", pytrace=False)
    return result


def _refusal_is_one_line(exc: Exception) -> None:
    text = str(exc).strip()
    assert text and len(text.splitlines()) <= 2, f"a refusal is a message and at most a hint: {text!r}"
    assert "Traceback" not in text


# -- the zoo's own definitions ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", _names())
def test_published_config_builds_the_published_parameter_count(name: str) -> None:
    entry = zoo.get(name)
    count = zoo.meta_parameter_count(entry.config("published"), entry.architecture)
    assert count == pytest.approx(entry.published_parameters, rel=PUBLISHED_PARAMETERS_RTOL), entry.parameters_source


@pytest.mark.parametrize("name", _names())
def test_tiny_config_is_tiny_and_the_same_class(name: str) -> None:
    entry = zoo.get(name)
    tiny, published = entry.config("tiny"), entry.config("published")
    assert type(tiny) is type(published) and tiny.architectures == published.architectures == [entry.architecture]
    assert zoo.meta_parameter_count(tiny, entry.architecture) < 1_000_000


@pytest.mark.parametrize("name", _names(heavy=True))
def test_flop_formula_equals_torch_flop_counter_on_the_real_tiny_model(name: str) -> None:
    # The reference itself: one real forward and backward of the tiny model (eager attention and experts) under
    # FlopCounterMode must count exactly what the formula writes. FlopCounterMode counts a grouped convolution's
    # backward as if dense (torch 2.13 conv_backward_flop ignores groups): convolution backward is compared only
    # where the model has no grouped convolution.
    entry = zoo.get(name)
    config, seq_len = entry.config("tiny"), entry.sequence("tiny")
    formula = zoo.analytic_flops(config, batch_size=2, seq_len=seq_len)
    counted = zoo_flops.counted_flops(config, entry.architecture, batch_size=2, seq_len=seq_len)
    conv_backward = sum(t.forward_flops * t.backward_multiple for t in formula.terms if t.kind == "conv")
    counted_backward = counted.pop("aten.convolution_backward", 0)
    assert sum(counted.values()) == formula.step_flops - conv_backward
    if config.model_type != "jamba":  # Jamba's only convolution is Mamba's depthwise conv1d
        assert counted_backward == conv_backward


# -- autoshard against the references -----------------------------------------------------------------------


@pytest.mark.parametrize("name", _names())
def test_profiled_parameters_equal_the_transformers_meta_build(name: str) -> None:
    entry = zoo.get(name)
    profile = _profiled(name)
    assert profile.parameter_count == zoo.meta_parameter_count(entry.config("tiny"), entry.architecture)


@pytest.mark.parametrize("name", _names())
def test_profiled_flops_are_within_3_percent_of_the_formula(name: str) -> None:
    # At the tiny size elementwise FLOPs (norms, activations, softmax) are no smaller a share than at the published
    # size, but neither side counts them: the formula holds exactly the terms torch's FlopCounterMode counts
    # (weight matmuls, attention score products, convolutions), which the test above checks on the real model.
    entry = zoo.get(name)
    profile = _profiled(name)
    seq_len = entry.sequence("tiny")
    if seq_len is not None:
        assert profile.seq_len == seq_len, "autoshard traced another sequence length than asked"
    formula = zoo.analytic_flops(entry.config("tiny"), batch_size=BATCH_SIZE, seq_len=seq_len)
    # The kernels' work: fused SDPA backward recomputes QKᵀ (benchmarks/zoo.py, fused_attention).
    reference = formula.step_flops + (formula.sdpa_recompute_flops if zoo.fused_attention(entry.architecture) else 0)
    diff_pct = 100 * (profile.flops_per_step - reference) / reference
    assert abs(diff_pct) <= FLOPS_RTOL_PCT, (
        f"autoshard {profile.flops_per_step:,} vs formula {reference:,} FLOPs ({diff_pct:+.2f} %); "
        f"formula by kind: {formula.to_dict()['by_kind']}")


@pytest.mark.parametrize("name", _names(heavy=True))
def test_recommend_returns_a_plan_or_a_one_line_refusal(name: str) -> None:
    import autoshard
    from autoshard.errors import AutoshardError

    try:
        plan = autoshard.recommend(_folder(name), hardware="dgx-h100", seq_len=zoo.get(name).sequence("tiny"))
    except AutoshardError as exc:  # any other exception is a bug and fails the test with its traceback
        _refusal_is_one_line(exc)
        return
    assert plan.recommended in plan.candidates
    assert plan.recommended.fits and plan.recommended.candidate.micro_batch_size >= 1
    # Every strategy the hardware supports was evaluated, and its memory model gave a finite, positive peak.
    from autoshard.hardware import load_hardware
    from autoshard.strategies import get, names

    hardware = load_hardware("dgx-h100")
    supported = {n for n in names() if get(n).unsupported(hardware) is None}
    assert supported <= {c.strategy for c in plan.candidates if c.memory is not None}
    for evaluation in plan.candidates:
        if evaluation.memory is not None:
            total = evaluation.memory.gpu.total
            assert math.isfinite(total) and total > 0, (evaluation.strategy, total)


@pytest.mark.slow
@pytest.mark.parametrize("name", _names())
def test_every_strategy_memory_model_gives_a_finite_positive_peak(name: str) -> None:
    # As tests/strategies/conformance.py evaluates strategies: each registered one the hardware supports, at a
    # fixed micro-batch, with and without checkpointing, on a workload traced from the tiny model.
    from autoshard.errors import AutoshardError
    from autoshard.hardware import load_hardware
    from autoshard.models import load_source
    from autoshard.strategies import Candidate, build_workload, get, names

    try:
        workload = build_workload(load_source(_folder(name)), seq_len=zoo.get(name).sequence("tiny"))
    except AutoshardError as exc:
        _refusal_is_one_line(exc)
        if zoo.get(name).kind == "hybrid":
            pytest.skip(f"autoshard refuses this hybrid model, an accepted outcome: {exc.message}")
        raise
    hardware = load_hardware("dgx-h100")
    evaluated = []
    for strategy_name in names():
        strategy = get(strategy_name)
        if strategy.unsupported(hardware) is not None:
            continue
        for checkpointing in (False, True):
            candidate = Candidate(strategy=strategy_name, micro_batch_size=2, activation_checkpointing=checkpointing)
            total = strategy.memory(workload, hardware, candidate).gpu.total
            assert math.isfinite(total) and total > 0, (strategy_name, checkpointing, total)
            evaluated.append(strategy_name)
    assert {"ddp", "fsdp"} <= set(evaluated)


@pytest.mark.parametrize("name", _names(heavy=True))
@pytest.mark.parametrize("checkpointing", [False, True], ids=["no-ckpt", "ckpt"])
def test_flops_are_the_same_in_both_compute_modes(name: str, checkpointing: bool) -> None:
    # build_workload counts FLOPs in the user's precision only and gives them to the 16-bit-weights trace
    # (strategies.workload._with_flops_of): autocast and bf16 weights change dtypes, never shapes. Held here
    # against both modes counted, step and block by block.
    from autoshard.models import load_source
    from autoshard.profiler.options import Precision, ProfileOptions
    from autoshard.profiler.scaling import profile_source

    _profiled(name)  # a refused hybrid is skipped
    source = load_source(_folder(name))
    counted = [
        profile_source(source, ProfileOptions(batch_size=1, seq_len=zoo.get(name).sequence("tiny"), precision=p,
                                              activation_checkpointing=checkpointing))
        for p in (Precision.BF16_MIXED, Precision.BF16_TRUE)
    ]
    amp, half = ((p.forward_flops, p.backward_flops, [(b.forward_flops, b.backward_flops) for b in p.blocks])
                 for p in counted)
    assert amp[0] > 0
    assert half == amp


# -- the benchmark script ----------------------------------------------------------------------------------


def test_benchmark_rejects_an_unknown_model_name() -> None:
    with pytest.raises(SystemExit) as exc:
        zoo.parse_args(["--only", "no-such-model"])
    assert exc.value.code == 2


def test_benchmark_records_a_failing_model_and_still_writes_its_report(tmp_path: Path) -> None:
    # A 10 ms limit: both of autoshard's commands time out, which the row records; the report is still written.
    assert zoo.main(["--size", "tiny", "--only", "bert-base", "--timeout-s", "0.01", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "zoo_tiny.json").read_text(encoding="utf-8"))
    (row,) = report["rows"]
    assert row["model"] == "bert-base" and row["status"] == "failed"
    assert "timed out after 0.01 s" in row["error"]
    assert row["meta_parameters"] == zoo.meta_parameter_count(zoo.get("bert-base").config("tiny"), "BertForMaskedLM")
    assert report["summary"]["failed"] == 1 and report["setup"]["size"] == "tiny"
    assert "| bert-base | encoder | BertForMaskedLM |" in (tmp_path / "zoo_tiny.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_benchmark_end_to_end_on_a_tiny_model_keeps_other_rows(tmp_path: Path) -> None:
    args = ["--size", "tiny", "--out", str(tmp_path)]
    assert zoo.main([*args, "--only", "bert-base"]) == 0
    assert zoo.main([*args, "--only", "vit-b-16"]) == 0
    report = json.loads((tmp_path / "zoo_tiny.json").read_text(encoding="utf-8"))
    assert [r["model"] for r in report["rows"]] == ["bert-base", "vit-b-16"]  # zoo order, both kept
    for row in report["rows"]:
        assert row["profile"]["status"] == "ok", row["error"]
        assert row["autoshard_parameters"] == row["meta_parameters"]
        assert row["recommend"]["status"] in ("ok", "refused"), row["error"]
    assert os.path.getsize(tmp_path / "zoo_tiny.md") > 0
