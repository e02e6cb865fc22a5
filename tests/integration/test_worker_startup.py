"""A worker told to stop while it starts (SIGTERM during its imports) returns before it touches
the database or takes a job: as clean an exit as a drain."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stageline.config import Settings
from stageline.errors import StagelineError
from stageline.worker import run_worker

pytestmark = pytest.mark.timeout(60)

NOWHERE = "postgresql://nobody@127.0.0.1:1/none"
"""Nothing listens on port 1: a worker that went on would fail to connect."""


async def test_a_worker_stopped_while_starting_returns_before_it_connects(
    settings_for: Callable[[str], Settings],
) -> None:
    await run_worker(settings=settings_for(NOWHERE), stopped_early=lambda: True)


async def test_a_worker_not_stopped_goes_on_to_connect(
    settings_for: Callable[[str], Settings],
) -> None:
    with pytest.raises(StagelineError, match="cannot connect"):
        await run_worker(settings=settings_for(NOWHERE), stopped_early=lambda: False)
