"""Claude Code's ``claude -p --output-format stream-json --verbose`` stream, line by line.

One JSON object a line (Claude Code headless / Agent SDK message types): ``system`` (``init``
with ``session_id``, ``model``, ``tools``; ``task_started`` / ``task_progress`` /
``task_notification`` / ``task_updated`` about sub-agents and background tasks;
``compact_boundary``, ``status``, ``api_retry``, hooks), ``assistant`` and ``user`` messages
(content blocks ``text``, ``thinking``, ``tool_use``, ``tool_result``; a sub-agent's messages
carry ``parent_tool_use_id``), ``stream_event`` (raw API stream events, only with
``--include-partial-messages``: live text, never stored) and the final ``result`` (``subtype``
``success`` or ``error_*``, ``is_error``, ``result``, ``errors[]``, ``terminal_reason``,
``num_turns``, ``usage``, ``total_cost_usd``, ``session_id``).
"""

from __future__ import annotations

from typing import Any

from stageline.harnesses._stream import describe_tool, event, first_line, numbers, text_of
from stageline.harnesses._types import HarnessEvent
from stageline.harnesses._types import HarnessEventKind as K

__all__ = ["claude_events", "claude_usage"]

_TASK_SUBTYPES = (
    "task_started",
    "task_progress",
    "task_notification",
    "task_updated",
    "background_tasks_changed",
)


def claude_usage(raw: Any) -> dict[str, float]:
    """Claude's usage in stageline's names: its ``input_tokens`` leave the cached part out."""
    got = numbers(raw)
    if not got:
        return {}
    read = got.get("cache_read_input_tokens", 0)
    made = got.get("cache_creation_input_tokens", 0)
    out = {
        "input_tokens": got.get("input_tokens", 0) + read + made,
        "cached_input_tokens": read,
        "output_tokens": got.get("output_tokens", 0),
    }
    if made:
        out["cache_creation_input_tokens"] = made
    return out


def _block(role: str, block: Any) -> HarnessEvent | None:
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text" and role == "assistant":
        return event(K.MESSAGE, block.get("text", ""))
    if kind in ("thinking", "redacted_thinking"):
        return event(K.REASONING, block.get("thinking", ""))
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        name = str(block.get("name", ""))
        return event(
            K.TOOL_USE,
            describe_tool(name, block.get("input")),
            id=block.get("id"),
            name=name,
            input=block.get("input"),
        )
    if kind in ("tool_result", "web_search_tool_result", "mcp_tool_result"):
        return event(
            K.TOOL_RESULT,
            block.get("content", ""),
            tool_use_id=block.get("tool_use_id"),
            is_error=bool(block.get("is_error", False)),
        )
    return None


def _system(obj: dict[str, Any]) -> list[HarnessEvent]:
    subtype = str(obj.get("subtype") or "system")
    if subtype == "init":
        return [
            event(
                K.PROVIDER_SESSION,
                obj.get("session_id", ""),
                session_id=obj.get("session_id"),
                model=obj.get("model"),
                cwd=obj.get("cwd"),
                tools=len(obj.get("tools") or []),
                permission_mode=obj.get("permissionMode"),
            )
        ]
    if subtype in _TASK_SUBTYPES:  # sub-agents and background tasks: helper-agent events
        text = (
            obj.get("summary")
            or obj.get("description")
            or obj.get("last_tool_name")
            or obj.get("status")
            or subtype
        )
        return [
            event(
                K.HELPER_AGENT,
                f"{subtype}: {first_line(str(text))}",
                event=subtype,
                task_id=obj.get("task_id"),
                tool_use_id=obj.get("tool_use_id"),
                status=obj.get("status"),
                task_type=obj.get("task_type"),
                usage=obj.get("usage"),
            )
        ]
    if subtype == "api_retry":
        return [
            event(
                K.WARNING,
                f"API retry {obj.get('attempt', '?')}/"
                f"{obj.get('max_retries', '?')}: {obj.get('error', '')}".rstrip(": "),
                subtype=subtype,
                attempt=obj.get("attempt"),
                error=obj.get("error"),
            )
        ]
    return [event(K.STATUS, subtype, subtype=subtype, status=obj.get("status"))]


def _message(kind: str, obj: dict[str, Any]) -> list[HarnessEvent]:
    message = obj.get("message") or {}
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    parent = obj.get("parent_tool_use_id")
    out: list[HarnessEvent] = []
    for block in blocks:
        found = _block(kind, block)
        if found is not None and parent:  # a sub-agent's message: a helper-agent event
            found = event(
                K.HELPER_AGENT,
                found.text,
                parent_tool_use_id=parent,
                event=found.kind,
                **found.data,
            )
        if found is not None:
            out.append(found)
    usage = claude_usage(message.get("usage")) if kind == "assistant" else {}
    if usage and not parent:  # one message arrives as several lines with the same id and usage
        out.append(event(K.USAGE, "", message_id=message.get("id"), **usage))
    if kind == "assistant" and obj.get("error"):
        out.append(event(K.WARNING, f"assistant error: {obj['error']}"))
    return out


def _stream_event(obj: dict[str, Any]) -> list[HarnessEvent]:
    """``--include-partial-messages``: live text and thinking only; the whole message follows."""
    inner = obj.get("event") or {}
    delta = inner.get("delta") or {}
    if inner.get("type") == "content_block_delta":
        if delta.get("type") == "text_delta":
            return [event(K.TEXT_DELTA, delta.get("text", ""))]
        if delta.get("type") == "thinking_delta":
            return [event(K.TEXT_DELTA, delta.get("thinking", ""), delta="thinking")]
    return []


def _reasons(obj: dict[str, Any]) -> str:
    """Why a result failed: its subtype, ``errors[]`` and ``terminal_reason``."""
    parts = [str(obj.get("subtype") or "error")]
    errors = obj.get("errors")
    if isinstance(errors, list):
        parts += [
            text_of(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors if e
        ]
    elif errors:
        parts.append(str(errors))
    if obj.get("terminal_reason"):
        parts.append(f"terminal reason: {obj['terminal_reason']}")
    if isinstance(obj.get("result"), str) and obj["result"].strip():
        parts.append(first_line(obj["result"]))
    return "; ".join(p for p in parts if p)


def _result(obj: dict[str, Any]) -> list[HarnessEvent]:
    failed = bool(obj.get("is_error")) or str(obj.get("subtype", "success")).startswith("error")
    text = text_of(obj.get("result", ""))
    usage = claude_usage(obj.get("usage"))
    if isinstance(obj.get("total_cost_usd"), int | float):
        usage["cost"] = float(obj["total_cost_usd"])
    out = [event(K.USAGE, "", total=True, **usage)] if usage else []
    meta = {
        "subtype": obj.get("subtype"),
        "num_turns": obj.get("num_turns"),
        "duration_ms": obj.get("duration_ms"),
        "session_id": obj.get("session_id"),
        "terminal_reason": obj.get("terminal_reason"),
    }
    if failed:
        reasons = _reasons(obj)
        out.append(event(K.ERROR, reasons, errors=obj.get("errors"), **meta))
        out.append(
            event(
                K.RESULT,
                text or reasons,
                status="failed",
                summary=first_line(reasons),
                output=text,
                **meta,
            )
        )
    else:
        out.append(
            event(
                K.RESULT,
                text,
                status="succeeded",
                summary=first_line(text) or str(obj.get("subtype", "")),
                output=text,
                **meta,
            )
        )
    return out


def claude_events(obj: dict[str, Any]) -> list[HarnessEvent]:
    kind = obj.get("type")
    if kind == "system":
        return _system(obj)
    if kind in ("assistant", "user"):
        return _message(str(kind), obj)
    if kind == "stream_event":
        return _stream_event(obj)
    if kind == "result":
        return _result(obj)
    if kind == "rate_limit_event":
        return [event(K.STATUS, "rate limit", info=obj.get("rate_limit_info"))]
    return [event("unknown", "", type=kind)]
