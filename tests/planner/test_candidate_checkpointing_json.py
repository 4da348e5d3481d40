"""Each candidate in ``recommend --json`` says what its checkpointing recomputes: op-selective at one
micro-batch and full at the next both read ``"activation_checkpointing": true``, and the table looked as if memory
halved when the batch doubled (probe)."""

from __future__ import annotations

import autoshard


def test_each_candidate_names_its_checkpointing_mode() -> None:
    plan = autoshard.recommend("tiny-gpt2", hardware="dgx-h100", seq_len=32, activation_checkpointing="op")
    d = plan.to_dict()
    modes = {(c["activation_checkpointing"], c["checkpointing"]) for c in d["candidates"]}
    assert modes == {(False, "none"), (True, "op")}
    assert d["recommended"]["checkpointing"] == ("op" if d["recommended"]["activation_checkpointing"] else "none")
