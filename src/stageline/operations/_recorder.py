"""Where an operation's events go: the run ledger (through the journal) and a transcript file."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from stageline.harnesses import HarnessEvent, HarnessResult
from stageline.ledger import EventCategory
from stageline.names import path_under
from stageline.operations._classify import ledger_fields
from stageline.stages import StageContext

__all__ = ["LedgerEventSink", "Transcript", "transcript_path"]


class LedgerEventSink:
    """Stages harness events into the run ledger, classified, on the operation's node."""

    def __init__(self, ctx: StageContext) -> None:
        self._ctx = ctx

    def record(
        self, event: HarnessEvent, *, category: EventCategory, node: str, **future_kwargs: Any
    ) -> None:
        self._ctx.run.journal.node_event(node=node, category=str(category), **ledger_fields(event))

    def note(
        self,
        kind: str,
        *,
        category: EventCategory,
        message: str = "",
        level: str = "info",
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """An operation's own event (started, transcript, failed, finished)."""
        self._ctx.run.journal.node_event(
            node=self._ctx.node,
            kind=kind,
            level=level,
            message=message,
            data=dict(data or {}),
            category=str(category),
        )


def transcript_path(run_dir: Path, node: str) -> Path:
    """The node's transcript file, which must stay in the run's folder (a node name is no path)."""
    return path_under(run_dir / "transcripts", f"{node}.jsonl")


class Transcript:
    """The harness transcript, one JSON object a line, appended to as events arrive.

    Each operation attempt appends a ``operation.begin`` line, its durable events (text deltas
    are left out: the whole message follows them) and a closing ``harness.result`` line, so a
    retried node keeps the transcripts of its earlier attempts.
    """

    def __init__(self, path: Path, header: Mapping[str, Any]) -> None:
        self.path = path
        self.events = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._out: IO[str] | None = path.open("a", encoding="utf-8")
        self._write({"type": "operation.begin", "ts": time.time(), **header})

    def _write(self, row: Mapping[str, Any]) -> None:
        if self._out is None:
            raise RuntimeError(f"transcript {self.path} is closed")
        self._out.write(json.dumps(row, default=str, ensure_ascii=False) + "\n")
        self._out.flush()

    def event(self, event: HarnessEvent) -> None:
        self.events += 1
        self._write(event.to_dict())

    def result(self, result: HarnessResult) -> None:
        self._write({**result.to_dict(), "ts": time.time()})

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
