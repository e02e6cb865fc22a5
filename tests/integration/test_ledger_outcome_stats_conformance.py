"""``outcome_groups`` (what ``stats`` prints) on every backend: summed up by the database,
equal to the Python reference on the same rows, and never by loading the rows."""

from __future__ import annotations

import random
import uuid
from dataclasses import asdict
from typing import Any

import pytest

from stageline.ledger import Backend, LedgerStore, Outcome, group_outcomes
from stageline.runner import outcome_stats


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


def _rows(template: str, n: int, seed: int) -> list[Outcome]:
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        failed = rnd.random() < 0.3
        rows.append(
            Outcome(
                run_id=f"{template}-{i}",
                task_id="t",
                template=template,
                node=rnd.choice(["a", "b", "c"]),
                stage="m:s",
                capability=rnd.choice([None, "writing", "review"]),
                alternative=rnd.choice([None, "x", "y", "z"]),
                status="failed" if failed else "succeeded",
                failure_phase=rnd.choice([None, "stage", "timeout"]) if failed else None,
                started_at=1000.0 + i,
                finished_at=1000.0 + i + 1,
                latency=float(rnd.choice(range(1, 40))) + rnd.choice([0.0, 0.5]),
                input_tokens=float(rnd.randint(0, 50)),
                output_tokens=float(rnd.randint(0, 20)),
                cost=rnd.choice([0.0, 0.25, 0.5]),
                quality=rnd.choice([None, 0.0, 0.5, 1.0]),
            )
        )
    return rows


def _plain(groups: list[Any]) -> list[dict[str, Any]]:
    out = []
    for g in groups:
        row = asdict(g)
        for key in ("input_tokens", "output_tokens", "cost", "quality_sum"):
            row[key] = pytest.approx(row[key])
        out.append(row)
    return out


@pytest.mark.parametrize("n", [1, 2, 7, 120])
async def test_groups_equal_the_python_reference(ledger: LedgerStore, n: int) -> None:
    template = f"t-{uuid.uuid4().hex[:8]}"
    rows = _rows(template, n, seed=n)
    await ledger.record_outcomes([*rows, *_rows(f"other-{template}", 5, seed=0)])
    found = await ledger.outcome_groups(template=template)
    assert _plain(found) == _plain(group_outcomes(rows))
    assert sum(g.count for g in found if g.alternative is None) == n

    since = 1000.0 + n // 2 + 1
    later = [r for r in rows if r.finished_at >= since]
    assert _plain(await ledger.outcome_groups(template=template, since=since)) == _plain(
        group_outcomes(later)
    )


async def test_percentiles_are_nearest_rank(ledger: LedgerStore) -> None:
    template = f"t-{uuid.uuid4().hex[:8]}"
    rows = [
        Outcome(
            run_id=f"r{i}",
            task_id="t",
            template=template,
            node="n",
            stage="m:s",
            alternative="a" if i <= 6 else "b",
            status="succeeded",
            started_at=0.0,
            finished_at=1.0,
            latency=float(i),
        )
        for i in range(1, 11)
    ]
    await ledger.record_outcomes(reversed(rows))
    node, a, b = await ledger.outcome_groups(template=template)
    assert (node.alternative, node.latency) == (None, {50: 5.0, 95: 10.0})
    assert (a.alternative, a.latency) == ("a", {50: 3.0, 95: 6.0})
    assert (b.alternative, b.latency) == ("b", {50: 8.0, 95: 10.0})


async def test_stats_never_loads_the_outcome_rows(
    ledger: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = f"t-{uuid.uuid4().hex[:8]}"
    await ledger.record_outcomes(_rows(template, 30, seed=3))

    async def refuse(**kwargs: Any) -> list[Outcome]:
        raise AssertionError("stats loaded every outcome row")

    monkeypatch.setattr(ledger, "outcomes", refuse)
    found = await outcome_stats(ledger, template=template)
    assert found["outcomes"] == 30 and {n["node"] for n in found["nodes"]} <= {"a", "b", "c"}
    assert await outcome_stats(ledger, template="nothing-here") == {
        "template": "nothing-here",
        "since": None,
        "percentiles": "nearest-rank",
        "outcomes": 0,
        "nodes": [],
    }
