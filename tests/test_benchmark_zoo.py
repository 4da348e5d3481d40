"""benchmarks/zoo.py times its commands cold: never through the user's workload cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmark_scripts import load

pytest.importorskip("transformers")


def test_recommend_is_timed_with_an_empty_cache_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zoo = load("zoo")
    user_cache = tmp_path / "user-cache"
    monkeypatch.setenv("AUTOSHARD_CACHE_DIR", str(user_cache))
    folder = tmp_path / "run" / "tiny-llama"
    zoo.get("llama-3.1-8b").config("tiny").save_pretrained(folder)
    result = zoo.run_recommend(folder, 32, "dgx-h100", 300)
    assert result["status"] == "ok", result
    assert not user_cache.exists()  # the user's cache is neither read nor written
    own = folder.parent / "cache-recommend"
    assert any(own.rglob("*.json"))  # the command's own, fresh one was
