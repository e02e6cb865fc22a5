"""Outcome rows summed up in the database: counts, sums and nearest-rank latency percentiles
per (template, node) and per router alternative, for ``stageline stats``.

No backend loads the rows into Python: the SQL ledger groups with ``GROUP BY`` and picks each
percentile's row with window functions (``row_number`` over the latency order, the rank being
``ceil(p * n / 100)``), one statement each, the same on SQLite and Postgres.
``group_outcomes`` does the same over rows in Python: the reference the SQL is tested against.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, case, func, or_, select

from stageline.ledger._schema import outcomes as _t

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor
    from stageline.ledger._outcomes import Outcome

__all__ = ["PERCENTILES", "OutcomeGroup", "OutcomeStatsSql", "group_outcomes", "nearest_rank"]

PERCENTILES = (50, 95)


@dataclass(frozen=True, kw_only=True)
class OutcomeGroup:
    """The outcomes of one node (``alternative`` None) or of one router alternative of it."""

    template: str
    node: str
    alternative: str | None
    count: int
    failed: int
    failed_by_phase: dict[str, int] = field(default_factory=dict)
    """Failures by failure phase (``unknown`` where none was recorded)."""
    latency: dict[int, float] = field(default_factory=dict)
    """Nearest-rank latency percentiles: 50 and 95."""
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    cost: float = 0.0
    quality_sum: float = 0.0
    quality_count: int = 0
    capabilities: tuple[str, ...] = ()
    """The capabilities recorded for the node (on the node's group only)."""


def nearest_rank(n: int, p: int) -> int:
    """The 1-based rank of the nearest-rank ``p``-th percentile of ``n`` values."""
    return max(1, math.ceil(p * n / 100))


def group_outcomes(rows: Iterable[Outcome]) -> list[OutcomeGroup]:
    """Groups of outcome rows, in Python: the reference the SQL is tested against."""
    buckets: dict[tuple[str, str, str | None], list[Outcome]] = {}
    for r in rows:
        buckets.setdefault((r.template, r.node, None), []).append(r)
        if r.alternative is not None:
            buckets.setdefault((r.template, r.node, r.alternative), []).append(r)
    found = []
    for (template, node, alt), mine in buckets.items():
        latencies = sorted(r.latency for r in mine)
        phases: dict[str, int] = {}
        for r in mine:
            if r.status == "failed":
                phase = r.failure_phase or "unknown"
                phases[phase] = phases.get(phase, 0) + 1
        graded = [r.quality for r in mine if r.quality is not None]
        found.append(
            OutcomeGroup(
                template=template,
                node=node,
                alternative=alt,
                count=len(mine),
                failed=sum(phases.values()),
                failed_by_phase=phases,
                latency={p: latencies[nearest_rank(len(mine), p) - 1] for p in PERCENTILES},
                input_tokens=sum(r.input_tokens for r in mine),
                output_tokens=sum(r.output_tokens for r in mine),
                cost=sum(r.cost for r in mine),
                quality_sum=sum(graded),
                quality_count=len(graded),
                capabilities=tuple(sorted({r.capability for r in mine if r.capability}))
                if alt is None
                else (),
            )
        )
    return sorted(found, key=_order)


def _order(g: OutcomeGroup) -> tuple[str, str, int, str]:
    return (g.template, g.node, g.alternative is not None, g.alternative or "")


def _filters(template: str | None, since: float | None) -> list[Any]:
    where = []
    if template is not None:
        where.append(_t.c.template == template)
    if since is not None:
        where.append(_t.c.finished_at >= since)
    return where


def _sums(keys: Sequence[Any], where: list[Any]) -> Any:
    failed = case((_t.c.status == "failed", 1), else_=0)
    return (
        select(
            *keys,
            func.count().label("count"),
            func.sum(failed).label("failed"),
            func.sum(_t.c.input_tokens).label("input_tokens"),
            func.sum(_t.c.output_tokens).label("output_tokens"),
            func.sum(_t.c.cost).label("cost"),
            func.sum(_t.c.quality).label("quality_sum"),
            func.count(_t.c.quality).label("quality_count"),
        )
        .where(*where)
        .group_by(*keys)
    )


def _ranked(where: list[Any]) -> Any:
    """The rows at each percentile's rank: of the node (``at_node``) and of its alternative."""
    node = (_t.c.template, _t.c.node)
    alt = (*node, _t.c.alternative)
    inner = (
        select(
            *alt,
            _t.c.latency,
            func.row_number().over(partition_by=node, order_by=_t.c.latency).label("rn"),
            func.count().over(partition_by=node).label("n"),
            func.row_number().over(partition_by=alt, order_by=_t.c.latency).label("rn_alt"),
            func.count().over(partition_by=alt).label("n_alt"),
        )
        .where(*where)
        .subquery()
    )

    def at(rank: Any, n: Any, p: int) -> Any:
        return rank == (n * p + 99) // 100  # ceil(p * n / 100) in integers

    return select(inner).where(
        or_(
            *(at(inner.c.rn, inner.c.n, p) for p in PERCENTILES),
            and_(
                inner.c.alternative.is_not(None),
                or_(*(at(inner.c.rn_alt, inner.c.n_alt, p) for p in PERCENTILES)),
            ),
        )
    )


class OutcomeStatsSql:
    """``outcome_groups`` of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:
        _x: Executor

        def _read(self) -> AbstractAsyncContextManager[Executor]: ...

    async def outcome_groups(
        self, *, template: str | None = None, since: float | None = None
    ) -> list[OutcomeGroup]:
        """Outcomes per node and per router alternative, summed up by the database."""
        where = _filters(template, since)
        node = [_t.c.template, _t.c.node]
        alt = [*node, _t.c.alternative]
        statements = {
            "nodes": _sums(node, where),
            "alternatives": _sums(alt, [*where, _t.c.alternative.is_not(None)]),
            "phases": select(*alt, _t.c.failure_phase, func.count().label("count"))
            .where(*where, _t.c.status == "failed")
            .group_by(*alt, _t.c.failure_phase),
            "capabilities": select(*node, _t.c.capability)
            .distinct()
            .where(*where, _t.c.capability.is_not(None)),
            "ranked": _ranked(where),
        }
        found: dict[str, list[dict[str, Any]]] = {}
        async with self._read() as x:
            for name, stmt in statements.items():
                compiled = stmt.compile(dialect=x.dialect)
                found[name] = await x.fetch(str(compiled), compiled.params)
        return _assemble(found)


def _assemble(found: dict[str, list[dict[str, Any]]]) -> list[OutcomeGroup]:
    phases: dict[tuple[str, str, str | None], dict[str, int]] = {}
    for r in found["phases"]:
        phase, count = r["failure_phase"] or "unknown", int(r["count"])
        for key in {(r["template"], r["node"], None), (r["template"], r["node"], r["alternative"])}:
            mine = phases.setdefault(key, {})
            mine[phase] = mine.get(phase, 0) + count
    latency: dict[tuple[str, str, str | None], dict[int, float]] = {}
    for r in found["ranked"]:
        for p in PERCENTILES:
            if r["rn"] == nearest_rank(int(r["n"]), p):
                latency.setdefault((r["template"], r["node"], None), {})[p] = float(r["latency"])
            if r["alternative"] is not None and r["rn_alt"] == nearest_rank(int(r["n_alt"]), p):
                latency.setdefault((r["template"], r["node"], r["alternative"]), {})[p] = float(
                    r["latency"]
                )
    caps: dict[tuple[str, str], set[str]] = {}
    for r in found["capabilities"]:
        caps.setdefault((r["template"], r["node"]), set()).add(r["capability"])
    groups = []
    for r in [*found["nodes"], *found["alternatives"]]:
        key = (r["template"], r["node"], r.get("alternative"))
        groups.append(
            OutcomeGroup(
                template=key[0],
                node=key[1],
                alternative=key[2],
                count=int(r["count"]),
                failed=int(r["failed"] or 0),
                failed_by_phase=phases.get(key, {}),
                latency=latency.get(key, {}),
                input_tokens=float(r["input_tokens"] or 0),
                output_tokens=float(r["output_tokens"] or 0),
                cost=float(r["cost"] or 0),
                quality_sum=float(r["quality_sum"] or 0),
                quality_count=int(r["quality_count"]),
                capabilities=tuple(sorted(caps.get(key[:2], ()))) if key[2] is None else (),
            )
        )
    return sorted(groups, key=_order)
