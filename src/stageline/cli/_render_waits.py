"""What the CLI prints about gates and questions: what waits, how to decide, what was decided."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from stageline.cli._render import seconds, status_text, when
from stageline.cli._tables import Col, fitted
from stageline.ledger import Wait, WaitKind

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

__all__ = [
    "ci_text",
    "decisions_table",
    "pending_table",
    "qa_lines",
    "question_text",
    "waiting_lines",
]


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


def question_text(head: str, text: Any, tail: str = "", style: str = "") -> list[Text]:
    """A question whole, its own line breaks kept: the context it gives (``Task: ...``) stays
    apart from what it asks; later lines are indented under the first."""
    from rich.text import Text

    parts = [" ".join(line.split()) for line in str(text).splitlines() if line.strip()] or [""]
    parts[-1] += tail
    pad = " " * len(head)
    return [Text(f"{head if i == 0 else pad}{part}", style=style) for i, part in enumerate(parts)]


def waiting_lines(run_id: str, waits: Sequence[Wait]) -> list[Text]:
    """What a waiting run waits on, and the commands that decide it."""
    from rich.text import Text

    lines: list[Text] = []
    for wait in waits:
        if wait.kind is WaitKind.GATE:
            lines.append(
                Text.assemble(
                    "  waiting at gate ",
                    (wait.name, "bold"),
                    f" (attempt {wait.attempt}, deadline {_deadline(wait)})",
                )
            )
            for key, value in (wait.payload.get("show") or {}).items():
                lines.append(Text(f"    {key}: {_short(value)}", style="dim"))
            gate = f" --gate {wait.name}" if len(waits) > 1 else ""
            lines.append(
                Text(f"  approve: stageline approve {run_id}{gate} [--note TEXT]", style="dim")
            )
            if wait.payload.get("changes_to") and wait.payload.get("changes_left") != 0:
                left = wait.payload.get("changes_left")
                lines.append(
                    Text(
                        f"  changes: stageline changes {run_id}{gate} --note TEXT "
                        f"(back to {wait.payload['changes_to']}; {left} round(s) left)",
                        style="dim",
                    )
                )
            lines.append(
                Text(f"  reject:  stageline reject {run_id}{gate} [--note TEXT]", style="dim")
            )
            continue
        if wait.kind is WaitKind.INTERRUPT:
            lines.extend(_interrupt_lines(run_id, wait, len(waits) > 1))
            continue
        if wait.kind is WaitKind.CI:
            lines.extend(_ci_lines(run_id, wait))
            continue
        questions = wait.payload.get("question_set", {}).get("questions", [])
        lines.append(
            Text.assemble(
                "  waiting for answers to question set ",
                (wait.wait_id, "bold"),
                f" (turn {wait.payload.get('turn')}, deadline {_deadline(wait)})",
            )
        )
        for q in questions:
            extra = (
                f" [{' | '.join(q['choices'])}]"
                if q.get("kind") == "choice"
                else " [JSON]"
                if q.get("kind") == "json"
                else ""
            )
            optional = "" if q.get("required", True) else " (optional)"
            lines += question_text(f"    {q['id']}: ", q["text"], f"{extra}{optional}", "dim")
        example = " ".join(f"-a {q['id']}=..." for q in questions if q.get("required", True))
        which = f" --question {wait.wait_id}" if len(waits) > 1 else ""
        lines.append(
            Text(
                f"  answer:  stageline answer {run_id}{which}   (asks each question; "
                f"or {example or '-a ID=VALUE'})",
                style="dim",
            )
        )
    return lines


def ci_text(ci: Any) -> str:
    """``workflow run 12 (URL) of acme/app at 1a2b3c4d5e6f``: what a CI wait waits on."""
    ci = ci if isinstance(ci, dict) else {}
    what = (
        f"{str(ci.get('kind') or 'workflow_run').replace('_', ' ')} {ci['id']}"
        if ci.get("id")
        else f"workflow {ci['workflow']}"
        if ci.get("workflow")
        else "the checks"
    )
    url = f" ({ci['url']})" if ci.get("url") else ""
    return f"{what}{url} of {ci.get('repository')} at {str(ci.get('head_sha') or '?')[:12]}"


def _ci_lines(run_id: str, wait: Wait) -> list[Text]:
    """A wait for CI: what it waits on; GitHub completes it, a person cannot."""
    from rich.text import Text

    build = wait.payload.get("ci", {}).get("build_round")
    timeout = wait.payload.get("ci_timeout")
    ends = (
        f", failed if not reported by {when(wait.requested_at + float(timeout), '%H:%M:%S')}"
        if isinstance(timeout, (int, float)) and timeout > 0
        else ""
    )
    return [
        Text.assemble(
            "  waiting on CI: ",
            (ci_text(wait.payload.get("ci")), "bold"),
            f" (build {build}, since {when(wait.requested_at, '%H:%M:%S')}{ends})",
        ),
        Text(
            "    GitHub completes it (its webhook, or polling); no person answers it", style="dim"
        ),
        Text(f"  cancel:  stageline cancel {run_id}", style="dim"),
    ]


def _interrupt_lines(run_id: str, wait: Wait, several: bool) -> list[Text]:
    """An interrupt the graph made itself: what it asks, and how to answer it."""
    from rich.text import Text

    asked = wait.payload.get("value")
    which = f" --wait {wait.wait_id}" if several else ""
    lines = [
        Text.assemble(
            "  waiting for an answer to interrupt ",
            (wait.wait_id, "bold"),
            f" at {wait.name} (deadline {_deadline(wait)})",
        ),
        Text(f"    asks: {_short(asked, 200)}", style="dim"),
    ]
    if wait.payload.get("human"):
        allowed = wait.inbox_allows
        lines.append(
            Text(
                f"  respond: stageline respond {run_id}{which} --value "
                f'\'{{"type": "{allowed[0] if allowed else "accept"}", "args": ...}}\' '
                f"(allows: {', '.join(allowed) or 'none'})",
                style="dim",
            )
        )
    else:
        lines.append(
            Text(
                f"  respond: stageline respond {run_id}{which} --value '<json>' (or -t TEXT)",
                style="dim",
            )
        )
    return lines


def pending_table(waits: Iterable[Wait], templates: dict[str, str]) -> RenderableType:
    """Every pending gate and question set: run, what, age and deadline. Nothing is cut: short
    columns keep their width, the template and what it waits at wrap."""
    rows = list(waits)
    retried = any(w.attempt > 1 for w in rows)
    now = time.time()
    cells = []
    for wait in rows:
        label = (
            f"gate {wait.name}"
            if wait.kind is WaitKind.GATE
            else f"interrupt {wait.name}: {_short(wait.payload.get('value'), 40)}"
            if wait.kind is WaitKind.INTERRUPT
            else f"question {wait.name} (turn {wait.payload.get('turn')})"
        )
        cells.append(
            [
                wait.run_id,
                templates.get(wait.run_id, "?"),
                label,
                *([str(wait.attempt)] if retried else []),
                seconds(now - wait.requested_at),
                _deadline(wait, now),
                wait.wait_id[:12],
            ]
        )
    asks = any(w.kind is not WaitKind.GATE for w in rows)  # the id picks a set or interrupt
    if not asks:
        cells = [row[:-1] for row in cells]
    cols = [
        Col(name="run"),
        Col(name="template", wrap=True, keep=4, under=True),
        Col(name="waits at", wrap=True),
        *([Col(name="attempt", keep=3, right=True)] if retried else []),
        Col(name="age", keep=2, right=True),
        Col(name="deadline", keep=5, wrap=True, under=True),
        *([Col(name="id")] if asks else []),
    ]
    return fitted(cols, cells)


def decisions_table(waits: Iterable[Wait]) -> RenderableType:
    """Each round of each gate: who decided what, and what became of it (notes whole).

    A gate's round counts every time it was asked in the attempt, oldest first: a request for
    changes sends the run back and the gate is asked again, in round 2 (the ledger keys each
    asking on its own, so its own ``round`` stays 1 there)."""
    rows = []
    asked: dict[tuple[str, int], int] = {}
    for wait in sorted(waits, key=lambda w: (w.requested_at, w.round)):
        note = wait.note or ""
        if wait.reason:
            note = f"{note} [{wait.reason}]".strip()
        number = asked[(wait.name, wait.attempt)] = asked.get((wait.name, wait.attempt), 0) + 1
        rows.append(
            [
                wait.name,
                str(wait.attempt),
                str(number),
                status_text(wait.status),
                wait.decision or "-",
                wait.actor or "-",
                when(wait.decided_at, "%H:%M:%S"),
                " ".join(note.split()),
            ]
        )
    cols = [
        Col(name="gate", wrap=True),
        Col(name="attempt", keep=2, right=True),
        Col(name="round", keep=4, right=True),
        Col(name="status", keep=3),
        Col(name="decision"),
        Col(name="by", wrap=True, keep=5, under=True),
        Col(name="at", keep=1),
        Col(name="note", wrap=True, keep=6, under=True),
    ]
    return fitted(cols, rows, labels=[f"{r[0]} round {r[2]}" for r in rows])


def qa_lines(waits: Iterable[Wait]) -> list[Text]:
    """The question-and-answer history: each set, its status, each question and its answer."""
    from rich.text import Text

    lines: list[Text] = []
    for wait in waits:
        by = f" by {wait.actor}" if wait.actor else ""
        reason = f" [{wait.reason}]" if wait.reason else ""
        if wait.kind is WaitKind.CI:
            ended = (wait.response or {}).get("ci") or {}
            lines.append(
                Text.assemble(
                    ("CI ", "bold"),
                    f"{ci_text(wait.payload.get('ci'))} round {wait.round} ",
                    status_text(wait.status),
                    f"{by}{reason}",
                )
            )
            if ended:
                late = ended.get("timed_out_after")
                note = f" (not reported within {seconds(float(late))})" if late else ""
                lines.append(
                    Text(f"  {ended.get('conclusion')}: {ci_text(ended)}{note}", style="green")
                )
            continue
        if wait.kind is WaitKind.INTERRUPT:
            lines.append(
                Text.assemble(
                    ("interrupt ", "bold"),
                    f"{wait.wait_id} at {wait.name} round {wait.round} ",
                    status_text(wait.status),
                    f"{by}{reason}",
                )
            )
            lines.append(Text(f"  Q {_short(wait.payload.get('value'), 200)}"))
            if wait.response is not None:
                lines.append(Text(f"  A {_short(wait.response.get('value'), 200)}", style="green"))
            continue
        lines.append(
            Text.assemble(
                (f"turn {wait.payload.get('turn')} ", "bold"),
                f"{wait.wait_id} round {wait.round} ",
                status_text(wait.status),
                f"{by}{reason}",
            )
        )
        answers = (wait.response or {}).get("answers", {})
        for q in wait.payload.get("question_set", {}).get("questions", []):
            lines += question_text(f"  Q {q['id']}: ", q["text"])
            if q["id"] in answers:
                lines.append(Text(f"  A {_short(answers[q['id']], 200)}", style="green"))
    return lines
