"""Test doubles for code that uses stageline: an in-memory ledger, a recording sink, a runner."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from stageline.config import Settings, load_settings, with_overrides
from stageline.events import Sink
from stageline.ledger import Event, MemoryLedger
from stageline.llm import ChatModel, OfflineModel
from stageline.runner import Runner

__all__ = ["MemoryLedger", "RecordingSink", "memory_runner"]


class RecordingSink:
    """A sink that keeps every event it is given, in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event, **future_kwargs: Any) -> None:
        self.events.append(event)

    def kinds(self, run_id: str | None = None) -> list[str]:
        """The kinds of the kept events (of one run, if given)."""
        return [e.kind for e in self.events if run_id is None or e.run_id == run_id]

    def clear(self) -> None:
        self.events.clear()


@contextlib.asynccontextmanager
async def memory_runner(
    settings: Settings | None = None,
    *,
    home: Path | str | None = None,
    sinks: tuple[Sink, ...] = (),
    model: ChatModel | None = None,
    extra_types: tuple[type[Any], ...] = (),
    **overrides: Any,
) -> AsyncIterator[Runner]:
    """A ``Runner`` over ``memory://``, offline unless given a model; nothing outlives it.

    Without ``settings`` it ignores ``stageline.toml`` and ``STAGELINE_*`` and keeps run output
    under ``home`` (default: a temporary folder removed on exit). ``overrides`` change settings
    fields, e.g. ``lease_ttl=0.6``.
    """
    with contextlib.ExitStack() as stack:
        if settings is None:
            if home is None:
                home = stack.enter_context(tempfile.TemporaryDirectory(prefix="stageline-"))
            folder = Path(home)
            settings = load_settings(
                cwd=folder,
                env={"STAGELINE_HOME": str(folder), "STAGELINE_DATABASE_URL": "memory://"},
            )
        settings = with_overrides(settings, database_url="memory://", **overrides)
        async with Runner.open(
            settings, sinks=sinks, model=model or OfflineModel(), extra_types=extra_types
        ) as runner:
            yield runner
