"""JSON-lines parsers: Claude Code ``stream-json``, Codex ``exec --json`` and the generic format.

The generic format, which the scripted agent speaks and any agent can adopt, is one JSON
object per line::

    {"type": "<kind>", "text": "<optional text>", ...any other fields...}

``type`` is a ``HarnessEventKind`` value (``message``, ``tool_use``, ``usage``, ...) or any
other word (kept, stored as output); ``text`` is the human-readable part; every other field
lands in the event's ``data``. Two kinds carry fields the harness reads: ``usage``
(``input_tokens`` including cached ones, ``cached_input_tokens``, ``output_tokens``, ``cost``
in US dollars, and any other numbers, summed; with ``"total": true`` they replace the sum) and
``result`` (``status``: ``succeeded`` or ``failed``, ``summary``, ``output``).

A line that is not a JSON object becomes a ``warning`` event, and so does a last line cut
short; a parser never raises on its input.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from stageline.harnesses._claude_stream import claude_events
from stageline.harnesses._codex_stream import codex_events
from stageline.harnesses._stream import (
    estimate_cost,
    event,
    first_line,
    numbers,
    text_of,
    usage_line,
)
from stageline.harnesses._types import HarnessEvent
from stageline.harnesses._types import HarnessEventKind as K

__all__ = ["PARSERS", "StreamParser", "first_line", "parse_lines"]

PREVIEW = 200
"""Characters of a bad line kept in its warning."""

_text = text_of
_event = event


class StreamParser:
    """Reads one agent's stream line by line and keeps what the harness result needs.

    Usage follows ``USAGE_KEYS``: live usage lines add up (a message repeated over several
    lines counts once), a ``total`` usage line (Claude's result) replaces the sum, and cost is
    estimated from the model's list price until the agent reports its own. Success follows the
    stream's terminal events (a completed turn, a result): an error the agent reported before
    a turn that then completed (a reconnect) does not fail the run.
    """

    def __init__(
        self,
        fmt: str,
        events: Callable[[dict[str, Any]], list[HarnessEvent]],
        *,
        model: str | None = None,
    ) -> None:
        self.format = fmt
        self._events = events
        self.messages: list[str] = []
        self.final_output: str | None = None
        self.summary = ""
        self.usage: dict[str, float] = {}
        self.model = model
        self.session_id: str | None = None
        """The provider's session (Claude ``session_id``, Codex ``thread_id``), once seen."""
        self.turns = 0
        self._seen_messages: set[str] = set()
        self._error: str | None = None
        """The last error the stream reported, until a terminal event settles it."""
        self._terminal: str | None = None
        """What the last terminal event said: None (none yet), ``succeeded`` or a failure."""

    @property
    def failure(self) -> str | None:
        """What the stream itself reported as a failure (a failed result or turn, an error)."""
        if self._terminal is not None and self._terminal != "succeeded":
            return self._terminal
        return self._error

    def feed(self, line: str, *, complete: bool = True) -> list[HarnessEvent]:
        """Events for one line; ``complete`` is False for a last line without its newline."""
        stripped = line.strip()
        if not stripped:
            return []
        try:
            obj = json.loads(stripped)
        except ValueError as exc:
            why = (
                "truncated line at the end of the stream"
                if not complete
                else f"malformed line, not JSON ({getattr(exc, 'msg', exc)})"
            )
            return [self._warn(why, stripped)]
        if not isinstance(obj, dict):
            return [
                self._warn(
                    f"malformed line, a JSON {type(obj).__name__} and not an object", stripped
                )
            ]
        try:
            events = self._events(obj)
        except Exception as exc:  # an unexpected shape must not stop the run
            return [
                self._warn(f"unreadable {self.format} line ({type(exc).__name__}: {exc})", stripped)
            ]
        kept = []
        for found in events:
            noted = self._note(found)
            if noted is not None:
                kept.append(noted)
        return kept

    def oversized(self, preview: str, size: int) -> HarnessEvent:
        return self._warn(f"line of {size} bytes exceeds the limit; skipped", preview)

    def _warn(self, why: str, line: str) -> HarnessEvent:
        return _event(K.WARNING, why, line=line[:PREVIEW], format=self.format)

    def _note(self, found: HarnessEvent) -> HarnessEvent | None:
        """Keep what ``found`` tells; the event to pass on (None: a duplicate left out)."""
        kind, data = found.kind, found.data
        if kind == K.MESSAGE and found.text:
            self.messages.append(found.text)
        elif kind == K.USAGE:
            return self._add_usage(found)
        elif kind == K.PROVIDER_SESSION:
            self.session_id = str(data.get("session_id") or found.text or "") or self.session_id
            self.model = str(data.get("model") or "") or self.model
        elif kind == K.STATUS and found.text == "turn started":
            self.turns += 1
        elif kind == K.STATUS and data.get("terminal") == "completed":
            self._terminal, self._error = "succeeded", None
        elif kind == K.ERROR:
            self._error = first_line(found.text) or "the agent reported an error"
            if data.get("terminal") == "failed":
                self._terminal = self._error
        elif kind == K.RESULT:
            self._result(found)
        return found

    def _add_usage(self, found: HarnessEvent) -> HarnessEvent | None:
        """Count a usage event; passed on with its cost (estimated when the agent gave none)."""
        data = found.data
        ident = data.get("message_id")
        if ident:
            if ident in self._seen_messages:
                return None
            self._seen_messages.add(str(ident))
        got = numbers({k: v for k, v in data.items() if k not in ("message_id", "total")})
        reported = "cost" in got
        if not reported:
            cost = estimate_cost(self.model, got)
            if cost is not None:
                got["cost"] = cost
        if data.get("total"):
            self.usage = {**self.usage, **got}
        else:
            for key, value in got.items():
                self.usage[key] = self.usage.get(key, 0) + value
        return HarnessEvent(
            kind=found.kind,
            text=found.text or usage_line(got),
            ts=found.ts,
            data={**data, **got, "cost_estimated": not reported and "cost" in got},
        )

    def _result(self, found: HarnessEvent) -> None:
        data = found.data
        output = data.get("output", found.text)
        self.final_output = _text(output) if output else self.final_output
        self.summary = str(data.get("summary") or "") or self.summary
        if str(data.get("status", "succeeded")) in ("succeeded", "success", "ok"):
            self._terminal, self._error = "succeeded", None
        else:
            self._terminal = self.summary or first_line(found.text) or "the agent reported failure"
        if data.get("session_id"):
            self.session_id = str(data["session_id"])
        if isinstance(data.get("num_turns"), int):
            self.turns = max(self.turns, data["num_turns"])

    @property
    def output_text(self) -> str:
        return self.final_output if self.final_output is not None else "\n\n".join(self.messages)

    @property
    def final_summary(self) -> str:
        return self.summary or first_line(self.messages[-1] if self.messages else self.output_text)


# -- generic ------------------------------------------------------------------------------------


def generic_events(obj: dict[str, Any]) -> list[HarnessEvent]:
    kind = obj.get("type")
    if not isinstance(kind, str) or not kind:
        raise ValueError("a line needs a string `type`")
    data = {k: v for k, v in obj.items() if k not in ("type", "text", "ts")}
    return [HarnessEvent(kind=kind, text=_text(obj.get("text", "")), data=data)]


PARSERS: dict[str, Callable[[dict[str, Any]], list[HarnessEvent]]] = {
    "claude": claude_events,
    "codex": codex_events,
    "generic": generic_events,
}
"""Stream format name -> line reader; ``StreamParser(fmt, PARSERS[fmt])`` reads a stream."""


def parse_lines(
    fmt: str, lines: Iterable[str], *, model: str | None = None
) -> tuple[list[HarnessEvent], StreamParser]:
    """Parse a whole transcript; the last line counts as cut short if it lacks its newline."""
    parser = StreamParser(fmt, PARSERS[fmt], model=model)
    events: list[HarnessEvent] = []
    for line in lines:
        events += parser.feed(line, complete=line.endswith("\n"))
    return events, parser
