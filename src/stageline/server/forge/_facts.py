"""The forge facts of a run in words: one renderer for the issue comments and the Slack thread.

``fact_line`` says a CI run or a pull request (``stage.log`` events that carry ``ci_run_id`` or
``pr_url``) in one line with its link, in the link style of where it goes (``markdown_link``
for GitHub, ``slack_link`` for Slack). ``comment_text`` is what an issue comment says for each
event the comment mirror posts (the run taken, its questions, the plan at its gate, decisions,
CI, the pull request, how the run ended); None for the others.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from stageline.ledger import Run, Wait
from stageline.ledger.records import Event

__all__ = [
    "COMMENT_KINDS",
    "Link",
    "comment_text",
    "fact_line",
    "forge_fact",
    "markdown_link",
    "slack_link",
]

Link = Callable[[str, str], str]
"""``(url, text)`` -> a link in some markup."""

COMMENT_KINDS = (
    "run.queued",
    "run.started",
    "run.succeeded",
    "run.failed",
    "run.parked",
    "run.rejected",
    "run.cancelled",
    "question.asked",
    "question.answered",
    "gate.waiting",
    "gate.decided",
    "stage.log",
)
"""What the comment mirror reads (``stage.log`` only when it is a forge fact)."""
_CI_ICONS = {"success": "✅", "neutral": "✅", "skipped": "✅", None: "🔧"}
_ENDS = {
    "run.succeeded": "✅ The run succeeded.",
    "run.failed": "❌ The run failed",
    "run.parked": "🅿️ The run is parked: a person decides what next",
    "run.rejected": "⛔ The run was rejected",
    "run.cancelled": "⏹️ The run was cancelled",
}
_CLIP = 60_000
"""Characters of a comment at most (GitHub takes 65,536)."""


def markdown_link(url: str, text: str) -> str:
    return f"[{text}]({url})"


def slack_link(url: str, text: str) -> str:
    return f"<{url}|{text.replace('|', '/').replace('>', ')')}>"


def forge_fact(event: Event) -> bool:
    """Whether ``event`` says a CI run or a pull request (a line of ``fact_line``)."""
    return event.kind == "stage.log" and bool(
        event.data.get("ci_run_id") or event.data.get("pr_url")
    )


def fact_line(
    event: Event, link: Link = markdown_link, escape: Callable[[str], str] = str
) -> str | None:
    """A CI run (dispatched, finished) or the pull request, with its link; None for any
    other event. ``escape``: what the message needs where it goes (Slack's ``&<>``)."""
    if not forge_fact(event):
        return None
    data, said = event.data, escape((event.message or "").strip())
    if url := data.get("pr_url"):
        number = data.get("pr_number")
        name = f"pull request #{number}" if number else "pull request"
        return f"🔀 {said or name}: {link(str(url), name)}"
    conclusion = data.get("conclusion")
    icon = _CI_ICONS.get(conclusion, "❌") if conclusion else "🔧"
    line = f"{icon} {said or 'CI run ' + str(data['ci_run_id'])}"
    if url := data.get("ci_url"):
        line += f": {link(str(url), 'CI run ' + str(data['ci_run_id']))}"
    return line


def _fenced(text: str) -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}\n{text}\n{fence}"


def _shown(payload: Mapping[str, Any]) -> str:
    shown = payload.get("summary") or payload.get("show") or payload.get("message")
    if shown is None:
        return ""
    if isinstance(shown, Mapping) and isinstance(shown.get("plan"), str):
        return str(shown["plan"])  # the plan reads as the Markdown it is
    text = shown if isinstance(shown, str) else json.dumps(shown, default=str, indent=1)
    return _fenced(text)


def _questions(wait: Wait) -> str:
    questions = [
        q
        for q in wait.payload.get("question_set", {}).get("questions", [])
        if isinstance(q, Mapping)
    ]
    lines = [f"❓ **Questions** (set `{wait.wait_id}`):", ""]
    for n, q in enumerate(questions, 1):
        choices = q.get("choices") or []
        extra = f" _({', '.join(map(str, choices))})_" if choices else ""
        lines.append(f"{n}. {q.get('text', '')}{extra}")
    lines += ["", "Answer them in Slack, on the dashboard or with `stageline answer`."]
    return "\n".join(lines)


def _gate(wait: Wait) -> str:
    body = _shown(wait.payload)
    shown = wait.payload.get("show")
    if wait.payload.get("park"):  # out of rounds: a person decides what next
        head = f"🅿️ Out of rounds at gate `{wait.name}`: grant more, take over or reject."
        if isinstance(shown, Mapping):  # every key shown, the plan's feedback too
            body = _fenced(json.dumps(shown, default=str, indent=1))
    elif isinstance(shown, Mapping) and isinstance(shown.get("plan"), str):
        head = f"📋 **The plan**, waiting for approval at gate `{wait.name}`:"
    else:
        head = f"⏸️ Waiting for a decision at gate `{wait.name}`:"
    how = "Approve, reject or ask for changes in Slack, on the dashboard or with the CLI."
    return f"{head}\n\n{body}\n\n{how}" if body else f"{head}\n\n{how}"


def comment_text(
    event: Event, run: Run, wait: Wait | None = None, *, page: str | None = None
) -> str | None:
    """What the issue comment for ``event`` says; None when the event gets no comment.
    ``wait``: the wait a ``question.asked`` or ``gate.waiting`` event announced; ``page``:
    the run's dashboard page, linked from the first comment."""
    kind = event.kind
    if kind in ("run.queued", "run.started"):  # whichever comes first: one comment
        text = f"🤖 stageline took this issue: run `{run.run_id}` ({run.template})."
        return text + (f" Follow it: {markdown_link(page, 'the run')}" if page else "")
    if kind in _ENDS:
        text = _ENDS[kind]
        if kind != "run.succeeded":
            where = f" at `{event.node}`" if event.node else ""
            text += where + (f": {event.message.strip()}" if event.message.strip() else ".")
        return text
    if kind == "question.asked":
        return _questions(wait) if wait is not None else None
    if kind == "gate.waiting":
        return _gate(wait) if wait is not None else None
    if kind in ("gate.decided", "question.answered"):
        return f"➜ {event.message}" if event.message else None
    return fact_line(event, markdown_link)


def clip(text: str) -> str:
    return text if len(text) <= _CLIP else text[: _CLIP - 1] + "…"
