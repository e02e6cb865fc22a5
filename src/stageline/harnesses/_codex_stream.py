"""Codex's ``codex exec --json`` stream, line by line (codex-rs ``exec/src/exec_events.rs``).

Top-level events: ``thread.started`` (``thread_id``, the session to resume), ``turn.started``,
``turn.completed`` (``usage``: ``input_tokens`` *including* ``cached_input_tokens``,
``output_tokens``), ``turn.failed`` (``error.message``), ``error`` (a stream error; a transient
one such as ``Reconnecting... 1/5`` may be followed by a turn that completes) and
``item.started`` / ``item.updated`` / ``item.completed`` around one item: ``agent_message``,
``reasoning``, ``command_execution``, ``file_change``, ``mcp_tool_call``, ``web_search``,
``todo_list`` or ``error`` (non-fatal).
"""

from __future__ import annotations

import re
from typing import Any

from stageline.harnesses._stream import event, numbers, text_of
from stageline.harnesses._types import HarnessEvent
from stageline.harnesses._types import HarnessEventKind as K

__all__ = ["TURN_COMPLETED", "codex_events"]

TURN_COMPLETED = "turn completed"
"""The status text of a completed turn: it settles any error the turn reported before."""
_TRANSIENT = re.compile(r"\b(reconnecting|retrying)\b", re.IGNORECASE)


def _changes(item: dict[str, Any]) -> tuple[str, list[Any]]:
    found = item.get("changes")
    changes: list[Any] = found if isinstance(found, list) else []
    shown = ", ".join(
        f"{c.get('kind', 'update')} {c.get('path', '?')}" for c in changes if isinstance(c, dict)
    )
    return shown or "files", changes


def _command(phase: str, item: dict[str, Any], ident: Any) -> list[HarnessEvent]:
    if phase == "item.started":
        return [
            event(
                K.TOOL_USE,
                f"shell {item.get('command', '')}",
                id=ident,
                name="shell",
                input={"command": item.get("command")},
                command=item.get("command"),
            )
        ]
    if phase == "item.completed":
        output = text_of(item.get("aggregated_output", ""))
        return [
            event(
                K.TOOL_RESULT,
                output[-2000:],
                id=ident,
                command=item.get("command"),
                exit_code=item.get("exit_code"),
                status=item.get("status"),
                is_error=item.get("status") == "failed" or item.get("exit_code") not in (None, 0),
            )
        ]
    return []


def _item(phase: str, item: dict[str, Any]) -> list[HarnessEvent]:
    kind = item.get("type") or item.get("item_type")
    ident = item.get("id")
    done = phase == "item.completed"
    if kind == "agent_message":
        return [event(K.MESSAGE, item.get("text", ""), id=ident)] if done else []
    if kind == "reasoning":
        return [event(K.REASONING, item.get("text", ""), id=ident)] if done else []
    if kind == "command_execution":
        return _command(phase, item, ident)
    if kind == "file_change":  # a patch the agent applied: a tool call, with its paths
        shown, changes = _changes(item)
        paths = [c.get("path") for c in changes if isinstance(c, dict)]
        if phase == "item.started":
            return [
                event(
                    K.TOOL_USE,
                    f"file_change {shown}",
                    id=ident,
                    name="file_change",
                    input={"changes": changes},
                    paths=paths,
                )
            ]
        if done:
            return [
                event(
                    K.TOOL_RESULT,
                    f"{item.get('status', 'completed')}: {shown}",
                    id=ident,
                    name="file_change",
                    paths=paths,
                    changes=changes,
                    status=item.get("status"),
                    is_error=item.get("status") == "failed",
                )
            ]
        return []
    if kind == "mcp_tool_call":
        name = f"{item.get('server', '')}.{item.get('tool', '')}"
        if phase == "item.started":
            return [event(K.TOOL_USE, name, id=ident, name=name, input=item.get("arguments"))]
        if done:
            error = item.get("error")
            body = (error.get("message") if isinstance(error, dict) else error) or item.get(
                "result", ""
            )
            return [
                event(
                    K.TOOL_RESULT,
                    text_of(body) if isinstance(body, str | list) else str(body),
                    id=ident,
                    name=name,
                    status=item.get("status"),
                    is_error=bool(error) or item.get("status") == "failed",
                )
            ]
        return []
    if kind == "web_search":
        query = item.get("query", "")
        if phase == "item.started":
            return [
                event(
                    K.TOOL_USE,
                    f"web_search {query}",
                    id=ident,
                    name="web_search",
                    input={"query": query},
                )
            ]
        return (
            [event(K.TOOL_RESULT, f"searched: {query}", id=ident, name="web_search")]
            if done
            else []
        )
    if kind == "collab_tool_call":  # a sub-agent the agent started
        return [
            event(
                K.HELPER_AGENT,
                str(item.get("tool") or "sub-agent"),
                id=ident,
                phase=phase,
                status=item.get("status"),
            )
        ]
    if kind == "todo_list":
        items = item.get("items") or []
        left = sum(1 for i in items if isinstance(i, dict) and not i.get("completed"))
        return [event(K.STATUS, f"plan: {len(items)} steps, {left} open", id=ident, items=items)]
    if kind == "error":  # a non-fatal error item
        return [event(K.WARNING, item.get("message", ""), id=ident)]
    return [event("unknown", "", type=phase, item_type=kind)] if done else []


def codex_usage(raw: Any) -> dict[str, float]:
    """Codex's usage: its ``input_tokens`` already include ``cached_input_tokens``."""
    got = numbers(raw)
    out: dict[str, float] = {
        k: got[k] for k in ("input_tokens", "cached_input_tokens", "output_tokens") if k in got
    }
    if "reasoning_output_tokens" in got:
        out["reasoning_output_tokens"] = got["reasoning_output_tokens"]
    return out


def codex_events(obj: dict[str, Any]) -> list[HarnessEvent]:
    kind = obj.get("type")
    if kind in ("thread.started", "thread.resumed"):
        thread = obj.get("thread_id", "")
        return [event(K.PROVIDER_SESSION, thread, session_id=thread, thread_id=thread)]
    if kind == "turn.started":
        return [event(K.STATUS, "turn started")]
    if kind == "turn.completed":
        usage = codex_usage(obj.get("usage"))
        return [
            *([event(K.USAGE, "", **usage)] if usage else []),
            event(K.STATUS, TURN_COMPLETED, terminal="completed"),
        ]
    if kind == "turn.failed":
        error = obj.get("error") or {}
        text = error.get("message", "turn failed") if isinstance(error, dict) else str(error)
        usage = codex_usage(obj.get("usage"))
        return [
            *([event(K.USAGE, "", **usage)] if usage else []),
            event(K.ERROR, text or "turn failed", terminal="failed"),
        ]
    if kind == "error":
        message = str(obj.get("message", "error"))
        if _TRANSIENT.search(message):  # the turn's own end decides whether it failed
            return [event(K.WARNING, message, transient=True)]
        return [event(K.ERROR, message)]
    if kind in ("item.started", "item.updated", "item.completed"):
        item = obj.get("item")
        return _item(kind, item) if isinstance(item, dict) else []
    return [event("unknown", "", type=kind)]
