"""The result cache and the study know the model file's code: after the forward was edited to do 6x the work
(same file name, same parameters), the old model's figures came back from the cache (real trials on CPU)."""

from __future__ import annotations

from pathlib import Path

import autoshard

from .test_tune_user_code import MODEL, ONE_TRIAL


def test_an_edited_model_file_is_measured_again_not_taken_from_the_cache(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text(MODEL.read_text(encoding="utf-8"), encoding="utf-8")
    args = {**ONE_TRIAL, "use_cache": True, "cache_dir": tmp_path / "cache"}
    first = autoshard.tune(model, output_dir=tmp_path / "a", **args)
    assert first.best is not None and not first.best.cached
    same = autoshard.tune(model, output_dir=tmp_path / "b", **args)
    assert same.best is not None and same.best.cached  # the cache works for the same code
    model.write_text(model.read_text(encoding="utf-8").replace(
        "        for block in self.blocks:", "        for block in [*self.blocks] * 6:"), encoding="utf-8")
    edited = autoshard.tune(model, output_dir=tmp_path / "c", **args)
    assert edited.best is not None and not edited.best.cached, edited.best.to_dict()
