"""An output directory belongs to one study from the moment the study is made: two tuners of different models
started at once into one directory read each other's measurements from the same trials/0000 (one study's pruning
decided on the other model's throughput) and the last summary replaced the first (a concurrency probe)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from autoshard.errors import UsageError
from autoshard.tuner.study import STUDY_FILE, _output_dir_claimed


def test_a_directory_claimed_by_one_study_refuses_another(tmp_path: Path) -> None:
    with _output_dir_claimed(tmp_path, "gpt2-2xcpu-aaaa"):
        pass
    assert (tmp_path / STUDY_FILE).read_text().strip() == "gpt2-2xcpu-aaaa"
    with pytest.raises(UsageError, match=r"holds the results of study 'gpt2-2xcpu-aaaa'; this is study 'llama"):
        with _output_dir_claimed(tmp_path, "llama-2xcpu-bbbb"):
            pytest.fail("entered")
    with _output_dir_claimed(tmp_path, "gpt2-2xcpu-aaaa"):  # the same study's tuners share it
        pass


def test_a_refused_study_claims_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), _output_dir_claimed(tmp_path, "a"):
        raise RuntimeError("the study was refused")  # e.g. made for another job
    assert not (tmp_path / STUDY_FILE).exists()
    with _output_dir_claimed(tmp_path, "b"):
        pass


def test_two_studies_started_at_once_cannot_both_claim_it(tmp_path: Path) -> None:
    inside, release = threading.Event(), threading.Event()
    outcome: dict[str, BaseException | None] = {}

    def first() -> None:
        with _output_dir_claimed(tmp_path, "a"):
            inside.set()
            release.wait(30)

    def second() -> None:
        try:
            with _output_dir_claimed(tmp_path, "b"):
                outcome["b"] = None
        except UsageError as e:
            outcome["b"] = e

    one = threading.Thread(target=first)
    one.start()
    assert inside.wait(30)
    two = threading.Thread(target=second)
    two.start()
    time.sleep(0.5)
    assert "b" not in outcome  # waiting on the first study's lock, not past it
    release.set()
    one.join(30)
    two.join(30)
    assert isinstance(outcome["b"], UsageError)

