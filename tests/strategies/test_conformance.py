"""Every registered strategy passes the conformance suite (``tests/strategies/conformance.py``)."""

from __future__ import annotations

import pytest

from autoshard import strategies
from tests.strategies import conformance

if conformance.registry_unavailable():
    pytest.skip(
        f"{conformance.registry_unavailable()}; tests/strategies/test_ddp.py runs this suite on ddp directly "
        "meanwhile",
        allow_module_level=True,
    )


@pytest.mark.parametrize("check", conformance.parametrized())
@pytest.mark.parametrize("name", strategies.names())
def test_strategy_conforms(name: str, check) -> None:  # type: ignore[no-untyped-def]
    check(strategies.get(name))
