"""``stageline stages``: the stage catalog, with what recorded runs of each stage cost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from stageline.cli._aio import run_async
from stageline.cli._config import load_settings
from stageline.cli._render import console, print_json
from stageline.ledger import open_ledger

if TYPE_CHECKING:
    from rich.console import RenderableType

    from stageline.templates import CatalogEntry, Measured

__all__ = ["load_catalog", "stages", "stages_table"]


def stages(
    capability: Annotated[
        str | None,
        typer.Option("--capability", "-c", metavar="C", help="Only stages of this capability."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """List the stage catalog: every stage a template can name, its capability, tier, cost,
    retry policy, the state keys it reads and writes, and what its recorded runs cost."""
    entries = load_catalog()
    if capability is not None:
        entries = [e for e in entries if e.capability == capability]
    if as_json:
        print_json([e.to_dict() for e in entries])
        return
    out = console()
    if not entries:
        out.print("no stages" + (f" of capability {capability}" if capability else ""))
        return
    out.print(stages_table(entries))


def load_catalog() -> list[CatalogEntry]:
    """The project's catalog, each stage with its measured runs from the ledger."""
    from stageline.templates import build_catalog, use_project, with_measured

    settings = load_settings()
    use_project(settings)
    entries = build_catalog(settings.root, settings.template_dirs)
    return with_measured(entries, run_async(_measured(settings.database_url)))


async def _measured(url: str) -> dict[str, Measured]:
    from stageline.templates import measure_stages

    async with open_ledger(url) as ledger:
        return await measure_stages(ledger)


def stages_table(entries: list[CatalogEntry]) -> RenderableType:
    """One row per stage; narrow, the keys and the description go under the table."""
    from stageline.cli._tables import Col, fitted

    cols = [
        Col(name="stage"),
        Col(name="capability"),
        Col(name="tier", keep=8),
        Col(name="cost", keep=7),
        Col(name="retry", right=True, keep=5),
        Col(name="asks", keep=4),
        Col(name="runs", right=True, keep=6),
        Col(name="p50 s", right=True, keep=3),
        Col(name="reads", wrap=True, keep=2, under=True),
        Col(name="writes", wrap=True, keep=2, under=True),
        Col(name="description", wrap=True, keep=1, under=True),
    ]
    rows = [
        [
            e.ref,
            e.capability or "-",
            e.tier,
            e.cost_class or "-",
            str(e.retry["max_attempts"]) if e.retry else "-",
            "yes" if e.asks_person else "",
            str(e.measured.runs) if e.measured else "",
            f"{e.measured.latency_p50:.3f}" if e.measured else "",
            " ".join(e.reads),
            " ".join(e.writes),
            e.description,
        ]
        for e in entries
    ]
    return fitted(cols, rows)
