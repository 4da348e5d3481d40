"""Hugging Face Hub ids read from the local cache (``autoshard.models.hub``), never the network.

The cache is written under a temporary HF_HOME in the layout huggingface_hub documents
(``hub/models--org--name/refs/<revision>`` holding a commit, ``snapshots/<commit>/config.json``), and each
test checks that huggingface_hub itself resolves it the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from autoshard.errors import ModelSourceError
from autoshard.models import load_source
from autoshard.models.hub import HubId, hub_cache_dir, parse_hub_id
from tests.models.tiny_configs import TINY_LLAMA

huggingface_hub = pytest.importorskip("huggingface_hub")
pytest.importorskip("transformers")

LLAMA = {
    **TINY_LLAMA,
    "_name_or_path": "/home/someone/checkpoints/llama",  # what an uploader's save_pretrained leaves behind
}
MAIN = "a" * 40
V1 = "b" * 40


def cache_model(hub: Path, repo_id: str, commit: str, data: dict[str, Any], ref: str | None = "main") -> Path:
    """Write ``data`` as ``repo_id``'s config.json at ``commit`` in the cache ``hub``; point ``ref`` at it."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    config = repo / "snapshots" / commit / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(data), encoding="utf-8")
    if ref is not None:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit, encoding="utf-8")
    return config


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hub cache under a temporary HF_HOME (the other cache variables unset)."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.chdir(tmp_path)  # relative paths named like Hub ids do not exist unless a test makes them
    path = tmp_path / "hf-home" / "hub"
    path.mkdir(parents=True)
    return path


def test_hub_id_loads_the_cached_config_and_is_named_after_the_id(hub: Path) -> None:
    config = cache_model(hub, "org/tiny-llama", MAIN, LLAMA)
    found = huggingface_hub.try_to_load_from_cache("org/tiny-llama", "config.json", cache_dir=hub)
    assert Path(found) == config  # huggingface_hub reads this layout the same way
    scanned = huggingface_hub.scan_cache_dir(hub)
    assert [(r.repo_id, [rev.commit_hash for rev in r.revisions]) for r in scanned.repos] == [
        ("org/tiny-llama", [MAIN])
    ]
    source = load_source("org/tiny-llama")
    assert (source.name, source.kind, Path(source.origin)) == ("org/tiny-llama", "hf-config", config)
    with torch.device("meta"):
        module = source.build()
    assert len(module.model.layers) == 2
    assert source.with_num_layers is not None and source.with_num_layers(3).name == "org/tiny-llama"


@pytest.mark.parametrize(
    ("revision", "layers"), [("v1", 3), (V1, 3), ("main", 2)], ids=["tag", "commit", "main"]
)
def test_hub_id_with_a_revision_reads_that_snapshot(hub: Path, revision: str, layers: int) -> None:
    cache_model(hub, "org/tiny-llama", MAIN, LLAMA)
    cache_model(hub, "org/tiny-llama", V1, {**LLAMA, "num_hidden_layers": 3}, ref="v1")
    expected = huggingface_hub.try_to_load_from_cache(
        "org/tiny-llama", "config.json", cache_dir=hub, revision=revision
    )
    source = load_source(f"org/tiny-llama@{revision}")
    assert (source.origin, source.num_layers, source.name) == (expected, layers, f"org/tiny-llama@{revision}")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "org/absent",
            [
                "org/absent is not a file, and its config.json is not in the local Hugging Face cache",
                "hf download org/absent config.json`",
            ],
        ),
        ("org/tiny-llama@v9", ["config.json at revision v9 is not in the local", "--revision v9"]),
    ],
    ids=["not-cached", "revision-not-cached"],
)
def test_uncached_hub_id_says_how_to_fetch_only_the_config(hub: Path, spec: str, expected: list[str]) -> None:
    cache_model(hub, "org/tiny-llama", MAIN, LLAMA)
    with pytest.raises(ModelSourceError) as info:
        load_source(spec)
    message = str(info.value)
    assert all(part in message for part in expected), message
    assert str(hub) in message and "never downloads" in message and message.count("\n") == 1


def test_a_mistyped_path_under_a_local_folder_is_told_as_a_path_first(hub: Path) -> None:
    """``cfg/nonexistent`` beside a folder ``cfg/`` is far likelier a mistyped path than a Hub id (a probe got only
    the Hub's download command for it)."""
    Path("cfg").mkdir()
    with pytest.raises(ModelSourceError) as info:
        load_source("cfg/nonexistent")
    message = str(info.value)
    assert "cfg/nonexistent is neither a file nor a folder here (cfg/ is)" in message and message.count("\n") == 1
    assert "Check the path" in message and "hf download cfg/nonexistent config.json" in message


def test_a_path_that_looks_like_a_hub_id_wins(hub: Path) -> None:
    cache_model(hub, "org/tiny-llama", MAIN, LLAMA)
    local = Path("org/tiny-llama")
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 4}), encoding="utf-8")
    source = load_source("org/tiny-llama")
    assert (source.num_layers, Path(source.origin).resolve()) == (4, (local / "config.json").resolve())


def test_hf_hub_cache_takes_precedence_over_hf_home(
    hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "elsewhere"
    config = cache_model(other, "org/tiny-llama", MAIN, LLAMA)
    monkeypatch.setenv("HF_HUB_CACHE", str(other))
    assert Path(load_source("org/tiny-llama").origin) == config


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"HF_HUB_CACHE": "/c", "HUGGINGFACE_HUB_CACHE": "/l", "HF_HOME": "/h"}, "/c"),
        ({"HUGGINGFACE_HUB_CACHE": "/l", "HF_HOME": "/h"}, "/l"),
        ({"HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/h/hub"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"),
    ],
)
def test_cache_folder_follows_huggingface_hubs_variables(environ: dict[str, str], expected: str) -> None:
    assert hub_cache_dir(environ) == Path(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("meta-llama/Llama-3.1-8B", HubId(repo_id="meta-llama/Llama-3.1-8B")),
        ("org/name@refs/pr/1", HubId(repo_id="org/name", revision="refs/pr/1")),
        ("llama-2-7b", None),  # a catalog name
        ("./org/name", None),
        ("/abs/name", None),
        ("org/name.json", None),
        ("a/b/c", None),
        ("org/na--me", None),  # huggingface_hub refuses "--" in ids
    ],
)
def test_parse_hub_id(text: str, expected: HubId | None) -> None:
    assert parse_hub_id(text) == expected
    if expected is not None:
        huggingface_hub.utils.validate_repo_id(expected.repo_id)  # a valid id for huggingface_hub too
