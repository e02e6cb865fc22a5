"""What the CLI prints about gates and questions: what waits, how to decide, what was decided."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from stageline.cli._render import seconds, status_text, when
from stageline.ledger import Wait, WaitKind

__all__ = ["decisions_table", "pending_table", "qa_lines", "waiting_lines"]


def _table() -> Table:
    return Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold")


def _deadline(wait: Wait, now: float | None = None) -> str:
    if wait.deadline_at is None:
        return "-"
    left = wait.deadline_at - (now or time.time())
    if wait.policy_step >= len(wait.policy) and wait.policy:
        return "parked"
    return f"in {seconds(left)}" if left >= 0 else f"overdue {seconds(-left)}"


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def waiting_lines(run_id: str, waits: Sequence[Wait]) -> list[Text]:
    """What a waiting run waits on, and the commands that decide it."""
    lines: list[Text] = []
    for wait in waits:
        if wait.kind is WaitKind.GATE:
            lines.append(Text.assemble(
                "  waiting at gate ", (wait.name, "bold"),
                f" (attempt {wait.attempt}, deadline {_deadline(wait)})"))
            for key, value in (wait.payload.get("show") or {}).items():
                lines.append(Text(f"    {key}: {_short(value)}", style="dim"))
            gate = f" --gate {wait.name}" if len(waits) > 1 else ""
            lines.append(Text(f"  approve: stageline approve {run_id}{gate} [--note TEXT]",
                              style="dim"))
            if wait.payload.get("changes_to") and wait.payload.get("changes_left") != 0:
                left = wait.payload.get("changes_left")
                lines.append(Text(
                    f"  changes: stageline changes {run_id}{gate} --note TEXT "
                    f"(back to {wait.payload['changes_to']}; {left} round(s) left)", style="dim"))
            lines.append(Text(f"  reject:  stageline reject {run_id}{gate} [--note TEXT]",
                              style="dim"))
            continue
        questions = wait.payload.get("question_set", {}).get("questions", [])
        lines.append(Text.assemble(
            "  waiting for answers to question set ", (wait.wait_id, "bold"),
            f" (turn {wait.payload.get('turn')}, deadline {_deadline(wait)})"))
        for q in questions:
            extra = (f" [{' | '.join(q['choices'])}]" if q.get("kind") == "choice"
                     else " [JSON]" if q.get("kind") == "json" else "")
            optional = "" if q.get("required", True) else " (optional)"
            lines.append(Text(f"    {q['id']}: {_short(q['text'], 100)}{extra}{optional}",
                              style="dim"))
        example = " ".join(f"-a {q['id']}=..." for q in questions if q.get("required", True))
        which = f" --question {wait.wait_id}" if len(waits) > 1 else ""
        lines.append(Text(f"  answer:  stageline answer {run_id}{which}   (asks each question; "
                          f"or {example or '-a ID=VALUE'})", style="dim"))
    return lines


def pending_table(waits: Iterable[Wait], templates: dict[str, str]) -> Table:
    """Every pending gate and question set: run, what, age and deadline."""
    table = _table()
    for column in ("run", "template", "waits at", "attempt", "age", "deadline", "id"):
        table.add_column(column, no_wrap=column != "waits at", overflow="fold")
    now = time.time()
    for wait in waits:
        label = (f"gate {wait.name}" if wait.kind is WaitKind.GATE
                 else f"question {wait.name} (turn {wait.payload.get('turn')})")
        table.add_row(wait.run_id, templates.get(wait.run_id, "?"), label, str(wait.attempt),
                      seconds(now - wait.requested_at), _deadline(wait, now), wait.wait_id[:12])
    return table


def decisions_table(waits: Iterable[Wait]) -> Table:
    """Each round of each gate: who decided what, and what became of it."""
    table = _table()
    for column in ("gate", "attempt", "round", "status", "decision", "by", "at", "note"):
        table.add_column(column, no_wrap=column not in ("note",), overflow="fold")
    for wait in waits:
        note = wait.note or ""
        if wait.reason:
            note = f"{note} [{wait.reason}]".strip()
        table.add_row(wait.name, str(wait.attempt), str(wait.round), status_text(wait.status),
                      wait.decision or "-", wait.actor or "-",
                      when(wait.decided_at, "%H:%M:%S"), _short(note, 120))
    return table


def qa_lines(waits: Iterable[Wait]) -> list[Text]:
    """The question-and-answer history: each set, its status, each question and its answer."""
    lines: list[Text] = []
    for wait in waits:
        by = f" by {wait.actor}" if wait.actor else ""
        reason = f" [{wait.reason}]" if wait.reason else ""
        lines.append(Text.assemble(
            (f"turn {wait.payload.get('turn')} ", "bold"), f"{wait.wait_id} round {wait.round} ",
            status_text(wait.status), f"{by}{reason}"))
        answers = (wait.response or {}).get("answers", {})
        for q in wait.payload.get("question_set", {}).get("questions", []):
            lines.append(Text(f"  Q {q['id']}: {_short(q['text'], 100)}"))
            if q["id"] in answers:
                lines.append(Text(f"  A {_short(answers[q['id']], 200)}", style="green"))
    return lines
