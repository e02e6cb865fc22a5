"""``stageline stats``: how each node (and each router alternative) has done, from outcomes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from stageline.cli._aio import run_async
from stageline.cli._config import load_settings
from stageline.cli._render import console, print_json
from stageline.ledger import open_ledger

if TYPE_CHECKING:
    from rich.table import Table

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


def stats_table(nodes: list[dict[str, Any]]) -> Table:
    """One template's nodes (and their router alternatives): readable at 80 columns, nothing
    cut. Token, cost, quality and failure-phase columns appear only where some row has one."""
    from rich.table import Table

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
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold")
    table.add_column("node", overflow="fold")
    for column in ("runs", "failed", "p50 s", "p95 s"):
        table.add_column(column, justify="right", no_wrap=True)
    for column, shown in optional.items():
        if shown:
            table.add_column(
                column,
                overflow="fold",
                justify="left" if column == "failures by phase" else "right",
            )
    for name, g in rows:
        cells = dict(
            zip(
                (
                    "runs",
                    "failed",
                    "p50 s",
                    "p95 s",
                    "failures by phase",
                    "tokens",
                    "cost",
                    "quality",
                ),
                _cells(g),
                strict=True,
            )
        )
        table.add_row(
            name,
            *(cells[c] for c in ("runs", "failed", "p50 s", "p95 s")),
            *(cells[c] for c, shown in optional.items() if shown),
        )
    return table


def _cells(g: dict[str, Any]) -> list[str]:
    phases = ", ".join(f"{k} {v:.0%}" for k, v in g["failure_rate_by_phase"].items())
    quality = "" if g["quality_mean"] is None else f"{g['quality_mean']:.2f}"
    return [
        str(g["count"]),
        f"{g['failure_rate']:.0%}",
        f"{g['latency_p50']:.3f}",
        f"{g['latency_p95']:.3f}",
        phases,
        f"{g['tokens']:g}",
        f"{g['cost']:.4g}",
        quality,
    ]


async def _stats(template: str | None, since: float | None) -> dict[str, Any]:
    from stageline.runner import outcome_stats

    async with open_ledger(load_settings().database_url) as ledger:
        return await outcome_stats(ledger, template=template, since=since)
