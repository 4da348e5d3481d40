"""Every test plans with an empty workload cache of its own, never the user's (``AUTOSHARD_CACHE_DIR``, which
subprocesses inherit): a test sees what it traced itself, and a test about the cache says what it shares."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_autoshard_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSHARD_CACHE_DIR", str(tmp_path_factory.mktemp("autoshard-cache")))


@pytest.fixture
def no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a test that traces the model: bad input must be refused before any tracing."""
    def traced(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was traced before the input was checked")

    monkeypatch.setattr("autoshard.strategies.build_workload", traced)
    monkeypatch.setattr("autoshard.planner.workload_cache.build_workload", traced)
