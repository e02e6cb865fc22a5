"""Fixtures the unit tests share: a runner over a real SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from stageline.config import Settings
from stageline.runner import Runner


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    """A runner on the test's SQLite ledger that delivers nothing (no outbox worker)."""
    async with Runner.open(sqlite_settings, deliver=False) as opened:
        yield opened
