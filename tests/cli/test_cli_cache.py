"""``recommend --json`` is the same answer whether the traced step came from the workload cache or not (only
``cached_workload`` says which), ``--no-cache`` writes nothing, and ``autoshard cache`` shows and clears it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoshard.cli import main

pytestmark = pytest.mark.own_cache  # about the cache itself: each test starts from an empty one

RECOMMEND = ["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--seq-len", "32", "--precision", "32-true", "--json"]


def _cli(*argv: str) -> str:
    return subprocess.run([sys.executable, "-m", "autoshard", *argv], capture_output=True, text=True,
                          check=True).stdout


def _workloads() -> Path:
    return Path(os.environ["AUTOSHARD_CACHE_DIR"]) / "workloads"


def test_recommend_json_is_byte_identical_with_and_without_the_cache_but_for_cached_workload():
    uncached = _cli(*RECOMMEND, "--no-cache")
    assert not _workloads().exists()
    cold = _cli(*RECOMMEND)
    [entry] = _workloads().glob("*.json")
    warm = _cli(*RECOMMEND)
    assert cold == uncached and json.loads(cold)["cached_workload"] is None
    assert json.loads(warm)["cached_workload"] == str(entry)
    assert warm == cold.replace('"cached_workload": null', f'"cached_workload": {json.dumps(str(entry))}')


def test_text_output_notes_the_cache_on_stderr_only(capsys):
    argv = [a for a in RECOMMEND if a != "--json"]
    assert main(argv) == 0
    first = capsys.readouterr()
    assert main(argv) == 0
    second = capsys.readouterr()
    assert "workload cache" not in first.err and "workload cache" not in second.out
    assert "the traced step came from the workload cache" in second.err and "--no-cache" in second.err
    assert second.out == first.out


def test_cache_dir_info_and_clear(capsys):
    workloads = _workloads()
    assert main(["cache", "dir"]) == 0
    assert capsys.readouterr().out.strip() == str(workloads)
    workloads.mkdir(parents=True)
    (workloads / "a-1.json").write_text("{}", encoding="utf-8")
    (workloads / "b-2.json").write_text("{}" * 10, encoding="utf-8")
    assert main(["cache", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"directory": str(workloads), "entries": 2, "size_bytes": 22}
    assert main(["cache", "clear"]) == 0
    assert "Removed 2 workload(s)" in capsys.readouterr().out
    assert list(workloads.iterdir()) == []
    assert main(["cache"]) == 0
    assert "0 workload(s)" in capsys.readouterr().out


def test_cache_list_names_each_entry_and_clear_stale_keeps_what_this_install_reads(capsys):
    _cli(*RECOMMEND)
    [fresh] = _workloads().glob("*.json")
    entry = json.loads(fresh.read_text(encoding="utf-8"))
    entry["key"]["torch"] = "2.0.0"  # as an older torch left it: this install keys its traces apart
    old = fresh.with_name("tiny-gpt2-old.json")
    old.write_text(json.dumps(entry), encoding="utf-8")
    (_workloads() / "junk.json").write_text("[1, 2", encoding="utf-8")
    fused = json.loads(fresh.read_text(encoding="utf-8"))
    fused["key"]["optimizer_impl"] = "fused"  # two lines differed only in size, one of them traced fused
    fresh.with_name("tiny-gpt2-fused.json").write_text(json.dumps(fused), encoding="utf-8")

    assert main(["cache", "list", "--json"]) == 0
    listed = {Path(e["path"]).name: e for e in json.loads(capsys.readouterr().out)["entries"]}
    assert listed[fresh.name]["stale"] is None and listed[fresh.name]["key"]["model"] == "tiny-gpt2"
    assert listed[old.name]["stale"].startswith("traced by torch 2.0.0 (here ")
    assert listed["junk.json"] == {"path": str(_workloads() / "junk.json"), "size_bytes": 5, "key": None,
                                   "stale": "not a workload entry"}
    assert main(["cache", "list"]) == 0
    text = capsys.readouterr().out
    assert "tiny-gpt2  32-true, adamw, seq 32" in text and "stale: traced by torch 2.0.0" in text
    assert "tiny-gpt2  32-true, adamw (fused), seq 32" in text
    assert "`autoshard cache clear --stale`" in text

    assert main(["cache", "clear", "--stale"]) == 0
    assert "Removed 2 stale workload(s)" in capsys.readouterr().out
    assert sorted(p.name for p in _workloads().glob("*.json")) == sorted([fresh.name, "tiny-gpt2-fused.json"])
    assert json.loads(_cli(*RECOMMEND))["cached_workload"] == str(fresh)  # still read


def test_cache_stale_goes_with_clear_only(capsys):
    assert main(["cache", "list", "--stale"]) == 2
    assert "--stale goes with `autoshard cache clear`" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["info", "list", "clear"])
def test_a_cache_dir_that_is_a_file_is_refused_not_counted_as_empty(tmp_path, monkeypatch, capsys, action):
    """``AUTOSHARD_CACHE_DIR`` naming a file answered "0 workload(s)" (and "Removed 0") for a cache that can never
    hold an entry; recommend's note said the write failed."""
    blocker = tmp_path / "a-file"
    blocker.write_text("kept", encoding="utf-8")
    monkeypatch.setenv("AUTOSHARD_CACHE_DIR", str(blocker))
    assert main(["cache", action]) == 2
    err = capsys.readouterr().err
    assert f"{blocker} is a file, not a directory (AUTOSHARD_CACHE_DIR names a file)" in err
    assert "Set AUTOSHARD_CACHE_DIR to a directory." in err
    assert blocker.read_text(encoding="utf-8") == "kept"
