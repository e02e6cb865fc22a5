"""``stageline stats``: how each node (and each router alternative) has done, from outcomes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from stageline.cli._aio import run_async
from stageline.cli._config import load_settings
from stageline.cli._render import console, print_json
from stageline.ledger import open_ledger

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["stats"]


def stats(
    template: Annotated[
        str | None, typer.Option("--template", "-t", metavar="T", help="Only this template.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="D",
            help="Only node runs since then: 7d, 12h, or a date such as 2026-11-01.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Per node: runs, p50/p95 latency, failure rate by phase, tokens, cost; and per
    alternative where a router chose. Percentiles are nearest-rank."""
    from stageline.runner import parse_since

    cutoff = parse_since(since)
    found = run_async(_stats(template, cutoff))
    if as_json:
        print_json(found)
        return
    out = console()
    if not found["nodes"]:
        out.print("no outcomes recorded" + (f" for template {template}" if template else ""))
        return
    for template_name in dict.fromkeys(n["template"] for n in found["nodes"]):
        nodes = [n for n in found["nodes"] if n["template"] == template_name]
        out.print(f"template {template_name}")
        out.print(stats_table(nodes))
        out.print()


def stats_table(nodes: list[dict[str, Any]]) -> RenderableType:
    """One template's nodes (and their router alternatives), words whole at any width (see
    ``_tables``). Token, cost, quality and failure-phase columns appear only where some row
    has one; narrow, the least telling go first, failures by phase under the table."""
    from stageline.cli._tables import Col, fitted

    rows = [
        r
        for node in nodes
        for r in (
            (node["node"], node),
            *((f"  -> {alt['alternative']}", alt) for alt in node["alternatives"]),
        )
    ]
    groups = [g for _, g in rows]
    optional = {
        "tokens": any(g["tokens"] for g in groups),
        "cost": any(g["cost"] for g in groups),
        "quality": any(g["quality_mean"] is not None for g in groups),
        "failures by phase": any(g["failure_rate_by_phase"] for g in groups),
    }
    cols = [
        Col(name="node", wrap=True),
        Col(name="runs", right=True),
        Col(name="failed", right=True, keep=6),
        Col(name="p50 s", right=True, keep=5),
        Col(name="p95 s", right=True, keep=4),
        Col(name="tokens", right=True, keep=3),
        Col(name="cost", right=True, keep=3),
        Col(name="quality", right=True, keep=2),
        Col(name="failures by phase", wrap=True, keep=1, under=True),
    ]
    shown = [
        c.name in ("node", "runs", "failed", "p50 s", "p95 s") or optional[c.name] for c in cols
    ]
    cells = [[name, *_cells(g)] for name, g in rows]
    return fitted(
        [c for c, keep in zip(cols, shown, strict=True) if keep],
        [[cell for cell, keep in zip(row, shown, strict=True) if keep] for row in cells],
        labels=[name.strip() for name, _ in rows],
    )


def _cells(g: dict[str, Any]) -> list[str]:
    """The cells after the node's name, in the order of ``stats_table``'s columns."""
    phases = ", ".join(f"{k} {v:.0%}" for k, v in g["failure_rate_by_phase"].items())
    quality = "" if g["quality_mean"] is None else f"{g['quality_mean']:.2f}"
    return [
        str(g["count"]),
        f"{g['failure_rate']:.0%}",
        f"{g['latency_p50']:.3f}",
        f"{g['latency_p95']:.3f}",
        f"{g['tokens']:g}",
        f"{g['cost']:.4g}",
        quality,
        phases,
    ]


async def _stats(template: str | None, since: float | None) -> dict[str, Any]:
    from stageline.runner import outcome_stats

    async with open_ledger(load_settings().database_url) as ledger:
        return await outcome_stats(ledger, template=template, since=since)
