"""fit() on a model file whose batch is ``(inputs, targets)`` and whose forward takes the inputs only, the shape of
a plain PyTorch loop: each backend's wrapper (DDP's and DeepSpeed's ``forward(*inputs, **kwargs)``) gets the inputs,
the file's ``loss(output, batch)`` the whole batch. 2 gloo processes, the real engines."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.models.test_pyfile import INPUTS_AND_TARGETS
from tests.runtime.test_unused_parameters import _fit


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("targets") / "model.py"
    path.write_text(textwrap.dedent(INPUTS_AND_TARGETS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def ddp(model_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _fit(model_file, {"strategy": "ddp"}, tmp_path_factory.mktemp("ddp"))


def test_ddp_trains_it(ddp: dict) -> None:
    assert ddp["strategy"] == "ddp"


def test_deepspeed_trains_it_and_agrees_with_ddp(model_file: Path, ddp: dict, tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    out = _fit(model_file, {"strategy": "deepspeed_stage_2"}, tmp_path)
    assert out["losses"] == pytest.approx(ddp["losses"], rel=1e-5)
