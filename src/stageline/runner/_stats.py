"""``stageline stats``: capability outcomes summed up per node, and per router alternative.

Percentiles are *nearest-rank*: the p-th percentile of n sorted values is the value at rank
``ceil(p / 100 * n)`` (1-based), so it is always an observed latency.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from stageline.errors import UsageError
from stageline.ledger import LedgerStore, Outcome

__all__ = ["outcome_stats", "parse_since", "percentile", "summarize"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile of ``values`` (None when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def parse_since(text: str | None, *, now: float | None = None) -> float | None:
    """A cut-off time from ``7d`` / ``12h`` / ``30m`` (that long ago) or an ISO date or time
    (``2026-11-01``, ``2026-11-01T08:00``; local time unless it names a zone)."""
    if not text:
        return None
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if found:
        return (now if now is not None else time.time()) - float(found.group(1)) * _UNITS[
            found.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise UsageError(
            f"--since takes a duration such as 7d or 12h, or a date such as 2026-11-01; "
            f"got {text!r}") from None


def _group(rows: Sequence[Outcome]) -> dict[str, Any]:
    latencies = [r.latency for r in rows]
    failed = [r for r in rows if r.status == "failed"]
    by_phase: dict[str, int] = {}
    for r in failed:
        phase = r.failure_phase or "unknown"
        by_phase[phase] = by_phase.get(phase, 0) + 1
    n = len(rows)
    graded = [r.quality for r in rows if r.quality is not None]
    return {
        "count": n,
        "succeeded": n - len(failed),
        "failed": len(failed),
        "failure_rate": len(failed) / n if n else 0.0,
        "failure_rate_by_phase": {k: v / n for k, v in sorted(by_phase.items())},
        "latency_p50": percentile(latencies, 50),
        "latency_p95": percentile(latencies, 95),
        "input_tokens": sum(r.input_tokens for r in rows),
        "output_tokens": sum(r.output_tokens for r in rows),
        "tokens": sum(r.tokens for r in rows),
        "cost": sum(r.cost for r in rows),
        "quality_mean": sum(graded) / len(graded) if graded else None,
    }


def summarize(rows: Iterable[Outcome]) -> list[dict[str, Any]]:
    """One entry per (template, node), each with its ``alternatives`` where a router chose."""
    nodes: dict[tuple[str, str], list[Outcome]] = {}
    for row in rows:
        nodes.setdefault((row.template, row.node), []).append(row)
    out: list[dict[str, Any]] = []
    for (template, node), mine in sorted(nodes.items()):
        caps = sorted({r.capability for r in mine if r.capability})
        entry = {"template": template, "node": node, "capability": ", ".join(caps) or None,
                 **_group(mine), "alternatives": []}
        alts: dict[str, list[Outcome]] = {}
        for r in mine:
            if r.alternative is not None:
                alts.setdefault(r.alternative, []).append(r)
        entry["alternatives"] = [{"alternative": a, **_group(rs)}
                                 for a, rs in sorted(alts.items())]
        out.append(entry)
    return out


async def outcome_stats(ledger: LedgerStore, *, template: str | None = None,
                        since: float | None = None) -> dict[str, Any]:
    """What ``stageline stats --json`` prints."""
    rows = await ledger.outcomes(template=template, since=since)
    return {"template": template, "since": since, "percentiles": "nearest-rank",
            "outcomes": len(rows), "nodes": summarize(rows)}
