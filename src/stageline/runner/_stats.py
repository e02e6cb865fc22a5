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
from stageline.ledger import LedgerStore, Outcome, OutcomeGroup, group_outcomes

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
            found.group(2)
        ]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise UsageError(
            f"--since takes a duration such as 7d or 12h, or a date such as 2026-11-01; "
            f"got {text!r}"
        ) from None


def _entry(g: OutcomeGroup) -> dict[str, Any]:
    n = g.count
    return {
        "count": n,
        "succeeded": n - g.failed,
        "failed": g.failed,
        "failure_rate": g.failed / n if n else 0.0,
        "failure_rate_by_phase": {k: v / n for k, v in sorted(g.failed_by_phase.items())},
        "latency_p50": g.latency.get(50),
        "latency_p95": g.latency.get(95),
        "input_tokens": g.input_tokens,
        "output_tokens": g.output_tokens,
        "tokens": g.input_tokens + g.output_tokens,
        "cost": g.cost,
        "quality_mean": g.quality_sum / g.quality_count if g.quality_count else None,
    }


def _nodes(groups: Iterable[OutcomeGroup]) -> list[dict[str, Any]]:
    """One entry per (template, node), each with its ``alternatives`` where a router chose."""
    out: list[dict[str, Any]] = []
    by_node: dict[tuple[str, str], dict[str, Any]] = {}
    for g in sorted(
        groups, key=lambda g: (g.template, g.node, g.alternative is not None, g.alternative or "")
    ):
        key = (g.template, g.node)
        if g.alternative is None:
            entry = {
                "template": g.template,
                "node": g.node,
                "capability": ", ".join(g.capabilities) or None,
                **_entry(g),
                "alternatives": [],
            }
            by_node[key] = entry
            out.append(entry)
        elif key in by_node:
            by_node[key]["alternatives"].append({"alternative": g.alternative, **_entry(g)})
    return out


def summarize(rows: Iterable[Outcome]) -> list[dict[str, Any]]:
    """One entry per (template, node) of these rows, each with its router ``alternatives``."""
    return _nodes(group_outcomes(rows))


async def outcome_stats(
    ledger: LedgerStore, *, template: str | None = None, since: float | None = None
) -> dict[str, Any]:
    """What ``stageline stats --json`` prints; the ledger sums the rows up (no row is loaded)."""
    nodes = _nodes(await ledger.outcome_groups(template=template, since=since))
    return {
        "template": template,
        "since": since,
        "percentiles": "nearest-rank",
        "outcomes": sum(n["count"] for n in nodes),
        "nodes": nodes,
    }
