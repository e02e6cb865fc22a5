"""Webhook message bodies: Discord, Slack, and stageline's generic JSON."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from stageline.events._filters import level_number
from stageline.ledger.records import Event

__all__ = ["FORMATS", "discord_payloads", "json_payload", "slack_payloads"]

FORMATS = ("discord", "slack", "json")

DISCORD_LIMIT = 2000
"""Characters in one Discord message's ``content``."""
SLACK_BLOCKS = 50
"""Blocks in one Slack message."""
SLACK_TEXT = 3000
"""Characters in one Slack section's text."""
LINE_LIMIT = 400

_KIND_ICONS = {
    "started": "▶️",
    "resumed": "▶️",
    "retried": "🔁",
    "succeeded": "✅",
    "failed": "❌",
    "waiting": "⏸️",
    "queued": "🕓",
    "cancelled": "⏹️",
    "rejected": "⛔",
    "drained": "⏏️",
    "parked": "🅿️",
    "approved": "👍",
    "escalated": "🚨",
}
_LEVEL_ICONS = {"critical": "🚨", "error": "❌", "warning": "⚠️"}


def _icon(event: Event) -> str:
    if level_number(event.level) >= level_number("warning"):
        return _LEVEL_ICONS.get(event.level, "⚠️")
    return _KIND_ICONS.get(event.kind.rpartition(".")[2], "•")


def _clip(text: str, limit: int = LINE_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _details(event: Event) -> list[str]:
    parts = []
    template = event.data.get("template")
    if isinstance(template, str) and event.kind.startswith("run."):
        parts.append(template)
    took = event.data.get("duration")
    if isinstance(took, int | float) and not isinstance(took, bool):
        parts.append(f"{took:.2f}s")
    phase = event.data.get("failure_phase")
    if isinstance(phase, str):
        parts.append(phase)
    return parts


_DISCORD_SPECIAL = re.compile(r"([\\*_~`|\[\]])")


def _discord_escape(text: str) -> str:
    return _DISCORD_SPECIAL.sub(r"\\\1", text)


Links = Mapping[int, Mapping[str, str]]
"""Signed decision links by event ``seq`` (``gate.waiting`` events, when ``public_url`` is set)."""


def _discord_line(event: Event, links: Links | None = None) -> str:
    line = f"{_icon(event)} **{event.kind}** `{event.run_id}`"
    if event.node:
        line += f" · {_discord_escape(event.node)}"
    details = _details(event)
    if details:
        line += " · " + _discord_escape(" · ".join(details))
    if event.message:
        line += f" — {_discord_escape(_clip(event.message))}"
    made = (links or {}).get(event.seq)
    if made:  # <url>: no preview; a preview's GET would only show the confirmation page
        line += "\n" + " · ".join(f"{decision}: <{url}>" for decision, url in made.items())
    return line


def discord_payloads(
    events: Sequence[Event], *, username: str = "stageline", links: Links | None = None
) -> list[dict[str, Any]]:
    """Messages for a Discord webhook: one line per event (and a gate's decision links), split
    at Discord's length limit."""
    return [
        {"content": content, "username": username, "allowed_mentions": {"parse": []}}
        for content in _chunks((_discord_line(e, links) for e in events), DISCORD_LIMIT)
    ]


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_line(event: Event) -> str:
    line = f"{_icon(event)} *{event.kind}* `{event.run_id}`"
    if event.node:
        line += f" · {_slack_escape(event.node)}"
    details = _details(event)
    if details:
        line += " · " + _slack_escape(" · ".join(details))
    if event.message:
        line += f" — {_slack_escape(_clip(event.message))}"
    return line


def slack_payloads(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Messages for a Slack incoming webhook: a section block per event, plain ``text`` beside
    them for notifications."""
    lines = [_slack_line(e)[:SLACK_TEXT] for e in events]
    out = []
    for start in range(0, len(lines), SLACK_BLOCKS):
        part = lines[start : start + SLACK_BLOCKS]
        fallback = part[0] if len(part) == 1 else f"{part[0]} (+{len(part) - 1} more)"
        out.append(
            {
                "text": fallback,
                "blocks": [
                    {"type": "section", "text": {"type": "mrkdwn", "text": ln}} for ln in part
                ],
            }
        )
    return out


def json_payload(events: Sequence[Event], *, links: Links | None = None) -> dict[str, Any]:
    """stageline's generic JSON: ``{"source", "version", "events": [Event.to_dict()...]}``; a
    ``gate.waiting`` event has ``links`` (decision -> signed URL) when there are links."""
    out = []
    for event in events:
        item = event.to_dict()
        made = (links or {}).get(event.seq)
        if made:
            item["links"] = dict(made)
        out.append(item)
    return {"source": "stageline", "version": 1, "events": out}


def _chunks(lines: Iterator[str], limit: int) -> Iterator[str]:
    current = ""
    for line in lines:
        line = line if len(line) <= limit else line[: limit - 1] + "…"
        if current and len(current) + 1 + len(line) > limit:
            yield current
            current = ""
        current = f"{current}\n{line}" if current else line
    if current:
        yield current
