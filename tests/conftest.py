"""Tests plan with a workload cache of the test file's own, never the user's (``AUTOSHARD_CACHE_DIR``, which
subprocesses inherit). A file's tests run one after another in one process (``--dist loadfile``), so what a test
finds in the cache is what the file's earlier tests traced, whatever else runs beside it; tracing the same model
again in each test of a file was about a quarter of the planning tests' time (2026-12-01: the four files
test_selective_search, test_cli_recommend, test_compare and test_zoo, 232 s with a cache per test, 171 s per file).
A test that counts what it traces, or must see an empty cache, takes one of its own: mark it ``own_cache`` (the
``no_tracing`` fixture does: a model found in the cache would not reach the tracer the fixture guards)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def _file_autoshard_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("autoshard-cache"))


@pytest.fixture(autouse=True)
def _autoshard_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                     monkeypatch: pytest.MonkeyPatch, _file_autoshard_cache: str) -> None:
    own = request.node.get_closest_marker("own_cache") is not None or "no_tracing" in request.fixturenames
    cache = str(tmp_path_factory.mktemp("autoshard-cache")) if own else _file_autoshard_cache
    monkeypatch.setenv("AUTOSHARD_CACHE_DIR", cache)


@pytest.fixture
def no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a test that traces the model: bad input must be refused before any tracing (with an empty cache of
    the test's own, so that nothing found there stands in for the tracer)."""
    def traced(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was traced before the input was checked")

    monkeypatch.setattr("autoshard.strategies.build_workload", traced)
    monkeypatch.setattr("autoshard.planner.workload_cache.build_workload", traced)


# -- slow in CI --------------------------------------------------------------------------------------------------
# CI runs `-m 'not slow'` on 2 cores and should take about 20 minutes; it took 44 (2026-11-30). These tests are the
# longest ones whose behaviour a shorter test in CI also covers (another parametrization, another strategy of the
# same family, the same resume by another signal); they run with `-m slow`. Seconds: `pytest -n 2 --dist loadfile
# --durations=0` at fa7e2b5 on a loaded 2-core VM (2026-12-01), each test's setup + call + teardown.
SLOW_IN_CI: dict[str, str] = {
    "tests/runtime/test_fit_backends.py::test_every_backend_trains_and_agrees_with_ddp[deepspeed_stage_2_offload]":
        "295 s; DeepSpeed's CPU-Adam offload trains in CI as deepspeed_stage_3_offload",
    "tests/tuner/test_tune_resume.py::test_sigkilled_tuner_resumes_with_its_finished_trials":
        "171 s; resuming after Ctrl-C and SIGTERM stays in CI",
    "tests/strategies/test_trace_sessions.py::test_the_forking_cases_pass_in_a_fresh_interpreter":
        "149 s; the forked sessions' equality with sequential ones stays in CI",
    "tests/strategies/test_zero12_backward_start.py::"
    "test_zero2_without_buckets_at_the_start_of_backward_matches_two_gloo_processes":
        "138 s; ZeRO-3's comparison with two gloo processes stays in CI",
    "tests/test_benchmark_memory_accuracy.py::test_accumulated_gradients_are_counted_against_real_runs":
        "119 s; the distributed cases stay in CI",
    "tests/profiler/test_experts.py::test_the_cli_says_the_active_parameters[recommend]":
        "102 s; the profile command's line stays in CI",
    "tests/runtime/test_fit_backends_resume.py::test_resume_gives_the_same_next_losses[deepspeed_stage_3]":
        "87 s; ddp and the other resumes stay in CI",
    "tests/runtime/test_fit_backends.py::test_activation_checkpointing_changes_no_loss[deepspeed_stage_3]":
        "75 s; fsdp's stays in CI",
    "tests/runtime/test_zoo_fit.py::test_fit_trains_a_tiny_zoo_model_in_two_processes[t5-large]":
        "52 s; llama, mixtral and vit stay in CI",
    "tests/runtime/test_zoo_fit.py::test_fit_trains_a_tiny_zoo_model_in_two_processes[llava-1.5-7b]":
        "52 s; llama, mixtral and vit stay in CI",
    "tests/test_benchmark_arch_sweep.py::test_one_architecture_is_profiled_recommended_and_checked_against_transformers":
        "72 s; the benchmark's own run",
    "tests/test_benchmark_recommend_speed.py::test_gpt2_row_has_positive_profile_and_recommend_times":
        "64 s; the benchmark's own run",
    "tests/test_benchmark_fit_overhead.py::test_ddp_run_measures_both_sides_on_identical_training":
        "44 s; the benchmark's own run",
    "tests/runtime/test_fit_fsdp_variants.py::test_fsdp_16_mixed_trains_and_agrees_with_ddp_16_mixed":
        "45 s; fit() planning and training FSDP2 at 16-mixed, and its overflow skip, stay in CI",
    "tests/profiler/test_heterogeneous.py::test_composite_configs_extrapolate_tower_by_tower_exactly"
    "[bf16-mixed-cuda-checkpointing-llava-1.5-7b-5-5-3]": "48 s; siglip-base and llava 4-5-2 stay in CI",
    "tests/profiler/test_heterogeneous.py::test_composite_configs_extrapolate_tower_by_tower_exactly"
    "[bf16-mixed-cuda-checkpointing-clip-vit-l-14-4-5-3]": "37 s; siglip-base and llava 4-5-2 stay in CI",
    "tests/profiler/test_heterogeneous.py::test_workload_phase_peaks_at_other_micro_batches_match_the_full_trace"
    "[bf16-mixed-cuda-checkpointing-siglip-towers-5-5]": "42 s; clip-towers and deepseek-v3 stay in CI",
    "tests/planner/test_workload_cache.py::test_another_sequence_precision_or_optimizer_traces_again[changed1]":
        "37 s; changed0 stays in CI",
    "tests/planner/test_workload_cache.py::test_another_sequence_precision_or_optimizer_traces_again[changed2]":
        "39 s; changed0 stays in CI",
    "tests/planner/test_workload_cache.py::test_an_unusable_entry_is_noted_ignored_and_rewritten[field-missing]":
        "36 s; the corrupt entry stays in CI",
    "tests/planner/test_workload_cache.py::test_an_unusable_entry_is_noted_ignored_and_rewritten[other-torch]":
        "35 s; the corrupt entry stays in CI",
    # Seconds from `pytest -n 2 --dist loadfile --junitxml` at 23be7b5 on the 2-core VM (2026-12-01, tests 34 min).
    "tests/profiler/test_heterogeneous.py::test_workload_phase_peaks_at_other_micro_batches_match_the_full_trace"
    "[bf16-mixed-cuda-checkpointing-deepseek-v3]": "30 s; clip-towers stays in CI, and deepseek-v3's mixed blocks at "
    "the traced micro-batch (test_extrapolated_profile_of_mixed_blocks_equals_full_trace)",
    "tests/profiler/test_depth_checkpointing.py::test_blocks_of_several_kinds_extrapolate_by_their_repeating_unit"
    "[gemma2-every-3]": "21 s; deepseek-v3-every-2 stays in CI, and gemma2's sliding and global blocks in "
    "test_heterogeneous",
    "tests/test_typing.py::test_user_script_calling_lazy_api_type_checks":
        "68 s (mypy parsing torch's stubs cold); CI's own mypy run checks autoshard/__init__.py's TYPE_CHECKING "
        "imports, and test_every_lazy_name_is_typed_from_the_module_it_loads_from keeps them in step with _LAZY",
}
"""Tests marked ``slow`` here rather than at the test: node id -> measured seconds and what covers it in CI."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in SLOW_IN_CI:
            item.add_marker(pytest.mark.slow)
