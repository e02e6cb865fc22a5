"""Console sink: one rich line per event on stderr (stdout stays free for a command's output)."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.text import Text

from stageline.ledger.records import Event

__all__ = ["ConsoleSink"]

_STYLES = {"debug": "dim", "warning": "yellow", "error": "red", "critical": "bold red"}


class ConsoleSink:
    """Prints each event it is given; called inline, so it is cheap and in ``seq`` order."""

    def __init__(
        self, *, stream: str = "stderr", console: Console | None = None, **future_kwargs: Any
    ) -> None:
        if stream not in ("stderr", "stdout"):
            raise ValueError("a console sink's stream is stderr or stdout")
        self._console = console or Console(
            file=sys.stderr if stream == "stderr" else sys.stdout,
            highlight=False,
            markup=False,
            soft_wrap=True,
        )

    def emit(self, event: Event, **future_kwargs: Any) -> None:
        self._console.print(event_text(event))


def event_text(event: Event) -> Text:
    """``HH:MM:SS run_id #seq kind node  message  key=value...``, coloured by level."""
    stamp = datetime.fromtimestamp(event.ts).strftime("%H:%M:%S")
    style = _STYLES.get(event.level, "")
    line = Text.assemble((f"{stamp} {event.run_id} #{event.seq:<3} ", "dim"), (event.kind, style))
    if event.node:
        line.append(f" {event.node}")
    took = event.data.get("duration")
    if isinstance(took, int | float) and not isinstance(took, bool):
        line.append(f" {took:.2f}s", style="dim")
    if event.message:
        line.append(f"  {event.message}", style=style)
    fields = event.fields()
    if fields:
        line.append("  " + " ".join(f"{k}={_value(v)}" for k, v in fields.items()), style="dim")
    return line


def _value(value: Any) -> str:
    """A field's value as a reader copies it: text bare unless it holds spaces, else JSON."""
    if isinstance(value, str) and value and not any(c.isspace() for c in value):
        return value
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return json.dumps(value, default=str, ensure_ascii=False)
