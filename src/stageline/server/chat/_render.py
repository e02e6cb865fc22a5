"""Slack messages and modals as views over the ledger: a run's root message, a gate, a question
set, a milestone; what a decision carries in its button."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from stageline.ledger import Run, Wait, WaitKind, WaitStatus

__all__ = [
    "button_value",
    "changes_modal",
    "escalation_text",
    "gate_blocks",
    "interrupt_blocks",
    "milestone_text",
    "parse_value",
    "question_blocks",
    "question_modal",
    "root_blocks",
]

TEXT_LIMIT = 2900
_ICONS = {
    "queued": "🕓",
    "running": "▶️",
    "waiting": "⏸️",
    "succeeded": "✅",
    "failed": "❌",
    "cancelled": "⏹️",
    "rejected": "⛔",
    "parked": "🅿️",
    "taken_over": "🙋",
    "stopped": "⏏️",
}
_SAID = {
    "approve": "Approved",
    "reject": "Rejected",
    "changes": "Changes requested",
    "takeover": "Taken over",
    "answered": "Answered",
}


def esc(text: Any) -> str:
    """Text for Slack mrkdwn: its three control characters escaped (no mention, no link)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(time.time() if ts is None else ts))


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _clip(text)}}


def button_value(wait: Wait, channel: str = "") -> str:
    """What a button carries: the run, the visit, its attempt and state hash (what was shown)."""
    return json.dumps(
        {
            "r": wait.run_id,
            "w": wait.wait_id,
            "a": wait.attempt,
            "h": wait.state_hash or "",
            "g": wait.name,
            "c": channel,
        },
        separators=(",", ":"),
    )


def parse_value(value: str) -> dict[str, Any]:
    data = json.loads(value)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("r"), str)
        or not isinstance(data.get("w"), str)
    ):
        raise ValueError("not a stageline button")
    return data


# -- messages -----------------------------------------------------------------------------------


def root_blocks(run: Run) -> tuple[str, list[dict[str, Any]]]:
    """The run's root message: what it is and where it is now."""
    status = str(run.status)
    text = f"{_ICONS.get(status, '•')} Run `{esc(run.run_id)}` · *{esc(run.template)}* · {status}"
    lines = [text]
    if run.error:
        lines.append(f"> {esc(_clip(run.error, 500))}")
    lines.append(f"_started {_when(run.created_at)}; follow it in this thread_")
    return text, [_section("\n".join(lines))]


def milestone_text(kind: str, node: str | None, message: str | None) -> str:
    line = f"• *{esc(kind)}*" + (f" · {esc(node)}" if node else "")
    return line + (f" — {esc(_clip(message or '', 500))}" if message else "")


def escalation_text(message: str, deciders: Sequence[str]) -> str:
    people = " ".join(f"<@{esc(u)}>" for u in deciders)
    return f"🚨 {people + ' ' if people else ''}{esc(message)}"


def _decided(wait: Wait) -> str:
    said = _SAID.get(wait.decision or "answered", esc(wait.decision or "decided"))
    if wait.status in (WaitStatus.DECIDED, WaitStatus.APPLIED):
        note = f": {esc(_clip(wait.note, 500))}" if wait.note else ""
        return f"*{said}* by {esc(wait.actor or 'someone')} at {_when(wait.decided_at)}{note}"
    reason = f" ({esc(wait.reason)})" if wait.reason else ""
    return f"_no longer waiting: {esc(wait.status)}{reason}_"


def _summary(wait: Wait) -> str:
    payload = wait.payload
    shown = payload.get("summary") or payload.get("show") or payload.get("message")
    if shown is None:
        return ""
    text = shown if isinstance(shown, str) else json.dumps(shown, default=str, indent=1)
    return f"\n```{esc(_clip(text, 1500))}```"


def gate_blocks(wait: Wait, channel: str = "") -> tuple[str, list[dict[str, Any]]]:
    """A gate: its summary, and while it waits, Approve / Reject / Request changes (and Take
    over at a park gate)."""
    head = f"⏸️ Gate *{esc(wait.name)}* of run `{esc(wait.run_id)}` (attempt {wait.attempt})" + (
        f", deadline {_when(wait.deadline_at)}" if wait.deadline_at else ""
    )
    blocks = [_section(head + _summary(wait))]
    if wait.status is WaitStatus.PENDING:
        value = button_value(wait, channel)
        buttons = [
            {
                "type": "button",
                "action_id": "approve",
                "style": "primary",
                "value": value,
                "text": {"type": "plain_text", "text": "Approve"},
            },
            {
                "type": "button",
                "action_id": "reject",
                "style": "danger",
                "value": value,
                "text": {"type": "plain_text", "text": "Reject"},
            },
        ]
        if wait.payload.get("changes_to") is not None:
            buttons.append(
                {
                    "type": "button",
                    "action_id": "changes",
                    "value": value,
                    "text": {"type": "plain_text", "text": "Request changes"},
                }
            )
        if wait.payload.get("park"):  # out of rounds: the person may take the work over
            buttons.append(
                {
                    "type": "button",
                    "action_id": "takeover",
                    "value": value,
                    "text": {"type": "plain_text", "text": "Take over"},
                }
            )
        blocks.append({"type": "actions", "block_id": "decide", "elements": buttons})
    else:
        blocks.append(_section(_decided(wait)))
    return head, blocks


def questions_of(wait: Wait) -> list[Mapping[str, Any]]:
    """The questions of a question set's wait."""
    questions = wait.payload.get("question_set", {}).get("questions", [])
    return [q for q in questions if isinstance(q, Mapping)]


def question_blocks(wait: Wait, channel: str = "") -> tuple[str, list[dict[str, Any]]]:
    """A question set: its questions, and while it waits an Answer button."""
    questions = questions_of(wait)
    head = f"❓ Run `{esc(wait.run_id)}` asks {len(questions)} question(s) at *{esc(wait.node)}*"
    lines = [head] + [
        f"• {esc(q.get('text', ''))}"
        + (f" _({', '.join(esc(c) for c in q.get('choices', []))})_" if q.get("choices") else "")
        for q in questions
    ]
    if len(questions) == 1 and questions[0].get("kind", "text") == "text":
        lines.append("_Reply in this thread to answer._")
    blocks = [_section("\n".join(lines))]
    if wait.status is WaitStatus.PENDING:
        blocks.append(
            {
                "type": "actions",
                "block_id": "answer",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "answer",
                        "style": "primary",
                        "value": button_value(wait, channel),
                        "text": {"type": "plain_text", "text": "Answer"},
                    }
                ],
            }
        )
    else:
        blocks.append(_section(_decided(wait)))
    return head, blocks


def interrupt_blocks(wait: Wait, channel: str = "") -> tuple[str, list[dict[str, Any]]]:
    """An interrupt the graph made itself: what it asks; for an Agent-Inbox
    ``HumanInterrupt``, the buttons its ``config`` allows (accept, ignore); a reply in the
    thread answers it (as text, or as the ``response`` of a ``HumanInterrupt``)."""
    asked: Any = wait.payload.get("value")
    head = f"↳ Run `{esc(wait.run_id)}` asks at *{esc(wait.name)}*"
    allows = wait.inbox_allows
    if wait.payload.get("human"):
        asked = wait.payload.get("inbox") or {}
        action = asked.get("action_request") or {}
        args = json.dumps(action.get("args"), default=str, indent=1)
        lines = [
            head,
            esc(_clip(str(asked.get("description") or ""), 1000)),
            f"*{esc(action.get('action'))}* ```{esc(_clip(args, 1500))}```",
        ]
        if "response" in allows:
            lines.append("_Reply in this thread to respond._")
        if "edit" in allows:
            lines.append("_To accept with edits: the dashboard, or `stageline respond`._")
    else:
        text = asked if isinstance(asked, str) else json.dumps(asked, default=str, indent=1)
        lines = [head, f"```{esc(_clip(text, 1500))}```", "_Reply in this thread to answer._"]
    blocks = [_section("\n".join(lines))]
    buttons = [
        {
            "type": "button",
            "action_id": f"inbox_{kind}",
            "value": button_value(wait, channel),
            "text": {"type": "plain_text", "text": kind.capitalize()},
            **({"style": "primary"} if kind == "accept" else {"style": "danger"}),
        }
        for kind in ("accept", "ignore")
        if kind in allows
    ]
    if wait.status is not WaitStatus.PENDING:
        blocks.append(_section(_decided(wait)))
    elif buttons:
        blocks.append({"type": "actions", "block_id": "respond", "elements": buttons})
    return head, blocks


def wait_blocks(wait: Wait, channel: str = "") -> tuple[str, list[dict[str, Any]]]:
    shown = {WaitKind.GATE: gate_blocks, WaitKind.INTERRUPT: interrupt_blocks}
    return shown.get(wait.kind, question_blocks)(wait, channel)


# -- modals -------------------------------------------------------------------------------------


def retired(blocks: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """A message's blocks without its buttons, with ``note`` saying why."""
    return [b for b in blocks if b.get("type") != "actions"] + [_section(note)]


def _plain(text: str, limit: int = 24) -> dict[str, Any]:
    return {"type": "plain_text", "text": text if len(text) <= limit else text[: limit - 1] + "…"}


def changes_modal(value: str, wait_name: str) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": "changes",
        "private_metadata": value,
        "title": _plain("Request changes"),
        "submit": _plain("Send"),
        "close": _plain("Cancel"),
        "blocks": [
            {
                "type": "input",
                "block_id": "note",
                "label": _plain(f"What should change at {wait_name}?", 2000),
                "element": {"type": "plain_text_input", "action_id": "note", "multiline": True},
            }
        ],
    }


def question_modal(value: str, wait: Wait) -> dict[str, Any]:
    """A modal built from the set's questions: text, a choice (a select), JSON (checked when
    it is submitted)."""
    blocks = []
    for q in questions_of(wait):
        qid, kind = str(q["id"]), q.get("kind", "text")
        element: dict[str, Any]
        if kind == "choice":
            element = {
                "type": "static_select",
                "action_id": "value",
                "options": [
                    {"text": _plain(str(c), 75), "value": str(c)} for c in q.get("choices", [])
                ],
            }
            if q.get("default") in q.get("choices", []):
                element["initial_option"] = {
                    "text": _plain(str(q["default"]), 75),
                    "value": str(q["default"]),
                }
        else:
            element = {
                "type": "plain_text_input",
                "action_id": "value",
                "multiline": kind == "json" or len(str(q.get("text", ""))) > 80,
            }
            if isinstance(q.get("default"), str) and q.get("default"):
                element["initial_value"] = q["default"]
            elif kind == "json" and "default" in q:
                element["initial_value"] = json.dumps(q["default"])
        label = str(q.get("text", qid)) + (" (JSON)" if kind == "json" else "")
        blocks.append(
            {
                "type": "input",
                "block_id": f"q:{qid}",
                "label": _plain(label, 2000),
                "optional": not q.get("required", True),
                "element": element,
            }
        )
    return {
        "type": "modal",
        "callback_id": "answer",
        "private_metadata": value,
        "title": _plain("Answer"),
        "submit": _plain("Answer"),
        "close": _plain("Cancel"),
        "blocks": blocks,
    }


def modal_answers(view: Mapping[str, Any]) -> dict[str, Any]:
    """The answers a submitted question modal holds (empty optional inputs left out)."""
    out: dict[str, Any] = {}
    for block_id, actions in (view.get("state", {}).get("values", {}) or {}).items():
        if not block_id.startswith("q:"):
            continue
        field = (actions or {}).get("value") or {}
        if field.get("type") == "static_select":
            chosen = field.get("selected_option")
            if chosen:
                out[block_id[2:]] = chosen.get("value")
        elif field.get("value") not in (None, ""):
            out[block_id[2:]] = field.get("value")
    return out
