"""``stageline transcript RUN [NODE]``: print the harness transcripts a run recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stageline.cli._aio import run_async
from stageline.cli._args import RunArg
from stageline.cli._config import load_settings
from stageline.cli._render import console, when
from stageline.errors import UsageError
from stageline.ledger import EventCategory, open_ledger

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["transcript"]

_STYLES = {
    "error": "red",
    "warning": "yellow",
    "tool_use": "cyan",
    "tool_result": "cyan",
    "message": "bold",
    "harness.result": "bold",
    "operation.begin": "dim",
}


def transcript(
    run_id: RunArg,
    node: Annotated[
        str | None, typer.Argument(metavar="NODE", help="Only this node's transcript.")
    ] = None,
    raw: Annotated[bool, typer.Option("--json", help="Print the JSON lines as stored.")] = False,
) -> None:
    """Print the harness transcript of a run's operation nodes (all of them, or NODE's)."""
    paths = run_async(_transcripts(run_id))
    if not paths:
        raise UsageError(
            f"run {run_id} has no harness transcript (only operation stages record one)"
        )
    if node is not None:
        if node not in paths:
            raise UsageError(
                f"run {run_id} has no transcript for node {node!r}; it has: {', '.join(paths)}"
            )
        paths = {node: paths[node]}
    out = console()
    for name, path in paths.items():
        if not path.is_file():
            raise UsageError(f"transcript of node {name!r} is gone: {path} does not exist")
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        if raw:
            for line in lines:
                typer.echo(line)
            continue
        if len(paths) > 1:
            from rich.text import Text

            out.print(Text(f"== {name}  ({path})", style="bold"))
        for line in lines:
            out.print(_line(line))


async def _transcripts(run_id: str) -> dict[str, Path]:
    """Node -> transcript path, as the ledger references them, in the order they were made."""
    settings = load_settings()
    async with open_ledger(settings.database_url) as ledger:
        await ledger.get_run(run_id)
        events = await ledger.events(run_id, categories=[str(EventCategory.OUTPUT)])
    folder = settings.run_dir(run_id) / "transcripts"
    found: dict[str, Path] = {}
    inside = folder.resolve()
    for event in events:
        if event.kind == "operation.transcript" and event.node and event.data.get("path"):
            path = Path(str(event.data["path"]))
            if inside in path.resolve().parents:  # only files in the run's own folder are read
                found.setdefault(event.node, path)
    if not found and folder.is_dir():  # the run died before its reference was written
        found = {p.stem: p for p in sorted(folder.glob("*.jsonl"))}
    return found


def _line(line: str) -> Text:
    from rich.text import Text

    try:
        row: dict[str, Any] = json.loads(line)
    except ValueError:
        return Text(line, style="dim")
    kind = str(row.get("type", "?"))
    stamp = when(row["ts"], "%H:%M:%S") if isinstance(row.get("ts"), int | float) else "        "
    if kind == "operation.begin":
        text = (
            f"attempt {row.get('attempt')} try {row.get('try')}: {row.get('harness')}"
            f"{' ' + str(row['model']) if row.get('model') else ''} in {row.get('repo')}"
        )
        if row.get("resume"):
            text += f", continuing session {row['resume']}"
    elif kind == "harness.result":
        text = f"{row.get('status')}: {row.get('summary') or ''}"
        if row.get("exit_code") not in (None, 0):
            text += f" (exit {row['exit_code']})"
    else:
        text = " ".join(str(row.get("text") or "").split())
        data = row.get("data") or {}
        if not text and data:
            text = json.dumps(data, default=str)
    if len(text) > 240:
        text = text[:239] + "…"
    return Text.assemble((f"{stamp} ", "dim"), (f"{kind:<16}", _STYLES.get(kind, "")), " ", text)
