"""Capability outcomes, ``stageline stats`` and budget gates as a user meets them: the CLI as a
subprocess over a SQLite file."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stageline.checkpoints import checkpoint_serde
from stageline.ledger import Outcome, open_backend

Cli = Callable[..., subprocess.CompletedProcess[str]]

BUDGET_TEMPLATE = """
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    done: list


def spend(name: str) -> Any:
    async def run(state: State, ctx: Any) -> dict[str, Any]:
        ctx.metric("input_tokens", 60)
        ctx.metric("output_tokens", 40)
        return {"done": [*(state.get("done") or []), name]}

    run.__name__ = name
    return run


template = Template("spender", state=State)
for name in ("a", "b", "c"):
    template.add_stage(name, spend(name))
template.add_sequence("a", "b", "c")
"""


@pytest.fixture
def cli_env(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The shared ``cli`` over ``tmp_path/ledger.db``, where the tests write outcomes."""
    return {**cli_env, "STAGELINE_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.db'}"}


def _row(template: str, node: str, i: int, latency: float, **kw: Any) -> Outcome:
    finished = kw.pop("finished", time.time() - 60)
    return Outcome(
        run_id=f"{template}-{node}-{i}",
        task_id="t",
        template=template,
        node=node,
        stage=f"m:{node}",
        started_at=finished - latency,
        finished_at=finished,
        latency=latency,
        **{"status": "succeeded", **kw},
    )


def known_outcomes() -> list[Outcome]:
    """``draft``: latencies 1..10 s; alternative a has 1..6 (2 and 3 time out), b has 7..10
    (9 fails in its stage); each takes 10 + 5 tokens and costs 0.5."""
    rows = []
    for i in range(1, 11):
        status, phase = "succeeded", None
        if i in (2, 3):
            status, phase = "failed", "timeout"
        if i == 9:
            status, phase = "failed", "stage"
        rows.append(
            _row(
                "blog",
                "draft",
                i,
                float(i),
                status=status,
                failure_phase=phase,
                capability="writing",
                alternative="a" if i <= 6 else "b",
                input_tokens=10.0,
                output_tokens=5.0,
                cost=0.5,
                quality=0.5 if status == "succeeded" else None,
            )
        )
    rows.append(_row("blog", "outline", 1, 0.5))
    rows.append(_row("blog", "outline", 2, 99.0, finished=time.time() - 30 * 86400))  # too old
    rows.append(_row("other", "x", 1, 3.0))
    return rows


def test_stats_json_gives_exact_counts_rates_and_nearest_rank_percentiles(
    tmp_path: Path,
    cli: Cli,
) -> None:
    async def seed() -> None:
        opened = await open_backend(f"sqlite:///{tmp_path / 'ledger.db'}", checkpoint_serde())
        try:
            await opened.ledger.record_outcomes(known_outcomes())
        finally:
            await opened.aclose()

    asyncio.run(seed())
    done = cli("stats", "--template", "blog", "--since", "7d", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["percentiles"] == "nearest-rank" and found["outcomes"] == 11
    nodes = {n["node"]: n for n in found["nodes"]}
    assert set(nodes) == {"draft", "outline"}  # no other template, nothing older than 7 days
    draft = nodes["draft"]
    assert (draft["count"], draft["succeeded"], draft["failed"]) == (10, 7, 3)
    assert draft["failure_rate"] == pytest.approx(0.3)
    assert draft["failure_rate_by_phase"] == {
        "stage": pytest.approx(0.1),
        "timeout": pytest.approx(0.2),
    }
    assert (draft["latency_p50"], draft["latency_p95"]) == (5.0, 10.0)
    assert (draft["input_tokens"], draft["output_tokens"], draft["tokens"]) == (100, 50, 150)
    assert draft["cost"] == 5.0 and draft["quality_mean"] == 0.5
    assert draft["capability"] == "writing"
    a, b = draft["alternatives"]
    assert (a["alternative"], a["count"], a["failed"], a["latency_p50"], a["latency_p95"]) == (
        "a",
        6,
        2,
        3.0,
        6.0,
    )
    assert a["failure_rate_by_phase"] == {"timeout": pytest.approx(2 / 6)}
    assert (b["alternative"], b["count"], b["failed"], b["latency_p50"], b["latency_p95"]) == (
        "b",
        4,
        1,
        8.0,
        10.0,
    )
    assert b["failure_rate"] == 0.25 and b["cost"] == 2.0
    outline = nodes["outline"]
    assert (outline["count"], outline["latency_p50"], outline["latency_p95"]) == (1, 0.5, 0.5)
    assert outline["alternatives"] == []

    table = cli("stats")
    assert table.returncode == 0, table.stderr
    assert "draft" in table.stdout and "other" in table.stdout

    bad = cli("stats", "--since", "last tuesday")
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_a_run_over_its_token_budget_waits_at_a_budget_gate_and_approve_finishes_it(
    tmp_path: Path,
    cli: Cli,
) -> None:
    (tmp_path / "spender.py").write_text(BUDGET_TEMPLATE)
    started = cli("run", "spender.py", "--run-id", "s1", "--budget-tokens", "150")
    assert started.returncode == 3, (started.stdout, started.stderr)  # waiting for a person

    pending = cli("pending", "--json")
    assert pending.returncode == 0, pending.stderr
    (wait,) = json.loads(pending.stdout)
    assert wait["kind"] == "gate" and wait["name"] == "budget" and wait["node"] == "c"
    assert wait["payload"]["budget"] == {
        "scope": "run",
        "measure": "tokens",
        "limit": 150.0,
        "used": 200.0,
        "ask": 150.0,
    }
    assert "approve 150 more tokens?" in wait["payload"]["show"]["budget"]

    approved = cli("approve", "s1")
    assert approved.returncode == 0, (approved.stdout, approved.stderr)
    shown = json.loads(cli("show", "s1", "--json").stdout)
    assert shown["run"]["status"] == "succeeded"
    assert shown["state"]["done"] == ["a", "b", "c"]

    stats = json.loads(cli("stats", "--template", "spender", "--json").stdout)
    counts = {n["node"]: (n["count"], n["tokens"]) for n in stats["nodes"]}
    assert counts == {"a": (1, 100), "b": (1, 100), "c": (1, 100)}
