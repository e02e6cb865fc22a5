"""What every stream reader shares: building events, text from content blocks, usage, prices."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stageline.harnesses._types import HarnessEvent

__all__ = [
    "USAGE_KEYS",
    "describe_tool",
    "estimate_cost",
    "event",
    "first_line",
    "numbers",
    "text_of",
    "usage_line",
]

USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "cost")
"""The usage every harness reports: input tokens *including* cached ones, the cached part,
output tokens, and cost in US dollars."""

# USD per million tokens: (input, cached input, output). Public list prices, late 2025; used
# only to estimate the cost of a stream live, before the agent reports its own total.
_PRICES: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("claude-opus-4-5", (5.0, 0.5, 25.0)),
    ("claude-opus-4", (15.0, 1.5, 75.0)),
    ("claude-sonnet-4", (3.0, 0.3, 15.0)),
    ("claude-3-7-sonnet", (3.0, 0.3, 15.0)),
    ("claude-haiku-4", (1.0, 0.1, 5.0)),
    ("claude-3-5-haiku", (0.8, 0.08, 4.0)),
    ("gpt-5-mini", (0.25, 0.025, 2.0)),
    ("gpt-5", (1.25, 0.125, 10.0)),
    ("codex-mini", (1.5, 0.375, 6.0)),
    ("o4-mini", (1.1, 0.275, 4.4)),
)


def first_line(text: str, limit: int = 200) -> str:
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def text_of(value: Any) -> str:
    """Text from a string, or from a list of ``{"type": "text", "text": ...}`` blocks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            text_of(part.get("text", "")) if isinstance(part, dict) else str(part) for part in value
        )
    return "" if value is None else str(value)


def numbers(values: Any) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    return {
        k: v for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }


def event(kind: str, text: Any = "", **data: Any) -> HarnessEvent:
    kept = {k: v for k, v in data.items() if v is not None}
    return HarnessEvent(kind=kind, text=text_of(text), data=kept)


_TOOL_FIELDS = (
    "command",
    "file_path",
    "path",
    "notebook_path",
    "pattern",
    "url",
    "query",
    "description",
    "prompt",
    "subagent_type",
)


def describe_tool(name: str, given: Any) -> str:
    """One line for a tool call: its name and what it acts on (the command, the file, ...)."""
    if not isinstance(given, Mapping):
        return name if given in (None, "", {}) else f"{name} {first_line(str(given), 160)}"
    for key in _TOOL_FIELDS:
        value = given.get(key)
        if isinstance(value, str) and value.strip():
            return f"{name} {first_line(value, 160)}"
    shown = ", ".join(f"{k}={v}" for k, v in list(given.items())[:3])
    return f"{name} {first_line(shown, 160)}" if shown else name


def usage_line(usage: Mapping[str, float]) -> str:
    """``1200 in (200 cached), 345 out, $0.0123``: a usage event in one line."""
    parts = []
    if "input_tokens" in usage:
        cached = usage.get("cached_input_tokens")
        parts.append(f"{usage['input_tokens']:g} in" + (f" ({cached:g} cached)" if cached else ""))
    if "output_tokens" in usage:
        parts.append(f"{usage['output_tokens']:g} out")
    if "cost" in usage:
        parts.append(f"${usage['cost']:.4f}")
    return ", ".join(parts)


def estimate_cost(model: str | None, usage: Mapping[str, float]) -> float | None:
    """Dollars for ``usage`` at ``model``'s list price; None for a model without one."""
    if not model:
        return None
    name = model.lower()
    price = next((p for prefix, p in _PRICES if prefix in name), None)
    if price is None:
        return None
    cached = float(usage.get("cached_input_tokens", 0))
    fresh = max(0.0, float(usage.get("input_tokens", 0)) - cached)
    return (
        fresh * price[0] + cached * price[1] + float(usage.get("output_tokens", 0)) * price[2]
    ) / 1e6
