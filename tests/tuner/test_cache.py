"""The result cache: measurements kept on disk by model, hardware, batch settings, trial length and config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoshard.tuner.cache import ResultCache, default_dir
from autoshard.tuner.result import TrialConfig

CONTEXT = {"model": "sha256:model", "hardware": "sha256:hw", "batch": "sha256:batch", "steps": 6, "warmup_steps": 2}
OUTCOME = {"samples_per_s": 123.5, "tokens_per_s": 3952.0, "step_time_s": 0.26, "peak_memory_bytes": 1 << 30,
           "peak_memory_kind": "host_rss", "step_times_s": [0.9, 0.3, 0.26, 0.25, 0.27, 0.26]}


def config(**overrides: object) -> TrialConfig:
    fields: dict[str, object] = {"strategy": "ddp", "micro_batch_size": 4, "activation_checkpointing": False,
                                 "settings": {"bucket_cap_mb": 25.0, "comm_hook": "none"}}
    return TrialConfig(**{**fields, **overrides})


def test_a_stored_outcome_comes_back_from_a_new_instance(tmp_path: Path) -> None:
    ResultCache(tmp_path / "cache", CONTEXT).put(config(), OUTCOME)
    assert ResultCache(tmp_path / "cache", dict(reversed(CONTEXT.items()))).get(config()) == OUTCOME
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".json"]  # no partial file left behind


def test_an_out_of_memory_outcome_round_trips(tmp_path: Path) -> None:
    outcome = {"failure": "oom", "message": "rank 0: OutOfMemoryError: CUDA out of memory."}
    cache = ResultCache(tmp_path, CONTEXT)
    cache.put(config(micro_batch_size=64), outcome)
    assert cache.get(config(micro_batch_size=64)) == outcome


@pytest.mark.parametrize("key", sorted(CONTEXT))
def test_another_context_misses(tmp_path: Path, key: str) -> None:
    ResultCache(tmp_path, CONTEXT).put(config(), OUTCOME)
    assert ResultCache(tmp_path, {**CONTEXT, key: "something else"}).get(config()) is None


@pytest.mark.parametrize(
    "other",
    [
        config(strategy="fsdp"),
        config(micro_batch_size=8),
        config(activation_checkpointing=True),
        config(settings={"bucket_cap_mb": 50.0, "comm_hook": "none"}),
        config(settings={"bucket_cap_mb": 25.0}),
    ],
    ids=["strategy", "micro_batch", "checkpointing", "knob_value", "knob_missing"],
)
def test_another_config_misses_and_has_another_key(tmp_path: Path, other: TrialConfig) -> None:
    cache = ResultCache(tmp_path, CONTEXT)
    cache.put(config(), OUTCOME)
    assert cache.get(other) is None
    assert cache.key(other) != cache.key(config())


def test_the_key_is_stable_across_instances_and_settings_order() -> None:
    reordered = config(settings={"comm_hook": "none", "bucket_cap_mb": 25.0})
    assert ResultCache(None, CONTEXT).key(config()) == ResultCache(None, CONTEXT).key(reordered)
    assert ResultCache(None, CONTEXT).key(config()) != ResultCache(None, {**CONTEXT, "steps": 7}).key(config())


def test_an_entry_of_another_context_under_the_same_name_is_not_used(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, CONTEXT)
    cache.put(config(), OUTCOME)
    path = tmp_path / f"{cache.key(config())}.json"
    entry = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**entry, "context": "another"}), encoding="utf-8")
    assert cache.get(config()) is None


def test_a_corrupt_entry_is_a_miss(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, CONTEXT)
    (tmp_path / f"{cache.key(config())}.json").write_text('{"context": ', encoding="utf-8")
    assert cache.get(config()) is None


def test_no_directory_disables_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cache = ResultCache(None, CONTEXT)
    cache.put(config(), OUTCOME)
    assert cache.get(config()) is None
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_directory_is_skipped_without_raising(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    cache = ResultCache(blocker / "cache", CONTEXT)
    cache.put(config(), OUTCOME)
    assert cache.get(config()) is None


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"XDG_CACHE_HOME": "/x/cache"}, Path("/x/cache/autoshard/tune")),
        ({}, Path.home() / ".cache" / "autoshard" / "tune"),
        ({"XDG_CACHE_HOME": ""}, Path.home() / ".cache" / "autoshard" / "tune"),
    ],
)
def test_default_dir_follows_xdg_cache_home(environ: dict[str, str], expected: Path) -> None:
    assert default_dir(environ) == expected


def test_a_cache_dir_that_cannot_be_written_is_said_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--cache-dir`` naming a file ran every trial uncached without a word (the bad-input probe)."""
    afile = tmp_path / "afile"
    afile.write_text("mine", encoding="utf-8")
    cache = ResultCache(afile, CONTEXT)
    cache.put(config(), OUTCOME)
    cache.put(config(micro_batch_size=8), OUTCOME)
    err = capsys.readouterr().err
    assert err.count("the tune result cache cannot be written") == 1 and str(afile) in err
    assert cache.get(config()) is None and afile.read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("package", ["torch", "deepspeed", "transformers", "python"])
def test_a_measurement_of_other_software_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 package: str) -> None:
    """A throughput measured under torch 2.9.1 was reused, as current, by torch 2.13 (a versions probe)."""
    from autoshard.tuner import cache as cache_mod

    here = cache_mod.software()
    ResultCache(tmp_path, CONTEXT).put(config(), OUTCOME)
    assert ResultCache(tmp_path, CONTEXT).get(config()) == OUTCOME
    monkeypatch.setattr(cache_mod, "software", lambda: {**here, package: "0.0-other"})
    assert ResultCache(tmp_path, CONTEXT).get(config()) is None
