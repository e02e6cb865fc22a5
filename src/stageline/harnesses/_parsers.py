"""JSON-lines parsers: Claude Code ``stream-json``, Codex ``exec --json`` and the generic format.

The generic format, which the scripted agent speaks and any agent can adopt, is one JSON
object per line::

    {"type": "<kind>", "text": "<optional text>", ...any other fields...}

``type`` is a ``HarnessEventKind`` value (``message``, ``tool_use``, ``usage``, ...) or any
other word (kept, stored as output); ``text`` is the human-readable part; every other field
lands in the event's ``data``. Two kinds carry fields the harness reads: ``usage``
(``input_tokens``, ``output_tokens`` and any other numbers, summed) and ``result``
(``status``: ``succeeded`` or ``failed``, ``summary``, ``output``).

A line that is not a JSON object becomes a ``warning`` event, and so does a last line cut
short; a parser never raises on its input.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from stageline.harnesses._types import HarnessEvent
from stageline.harnesses._types import HarnessEventKind as K

__all__ = ["PARSERS", "StreamParser", "first_line", "parse_lines"]

PREVIEW = 200
"""Characters of a bad line kept in its warning."""


def first_line(text: str, limit: int = 200) -> str:
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _text(value: Any) -> str:
    """Text from a string, or from a list of ``{"type": "text", "text": ...}`` blocks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text(part.get("text", "")) if isinstance(part, dict) else str(part)
                         for part in value)
    return "" if value is None else str(value)


def _numbers(values: Any) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    return {k: v for k, v in values.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def _event(kind: str, text: Any = "", **data: Any) -> HarnessEvent:
    kept = {k: v for k, v in data.items() if v is not None}
    return HarnessEvent(kind=kind, text=_text(text), data=kept)


class StreamParser:
    """Reads one agent's stream line by line and keeps what the harness result needs."""

    def __init__(self, fmt: str, events: Callable[[dict[str, Any]], list[HarnessEvent]]) -> None:
        self.format = fmt
        self._events = events
        self.messages: list[str] = []
        self.final_output: str | None = None
        self.summary = ""
        self.usage: dict[str, float] = {}
        self.failure: str | None = None
        """What the stream itself reported as a failure (a failed result, an error event)."""

    def feed(self, line: str, *, complete: bool = True) -> list[HarnessEvent]:
        """Events for one line; ``complete`` is False for a last line without its newline."""
        stripped = line.strip()
        if not stripped:
            return []
        try:
            obj = json.loads(stripped)
        except ValueError as exc:
            why = ("truncated line at the end of the stream" if not complete
                   else f"malformed line, not JSON ({getattr(exc, 'msg', exc)})")
            return [self._warn(why, stripped)]
        if not isinstance(obj, dict):
            return [self._warn(f"malformed line, a JSON {type(obj).__name__} and not an object",
                               stripped)]
        try:
            events = self._events(obj)
        except Exception as exc:  # an unexpected shape must not stop the run
            return [self._warn(f"unreadable {self.format} line ({type(exc).__name__}: {exc})",
                               stripped)]
        for event in events:
            self._note(event)
        return events

    def oversized(self, preview: str, size: int) -> HarnessEvent:
        return self._warn(f"line of {size} bytes exceeds the limit; skipped", preview)

    def _warn(self, why: str, line: str) -> HarnessEvent:
        return _event(K.WARNING, why, line=line[:PREVIEW], format=self.format)

    def _note(self, event: HarnessEvent) -> None:
        kind, data = event.kind, event.data
        if kind == K.MESSAGE and event.text:
            self.messages.append(event.text)
        elif kind == K.USAGE:
            for key, value in _numbers(data).items():
                self.usage[key] = self.usage.get(key, 0) + value
        elif kind == K.ERROR:
            self.failure = first_line(event.text) or "the agent reported an error"
        elif kind == K.RESULT:
            output = data.get("output", event.text)
            self.final_output = _text(output) if output else self.final_output
            self.summary = str(data.get("summary") or "") or self.summary
            if str(data.get("status", "succeeded")) not in ("succeeded", "success", "ok"):
                self.failure = (self.summary or first_line(event.text)
                                or "the agent reported failure")

    @property
    def output_text(self) -> str:
        return self.final_output if self.final_output is not None else "\n\n".join(self.messages)

    @property
    def final_summary(self) -> str:
        return self.summary or first_line(self.messages[-1] if self.messages else self.output_text)


# -- Claude Code: `claude -p --output-format stream-json --verbose` ---------------------------


def _claude_block(role: str, block: Any) -> HarnessEvent | None:
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text" and role == "assistant":
        return _event(K.MESSAGE, block.get("text", ""))
    if kind == "thinking":
        return _event(K.REASONING, block.get("thinking", ""))
    if kind in ("tool_use", "server_tool_use"):
        return _event(K.TOOL_USE, block.get("name", ""), id=block.get("id"),
                      name=block.get("name"), input=block.get("input"))
    if kind in ("tool_result", "web_search_tool_result"):
        return _event(K.TOOL_RESULT, block.get("content", ""), tool_use_id=block.get("tool_use_id"),
                      is_error=bool(block.get("is_error", False)))
    return None


def claude_events(obj: dict[str, Any]) -> list[HarnessEvent]:
    kind = obj.get("type")
    if kind == "system":
        if obj.get("subtype") == "init":
            return [_event(K.PROVIDER_SESSION, obj.get("session_id", ""),
                           session_id=obj.get("session_id"), model=obj.get("model"),
                           cwd=obj.get("cwd"), tools=len(obj.get("tools") or []))]
        return [_event(K.STATUS, obj.get("subtype", "system"), subtype=obj.get("subtype"))]
    if kind in ("assistant", "user"):
        message = obj.get("message") or {}
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        parent = obj.get("parent_tool_use_id")
        out: list[HarnessEvent] = []
        for block in blocks:
            event = _claude_block(kind, block)
            if event is not None and parent:
                event = _event(K.HELPER_AGENT, event.text, parent_tool_use_id=parent,
                               event=event.kind, **event.data)
            if event is not None:
                out.append(event)
        if kind == "assistant" and obj.get("error"):
            out.append(_event(K.WARNING, f"assistant error: {obj['error']}"))
        return out
    if kind == "stream_event":  # partial messages (--include-partial-messages): text only
        inner = obj.get("event") or {}
        delta = inner.get("delta") or {}
        if inner.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            return [_event(K.TEXT_DELTA, delta.get("text", ""))]
        return []
    if kind == "result":
        failed = bool(obj.get("is_error")) or obj.get("subtype", "success") != "success"
        text = _text(obj.get("result", ""))
        usage = _numbers(obj.get("usage"))
        if isinstance(obj.get("total_cost_usd"), int | float):
            usage["cost_usd"] = obj["total_cost_usd"]
        out = [_event(K.USAGE, "", **usage)] if usage else []
        out.append(_event(
            K.RESULT, text, status="failed" if failed else "succeeded",
            summary=first_line(text) or str(obj.get("subtype", "")), output=text,
            subtype=obj.get("subtype"), num_turns=obj.get("num_turns"),
            duration_ms=obj.get("duration_ms"), session_id=obj.get("session_id"),
        ))
        return out
    if kind == "rate_limit_event":
        return [_event(K.STATUS, "rate limit", info=obj.get("rate_limit_info"))]
    return [_event("unknown", "", type=kind)]


# -- Codex: `codex exec --json` ---------------------------------------------------------------


def _codex_item(phase: str, item: dict[str, Any]) -> list[HarnessEvent]:
    kind = item.get("type") or item.get("item_type")
    ident = item.get("id")
    done = phase == "item.completed"
    if kind == "agent_message":
        return [_event(K.MESSAGE, item.get("text", ""), id=ident)] if done else []
    if kind == "reasoning":
        return [_event(K.REASONING, item.get("text", ""), id=ident)] if done else []
    if kind == "command_execution":
        if phase == "item.started":
            return [_event(K.TOOL_USE, item.get("command", ""), id=ident, name="shell",
                           command=item.get("command"))]
        if done:
            output = _text(item.get("aggregated_output", ""))
            return [_event(K.TOOL_RESULT, output[-2000:], id=ident, command=item.get("command"),
                           exit_code=item.get("exit_code"), status=item.get("status"))]
        return []
    if kind == "mcp_tool_call":
        name = f"{item.get('server', '')}.{item.get('tool', '')}"
        if phase == "item.started":
            return [_event(K.TOOL_USE, name, id=ident, name=name, arguments=item.get("arguments"))]
        return [_event(K.TOOL_RESULT, name, id=ident, name=name, status=item.get("status"),
                       error=item.get("error"))] if done else []
    if kind == "web_search":
        if phase == "item.started":
            return [_event(K.TOOL_USE, item.get("query", ""), id=ident, name="web_search")]
        if done:
            return [_event(K.TOOL_RESULT, item.get("query", ""), id=ident, name="web_search")]
        return []
    if kind == "file_change":
        changes = item.get("changes") or []
        paths = [c.get("path", "") for c in changes if isinstance(c, dict)]
        return [_event(K.FILE_CHANGE, ", ".join(paths), id=ident, changes=changes,
                       status=item.get("status"))] if done else []
    if kind == "todo_list":
        return [_event(K.STATUS, "plan", id=ident, items=item.get("items"))]
    if kind == "error":
        return [_event(K.WARNING, item.get("message", ""), id=ident)]
    return [_event("unknown", "", type=phase, item_type=kind)] if done else []


def codex_events(obj: dict[str, Any]) -> list[HarnessEvent]:
    kind = obj.get("type")
    if kind in ("thread.started", "thread.resumed"):
        thread = obj.get("thread_id", "")
        return [_event(K.PROVIDER_SESSION, thread, session_id=thread)]
    if kind == "turn.started":
        return [_event(K.STATUS, "turn started")]
    if kind in ("turn.completed", "turn.failed"):
        out = [_event(K.USAGE, "", **_numbers(obj.get("usage")))] if obj.get("usage") else []
        if kind == "turn.failed":
            error = obj.get("error") or {}
            out.append(_event(K.ERROR, error.get("message", "turn failed")
                              if isinstance(error, dict) else str(error)))
        return out
    if kind == "error":
        return [_event(K.ERROR, obj.get("message", "error"))]
    if kind in ("item.started", "item.updated", "item.completed"):
        item = obj.get("item")
        return _codex_item(kind, item) if isinstance(item, dict) else []
    return [_event("unknown", "", type=kind)]


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


def parse_lines(fmt: str, lines: Iterable[str]) -> tuple[list[HarnessEvent], StreamParser]:
    """Parse a whole transcript; the last line counts as cut short if it lacks its newline."""
    parser = StreamParser(fmt, PARSERS[fmt])
    events: list[HarnessEvent] = []
    for line in lines:
        events += parser.feed(line, complete=line.endswith("\n"))
    return events, parser
