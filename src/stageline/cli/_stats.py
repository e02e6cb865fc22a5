"""``stageline stats``: how each node (and each router alternative) has done, from outcomes."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.table import Table

from stageline.cli._render import console, print_json
from stageline.config import load_settings
from stageline.ledger import open_ledger

__all__ = ["stats"]


def stats(
    template: Annotated[
        str | None, typer.Option("--template", "-t", metavar="T", help="Only this template.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="D",
                     help="Only node runs since then: 7d, 12h, or a date such as 2026-11-01."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Per node: runs, p50/p95 latency, failure rate by phase, tokens, cost; and per
    alternative where a router chose. Percentiles are nearest-rank."""
    from stageline.runner import parse_since

    cutoff = parse_since(since)
    found = asyncio.run(_stats(template, cutoff))
    if as_json:
        print_json(found)
        return
    out = console()
    if not found["nodes"]:
        out.print("no outcomes recorded" + (f" for template {template}" if template else ""))
        return
    table = Table("template", "node", "alternative", "runs", "failed", "p50 s", "p95 s",
                  "failures by phase", "tokens", "cost", "quality")
    for node in found["nodes"]:
        table.add_row(node["template"], node["node"], "", *_cells(node))
        for alt in node["alternatives"]:
            table.add_row("", "", alt["alternative"], *_cells(alt))
    out.print(table)


def _cells(g: dict[str, Any]) -> list[str]:
    phases = ", ".join(f"{k} {v:.0%}" for k, v in g["failure_rate_by_phase"].items())
    quality = "" if g["quality_mean"] is None else f"{g['quality_mean']:.2f}"
    return [str(g["count"]), f"{g['failure_rate']:.0%}", f"{g['latency_p50']:.3f}",
            f"{g['latency_p95']:.3f}", phases, f"{g['tokens']:g}", f"{g['cost']:.4g}", quality]


async def _stats(template: str | None, since: float | None) -> dict[str, Any]:
    from stageline.runner import outcome_stats

    async with open_ledger(load_settings().database_url) as ledger:
        return await outcome_stats(ledger, template=template, since=since)
